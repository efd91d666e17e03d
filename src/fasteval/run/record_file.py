"""One append-only JSON-lines file of a run folder (``episodes.jsonl``, ``errors.jsonl``).

* opened without following a symbolic link (``O_NOFOLLOW``): a link planted in a new output folder
  cannot send the records to a file outside it;
* appended with whole lines only: each group is written with ``write`` calls on an ``O_APPEND``
  descriptor, and a write that fails (disk full, quota) is cut back to where the group started, so
  the file always ends in a complete line and the error names the file;
* a torn last line left by a kill (or a missing final newline) is cut back by
  :func:`cut_torn_tail` before a resumed run appends, so the next record is not glued onto it.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from fasteval.types.errors import FastevalError, UserInputError


class DiskFullError(FastevalError, OSError):
    """The disk filled up while writing results (the records already written stay valid)."""


def write_error(path: Path, exc: OSError, folder: Path, resume: str | None = None) -> FastevalError:
    """The error to raise when writing ``path`` failed: it names the file, and says what is kept. ``resume``: the
    command that finishes the run (:func:`fasteval.run.rundir.resume_command`, with ``--trust-remote-code`` where the
    run needs it); ``fasteval --resume FOLDER`` if not given."""
    kept = ("The record files end in complete lines: every episode recorded so far is valid; "
            f"free some space and run `{resume or f'fasteval --resume {folder}'}` to finish the remaining episodes.")
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return DiskFullError(exc.errno, f"disk full while writing {path}. {kept}")
    return FastevalError(f"writing {path} failed: {exc.strerror or exc}. {kept}")


class RecordFile:
    """Appends complete lines to one record file (see the module docstring)."""

    write = staticmethod(os.write)
    """The system call (a test replaces it to fill the disk)."""

    def __init__(self, path: Path, resume: str | None = None):
        self.path = Path(path)
        self.resume = resume
        """How to finish the run, for the error of a failed write (:func:`write_error`)."""
        self.fd: int | None = None
        self.resume = resume
        """The command that finishes the run, for a write error's message (:func:`write_error`)."""

    def open(self) -> None:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC  # POSIX, as the folder lock
        try:
            self.fd = os.open(self.path, flags, 0o666)
        except OSError as exc:
            if exc.errno == errno.ELOOP or self.path.is_symlink():
                raise UserInputError(
                    f"{self.path} is a symbolic link: fasteval writes its records only into real files of the output "
                    f"folder, never through a link. Remove the link, or choose another --output-dir.") from None
            raise UserInputError(f"cannot open {self.path} for writing: {exc.strerror or exc}. "
                                 f"Choose another --output-dir.") from None

    def append(self, text: str) -> None:
        """Append ``text`` (complete lines); on failure, cut the file back and raise :func:`write_error`'s error."""
        if not text:
            return
        assert self.fd is not None, "RecordFile.open() first"
        data = memoryview(text.encode("utf-8"))
        start = os.fstat(self.fd).st_size
        try:
            while data:
                written = self.write(self.fd, data)
                data = data[written:]
        except OSError as exc:
            try:
                os.ftruncate(self.fd, start)  # no torn line: the group is all in, or not at all
            except OSError:
                pass
            raise write_error(self.path, exc, self.path.parent, self.resume) from None

    def close(self) -> None:
        if self.fd is None:
            return
        try:
            os.fsync(self.fd)
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None


def cut_torn_tail(path: Path) -> int:
    """Cut ``path`` back to its last complete line (ending in ``\\n``); returns the bytes dropped (0: none)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return 0
    if size == 0:
        return 0
    with open(path, "rb") as f:
        keep, chunk = size, 1 << 16
        while keep > 0:  # search backwards for the last newline
            start = max(0, keep - chunk)
            f.seek(start)
            block = f.read(keep - start)
            if block.endswith(b"\n") and keep == size:
                return 0  # the file ends in a complete line
            cut = block.rfind(b"\n")
            if cut >= 0:
                keep = start + cut + 1
                break
            keep = start
    with open(path, "r+b") as f:
        f.truncate(keep)
    return size - keep
