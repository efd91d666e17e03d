"""Progress of a run while it goes, beside the CLI's episode bar (issue 42: a LIBERO run printed nothing for ten
minutes, where ``lerobot-eval`` shows a bar per step).

* **stderr is a terminal**: the episode bar (``doors/cli.py: _Progress``) also shows the env steps taken, and the step
  the longest episode in flight has reached (``520 steps, in flight up to step 234/520``), refreshed about once a
  second by a thread, so a run of long episodes moves before its first episode ends.
* **stderr is not a terminal** (a log file, a cluster job): one line at a time, at most one per
  ``FASTEVAL_PROGRESS_EVERY_S`` seconds (default 30): when an episode finishes and the last line is that old, or
  when nothing was said for that long (a heartbeat with the steps in flight). A run shorter than that prints no
  progress line at all (tests and short runs stay quiet); a run of slow episodes prints a line per episode.
  ``FASTEVAL_PROGRESS_EVERY_S=0``: a line at every finished episode, no heartbeat.

The thread only reads the ledger's arrays (a display may be one step stale); it never touches the run, whose results
do not depend on it.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable

from fasteval.render.words import progress_outcome

EVERY_ENV = "FASTEVAL_PROGRESS_EVERY_S"
DEFAULT_EVERY_S = 30.0
TTY_TICK_S = 1.0


def every_s_from_env() -> float:
    """Seconds between progress lines off a terminal (``FASTEVAL_PROGRESS_EVERY_S``; a bad value: the default)."""
    try:
        value = float(os.environ.get(EVERY_ENV, DEFAULT_EVERY_S))
    except ValueError:
        return DEFAULT_EVERY_S
    return value if value >= 0 else DEFAULT_EVERY_S


def in_flight(ledger: Any) -> tuple[int, int, int]:
    """``(env steps of the episodes in flight, how many there are, the longest one's step)``: O(slots)."""
    if ledger is None:
        return 0, 0, 0
    active = ledger.slot_episode >= 0
    steps = ledger.acc_len[active]
    return int(steps.sum()), int(active.sum()), int(steps.max()) if steps.size else 0


class RunProgress:
    """The steps part of a run's progress (see the module docstring). ``counts()`` gives ``(done, successes,
    sum_return, signal)`` of the finished episodes; ``write`` prints a line (off a terminal); ``bar`` is the tqdm bar
    (on one). :meth:`tick` and :meth:`episodes_finished` take the time, so tests drive them with a fake clock."""

    def __init__(self, engine: Any, total: int, counts: Callable[[], tuple[int, int, float, bool]],
                 write: Callable[[str], None], bar: Any = None, every_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.engine = engine
        self.total = total
        self.counts = counts
        self.write = write
        self.bar = bar
        self.every_s = every_s_from_env() if every_s is None else every_s
        self.clock = clock
        self.started = self.last_line = clock()
        self.finished_steps = 0
        """Env steps of the finished episodes (added up by :meth:`episodes_finished`)."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def steps_text(self) -> str:
        steps, running, longest = in_flight(self.engine.ledger)  # CoreEngine and RayEngine both have these
        cap = self.engine.max_steps
        text = f"{self.finished_steps + steps:,} env steps"
        if running:
            text += f", {running} in flight up to step {longest:,}" + (f"/{cap:,}" if cap else "")
        return text

    def line(self, now: float) -> str:
        done, successes, sum_return, signal = self.counts()
        return (f"progress: {done}/{self.total} episodes, {progress_outcome(done, successes, sum_return, signal)}, "
                f"{self.steps_text()}, {now - self.started:.0f} s")

    def episodes_finished(self, steps: int = 0, now: float | None = None) -> None:
        """Episodes with ``steps`` env steps in all finished: on a terminal, the bar's steps (drawn with its next
        update); off one, a line when the last one is at least ``every_s`` old."""
        self.finished_steps += steps
        if self.bar is not None:
            self.bar.set_description_str(self.steps_text(), refresh=False)
            return
        now = self.clock() if now is None else now
        if now - self.last_line >= self.every_s:
            self.write(self.line(now))
            self.last_line = now

    def tick(self, now: float | None = None) -> None:
        """On a terminal: the bar's steps; off one: a heartbeat line when nothing was said for ``every_s``."""
        now = self.clock() if now is None else now
        if self.bar is not None:
            self.bar.set_description_str(self.steps_text(), refresh=True)
        elif self.every_s > 0 and now - self.last_line >= self.every_s:
            self.write(self.line(now))
            self.last_line = now

    def start(self) -> "RunProgress":
        if self.bar is None and self.every_s <= 0:
            return self  # a line per episode, no heartbeat
        period = TTY_TICK_S if self.bar is not None else min(self.every_s, TTY_TICK_S * 5)

        def loop() -> None:
            while not self._stop.wait(period):
                try:
                    self.tick()
                except Exception:  # a display must never stop a run (a ledger swapped between runs, a closed bar)
                    pass

        self._thread = threading.Thread(target=loop, name="fasteval-progress", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
