"""What one engine run hands up: :class:`Segment`, final when :meth:`CoreEngine.run_segment` returns.

Core does not build the record of a run: it hands its ingredients up, and the run layer
(:mod:`fasteval.run.record`) builds the one record from them, the spec and what the layer above knows
(the earlier segments of a resumed run, the task's label, a write that failed). Nothing here is changed
after it is handed up: the ledger's finished rows are final, the stop rule has finished, the recorders
are closed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from fasteval.core.ledger import Ledger
from fasteval.core.stopping import StopWhen


@dataclass(frozen=True)
class Segment:
    """One engine run (a whole run, or one segment of a resumed one)."""

    ledger: Ledger
    """Its ledger: the finished rows (``ledger.finished``) are its episodes, ``ledger.failed`` the rows
    that failed for good; ``ledger.limit < ledger.n_episodes`` when a stop request kept episodes from
    starting."""
    errors: tuple[dict[str, Any], ...]
    """Fault records, in the order they happened (retried ones included)."""
    eval_s: float
    """Seconds of the hot loop (dry run and graph capture excluded)."""
    timings: Mapping[str, float]
    """Seconds per stage."""
    facts: Mapping[str, Any]
    """What the engine alone knows of the run (device, slots, step cap, kernel backend, batching,
    accelerators, the policy's and the env's own facts, the success signal, threads...)."""
    success_signal: bool
    """Whether the envs had reported ``info["is_success"]`` by the end of the run."""
    stop: StopWhen | None = None
    """The ``--stop-when`` rule, finished (its ``k`` and summary are final), or ``None``."""
    cap: int | None = None
    """The episodes the run was asked for (its ``n``; for a run of given episode indices, the spec's ``n``)."""
    error: BaseException | None = None
    """What ended the run early (an exception, a second signal's KeyboardInterrupt), or ``None``."""
    outputs: Mapping[str, Any] = field(default_factory=dict)
    """What the recorders made (``video_paths``, ``episode_data``): :meth:`EngineParts.finish_observers`'s."""


class SegmentAborted(Exception):
    """A run that stopped early (an error, a second signal): ``segment`` holds every episode that finished
    before the stop (nothing computed is lost); ``__cause__`` is what stopped it."""

    def __init__(self, segment: Segment):
        super().__init__(f"the run stopped early: {type(segment.error).__name__}: {segment.error}")
        self.segment = segment
