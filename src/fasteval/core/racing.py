"""``--stop-when best`` in a many-policy run: the race of :mod:`fasteval.types.sequential.race`, in ledger terms.

:class:`RaceStop` is a run's racing state (one run, or one resumed run): a
:class:`~fasteval.types.sequential.race.RaceGate` in front of a :class:`~fasteval.types.sequential.race.Race`.
The engine hands it every finished ledger row (``on_finished``); it feeds the gate each row's policy,
episode index and outcome (success, or the return for ``return:best``), and every row that failed for
good (``ledger.failed_rows``) as an episode with no outcome. The gate passes on the prefix of indices
that every remaining policy has finished, so each decision depends on episodes ``0..k-1`` only: the same
eliminations at the same k, and the same numbers, whatever the batch size, the vectorization, the
pipelining or the order episodes finish in.

* a policy dropped at k: :meth:`~fasteval.core.ledger.Ledger.drop_policies` (none of its episodes at or
  past k starts; the loop abandons those in flight and gives their slots to the remaining policies at
  once, :func:`fasteval.core.loop.at_stop_request`);
* the race done (one left, all remaining tied, or the cap): :meth:`~fasteval.core.ledger.Ledger.request_stop`.

A resumed run primes a new race with every policy's recorded episodes (any order: it replays to the same
state, :meth:`prime`), then runs only the remaining policies' missing episodes (:meth:`keep`).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

import numpy as np

from fasteval.core.stopping import NoSuccessSignalError, StopRuleError
from fasteval.types.errors import UserInputError
from fasteval.types.metric_bounds import FIELDS
from fasteval.types.sequential.race import Race, RaceGate, RaceStatus


def no_signal_message(rule: str, n_finished: int) -> str:
    """A success race on an env that reports no success: every policy would read 0% and the race would
    name the first-listed one best on a tie."""
    return (f"--stop-when {rule}: a race on the success rate needs the env's success signal, and the env reported "
            f"none (no info['is_success'] in the first {n_finished} finished episode{'' if n_finished == 1 else 's'}), "
            f"so every policy would read 0% and the race would decide nothing. Race on the mean return "
            f"(--stop-when return:best, or best with --rank-by return; bounds from the env where it declares them, "
            f"else --return-bounds LO,HI) or on the max reward (max_reward:best), or drop --stop-when to run every "
            f"policy to -n. The finished episodes are kept.")


class RaceStop:
    """The race of one many-policy run (see the module docstring). ``names``: the policies' names (their
    records' ``policy`` field); ``announce(line)``: told each elimination and the end (the CLI prints them)."""

    def __init__(self, rule: Any, names: Sequence[str], confidence: float = 0.95, return_bounds: Any = None,
                 cap: int | None = None, min_feed: int = 1, announce: Callable[[str], None] | None = None,
                 bounds_source: str | None = None):
        try:
            self.race = Race(rule, len(names), cap=cap, confidence=confidence, return_bounds=return_bounds,
                             names=list(names), bounds_source=bounds_source)
        except ValueError as exc:
            raise UserInputError(str(exc)) from None
        self.gate = RaceGate(self.race, min_feed=min_feed)
        self.names = tuple(names)
        self._index = {name: k for k, name in enumerate(self.names)}
        self._field = FIELDS[self.race.rule.metric]
        self.announce = announce
        self.n_cancelled = 0
        """Episodes cancelled in flight (the run's end, and dropped policies' episodes), over every segment."""
        self._failed_seen = 0
        self._dropped_told: set[int] = set()
        self._done_told = False

    # -- reading ---------------------------------------------------------------------------------------------
    @property
    def status(self) -> RaceStatus:
        return self.race.status()

    @property
    def fired(self) -> bool:
        """The race is over (one left, tied, or the cap): the run runs nothing more."""
        return self.race.done

    @property
    def k(self) -> int:
        return self.race.k

    def episodes_used(self) -> np.ndarray:
        """Per policy, the episodes that count (``0..n_p - 1``)."""
        return self.race.episodes_used()

    def limit(self, policy: int) -> int | None:
        """Episodes of ``policy`` at or past this do not count (its k if dropped, the race's k when it is over)."""
        for e in self.race.eliminations:
            if e.policy == policy:
                return e.k
        return self.race.k if self.race.done else None

    def keep(self, pairs: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
        """The ``(policy, episode)`` pairs still worth running: none of a dropped policy's at or past its k,
        none at all once the race is over."""
        out = []
        for policy, episode in pairs:
            limit = self.limit(int(policy))
            if limit is None or int(episode) < limit:
                out.append((int(policy), int(episode)))
        return out

    def progress(self) -> str:
        """One line for the terminal: remaining policies, leader, episodes used."""
        race = self.race
        status = race.status()
        leader = self.names[status.leader] if status.leader is not None else "-"
        used = int(race.episodes_used().sum())
        return (f"race: {len(status.remaining)}/{race.n_policies} remaining, leader {leader}, k={race.k}, "
                f"{used} episodes counted")

    # -- feeding ----------------------------------------------------------------------------------------------
    def _add(self, policy: int, ixs: list[int], values: list[Any], error: type) -> list[Any]:
        try:
            return list(self.gate.add(policy, ixs, values).new)
        except ValueError as exc:  # a return outside --return-bounds
            raise error(str(exc)) from None

    def prime(self, table: Any, n_cancelled: int = 0) -> None:
        """Feed the episodes recorded by earlier segments of a resumed run (an EpisodeTable with a ``policy``
        column, any order); ``n_cancelled``: what their runs cancelled in flight."""
        self.n_cancelled += int(n_cancelled)
        if not len(table):
            return
        if self._field == "success" and not np.asarray(table.columns["has_success_signal"]).any():
            raise NoSuccessSignalError(no_signal_message(self.race.rule.text, len(table)))
        names = table.column("policy")
        ixs = np.asarray(table.columns["episode_ix"])
        values = np.asarray(table.columns[self._field])
        for name in dict.fromkeys(names.tolist()):
            k = self._index.get(name)
            if k is None:
                raise UserInputError(f"the run's records name a policy {name!r} that is not one of {list(self.names)}.")
            mask = names == name
            self._add(k, ixs[mask].tolist(), values[mask].tolist(), UserInputError)
        try:
            self.gate.flush()
        except ValueError as exc:
            raise UserInputError(str(exc)) from None
        self._tell()

    def on_finished(self, ledger: Any, rows: Any) -> None:
        """Feed finished ledger rows and the rows that failed for good since the last call; apply what the
        race decided to the ledger."""
        new: list[Any] = []
        if len(rows) and self._field == "success" and not ledger.success_signal:
            raise NoSuccessSignalError(no_signal_message(self.race.rule.text, int(ledger.finished.sum())))
        if len(rows):
            pids = ledger.policy_ids[rows]
            ixs = ledger.episode_ids[rows]
            values = getattr(ledger, self._field)[rows]
            if np.all(pids == pids[0]):
                new += self._add(int(pids[0]), ixs.tolist(), values.tolist(), StopRuleError)
            else:
                for p in np.unique(pids).tolist():
                    mask = pids == p
                    new += self._add(int(p), ixs[mask].tolist(), values[mask].tolist(), StopRuleError)
        new += self._feed_failed(ledger)
        self._apply(ledger, new)

    def _feed_failed(self, ledger: Any) -> list[Any]:
        failed = ledger.failed_rows
        new: list[Any] = []
        while self._failed_seen < len(failed):
            row = failed[self._failed_seen]
            self._failed_seen += 1
            new += self._add(int(ledger.policy_ids[row]), [int(ledger.episode_ids[row])], [None], StopRuleError)
        return new

    def _apply(self, ledger: Any, new: list[Any]) -> None:
        if new:
            ledger.drop_policies(sorted({e.policy for e in new}))
        if self.race.done and not ledger.halting:
            ledger.request_stop()
        self._tell()

    def _tell(self) -> None:
        """Announce the eliminations and the end not yet announced."""
        if self.announce is None:
            return
        for e in self.race.eliminations:
            if e.policy in self._dropped_told:
                continue
            self._dropped_told.add(e.policy)
            self.announce(f"race: dropped {self.names[e.policy]} after {e.k} episodes (beaten by "
                          f"{self.names[e.by]}); {self.progress()[6:]}")
        if self.race.done and not self._done_told:
            self._done_told = True
            self.announce(f"race: done ({self.race.reason}) at k={self.race.k}; {self.progress()[6:]}")

    def finish(self, ledger: Any) -> None:
        """At the end of the run: feed the failed rows not fed yet and the buffered prefix; count the cancelled."""
        try:
            self._feed_failed(ledger)
            self.gate.flush()
        except ValueError as exc:
            raise StopRuleError(str(exc)) from None
        self.n_cancelled += int(ledger.n_cancelled)
        self._tell()

    def summary(self) -> dict[str, Any]:
        """The race's block (``eval_info.json``'s ``race``): :meth:`Race.summary` plus what the engine knows
        (episodes cancelled in flight, and each policy's episodes computed past its stop, not counted)."""
        block = self.race.summary()
        past = {self.names[p]: sorted(set(ixs)) for p, ixs in enumerate(self.gate.past_stop) if ixs}
        block["n_cancelled"] = self.n_cancelled
        block["computed_past_stop"] = past
        block["n_computed_past_stop"] = sum(len(v) for v in past.values())
        return block
