"""How ``fasteval sweep`` stops on SIGINT and SIGTERM: the contract of a run (``fasteval``'s ``--resume``).

* The **first** signal finishes the jobs in flight and starts no other: each running job ends with all
  its episodes stored, the store is written, the report is built, and the command prints how to resume
  (the same command) and exits ``128 + signal`` (130 for SIGINT, 143 for SIGTERM).
* A **second** signal stops at once: the episodes that reached the driver are stored (an in-process job
  flushes its batch first; pool workers are killed after the driver has stored what they sent, so a
  worker's last half-second of episodes, not yet sent, is run again on resume), no report is written, and
  the exit code is the same. Either way resume is exact: a job runs only its missing episodes.

The handlers are installed for both signals, even where the shell started the sweep with SIGINT
ignored (a background job of a script, ``nohup bash -c 'fasteval sweep ...' &``: bash sets SIGINT to
``SIG_IGN`` for it): a sweep then stops on ``kill -INT PID`` as in a terminal, and stops gracefully rather
than not at all when the script's own Ctrl-C reaches it. ``kill PID`` (SIGTERM) is the usual way to stop
a background sweep. Pool workers ignore both signals (a terminal's Ctrl-C reaches the whole process
group): the driver alone decides when a job stops.
"""

from __future__ import annotations

import signal
import threading
from typing import Any, Callable

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class SweepStop:
    """``with SweepStop(announce) as stop: run_sweep(..., stop=stop.requested)``; ``stop.received`` is the
    first signal's number (``None``: no signal). See the module docstring."""

    def __init__(self, announce: Callable[[str], None]):
        self.announce = announce
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def requested(self) -> bool:
        return self.received is not None

    @property
    def exit_code(self) -> int:
        return 128 + int(self.received or signal.SIGINT)

    @property
    def name(self) -> str:
        return signal.Signals(self.received or signal.SIGINT).name

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is not None:
            raise KeyboardInterrupt(f"second signal ({signal.Signals(signum).name})")
        self.received = signum
        self.announce(f"{signal.Signals(signum).name} received: finishing the jobs in flight, starting no new ones "
                      f"(send it again to stop at once).")

    def __enter__(self) -> "SweepStop":
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def ignore_in_workers() -> None:
    """In a pool worker: SIGINT and SIGTERM are the driver's (see the module docstring)."""
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
