"""The watchdog: deadlines for the calls that may hang in this process, and what to do when one passes.

A policy that never returns, or an in-process (sync) env whose ``reset`` or ``step`` never returns,
would hang the run forever: a thread cannot interrupt a call stuck in C, and a worker pool's
``--step-timeout`` (the worker is killed and replaced) does not apply to envs in this process. So the
engine *arms* the watchdog before such a call (``--policy-timeout``: the policy step, the dry run and
the copy of its actions; ``--step-timeout``: every sync env reset, step and rebuild) and *disarms* it
after. Arming is two attribute stores: no lock, no thread start after the first.

A daemon thread checks the deadline a few times per timeout. When one passes it calls
``on_expire(cause)`` once, from that thread. The default ends the process with exit code 1 after
saying why; the durable run (:mod:`fasteval.run.durable`) installs its own, which first flushes the
records, marks the run folder's manifest ``failed`` with the cause, and prints the resume command.
Ending the process is the only clean answer to a call that cannot be interrupted.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Callable

POLICY, ENV = "policy", "env"
OPTION = {POLICY: "--policy-timeout", ENV: "--step-timeout"}
EXIT_CODE = 1


def exit_on_expiry(cause: str) -> None:
    """The default expiry: say why on stderr and end the process (exit code 1)."""
    try:
        sys.stdout.flush()
        print(f"fasteval: {cause}. A hung call cannot be interrupted in its thread: ending the process.",
              file=sys.stderr, flush=True)
    finally:
        os._exit(EXIT_CODE)


class Watchdog:
    """One deadline at a time (calls are sequential in the engine's thread). See the module docstring."""

    def __init__(self, on_expire: Callable[[str], None] | None = None):
        self.on_expire: Callable[[str], None] = on_expire or exit_on_expiry
        self._deadline: float | None = None
        self._armed: tuple[str, str, float] = ("", "", 0.0)  # (kind, what, seconds) of the armed call
        self._poll_s = 1.0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.expired: str | None = None
        """The cause, once a deadline passed."""

    def arm(self, seconds: float | None, kind: str, what: str) -> None:
        """Start the deadline of a call of ``kind`` (:data:`POLICY` or :data:`ENV`), described by ``what``
        (``"env step"``...). ``seconds=None``: no deadline (a no-op)."""
        if seconds is None:
            return
        if self._thread is None or seconds / 20 < self._poll_s:
            self._start(seconds)
        self._armed = (kind, what, seconds)
        self._deadline = time.monotonic() + seconds

    def disarm(self) -> None:
        self._deadline = None

    def _start(self, seconds: float) -> None:
        self._poll_s = min(1.0, max(0.01, seconds / 20))
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="fasteval-watchdog", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._poll_s):
            deadline = self._deadline
            if deadline is not None and time.monotonic() > deadline and self.expired is None:
                kind, what, seconds = self._armed
                self.expired = f"{what} did not return within {seconds:g} s ({OPTION.get(kind, kind)})"
                self.on_expire(self.expired)
                return

    def close(self) -> None:
        """Stop the thread (an engine closing). Safe to call twice."""
        self._stop.set()
        self._deadline = None
