"""Paths typed by users: refuse the unusable ones at the boundary, with a message, before any work.

A path option (``-o``, ``--resume``, ``--config``, a sweep file or folder) is checked once,
when it is parsed, so that a bad value is a usage error (exit code 2) and never an ``OSError``
or ``ValueError`` from deep inside a run. :func:`path_problem` says what is wrong with a path,
or returns ``None``; :class:`UsablePath` is the click type that applies it.

Unusable means: empty; holding a NUL byte or a character the file system cannot encode; a
file or folder name longer than the system allows; a folder wanted where a file is (or the
other way round); an ancestor that is a file, not a folder; and, for outputs, no write
permission in the nearest existing folder.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

NAME_MAX = 255
"""Longest file or folder name (bytes) on the common Linux, macOS and Windows file systems."""


def path_problem(value: str | os.PathLike, *, kind: str = "any", must_exist: bool = False,
                 writable: bool = False) -> str | None:
    """What makes ``value`` unusable, as a sentence fragment, or ``None`` when it is usable.

    ``kind``: ``"dir"`` (a folder, or a path where one can be made), ``"file"`` or ``"any"``.
    ``must_exist``: the path must be there already. ``writable``: we will create files under
    it (checked on the nearest existing folder). Touches the file system only to ``stat``.
    """
    text = os.fspath(value)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    if text == "":
        return "the path is empty"
    if "\x00" in text:
        return "the path holds a NUL byte (\\x00), which no file system accepts"
    try:
        encoded = os.fsencode(text)
    except UnicodeError:
        return "the path holds characters this file system cannot encode"
    for part in encoded.split(os.sep.encode()):
        if len(part) > NAME_MAX:
            return f"a name in the path is {len(part)} bytes long; the limit is {NAME_MAX}"
    path = Path(text)
    try:
        if path.exists():
            if kind == "dir" and not path.is_dir():
                return "it is a file, not a folder"
            if kind == "file" and path.is_dir():
                return "it is a folder, not a file"
            if writable and kind == "dir" and not os.access(path, os.W_OK | os.X_OK):
                return "this user may not write there"
            return None
        if must_exist:
            return "it does not exist"
        ancestor = path.absolute().parent
        while not ancestor.exists() and ancestor != ancestor.parent:
            ancestor = ancestor.parent
        if not ancestor.is_dir():
            return f"{str(ancestor)!r} is a file, so no folder can be made below it"
        if writable and not os.access(ancestor, os.W_OK | os.X_OK):
            return f"this user may not create anything in {str(ancestor)!r}"
    except OSError as exc:  # ELOOP, EACCES on an ancestor, ...
        return f"it cannot be inspected ({exc.strerror or exc})"
    return None


class UsablePath(click.ParamType):
    """A click type for path options: :func:`path_problem` must find nothing; gives a ``Path``."""

    name = "path"

    def __init__(self, kind: str = "any", must_exist: bool = False, writable: bool = False):
        if kind not in ("any", "dir", "file"):
            raise ValueError(f"kind must be 'any', 'dir' or 'file', got {kind!r}")
        self.kind, self.must_exist, self.writable = kind, must_exist, writable
        self.name = {"dir": "directory", "file": "file"}.get(kind, "path")

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Path:
        problem = path_problem(value, kind=self.kind, must_exist=self.must_exist, writable=self.writable)
        if problem is not None:
            self.fail(f"{os.fspath(value)!r} is not usable: {problem}.", param, ctx)
        return Path(os.fspath(value))

    def shell_complete(self, ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
        from click.shell_completion import CompletionItem

        return [CompletionItem(incomplete, type="dir" if self.kind == "dir" else "file")]
