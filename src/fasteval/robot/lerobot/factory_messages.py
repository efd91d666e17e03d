"""LeRobot's env factory's messages, said once (issue 42: LIBERO's appeared six times per run).

LeRobot's ``create_libero_envs`` prints ``Creating LIBERO envs | ...``, ``Restricting to task_ids=...`` and
``Built vec env | ...`` on stdout each time it builds a vector env. fasteval builds one env per slot (and one probe),
so a run of batch 5 said the same three lines six times. :func:`said_once` captures what the factory prints and
writes each distinct block to stderr (stdout stays the results') once per process; env worker processes (started
by multiprocessing) say nothing, since the main process's probe env said it already.
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import sys
from typing import Iterator

_SAID: set[str] = set()


@contextlib.contextmanager
def said_once() -> Iterator[None]:
    """Run the body with stdout captured; then write what it printed to stderr, unless this process said it before
    or is a worker process (see the module docstring)."""
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stdout(buffer):
            yield
    finally:
        text = buffer.getvalue()
        if text.strip() and text not in _SAID:
            _SAID.add(text)
            if multiprocessing.parent_process() is None:
                sys.stderr.write(text)
                sys.stderr.flush()
