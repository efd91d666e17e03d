"""One process per run folder: an ``flock`` on ``.fasteval.lock`` in the folder.

Two processes writing one run folder (two ``--resume`` of it, a run started twice) would both run
the missing episodes and append duplicate records. The lock is taken before the folder's records are
read and held until the run's last write; the kernel releases it when the process ends, however it
ends (a kill included), so a stale lock file never blocks anyone. The file holds the holder's pid,
host, start time and command line, so the second process can say who has the folder.

The lock file is never deleted once a run wrote into the folder (deleting it while another process
waits on it would let two processes hold "the" lock).
"""

from __future__ import annotations

import errno
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from fasteval.types.errors import UserInputError

LOCK_NAME = ".fasteval.lock"


def disk_full_text(folder: Path, exc: OSError, what: str) -> str:
    """The one line of a new run that could not start on a full disk (ENOSPC, EDQUOT), leaving nothing behind."""
    name = errno.errorcode.get(exc.errno or 0, "ENOSPC")
    detail = os.strerror(exc.errno) if exc.errno else str(exc)
    return (f"the disk holding {folder} is full ({name}: {detail}): fasteval could not write {what}, so the run "
            f"did not start and left nothing behind. Free some space, or choose an --output-dir on another disk.")


class LockWriteError(UserInputError):
    """The lock was free, but its file could not be written (``disk_full``: ENOSPC or EDQUOT). The lock file is this
    process's to remove (it held the lock); nothing else was written."""

    def __init__(self, folder: Path, exc: OSError):
        self.disk_full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
        name = errno.errorcode.get(exc.errno or 0, "error")
        if self.disk_full:
            what = disk_full_text(folder, exc, "even its lock file")
        else:
            what = (f"cannot write the lock file {folder / LOCK_NAME} ({name}: {exc.strerror or exc}), so the run did "
                    f"not start. Choose another --output-dir.")
        super().__init__(what)


class FolderLock:
    """``acquire()`` the folder or raise :class:`UserInputError` naming the holder; ``release()``."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        self.fd: int | None = None

    def acquire(self) -> "FolderLock":
        import fcntl

        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC  # POSIX (fcntl locks): both always exist
        try:
            fd = os.open(self.path, flags, 0o666)
        except OSError as exc:
            what = "is a symbolic link" if exc.errno == errno.ELOOP else f"cannot be opened ({exc.strerror or exc})"
            raise UserInputError(f"the lock file {self.path} {what}. Choose another --output-dir.") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _read_holder(fd)
            os.close(fd)
            raise UserInputError(
                f"{self.folder} is in use by another fasteval process ({holder}). Two processes on one run folder "
                f"would run the same episodes twice. Wait for it to end, or choose another --output-dir.") from None
        try:
            os.ftruncate(fd, 0)
            os.write(fd, json.dumps(holder_facts()).encode())
        except OSError as exc:  # not another process's lock: this process cannot write (a full disk)
            os.close(fd)  # releases the flock: a later try in this process must not find its own lock held
            raise LockWriteError(self.folder, exc) from None
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor releases the flock
            self.fd = None

    def remove(self) -> None:
        """Release and delete the lock file (only for a folder this run leaves as it found it)."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        self.release()

    def __enter__(self) -> "FolderLock":
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


def holder_facts() -> dict[str, Any]:
    return {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": " ".join(sys.argv)}


def _read_holder(fd: int) -> str:
    try:
        facts = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except (OSError, ValueError):
        facts = {}
    if not facts.get("pid"):
        return "its details are not written yet"
    return f"pid {facts['pid']} on {facts.get('host', '?')}, since {facts.get('since', '?')}: {facts.get('command', '?')}"
