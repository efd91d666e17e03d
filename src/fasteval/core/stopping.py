"""``--stop-when`` in a run: the rule checked on the prefix of episode indices, in ledger terms.

:class:`StopWhen` is one task's stopping state for one run (or one resumed run): a
:class:`~fasteval.types.sequential.PrefixGate` in front of the rule's monitor. The engine hands it
every finished ledger row (``on_finished``); it feeds the gate the episode index and its outcome
(success, or the return for ``return:`` rules; no outcome for an episode that failed for good).
When the gate fires at k, it asks the ledger to stop: no new episode starts, and the loop cancels
the episodes in flight (all of them have indices >= k, since 0..k-1 had to finish first).

:func:`cut_at_stop` then keeps exactly the episodes ``0..k-1`` of a result table and builds the
``stopping`` block: the finished episodes at or past k are listed there, not counted.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from fasteval.types.errors import FastevalError, UserInputError
from fasteval.types.sequential import PrefixGate, StopMonitor, TruncatedStopMonitor
from fasteval.types.sequential.rules import overall_stopping


class StopRuleError(FastevalError, RuntimeError):
    """The stop rule cannot go on: an episode's return lies outside ``--return-bounds`` (exit 1;
    the episodes finished so far are kept)."""


class NoSuccessSignalError(UserInputError):
    """A success-rate rule on an env that reports no success (exit 2, as bad input): its episodes would
    all read "failed", and the rule would decide on nothing (``ci<=0.05`` stopped CartPole at k = 69 with
    a success interval of 0-0.099; ``below=0.8`` would claim "below 80%"). Raised when the first
    episodes finish without any ``info["is_success"]`` (an env's signal is known only then), before
    the rule has read an outcome; the finished episodes are kept."""


def no_signal_message(rule: str, n_finished: int) -> str:
    return (f"--stop-when {rule}: a success-rate rule needs the env's success signal, and the env reported none "
            f"(no info['is_success'] at any step of the first {n_finished} finished episode"
            f"{'' if n_finished == 1 else 's'}), so every episode would read as failed and the rule would decide "
            f"on nothing. Stop on the mean return instead (--stop-when return:above=T, return:below=T or "
            f"return:ci<=E, with --return-bounds LO,HI), or drop --stop-when. The finished episodes are kept.")


class StopWhen:
    """The stop rule of one task's run. ``prime(records)`` feeds episodes recorded by an earlier
    segment (a resumed run), in any order; ``on_finished(ledger, rows)`` the ones this run finishes."""

    def __init__(self, rule: Any, confidence: float = 0.95, return_bounds: Any = None, cap: int | None = None,
                 min_feed: int = 1, design: str = "anytime"):
        try:
            self.monitor = (TruncatedStopMonitor(rule, confidence, cap) if design == "truncated" else
                            StopMonitor(rule, confidence, return_bounds, cap))
        except ValueError as exc:
            raise UserInputError(str(exc)) from None
        self.gate = PrefixGate(self.monitor, min_feed=min_feed)
        self._field = "success" if self.monitor.rule.metric == "success" else "sum_reward"
        self.n_cancelled = 0
        """Episodes cancelled in flight when the rule fired, over every segment of the run."""

    @property
    def k(self) -> int | None:
        """Episodes reported (0..k-1) once the rule fired, else None."""
        return self.gate.k

    @property
    def fired(self) -> bool:
        return self.gate.k is not None

    def _add(self, ixs: Iterable[int], values: Iterable[Any], error: type = StopRuleError) -> int | None:
        try:
            return self.gate.add(ixs, values)
        except ValueError as exc:  # a return outside --return-bounds
            raise error(str(exc)) from None

    def prime(self, table: Any, n_cancelled: int = 0) -> int | None:
        """Feed the episodes recorded by earlier segments of a resumed run (an EpisodeTable, any order);
        ``n_cancelled``: the episodes their rule cancelled in flight (the summary counts every segment's)."""
        self.n_cancelled += int(n_cancelled)
        ixs = np.asarray(table.columns["episode_ix"]).tolist()
        if not ixs:
            return None
        if self._field == "success" and not np.asarray(table.columns["has_success_signal"]).any():
            raise NoSuccessSignalError(no_signal_message(self.monitor.rule.text, len(ixs)))
        self._add(ixs, np.asarray(table.columns[self._field]).tolist(), UserInputError)
        try:
            return self.gate.flush()
        except ValueError as exc:
            raise UserInputError(str(exc)) from None

    def on_finished(self, ledger: Any, rows: Any) -> int | None:
        """Feed finished ledger rows (and rows that failed for good where they block the prefix);
        on the first firing, ask the ledger to stop at k. A success rule refuses to read outcomes of an
        env without a success signal (:class:`NoSuccessSignalError`, before any outcome is read)."""
        if self.fired:
            self.gate.add(ledger.episode_ids[rows].tolist(), [None] * len(rows))  # listed as computed past the stop
            return None
        if self._field == "success" and not ledger.success_signal:
            raise NoSuccessSignalError(no_signal_message(self.monitor.rule.text, int(ledger.finished.sum())))
        values = getattr(ledger, self._field)[rows]
        fired = self._add(ledger.episode_ids[rows].tolist(), values.tolist())
        if fired is None:
            fired = self._add_failed(ledger)
        if fired is not None:
            ledger.request_stop()
        return fired

    def _add_failed(self, ledger: Any) -> int | None:
        """Rows that failed for good are finished without an outcome: feed the ones blocking the prefix."""
        fired = None
        ids = ledger.episode_ids
        while fired is None and not self.fired:
            row = int(np.searchsorted(ids, self.gate.next_index))
            if row >= ids.size or ids[row] != self.gate.next_index or not ledger.failed[row]:
                break
            fired = self._add([self.gate.next_index], [None])
        return fired

    def finish(self, ledger: Any) -> None:
        """At the end of the run: feed failed rows still blocking the prefix and the buffered prefix,
        count the cancelled."""
        if not self.fired:
            self._add_failed(ledger)
            try:
                self.gate.flush()
            except ValueError as exc:
                raise StopRuleError(str(exc)) from None
            monitor = self.monitor
            if (not self.fired and isinstance(monitor, TruncatedStopMonitor) and monitor.cap is not None
                    and self.gate.next_index >= monitor.cap):  # every episode up to the cap ended, some failed for good
                monitor.finish()
        self.n_cancelled += int(ledger.n_cancelled)

    def summary(self) -> dict[str, Any]:
        return self.gate.summary(self.n_cancelled)


def stopping_meta(block: dict[str, Any], task: tuple[Any, Any, Any]) -> dict[str, Any]:
    """``meta`` entries of a one-task run: ``stopping`` (the overall block, which for one task
    repeats the task's numbers) and ``stopping_per_task`` (the task's block with its labels)."""
    group, task_id, name = task
    return {"stopping": {**block, **overall_stopping([block], [])},
            "stopping_per_task": [{"task_group": group, "task_id": task_id, "task": name, **block}]}


def cut_at_stop(table: Any, stop: StopWhen | None) -> tuple[Any, dict[str, Any] | None]:
    """``table`` (an EpisodeTable in episode order) cut to episodes ``0..k-1`` when the rule fired,
    and the stopping block (``None`` without a rule)."""
    if stop is None:
        return table, None
    block = stop.summary()
    if stop.k is None:
        return table, block
    ix = np.asarray(table.columns["episode_ix"])
    keep = np.flatnonzero(ix < stop.k)
    past = sorted(set(block["computed_past_stop"]) | set(ix[ix >= stop.k].tolist()))
    block["computed_past_stop"], block["n_computed_past_stop"] = past, len(past)
    return (table if keep.size == ix.size else table.take(keep)), block
