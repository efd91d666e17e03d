"""The watchdog: deadlines for the calls that may hang in this process, and what to do when one passes.

A policy that never returns, or an in-process (sync) env whose ``reset`` or ``step`` never returns,
would hang the run forever: a thread cannot interrupt a call stuck in C, and a worker pool's
``--step-timeout`` (the worker is killed and replaced) does not apply to envs in this process. So the
engine *arms* the watchdog before such a call (``--policy-timeout``: the policy step, the dry run and
the copy of its actions; ``--step-timeout``: every sync env reset, step and rebuild) and *disarms* it
after. Arming and disarming are attribute stores: no lock, no clock, no thread start.

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
from contextlib import contextmanager
from typing import Callable, Iterator

POLICY, ENV = "policy", "env"
OPTION = {POLICY: "--policy-timeout", ENV: "--step-timeout"}
HINT = {POLICY: "if the policy is only slow (a first call compiling, a busy GPU), raise --policy-timeout",
        ENV: "if the env is only slow rather than hung (a first LIBERO reset builds its model under load), raise "
             "--step-timeout (seconds per env call)"}
"""What to do when a deadline of that kind passed, said with the cause."""
EXIT_CODE = 1


def exit_on_expiry(cause: str) -> None:
    """The default expiry: say why on stderr and end the process (exit code 1)."""
    try:
        sys.stdout.flush()
        print(f"fasteval: {cause}. A hung call cannot be interrupted in its thread: ending the process.",
              file=sys.stderr, flush=True)
    finally:
        os._exit(EXIT_CODE)


def expiry_cause(seconds: float, kind: str, what: str) -> str:
    """What happened when a deadline passed, and which option to raise."""
    hint = HINT.get(kind)
    return (f"{what} did not return within {seconds:g} s ({OPTION.get(kind, kind)})"
            + (f"; {hint}" if hint else ""))


class Watchdog:
    """One armed call at a time (calls are sequential in the engine's thread). See the module docstring.

    The hot path is two attribute stores: :meth:`arm` stores a guard prepared once by the caller
    (:meth:`guard`), :meth:`disarm` clears it and counts the call. The thread, started by :meth:`guard`,
    notices a call that is still the same one (same guard, same count) after its seconds have passed.
    """

    def __init__(self, on_expire: Callable[[str], None] | None = None):
        self.on_expire: Callable[[str], None] = on_expire or exit_on_expiry
        self._armed: tuple[float, str, str] | None = None  # (seconds, kind, what) of the call in progress
        self._calls = 0
        self._poll_s = 1.0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.expired: str | None = None
        """The cause, once a deadline passed."""

    def guard(self, seconds: float | None, kind: str, what: str) -> tuple[float, str, str] | None:
        """The guard to :meth:`arm` around calls of ``kind`` (:data:`POLICY` or :data:`ENV`) described by
        ``what`` (``"an env step"``), or ``None`` for no deadline. Starts the thread the first time."""
        if seconds is None:
            return None
        self._poll_s = min(self._poll_s, max(0.01, seconds / 20))
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="fasteval-watchdog", daemon=True)
            self._thread.start()
        return (float(seconds), kind, what)

    def arm(self, guard: tuple[float, str, str] | None) -> None:
        self._armed = guard

    def disarm(self) -> None:
        self._armed = None
        self._calls += 1

    @contextmanager
    def armed(self, guard: tuple[float, str, str] | None) -> Iterator[None]:
        """:meth:`arm` for the duration of a ``with`` block (disarmed if it raises too)."""
        self.arm(guard)
        try:
            yield
        finally:
            self.disarm()

    def _run(self) -> None:
        seen: tuple[int, object, float] | None = None  # (call count, guard, first seen) of the armed call
        while not self._stop.wait(self._poll_s):
            armed, calls = self._armed, self._calls
            if armed is None:
                seen = None
            elif seen is None or seen[0] != calls or seen[1] is not armed:
                seen = (calls, armed, time.monotonic())
            elif time.monotonic() - seen[2] > armed[0] and self.expired is None:
                seconds, kind, what = armed
                self.expired = expiry_cause(seconds, kind, what)
                self.on_expire(self.expired)
                return

    def close(self) -> None:
        """Stop the thread (an engine closing). Safe to call twice."""
        self._stop.set()
        self._armed = None
