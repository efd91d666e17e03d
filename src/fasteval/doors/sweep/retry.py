"""Whether re-running a failed sweep job could change its outcome.

A job's error text starts with the exception's class name (``describe_error`` in
:mod:`fasteval.doors.sweep.executors`). Bad input (:class:`~fasteval.types.errors.UserInputError`
and its subclasses: an unloadable policy, an unknown env, an action-space mismatch, a policy that
raises on its dry run) fails the same way every time: a retry cannot help, the input must change.
Env faults past the engine's retries and dead worker processes may be transient: a retry may help.
Anything else is unknown.
"""

from __future__ import annotations

import re
from typing import Any

from fasteval.types import errors as error_types

TRANSIENT_MARKS = ("failed after the engine's retries", "the worker process died", "EnvStepError", "TimeoutError",
                   "BrokenProcessPool", "MemoryError", "ConnectionError", "RayTaskError", "WorkerCrashedError")
_CLASS = re.compile(r"^\s*(?:[\w.]+\.)?(?P<name>[A-Z]\w*(?:Error|Exception))\b")


def _deterministic_names() -> set[str]:
    names, todo = set(), [error_types.UserInputError]
    while todo:
        cls = todo.pop()
        names.add(cls.__name__)
        todo.extend(cls.__subclasses__())
    return names


def retry_verdict(error_text: str | None) -> dict[str, Any]:
    """``{"helps": True | False | None, "why": str}`` for one failed job's error text."""
    text = (error_text or "").strip()
    match = _CLASS.match(text)
    name = match["name"] if match else None
    if name in _deterministic_names():
        return {"helps": False, "why": f"{name} is bad input and fails the same way every time; fix the sweep file "
                                       "or the checkpoint, then re-run"}
    if any(mark in text for mark in TRANSIENT_MARKS):
        return {"helps": True, "why": "an env or worker fault that may not recur; re-run the same command to retry"}
    return {"helps": None, "why": f"{name or 'the error'} may or may not recur; read the error, then re-run to retry"}


def cell_retry_verdict(error_texts: list[str]) -> dict[str, Any] | None:
    """The verdict for a cell's failed jobs: cannot help if any job's failure is deterministic,
    may help if every failure may be transient, else unknown. ``None`` for a cell without failures."""
    if not error_texts:
        return None
    verdicts = [retry_verdict(t.split(": ", 1)[1] if t.startswith("seeds ") else t) for t in error_texts]
    for helps in (False, None, True):
        for v in verdicts:
            if v["helps"] is helps:
                return v
    return verdicts[0]
