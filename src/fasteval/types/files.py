"""File names and atomic writes: the one helper of each that every writer of fasteval uses.

* :func:`safe_filename` — a file or folder name made from a label (a task, an env id, a policy name);
* :func:`atomic_file` — a file written in full or not at all: a temp file in the same folder, flushed
  and synced, given the usual mode, then renamed over the target (:func:`write_text_atomic` for a
  string). A crash or an exception leaves the old file (or none), never half of one.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterator

SAFE_CHARACTERS = "-_."
"""Characters a name keeps besides letters and digits; every other one becomes ``_``."""


def safe_filename(text: Any, empty: str = "_") -> str:
    """``text`` as one file or folder name: letters, digits and ``-_.`` kept, anything else (``/``,
    spaces, ``:``) replaced by ``_``, leading and trailing ``.`` and ``_`` dropped (so no name is
    hidden, ``.`` or ``..``); ``empty`` when nothing is left. ``"gym_pusht/PushT-v0"`` ->
    ``"gym_pusht_PushT-v0"``; ``"../x"`` -> ``"x"``."""
    name = "".join(c if c.isalnum() or c in SAFE_CHARACTERS else "_" for c in str(text)).strip("._")
    return name or empty


def _usual_mode() -> int:
    """``0o666`` less the process's umask: the mode ``open()`` would give (mkstemp's is ``0o600``)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


@contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "w", **open_kwargs: Any) -> Iterator[IO[Any]]:
    """``with atomic_file(path) as f: f.write(...)``: ``path`` holds everything written, or is untouched.

    The file is a temp file beside ``path`` (``.<name>.<random>.tmp``, in the same folder so the
    rename is atomic); on a clean exit it is flushed, synced to disk, given the usual mode and renamed
    over ``path``. On an exception it is removed and the exception goes on. ``mode``: ``"w"`` (text,
    UTF-8 unless ``encoding`` says otherwise) or ``"wb"``; ``open_kwargs`` go to ``os.fdopen``
    (``buffering=``, ``newline=``). Makes the parent folders."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    if "b" not in mode:
        open_kwargs.setdefault("encoding", "utf-8")
    try:
        os.chmod(tmp, _usual_mode())
        with os.fdopen(fd, mode, **open_kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through :func:`atomic_file`; returns ``path`` as a Path."""
    with atomic_file(path) as f:
        f.write(text)
    return Path(path)
