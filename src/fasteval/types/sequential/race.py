"""``--stop-when best``: race K policies on paired seeds and drop each one once it has clearly lost.

Rules (:func:`parse_race_rule`): ``best``, ``best:eps=E``, on the mean return ``return:best``,
``return:best:eps=E`` (E in return units), and on the mean max reward (PushT's coverage) ``max_reward:best``,
``max_reward:best:eps=E``. A plain ``best`` races on the run's ``--rank-by`` metric when one is given (else
on success). Races on returns or max rewards need bounds: the env's declared ones
(:mod:`fasteval.types.metric_bounds`) or ``--return-bounds LO,HI``.

**The race.** K policies run the same episodes: episode i of every policy has seed ``seed + i``, so
the outcomes ``x_pi`` of policies p are *paired* by i. After each episode index, with ``R`` the
policies still in the race:

1. **drop** every policy q in R for which some p in R is shown to beat it by more than eps: the
   paired confidence sequence of ``mu_p - mu_q`` lies entirely above eps. q keeps the episodes
   ``0..k-1`` (its prefix at the decision); the record names p (``by``);
2. stop with **one left** when R has one policy;
3. stop **tied** when eps > 0 and every pair in R is shown within eps: each pair's sequence lies
   inside (-eps, eps);
4. stop at the **cap** (``-n``).

The answer is the *leader*: the policy of R with the highest mean (the first of them on a tie).

**The paired statistic.** Per pair (p, q) and episode i, ``d_i = x_pi - x_qi`` in [-1, 1]
(successes), or ``(r_pi - r_qi) / (HI - LO)`` (returns), as ``y_i = (1 + d_i) / 2`` in [0, 1]. A seed
that is hard for every policy makes both fail: ``d_i = 0``, no noise. That is why pairing needs far
fewer episodes than per-policy intervals when seeds share difficulty (measured in
``benchmarks/bench_race.py``). The sequence is :mod:`.race_cs`'s mixture of constant bets (the bets of
:mod:`.eprocess`, moved to the nulls ``m+ = (1 + eps') / 2`` and ``m- = (1 - eps') / 2``, with
``eps' = eps`` for successes and ``eps / (HI - LO)`` for returns), read at four points: the long
gambler at m+ ("p beats q by more than eps"), the short one at m- ("q beats p"), and, for ties, the
short one at m+ and the long one at m-.

**The guarantee.** Every unordered pair's two-sided sequence runs at level ``alpha' = alpha /
(K (K - 1) / 2)`` (a gambler's line is ``2 / alpha'``, i.e. ``K (K - 1) / alpha``). By Ville's
inequality, a pair's sequence misses the true difference at some episode with probability at most
alpha'; by the union bound over the ``K (K - 1) / 2`` pairs, with probability at least ``1 - alpha``
*every* pair's sequence covers its true difference at *every* episode at once. On that event:

* no policy within eps of the best is ever dropped: dropping q needs some p with ``mu_p - mu_q > eps``
  inside the sequence, so truly ``mu_p - mu_q > eps``, impossible when ``mu_q >= mu_best - eps``
  (the family-wise guarantee: over all eliminations of a run, at most alpha);
* a declared tie is a true tie (every remaining pair within eps), and every reported paired interval
  is right, all at once.

**Holm's step-down for the drops** (``holm=True``, the default). The drops test the K hypotheses "q is within
eps of the best" (H_q; under it every "p beats q" long gambler is a nonnegative supermartingale). H_q's local
test is the union over the other K - 1 policies, each at ``alpha_q / (K - 1)``; Bonferroni over K hypotheses is
the line ``K (K - 1) / alpha`` of the first drop, and closed testing with Bonferroni local tests (Holm's
shortcut) lowers it to ``(K - 1) (K - d) / alpha`` after d drops: the alpha of a dropped policy is spent on
the rest. Reading the current wealth instead of its running maximum rejects a subset of what closed testing
allows, so the family-wise guarantee on drops stays at most alpha (checked by simulation in
``tests/test_race.py``; about 11% fewer episodes in scenario (a) of ``benchmarks/bench_race.py``, whose own
vectorised races keep the union bound's line). The intervals and ties keep the union bound over pairs
(``alpha'`` each, all at once), so a policy dropped under a lowered line may show a paired interval that
still reaches eps: the drop rests on Holm's test, whose line is recorded with each elimination (``line``).

Optional stopping is covered (the sequences are anytime-valid), and so is the freezing of a pair when
one of its policies is dropped (a stopped supermartingale is one). The decision rule is free to use
anything seen so far, such as the remaining set. The same bound holds for one-sided tests of the
``K (K - 1)`` ordered pairs at ``alpha / (K (K - 1))`` each: the two-sided sequences cost nothing more
and give ties and intervals too. (Closed-testing variants, such as an e-value mean over "q is within
eps of the best" hypotheses, are also valid for e-processes; in exploratory simulations of the
benchmark's scenarios they saved 5-12% of the episodes, not enough for the extra machinery.)

**No policy drops them all.** The sample mean of a pair lies inside its sequence, so "p beats q"
implies that p's mean over the shared prefix is higher than q's by more than eps: the relation has no
cycles, and the leader is never dropped. R is never empty.

**Batch invariance.** :class:`Race` takes outcomes in episode-index order, one index for all
remaining policies at a time (a block is many indices); :class:`RaceGate` takes finished episodes in
any order and feeds it the prefix of indices that every remaining policy has finished. Each decision
depends only on the outcomes of indices ``0..k-1``, every running sum is a sequential cumulative sum
from the previous state, so the same outcomes give the same eliminations at the same k and the same
numbers, bit for bit, whatever the block sizes or the arrival order (tested with shuffled arrivals).

**In a run** (the engine's side, for many-policy runs): build ``Race(rule, K, cap=n, confidence,
return_bounds, names)`` and a :class:`RaceGate` in front of it; hand the gate every finished ledger
row as ``add(policy, [episode_ix], [success or return, or None if it failed for good])``. The ledger
should hand out (policy, episode) pairs interleaved by episode index, so that every remaining
policy's prefix grows at the same pace (the race can only decide index k once all of them have
finished it). On ``status.new``: stop each dropped policy at its ``k`` (start none of its episodes
at or past k, cancel those in flight; the ones that finish anyway are in ``gate.past_stop``), and give
its slots to the remaining policies. On ``status.done``: stop the run at ``status.k``. At the end,
``race.summary()`` is the record's race block, and policy p reports its episodes ``0..n_p - 1`` with
``n_p = race.episodes_used()[p]``. To resume, prime a new gate with every policy's recorded episodes
(any order; the race replays to the same state), then run the remaining policies from ``race.k``; a
race that stopped at its cap goes on with ``race.raise_cap(new_n)``.

Pure NumPy, no I/O.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from fasteval.types.sequential.betting import BettingCS, check_confidence
from fasteval.types.sequential.race_cs import N_BETS, fold, log_factors, mixture, mixture_cs, signed_bets
from fasteval.types.sequential.rules import parse_return_bounds

DEFAULT_EPS = 0.0
"""``best`` without a margin: drop a policy once another is shown better at all."""
METHOD = ("paired race: mixture-of-constant-bets confidence sequences on the per-seed differences of every pair, "
          "each at alpha / (K(K-1)/2) (union bound over pairs: the intervals and ties); drops by Holm's step-down on "
          "the K(K-1) one-sided 'p beats q' hypotheses (line (K(K-1) - r) / alpha after r rejections)")
_RULE = re.compile(r"^(?:(?P<metric>success|return|max_reward):)?best(?::eps\s*=\s*(?P<eps>[^\s]+))?$")
_EXAMPLES = "best, best:eps=0.02, return:best, return:best:eps=5, max_reward:best"
_MAX_ELEMENTS = 2_000_000
"""Folded log-wealth entries per step of :meth:`Race.feed` (pairs x boundaries x indices x bets)."""
REASONS = ("one_left", "tied", "cap")
_SCAN = 32
"""Indices scanned per step at most: a decision refolds the rest of a scan, so short scans waste little."""


# -- the rule ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RaceRule:
    """A parsed race rule. ``eps``: the margin in outcome units (a rate, or return units)."""

    text: str
    metric: str = "success"
    eps: float = DEFAULT_EPS

    @property
    def needs_return_bounds(self) -> bool:
        return self.metric != "success"

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.text, "metric": self.metric, "kind": "best", "eps": self.eps}


def is_race_rule(text: Any) -> bool:
    """Whether ``text`` is a race rule (``best...``), to route it here rather than to :func:`~.rules.parse_stop_rule`."""
    return isinstance(text, RaceRule) or (isinstance(text, str) and _RULE.match(text.strip()) is not None)


def parse_race_rule(text: Any, rank_by: str | None = None) -> RaceRule:
    """``text`` -> :class:`RaceRule`, or a ValueError that says which forms are accepted. ``rank_by`` (the
    run's ``--rank-by``): the metric of a rule without one (``best``); a rule that names another metric than
    ``rank_by`` is refused."""
    if isinstance(text, RaceRule):
        return text
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"--stop-when: expected a race rule such as {_EXAMPLES}, got {text!r}.")
    raw = text.strip()
    match = _RULE.match(raw)
    if match is None:
        raise ValueError(f"--stop-when: cannot read {raw!r} as a race rule; expected one of {_EXAMPLES}.")
    metric = match["metric"] or rank_by or "success"
    if rank_by is not None and metric != rank_by:
        raise ValueError(f"--stop-when {raw} races on {metric}, but --rank-by is {rank_by}: give one metric "
                         f"(--stop-when {rank_by}:best, or --stop-when best with --rank-by {rank_by}).")
    eps = DEFAULT_EPS
    if match["eps"] is not None:
        try:
            eps = float(match["eps"])
        except ValueError:
            raise ValueError(f"--stop-when {raw}: the margin {match['eps']!r} is not a number (e.g. best:eps=0.02).") from None
        if not math.isfinite(eps) or eps < 0:
            raise ValueError(f"--stop-when {raw}: the margin must be a finite number >= 0, got {match['eps']!r}.")
        if metric == "success" and eps >= 1.0:
            raise ValueError(f"--stop-when {raw}: a success-rate margin is a fraction below 1 (best:eps=0.02 is 2 "
                             f"points), got {eps:g}.")
    return RaceRule(raw, metric, eps)


def check_race_setup(rule: RaceRule, n_policies: int, return_bounds: tuple[float, float] | None) -> None:
    """Raise ValueError when the race cannot run: fewer than two policies, a return rule without
    bounds, or a margin as wide as the bounds."""
    if int(n_policies) < 2:
        raise ValueError(f"--stop-when {rule.text}: a race needs at least two policies (give --policy several "
                         f"times), got {n_policies}.")
    if rule.metric == "success":
        return
    if return_bounds is None:
        what = "episode return" if rule.metric == "return" else "max reward of an episode"
        raise ValueError(f"--stop-when {rule.text}: a race on the {'mean return' if rule.metric == 'return' else 'mean max reward'} "
                         f"needs --return-bounds LO,HI (the smallest and largest possible {what}), so that its "
                         f"intervals are valid; the env declares no bounds of its own.")
    lo, hi = return_bounds
    if rule.eps >= hi - lo:
        raise ValueError(f"--stop-when {rule.text}: the margin {rule.eps:g} must be smaller than the width of "
                         f"--return-bounds {lo:g},{hi:g}.")


# -- what a feed returns ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Elimination:
    """Policy ``policy`` dropped after its episodes ``0..k-1``, beaten by ``by`` (still in the race at
    that moment) with the e-value ``e_value`` (>= ``line``: Holm's line at that step, ``(K - 1) (K - d) /
    alpha`` after d drops; ``K (K - 1) / alpha`` for the first drop, or always without Holm)."""

    policy: int
    k: int
    by: int
    e_value: float
    line: float = math.nan

    def to_dict(self) -> dict[str, Any]:
        return {"policy": self.policy, "k": self.k, "by": self.by, "e_value": self.e_value, "line": self.line}


@dataclass(frozen=True)
class RaceStatus:
    """The race after a feed. ``k``: episodes ``0..k-1`` are decided for every remaining policy;
    ``remaining``: policy indices still in; ``eliminations``: all drops so far, in order (a policy's
    reported episodes are ``0..e.k-1``); ``new``: the drops of this feed (the engine stops running
    those policies); ``leader``: the remaining policy with the highest mean (None before any
    episode); ``done`` with ``reason`` in ``one_left``, ``tied``, ``cap``."""

    k: int
    remaining: tuple[int, ...]
    eliminations: tuple[Elimination, ...]
    new: tuple[Elimination, ...]
    leader: int | None
    tied: bool
    done: bool
    reason: str | None

    def episodes_of(self, policy: int) -> int:
        """How many episodes (``0..n-1``) count for ``policy``: its k if dropped, else the race's k."""
        for e in self.eliminations:
            if e.policy == policy:
                return e.k
        return self.k


# -- the race -------------------------------------------------------------------------------------------------
class Race:
    """The race's statistics, fed outcomes in episode-index order (see the module docstring).

    ``feed(values)``: ``values`` of shape ``(K, n)`` holds the outcomes of episodes ``k..k+n-1`` of every
    policy (successes as bools, or returns; NaN or None: the episode failed for good and carries no
    outcome); rows of dropped policies are ignored. Returns a :class:`RaceStatus`. Values past the cap,
    or after the race is done, are ignored.

    State: per unordered pair (p < q), the log-wealth of the N bet components at each boundary
    (``(P, B, N)``, ``P = K (K - 1) / 2``, B = 4, or 2 when eps = 0); per policy, its outcomes so far
    (for the summary's intervals) and running sums. The cost of an index is ``P B N`` log1p's over the
    pairs still racing (K = 10: 7,200).
    """

    def __init__(self, rule: RaceRule | str, n_policies: int, cap: int | None = None, confidence: float = 0.95,
                 return_bounds: Any = None, names: Sequence[str] | None = None, bounds_source: str | None = None,
                 holm: bool = True):
        self.rule = parse_race_rule(rule)
        self.bounds_source = bounds_source if self.rule.metric != "success" else None
        self.n_policies = int(n_policies)
        self.return_bounds = parse_return_bounds(return_bounds)
        check_race_setup(self.rule, self.n_policies, self.return_bounds)
        if cap is not None and int(cap) < 1:
            raise ValueError(f"cap: expected a number of episodes >= 1, got {cap!r}.")
        self.cap = None if cap is None else int(cap)
        self.confidence = check_confidence(confidence)
        self.alpha = 1.0 - self.confidence
        K = self.n_policies
        self.names = [str(n) for n in names] if names is not None else [str(p) for p in range(K)]
        if len(self.names) != K:
            raise ValueError(f"names: expected {K} names, got {len(self.names)}.")
        self.n_pairs = K * (K - 1) // 2
        self.alpha_pair = self.alpha / self.n_pairs
        self.line = 2.0 / self.alpha_pair
        self._log_line = math.log(self.line)
        self.holm = bool(holm)
        self.n_rejected = 0
        """Holm: the one-sided "p beats q" hypotheses rejected so far (each drop rejects at least one)."""
        self.width = 1.0 if self.rule.metric == "success" else self.return_bounds[1] - self.return_bounds[0]
        self.eps_unit = self.rule.eps / self.width
        m_plus, m_minus = (1.0 + self.eps_unit) / 2.0, (1.0 - self.eps_unit) / 2.0
        # boundaries: 0 "p beats q", 1 "q beats p", then (eps > 0) 2 "mu_p - mu_q < eps", 3 "mu_p - mu_q > -eps"
        means, sides = [m_plus, m_minus], [1, -1]
        if self.eps_unit > 0:
            means, sides = means + [m_plus, m_minus], sides + [-1, 1]
        self._m = np.array(means)
        self._bets = signed_bets(self._m, np.array(sides))
        self._pairs = np.array([(p, q) for p in range(K) for q in range(p + 1, K)], dtype=np.int64).reshape(-1, 2)
        self._comps = np.zeros((self.n_pairs, self._m.size, N_BETS))
        self._log_e = np.zeros((self.n_pairs, self._m.size))
        self._pair_n = np.zeros(self.n_pairs, dtype=np.int64)
        self.k = 0
        self.remaining = np.ones(K, dtype=bool)
        self.eliminations: list[Elimination] = []
        self._sums = np.zeros(K)
        self._counts = np.zeros(K, dtype=np.int64)
        self._values: list[list[np.ndarray]] = [[] for _ in range(K)]
        self.tied = False
        self.reason: str | None = None

    # -- reading the state ---------------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.reason is not None

    @property
    def remaining_policies(self) -> tuple[int, ...]:
        return tuple(int(p) for p in np.flatnonzero(self.remaining))

    def means(self) -> np.ndarray:
        """Each policy's mean outcome over its episodes so far (in outcome units; NaN before any)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            unit = np.where(self._counts > 0, self._sums / np.maximum(self._counts, 1), np.nan)
        return self._from_unit(unit)

    @property
    def leader(self) -> int | None:
        """The remaining policy with the highest mean (the first of them on a tie); None before any outcome."""
        if not self._counts[self.remaining].any():
            return None
        with np.errstate(invalid="ignore", divide="ignore"):
            unit = np.where(self._counts > 0, self._sums / np.maximum(self._counts, 1), -np.inf)
        return int(np.argmax(np.where(self.remaining, unit, -np.inf)))

    def status(self, new: Sequence[Elimination] = ()) -> RaceStatus:
        return RaceStatus(self.k, self.remaining_policies, tuple(self.eliminations), tuple(new), self.leader,
                          self.tied, self.done, self.reason)

    def episodes_used(self) -> np.ndarray:
        """Per policy, the episodes that count (``0..n-1``): its k if dropped, else the race's k."""
        out = np.full(self.n_policies, self.k, dtype=np.int64)
        for e in self.eliminations:
            out[e.policy] = e.k
        return out

    # -- units ----------------------------------------------------------------------------------------------------
    def _unit(self, values: Any) -> np.ndarray:
        """``(K, n)`` outcomes -> floats in [0, 1], NaN for no outcome; a return outside the bounds raises."""
        arr = np.asarray(values, dtype=object if _has_none(values) else None)
        if arr.ndim != 2 or arr.shape[0] != self.n_policies:
            raise ValueError(f"race outcomes: expected shape (n_policies={self.n_policies}, n), got {arr.shape}.")
        x = np.array([[np.nan if v is None else float(v) for v in row] for row in arr], dtype=np.float64) \
            if arr.dtype == object else arr.astype(np.float64)
        if self.rule.metric == "success":
            bad = ~np.isnan(x) & (x != 0.0) & (x != 1.0) & self.remaining[:, None]
            if bad.any():
                p, i = (int(v) for v in np.argwhere(bad)[0])
                raise ValueError(f"race outcomes: a success is True/False (or 0/1), got {x[p, i]!r} for policy "
                                 f"{self.names[p]} at episode {self.k + i}.")
            return x
        lo, hi = self.return_bounds
        bad = ~np.isnan(x) & ~((x >= lo) & (x <= hi))
        bad &= self.remaining[:, None]
        if bad.any():
            p, i = (int(v) for v in np.argwhere(bad)[0])
            raise ValueError(f"--return-bounds {lo:g},{hi:g}: the episode return {x[p, i]!r} of policy "
                             f"{self.names[p]} (episode {self.k + i}) lies outside them; the race's intervals would "
                             f"not be valid. Rerun with bounds that cover every possible return.")
        return np.clip((x - lo) / (hi - lo), 0.0, 1.0)

    def _from_unit(self, value: Any) -> Any:
        if self.rule.metric == "success":
            return value
        lo, hi = self.return_bounds
        return lo + np.asarray(value) * (hi - lo)

    # -- feeding ------------------------------------------------------------------------------------------------
    def feed(self, values: Any) -> RaceStatus:
        if self.done:
            return self.status()
        x = self._unit(values)
        new: list[Elimination] = []
        pos = 0
        while pos < x.shape[1] and not self.done:
            pos += self._step_block(x[:, pos:], new)
        return self.status(new)

    def _step_block(self, x: np.ndarray, new: list[Elimination]) -> int:
        """Fold the longest run of indices with no decision (then the deciding index, decided); return
        how many indices were consumed."""
        active = np.flatnonzero(self.remaining[self._pairs[:, 0]] & self.remaining[self._pairs[:, 1]])
        room = x.shape[1] if self.cap is None else min(x.shape[1], self.cap - self.k)
        per_index = max(1, active.size * self._m.size * N_BETS)
        n = max(1, min(room, _SCAN, _MAX_ELEMENTS // per_index))
        block = x[:, :n]
        p, q = self._pairs[active, 0], self._pairs[active, 1]
        y = (1.0 + block[p] - block[q]) / 2.0  # (A, n); NaN where either side has no outcome
        traj = fold(self._comps[active], log_factors(y, self._m, self._bets))  # (A, B, n, N)
        log_e = mixture(traj)  # (A, B, n)
        fire = log_e >= self._lines()[None, :, None]
        beats = fire[:, 0, :] | fire[:, 1, :]
        hit = beats.any(axis=0)
        if self._m.size > 2:
            hit |= (fire[:, 2, :] & fire[:, 3, :]).all(axis=0)
        t = int(np.argmax(hit)) if hit.any() else n - 1
        self._commit(block[:, : t + 1], active, traj[:, :, t, :], log_e[:, :, t])
        if hit.any():
            self._decide(active, log_e[:, :, t], new)
        if not self.done and self.cap is not None and self.k >= self.cap:
            self.reason = "cap"
        return t + 1

    def _commit(self, block: np.ndarray, active: np.ndarray, comps: np.ndarray, log_e: np.ndarray) -> None:
        """Advance to the end of ``block`` (the indices up to the decision): pair states, sums, outcomes."""
        self._comps[active] = comps
        self._log_e[active] = log_e
        self._pair_n[active] += block.shape[1]
        for p in np.flatnonzero(self.remaining):
            row = block[p]
            present = ~np.isnan(row)
            self._sums[p] = np.cumsum(np.concatenate([[self._sums[p]], np.where(present, row, 0.0)]))[-1]
            self._counts[p] += int(present.sum())
            self._values[p].append(row.copy())
        self.k += block.shape[1]

    @property
    def holm_line(self) -> float:
        """The e-value a "p beats q" wealth must reach now to drop q: ``(K - 1) (K - d) / alpha`` with d the
        policies dropped so far (Holm's step-down on the K hypotheses "q is within eps of the best"; without
        Holm, and before any drop, ``K (K - 1) / alpha``, the union bound's line)."""
        K = self.n_policies
        return (K - 1) * (K - (self.n_rejected if self.holm else 0)) / self.alpha

    def _lines(self) -> np.ndarray:
        """Log lines per boundary: the drops' (Holm's, at the current step), then the ties' (Bonferroni's)."""
        drop = math.log(self.holm_line)
        return np.array([drop, drop, self._log_line, self._log_line][: self._m.size])

    def _decide(self, active: np.ndarray, log_e: np.ndarray, new: list[Elimination]) -> None:
        """Apply the decisions at the current k: drops first (all at once, Holm's step-down repeated at this k
        until no more hypothesis crosses its lowered line), then one left, then a tie."""
        beaten_by: dict[int, list[tuple[int, float]]] = {}
        # Holm's step-down at this k: each dropped policy (a rejected "q is within eps of the best") lowers the
        # line for the rest, and the pairs still racing are read again against it. (Reading the current wealth,
        # not its running maximum, rejects a subset of what closed testing allows: the guarantee holds.)
        lines: dict[int, float] = {}
        while True:
            line = math.log(self.holm_line)
            step: set[int] = set()
            for a in range(len(active)):
                p, q = (int(v) for v in self._pairs[active[a]])
                for side, (winner, loser) in ((0, (p, q)), (1, (q, p))):
                    if loser not in beaten_by and log_e[a, side] >= line:
                        step.add(loser)
                        beaten_by.setdefault(loser, [])
                        beaten_by[loser].append((winner, float(log_e[a, side])))
            # a loser beaten by several winners at this step keeps every one (the record names the strongest)
            for a in range(len(active)):
                p, q = (int(v) for v in self._pairs[active[a]])
                for side, (winner, loser) in ((0, (p, q)), (1, (q, p))):
                    if loser in step and log_e[a, side] >= line and (winner, float(log_e[a, side])) not in beaten_by[loser]:
                        beaten_by[loser].append((winner, float(log_e[a, side])))
            lines.update({loser: math.exp(line) for loser in step})
            self.n_rejected += len(step)
            if not step or not self.holm:
                break
        fire = log_e >= self._lines()[None, :]
        dropped = set(beaten_by)
        for loser in sorted(dropped):
            # name a winner that stays in the race if one fired, then the strongest evidence, then the first index
            by, log_e_by = max(beaten_by[loser], key=lambda c: (c[0] not in dropped, c[1], -c[0]))
            e = Elimination(loser, self.k, by, float(math.exp(min(log_e_by, 700.0))), lines[loser])
            self.eliminations.append(e)
            new.append(e)
            self.remaining[loser] = False
        if self.remaining.sum() == 1:
            self.reason = "one_left"
            return
        if self._m.size > 2:
            within = self.remaining[self._pairs[active, 0]] & self.remaining[self._pairs[active, 1]]
            if within.any() and (fire[within, 2] & fire[within, 3]).all():
                self.tied = True
                self.reason = "tied"

    def raise_cap(self, cap: int) -> None:
        """Continue a race that stopped at its cap up to a larger one (``--resume DIR -n N``): the
        intervals are anytime-valid, so the guarantee does not depend on the cap."""
        if self.reason not in (None, "cap"):
            raise ValueError(f"the race already ended ({self.reason}); only a race that reached its cap can go on.")
        if self.cap is not None and int(cap) <= self.k:
            raise ValueError(f"cap: the race already has {self.k} episodes per policy; a larger cap is needed, got {cap}.")
        self.cap = int(cap)
        self.reason = None

    # -- the record ---------------------------------------------------------------------------------------------
    def outcomes(self, policy: int) -> np.ndarray:
        """Policy ``policy``'s counted outcomes (episodes ``0..n-1``, in [0, 1] units; NaN: no outcome)."""
        parts = self._values[policy]
        return np.concatenate(parts) if parts else np.zeros(0)

    def paired_interval(self, p: int, q: int) -> dict[str, Any]:
        """``mu_p - mu_q`` on the episodes both have: estimate and the race's interval (level alpha'), in
        outcome units."""
        xp, xq = self.outcomes(p), self.outcomes(q)
        n = min(xp.size, xq.size)
        y = (1.0 + xp[:n] - xq[:n]) / 2.0
        both = ~np.isnan(y)
        low, high = mixture_cs(y[None, :], 1.0 - self.alpha_pair) if n else (np.zeros(1), np.ones(1))
        est = float(2.0 * y[both].mean() - 1.0) * self.width if both.any() else math.nan
        return {"policy": p, "vs": q, "n_pairs": int(both.sum()), "difference": est,
                "cs_low": float(2.0 * float(np.ravel(low)[0]) - 1.0) * self.width,
                "cs_high": float(2.0 * float(np.ravel(high)[0]) - 1.0) * self.width}

    def summary(self) -> dict[str, Any]:
        """The race's block for ``eval_info.json`` (see docs/how-many-episodes.md)."""
        used = self.episodes_used()
        leader = self.leader
        dropped = {e.policy: e for e in self.eliminations}
        means = self.means()
        policies = []
        # each policy's own interval at 1 - alpha/K: all K hold at once, so the leader's (the best of K, chosen
        # on these data) holds too
        each = 1.0 - self.alpha / self.n_policies
        for p in range(self.n_policies):
            x = self.outcomes(p)
            x = x[~np.isnan(x)]
            cs = BettingCS(each)
            if x.size:
                cs.update(x)
            e = dropped.get(p)
            policies.append({"policy": p, "name": self.names[p], "episodes": int(used[p]),
                             "estimate": float(means[p]) if x.size else math.nan,
                             "cs_low": float(self._from_unit(cs.lower)), "cs_high": float(self._from_unit(cs.upper)),
                             "dropped_at": e.k if e else None, "dropped_by": e.by if e else None})
        # remaining ones by mean, then the dropped ones, the last dropped first
        order = sorted(range(self.n_policies), key=lambda p: (p in dropped, -(dropped[p].k if p in dropped else 0),
                                                              -float(np.nan_to_num(means[p], nan=-np.inf)), p))
        for rank, p in enumerate(order, 1):
            policies[p]["rank"] = rank
        vs_leader = [self.paired_interval(leader, p) for p in range(self.n_policies) if leader is not None and p != leader]
        return {
            "rule": self.rule.text, "metric": self.rule.metric, "eps": self.rule.eps, "confidence": self.confidence,
            "alpha": self.alpha, "alpha_per_pair": self.alpha_pair, "n_policies": self.n_policies,
            "return_bounds": list(self.return_bounds) if self.return_bounds else None,
            "bounds_source": self.bounds_source, "interval_confidence": each, "cap": self.cap,
            "k": self.k, "reason": self.reason or "incomplete", "tied": self.tied,
            "holm": self.holm, "n_rejected": self.n_rejected, "drop_line": self.holm_line,
            "remaining": list(self.remaining_policies), "leader": leader,
            "leader_name": self.names[leader] if leader is not None else None,
            "eliminations": [{**e.to_dict(), "name": self.names[e.policy], "by_name": self.names[e.by]}
                             for e in self.eliminations],
            "policies": policies, "vs_leader": vs_leader,
            "total_episodes": int(used.sum()), "method": METHOD,
        }


def _has_none(values: Any) -> bool:
    if isinstance(values, np.ndarray):
        return values.dtype == object
    return any(v is None for row in values for v in row)


# -- any arrival order in, index prefixes out ----------------------------------------------------------------------
@dataclass
class RaceGate:
    """Finished episodes of any policy, in any order, in; to the :class:`Race`, the prefix of episode
    indices that every remaining policy has finished.

    ``add(policy, ixs, values)``: episode indices (0-based, relative to the run's first) and outcomes
    (None: failed for good, counted as finished with no outcome). Returns the race's status; its
    ``new`` eliminations tell the engine which policies to stop (their episodes ``>= e.k`` are
    listed in ``past_stop``), ``done`` that the whole run stops at ``k``. ``min_feed``: prefix indices
    are handed on ``min_feed`` at a time (and by :meth:`flush`); the race's decisions do not depend on
    it, only how far the run gets ahead of them.

    Resuming a run: feed the recorded episodes of every policy (``prime`` is ``add`` then ``flush``),
    in any order; the race replays to the same state, and the engine runs each remaining policy from
    ``k`` on (recorded episodes of a dropped policy past its k are listed as past the stop).
    """

    race: Race
    min_feed: int = 1
    _waiting: list[dict[int, Any]] = field(default_factory=list)
    past_stop: list[list[int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        K = self.race.n_policies
        self.min_feed = max(1, int(self.min_feed))
        self._waiting = [{} for _ in range(K)]
        self.past_stop = [[] for _ in range(K)]

    def add(self, policy: int, ixs: Any, values: Any) -> RaceStatus:
        policy = int(policy)
        if not 0 <= policy < self.race.n_policies:
            raise ValueError(f"policy: expected 0..{self.race.n_policies - 1}, got {policy}.")
        limit = self._limit(policy)
        for ix, value in zip(ixs, values):
            ix = int(ix)
            if ix >= limit:
                self.past_stop[policy].append(ix)
            elif ix >= self.race.k:
                self._waiting[policy][ix] = value
        return self.flush() if self._ready() >= self.min_feed else self.race.status()

    def prime(self, policy: int, ixs: Any, values: Any) -> RaceStatus:
        """Feed recorded episodes of an earlier segment (a resumed run): ``add`` then ``flush``."""
        self.add(policy, ixs, values)
        return self.flush()

    def _limit(self, policy: int) -> int:
        """Indices at or past this are not counted for ``policy``: its k if dropped, the cap, or the end."""
        for e in self.race.eliminations:
            if e.policy == policy:
                return e.k
        if self.race.done:
            return self.race.k
        return self.race.cap if self.race.cap is not None else 1 << 62

    def _ready(self) -> int:
        """Consecutive indices from the race's k that every remaining policy has finished."""
        remaining = self.race.remaining_policies
        n, k = 0, self.race.k
        while all((k + n) in self._waiting[p] for p in remaining):
            n += 1
        return n

    def flush(self) -> RaceStatus:
        """Feed the ready prefix now; the race's status."""
        n = self._ready()
        if n == 0 or self.race.done:
            return self.race.status()
        k = self.race.k
        K = self.race.n_policies
        block: list[list[Any]] = [[None] * n for _ in range(K)]
        for p in self.race.remaining_policies:
            block[p] = [self._waiting[p].pop(k + i) for i in range(n)]
        status = self.race.feed(block)
        for p in range(K):
            limit = self._limit(p)
            late = sorted(ix for ix in self._waiting[p] if ix >= limit)
            for ix in late:
                del self._waiting[p][ix]
            self.past_stop[p].extend(late)
        if status.done:  # the fed block may reach past the stop: those indices are past it too
            for p in self.race.remaining_policies:
                self.past_stop[p].extend(range(status.k, k + n))
        for e in status.new:
            self.past_stop[e.policy].extend(range(e.k, k + n))
        return status
