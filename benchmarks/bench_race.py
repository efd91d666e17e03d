"""Episodes to an answer: the race of ``--stop-when best`` against a fixed n for every policy (issue 30).

Known-answer checkpoints (:class:`fasteval.testing.CheckpointFamily`): checkpoint k succeeds on seed s
with probability p_k, exactly, with a share of seeds (0, 0.5, 1) whose difficulty all checkpoints
share. Race r uses the seeds ``r * 1,000,000 + i``, as a real run with ``--seed`` would.

Scenarios: (a) 10 checkpoints with p evenly spaced from 0.30 to 0.80; (b) 8 checkpoints, seven at
0.70 and one at 0.80; (c) 5 checkpoints from 0.500 to 0.510. The best is always the last one, so
the leader's tie-break (the first index) never favours it.

**The honest comparator: the fixed n a user would choose in advance.** The fixed design runs every
checkpoint on n episodes and picks the highest mean (ties shared). Before any data, a user who wants the
best of K with probability 0.95 when it leads by at least 0.05 takes Bechhofer's n (1954; the
indifference-zone design, the worst-case variance 1/4: ``HONEST_GAP``, ``HONEST_P``), which depends on K
only: 10 checkpoints in (a), 8 in (b). The race is capped at that same n (``-n``), so it never spends more
than the fixed design. **Ratio = K x n / the race's mean total**: the targets (>= 3x in (a), >= 1.5x in
(b)) are against it, with the race's wrong-pick rate (the leader at the stop is not the best) at most
alpha. In (c) every checkpoint is within 0.01 of the best, so no fixed n "picks the best" in a useful
sense; the cap there is Bechhofer's n for a 0.02 margin at probability 0.99.

**The oracle comparator, a side column only.** The fixed n that picks the best *as often as the race
did on the same seed blocks* (common seeds: the smallest n at which the fixed design's correct-pick
rate over these blocks reaches the race's). It needs the true rates, which no user has before the run,
so it is no design anyone could choose; it is shown with its spread over ``ORACLE_GROUPS`` groups of
races (the ratio per group: its median, min and max), because matching a rate near 1 is noisy.

**Futility** (``--stop-when above=T``, T = 0.8, one policy): episodes until the anytime-valid interval
decides, with the futility stop ("surely not above T": its upper bound below T) and without it (the run
goes on to its cap unless the claim is made), at p = 0.5 and 0.7 and caps 200 and 1,000; the same
sequence (``BettingCS``) gives both stops, and the library's ``StopMonitor`` is checked on the first runs.

**Paired and unpaired.** The paired race is fasteval's (:class:`~fasteval.types.sequential.race.Race`:
per-pair confidence sequences on the per-seed differences, alpha split over the K(K-1)/2 pairs). The
unpaired one is the same race with per-policy sequences (the same bets, alpha split over the K
policies), dropping q when ``low_p - high_q > eps``: what one gets without the pairing.

**How it is simulated.** Successes give per-pair differences in {-1, 0, 1}, and the wealth of a
constant-bet mixture depends only on how many of each it has seen, so each decision is a table
look-up (the table holds, per episode count and count of one kind, the count of the other kind at
which the gambler's wealth reaches its line). The tables are checked against the library: the
first races of each configuration go through ``Race`` itself and must give the same drops at the
same k, the same stop and the same leader.

Also: the cap at other stated gaps and probabilities (Bechhofer), the race's bets against
the plug-in bets of ``--stop-when``'s BettingCS on single pairs (episodes to a drop, coverage), and
races of (a) and (b) run **end to end through the engine** (``--engine-races`` per rule, half the seeds
shared; at ``--tiny`` two races, all shared), each of which must equal the simulator's race on the same
seeds: the same eliminations at the same k, by the same policies, the same stop and the same numbers.

Run: ``PYTHONPATH=src python benchmarks/bench_race.py [--races 1000] [--parts a,b,...] [--json out.json]``; ``--tiny`` for
the smoke test (30 races, shares 0 and 1 only, the honest design for a gap of 0.15 (``TINY_GAP``), the (c) cap
cut to 300, 40 futility runs);
``--engine-only [--engine-races R]`` for the end-to-end rows alone (the caps set as in the full run).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import command_line  # noqa: E402

from fasteval.testing.checkpoints import CheckpointFamily  # noqa: E402
from fasteval.types.sequential.race import Race  # noqa: E402
from fasteval.types.sequential.betting import log_capital  # noqa: E402
from fasteval.types.sequential.race_cs import fractions, log_wealth, signed_bets  # noqa: E402

ALPHA = 0.05
CONFIDENCE = 1.0 - ALPHA
EPS = 0.02
P_CAP = 0.99
"""(c)'s cap: Bechhofer's n for an ``EPS`` margin at this probability."""
HONEST_GAP, HONEST_P = 0.05, 0.95
"""The honest comparator of (a) and (b): Bechhofer's n for this gap at this probability (and the race's cap)."""
PARTS = ("a", "b", "c", "engine", "sensitivity", "futility", "bets")
"""What ``--parts`` may choose: the scenarios' simulated races, the end-to-end races, the other stated designs,
the futility stops, the bets' comparison."""
TINY_GAP = 0.15
"""``--tiny``: the stated gap of the honest design (a smaller n, so the smoke test is quick)."""
ORACLE_GROUPS = 10
"""Groups of races over which the oracle comparator's spread is shown."""
FUTILITY_T, FUTILITY_P, FUTILITY_CAPS = 0.8, (0.5, 0.7), (200, 1000)
SCENARIOS = {
    "a": ("10 checkpoints, p from 0.30 to 0.80", tuple(np.linspace(0.30, 0.80, 10).round(6).tolist())),
    "b": ("8 checkpoints, seven at 0.70, one at 0.80", (0.70,) * 7 + (0.80,)),
    "c": ("5 checkpoints within 0.01 (0.500 to 0.510)", (0.500, 0.5025, 0.505, 0.5075, 0.510)),
}
RULES = ("best", f"best:eps={EPS}")
TARGETS = {"a": 3.0, "b": 1.5}
RACE_STRIDE = 1_000_000
FIXED_BASE = 1 << 40
"""Seed blocks of the bets' comparison: far from every race's seeds."""
CHUNK = 100
"""Races simulated at once (bounded memory)."""


# -- the fixed design ------------------------------------------------------------------------------------------
def fixed_credit(fam: CheckpointFamily, blocks: int, n_max: int, base: int, stride: int = RACE_STRIDE) -> np.ndarray:
    """``credit[b, n]``: the fixed design's credit for picking the best with n episodes per checkpoint
    (n = 0..n_max) on seed block b (seeds ``base + b * stride + i``): 1, 0, or a share of a tie for the top."""
    credit = np.zeros((blocks, n_max + 1), dtype=np.float32)
    best = fam.best
    for start in range(0, blocks, CHUNK):
        b = np.arange(start, min(blocks, start + CHUNK))
        seeds = base + b[:, None] * stride + np.arange(n_max)[None, :]
        sums = np.cumsum(fam.outcomes(seeds).astype(np.int32), axis=2)  # (K, B, n)
        top = sums.max(axis=0)
        winners = sums == top[None]
        credit[b, 1:] = winners[best] / winners.sum(axis=0)
    credit[:, 0] = 1.0 / fam.n_policies
    return credit


def fixed_curve(fam: CheckpointFamily, blocks: int, n_max: int, base: int, stride: int = RACE_STRIDE) -> np.ndarray:
    """``curve[n]``: the fixed design's correct-pick rate with n episodes per checkpoint (n = 0..n_max)
    over ``blocks`` seed blocks ``base + b * stride + i`` (ties for the top: shared credit)."""
    return fixed_credit(fam, blocks, n_max, base, stride).astype(np.float64).mean(axis=0)


def oracle_spread(credit: np.ndarray, right: np.ndarray, total: np.ndarray, k: int) -> dict[str, Any]:
    """The oracle comparator per group of races (``ORACLE_GROUPS``): the fixed n whose pick rate on the group's
    seed blocks reaches the race's there, as a ratio K x n / the race's mean total; median, min, max, and how
    many groups the fixed design never matched within its horizon."""
    ratios, unmatched = [], 0
    for g in np.array_split(np.arange(right.size), min(ORACLE_GROUPS, right.size)):
        n = first_reaching(credit[g].astype(np.float64).mean(axis=0), float(right[g].mean()))
        if n is None:
            unmatched += 1
        else:
            ratios.append(k * n / float(total[g].mean()))
    if not ratios:
        return {"median": None, "min": None, "max": None, "unmatched": unmatched, "groups": unmatched}
    return {"median": float(np.median(ratios)), "min": float(min(ratios)), "max": float(max(ratios)),
            "unmatched": unmatched, "groups": len(ratios) + unmatched}


def first_reaching(curve: np.ndarray, level: float) -> int | None:
    hit = np.flatnonzero(curve >= level - 1e-12)
    return int(hit[0]) if hit.size else None


def bechhofer_n(k: int, p_star: float, delta: float, sigma: float = 0.5) -> int:
    """Bechhofer's n: pick the best of k with probability ``p_star`` when it leads by ``delta``
    (least favourable configuration, known sd ``sigma``): ``P = E[Phi(Z + tau)^(k-1)]``, ``n = (tau sigma / delta)^2``."""
    from scipy import integrate, optimize, stats

    def prob(tau: float) -> float:
        return integrate.quad(lambda z: stats.norm.pdf(z) * stats.norm.cdf(z + tau) ** (k - 1), -10, 10)[0] - p_star

    tau = optimize.brentq(prob, 0.0, 20.0)
    return int(math.ceil((tau * sigma / delta) ** 2))


# -- decision tables -----------------------------------------------------------------------------------------
def _log_wealth_counts(bets: np.ndarray, m: float, plus: np.ndarray, minus: np.ndarray, zero: np.ndarray) -> np.ndarray:
    """Mixture log-wealth after ``plus`` values y = 1, ``minus`` y = 0 and ``zero`` y = 1/2 (arrays)."""
    coef = np.stack([np.log1p(bets * (1.0 - m)), np.log1p(bets * (0.0 - m)), np.log1p(bets * (0.5 - m))])  # (3, N)
    comps = plus[..., None] * coef[0] + minus[..., None] * coef[1] + zero[..., None] * coef[2]
    top = comps.max(axis=-1)
    return top + np.log(np.exp(comps - top[..., None]).sum(axis=-1)) - math.log(bets.size)


class Band:
    """A boundary table restricted to the counts that occur: row t (1..T) covers the "other" counts
    ``lo[t]..hi[t]`` (non-decreasing in t, as running counts are), stored from column 0."""

    def __init__(self, lo: np.ndarray, hi: np.ndarray):
        self.lo, self.hi = lo.astype(np.int64), hi.astype(np.int64)
        self.table = np.zeros((lo.size, int((hi - lo).max()) + 1), dtype=np.int32)

    def look(self, t_index: np.ndarray, other: np.ndarray) -> np.ndarray:
        """The table at rows ``t_index`` (0-based: after t_index + 1 values) and counts ``other``."""
        return self.table[t_index, other - self.lo[t_index]]


def threshold_table(m: float, side: int, line: float, lo: np.ndarray, hi: np.ndarray) -> Band:
    """For a boundary gambler (null mean ``m``, long side +1 / short side -1) on values in {0, 1/2, 1}:
    the least count ``v`` of the values it wins on (1 for long, 0 for short) such that after t values,
    ``o`` of them the opposite extreme, its wealth reaches ``line`` (``t - o + 1``: never), for the
    counts ``o`` in ``lo[t]..hi[t]``. The wealth rises with v at fixed (t, o), so v is a boundary; each
    row starts from the previous one (the boundary moves by a step or two per row) and is corrected
    up or down until it is exact."""
    bets = signed_bets([m], [side])[0]
    band = Band(lo, hi)
    prev_v, prev_lo = np.zeros(1, dtype=np.int64), 0
    for row in range(lo.size):
        t = row + 1
        o = np.arange(lo[row], hi[row] + 1)
        v = prev_v[np.clip(o - prev_lo, 0, prev_v.size - 1)]
        v = np.clip(v, 0, t - o + 1)

        def wealth(vv: np.ndarray) -> np.ndarray:
            win, lose = (vv, o) if side > 0 else (o, vv)
            return _log_wealth_counts(bets, m, win.astype(np.float64), lose.astype(np.float64),
                                      (t - vv - o).astype(np.float64))

        while True:  # up: not reached yet, with room left
            up = (v <= t - o) & (wealth(np.minimum(v, t - o)) < line)
            if not up.any():
                break
            v = np.where(up, v + 1, v)
        while True:  # down: one less reaches it too
            down = (v >= 1) & (wealth(np.maximum(v - 1, 0)) >= line)
            if not down.any():
                break
            v = np.where(down, v - 1, v)
        band.table[row, :v.size] = v
        prev_v, prev_lo = v, lo[row]
    return band


def _grow(lo: np.ndarray, hi: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The band ``lo..hi`` per row, widened to the counts ``c`` (shape (..., T))."""
    flat = c.reshape(-1, c.shape[-1])
    return np.minimum(lo, flat.min(axis=0)), np.maximum(hi, flat.max(axis=0))


def _monotone(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.minimum.accumulate(lo[::-1])[::-1], np.maximum.accumulate(hi)


class PairedTables:
    """The boundary tables of a paired race with K policies, margin eps, level alpha, for the running
    counts of +1 and -1 differences in the bands ``plus`` and ``minus`` (``(lo, hi)`` per row)."""

    def __init__(self, k: int, eps: float, alpha: float, plus: tuple[np.ndarray, np.ndarray],
                 minus: tuple[np.ndarray, np.ndarray]):
        n_pairs = k * (k - 1) // 2
        self.line = math.log(2.0 / (alpha / n_pairs))
        self.eps = eps
        hi_m, lo_m = (1.0 + eps) / 2.0, (1.0 - eps) / 2.0
        self.p_beats = threshold_table(hi_m, +1, self.line, *minus)  # count of +1 (p won) given the count of -1
        self.q_beats = threshold_table(lo_m, -1, self.line, *plus)  # count of -1 given the count of +1
        if eps > 0:
            self.below = threshold_table(hi_m, -1, self.line, *plus)  # mu_p - mu_q < eps: count of -1 given +1
            self.above = threshold_table(lo_m, +1, self.line, *minus)  # mu_p - mu_q > -eps: count of +1 given -1


class UnpairedBounds:
    """Per-policy sequences at level alpha / K (the same bets): the lower and upper bound after t
    outcomes with s successes, for s in the band ``lo[t]..hi[t]``, by bisection on the count form."""

    def __init__(self, k: int, alpha: float, lo: np.ndarray, hi: np.ndarray):
        line = math.log(2.0 / (alpha / k))
        self.lo = lo.astype(np.int64)
        rows = np.arange(lo.size)
        widths = (hi - lo + 1).astype(np.int64)
        t = np.repeat(rows + 1, widths).astype(np.float64)
        s = (np.repeat(self.lo, widths) + np.concatenate([np.arange(w) for w in widths])).astype(np.float64)
        self.offset = np.concatenate([[0], np.cumsum(widths)[:-1]])
        mean = s / t
        f = fractions()

        def wealth(m: np.ndarray, side: int) -> np.ndarray:
            lam = f[None, :] / (m[:, None] if side > 0 else -(1 - m[:, None]))
            comps = s[:, None] * np.log1p(lam * (1 - m[:, None])) + (t - s)[:, None] * np.log1p(-lam * m[:, None])
            top = comps.max(axis=1)
            return top + np.log(np.exp(comps - top[:, None]).sum(axis=1)) - math.log(f.size)

        bounds = []
        for side in (+1, -1):
            rejected = np.zeros_like(mean) if side > 0 else np.ones_like(mean)
            inner = mean.copy()
            for _ in range(45):
                mid = np.clip((rejected + inner) / 2, 1e-12, 1 - 1e-12)
                rej = wealth(mid, side) >= line
                rejected, inner = np.where(rej, mid, rejected), np.where(rej, inner, mid)
            bounds.append(rejected)
        self.lower, self.upper = bounds

    def look(self, t_index: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        at = self.offset[t_index] + s - self.lo[t_index]
        return self.lower[at], self.upper[at]


# -- the races, vectorised -----------------------------------------------------------------------------------
def _outcomes(fam: CheckpointFamily, races: np.ndarray, cap: int) -> np.ndarray:
    """(R, K, cap) successes of the races ``races`` (seeds ``r * RACE_STRIDE + i``)."""
    return np.moveaxis(fam.outcomes(races[:, None] * RACE_STRIDE + np.arange(cap)[None, :]), 0, 1)


def _pairs(k: int) -> tuple[np.ndarray, np.ndarray]:
    pairs = np.array([(p, q) for p in range(k) for q in range(p + 1, k)])
    return pairs[:, 0], pairs[:, 1]


def pair_counts(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Running counts of ``x_p - x_q = +1`` and ``-1`` per pair (p < q): two (R, A, T) int32 arrays."""
    p0, p1 = _pairs(x.shape[1])
    d = x[:, p0].astype(np.int8) - x[:, p1].astype(np.int8)
    return np.cumsum(d == 1, axis=2, dtype=np.int32), np.cumsum(d == -1, axis=2, dtype=np.int32)


def _finish(x: np.ndarray, alive: np.ndarray, stop: np.ndarray, drop_k: np.ndarray, tied: np.ndarray) -> dict[str, np.ndarray]:
    """Leader at the stop (highest count of successes in 0..stop-1 among the alive, first index on ties),
    total episodes."""
    sums = np.cumsum(x.astype(np.int32), axis=2)  # (R, K, T)
    at_stop = np.take_along_axis(sums, (stop - 1)[:, None, None].repeat(x.shape[1], axis=1), axis=2)[:, :, 0]
    leader = np.argmax(np.where(alive, at_stop, -1), axis=1)
    used = np.where(drop_k > 0, drop_k, stop[:, None])
    return {"leader": leader, "total": used.sum(axis=1), "stop": stop, "drop_k": drop_k, "tied": tied}


def _run(fire_beats, fire_tie, r_n: int, k_n: int, cap: int, has_tie: bool) -> tuple[np.ndarray, ...]:
    """The race's steps: ``fire_beats(t, alive)`` -> (R, K) policies beaten at step t (by an alive one),
    ``fire_tie(t, alive)`` -> (R,) every alive pair shown within eps. Drops first, then one left, then a tie."""
    alive = np.ones((r_n, k_n), dtype=bool)
    done = np.zeros(r_n, dtype=bool)
    stop = np.full(r_n, cap)
    drop_k = np.zeros((r_n, k_n), dtype=np.int64)
    tied = np.zeros(r_n, dtype=bool)
    for t in range(cap):
        newly = fire_beats(t, alive) & alive & ~done[:, None]
        drop_k[newly] = t + 1
        alive &= ~newly
        one = ~done & (alive.sum(axis=1) == 1)
        stop[one], done = t + 1, done | one
        if has_tie:
            tie = ~done & (alive.sum(axis=1) >= 2) & fire_tie(t, alive)
            stop[tie], tied, done = t + 1, tied | tie, done | tie
        if done.all():
            break
    return alive, stop, drop_k, tied


def race_paired(x: np.ndarray, counts: tuple[np.ndarray, np.ndarray], tables: PairedTables, cap: int) -> dict[str, np.ndarray]:
    """``x``: (R, K, cap) successes. The paired race, as :class:`Race` runs it (see the module docstring)."""
    r_n, k_n, _ = x.shape
    p0, p1 = _pairs(k_n)
    plus, minus = counts
    rows = np.arange(cap)[None, None, :]
    f_p = plus >= tables.p_beats.look(rows, minus)  # (R, A, cap)
    f_q = minus >= tables.q_beats.look(rows, plus)
    f_tie = ((minus >= tables.below.look(rows, plus)) & (plus >= tables.above.look(rows, minus))) if tables.eps > 0 else None
    on_p = np.eye(k_n, dtype=np.int32)[p0]  # (A, K)
    on_q = np.eye(k_n, dtype=np.int32)[p1]

    def beats(t: int, alive: np.ndarray) -> np.ndarray:
        live = alive[:, p0] & alive[:, p1]
        return ((f_p[:, :, t] & live).astype(np.int32) @ on_q + (f_q[:, :, t] & live).astype(np.int32) @ on_p) > 0

    def tie(t: int, alive: np.ndarray) -> np.ndarray:
        return (f_tie[:, :, t] | ~(alive[:, p0] & alive[:, p1])).all(axis=1)

    alive, stop, drop_k, tied = _run(beats, tie, r_n, k_n, cap, tables.eps > 0)
    return _finish(x, alive, stop, drop_k, tied)


def race_unpaired(x: np.ndarray, bounds: UnpairedBounds, eps: float, cap: int) -> dict[str, np.ndarray]:
    """The same race with per-policy sequences: drop q when some alive p has ``low_p - high_q > eps``;
    tied when every alive pair has ``high_p - low_q < eps``."""
    r_n, k_n, _ = x.shape
    s = np.cumsum(x.astype(np.int32), axis=2)
    low, high = bounds.look(np.arange(cap)[None, None, :], s)  # (R, K, cap)
    off = ~np.eye(k_n, dtype=bool)

    def beats(t: int, alive: np.ndarray) -> np.ndarray:
        gap = low[:, :, t][:, :, None] - high[:, :, t][:, None, :]  # (R, p, q): low_p - high_q
        return ((gap > eps) & alive[:, :, None] & off[None]).any(axis=1)

    def tie(t: int, alive: np.ndarray) -> np.ndarray:
        spread = high[:, :, t][:, :, None] - low[:, :, t][:, None, :]
        pair = alive[:, :, None] & alive[:, None, :] & off[None]
        return ((spread < eps) | ~pair).all(axis=(1, 2))

    alive, stop, drop_k, tied = _run(beats, tie, r_n, k_n, cap, eps > 0)
    return _finish(x, alive, stop, drop_k, tied)


# -- one configuration -------------------------------------------------------------------------------------------
def library_check(x: np.ndarray, rule: str, cap: int, vec: dict[str, np.ndarray], n: int) -> int:
    """Races run through :class:`Race` itself: how many give the vectorised drops, stop, tie and leader."""
    same = 0
    for r in range(min(n, x.shape[0])):
        # the vectorised races use the union bound's line for every drop: the library's race without Holm's step-down
        status = Race(rule, x.shape[1], cap=cap, confidence=CONFIDENCE, holm=False).feed(x[r, :, :cap])
        drops = sorted((e.policy, e.k) for e in status.eliminations)
        vdrops = sorted((int(p), int(vec["drop_k"][r, p])) for p in np.flatnonzero(vec["drop_k"][r]))
        same += (drops == vdrops and status.k == vec["stop"][r] and status.leader == vec["leader"][r]
                 and status.tied == bool(vec["tied"][r]))
    return same


def engine_check(fam: CheckpointFamily, scenario: str, rule: str, cap: int, races: int,
                 batch_size: int = 16) -> dict[str, Any]:
    """Races run end to end, through the engine (``evaluate(policy=[...], stop_when=rule)``: the checkpoints
    as real policies on the Bernoulli env, seeds ``r * RACE_STRIDE + i``), against the simulator's race on
    the same outcomes (:class:`Race` fed :meth:`CheckpointFamily.outcomes`): how many give the same drops at
    the same k (and by the same policies), the same stop and reason, the same leader and the same numbers."""
    from fasteval import evaluate

    same, totals, seconds = 0, [], []
    ignore = ("n_cancelled", "computed_past_stop", "n_computed_past_stop")
    for r in range(races):
        seed = r * RACE_STRIDE
        t0 = time.perf_counter()
        result = evaluate(env=fam.env_ref, env_kwargs=fam.env_kwargs, policy=fam.policies(), n_episodes=cap,
                          seed=seed, batch_size=batch_size, device="cpu", stop_when=rule, confidence=CONFIDENCE)
        seconds.append(time.perf_counter() - t0)
        sim = Race(rule, fam.n_policies, cap=cap, confidence=CONFIDENCE, names=list(result.names))
        sim.feed(fam.outcomes(seed + np.arange(cap)))
        engine = {k: v for k, v in result.race.items() if k not in ignore}
        same += int(json.dumps(engine, sort_keys=True) == json.dumps(sim.summary(), sort_keys=True))
        totals.append(result.race["total_episodes"])
    return {"scenario": scenario, "share": fam.share, "rule": rule, "cap": cap, "races": races,
            "batch_size": batch_size, "same_as_simulator": same, "mean_total": float(np.mean(totals)),
            "median_seconds_per_race": float(np.median(seconds))}


def run_config(fam: CheckpointFamily, scenario: str, rule: str, cap: int, races: int, paired: bool,
               check: int) -> dict[str, Any]:
    eps = EPS if "eps" in rule else 0.0
    chunks = [np.arange(s, min(races, s + CHUNK)) for s in range(0, races, CHUNK)]
    big = np.iinfo(np.int64).max
    if paired:  # pass 1: the counts that occur, so the tables cover them and no more
        bands = [np.full(cap, big), np.full(cap, -1), np.full(cap, big), np.full(cap, -1)]
        for r in chunks:
            plus, minus = pair_counts(_outcomes(fam, r, cap))
            bands[0], bands[1] = _grow(bands[0], bands[1], plus)
            bands[2], bands[3] = _grow(bands[2], bands[3], minus)
        tables = PairedTables(fam.n_policies, eps, ALPHA, _monotone(bands[0], bands[1]), _monotone(bands[2], bands[3]))
    else:
        lo, hi = np.full(cap, big), np.full(cap, -1)
        for r in chunks:
            lo, hi = _grow(lo, hi, np.cumsum(_outcomes(fam, r, cap).astype(np.int32), axis=2))
        bounds = UnpairedBounds(fam.n_policies, ALPHA, *_monotone(lo, hi))
    parts, checked = [], 0
    for r in chunks:
        x = _outcomes(fam, r, cap)
        out = race_paired(x, pair_counts(x), tables, cap) if paired else race_unpaired(x, bounds, eps, cap)
        if paired and r[0] == 0 and check:
            checked = library_check(x, rule, cap, out, check)
        parts.append(out)
    res = {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
    rates = np.asarray(fam.rates)
    good = rates >= rates.max() - eps - 1e-12
    near = rates >= rates.max() - EPS - 1e-12  # in (c): every checkpoint
    leader_right = near[res["leader"]] if scenario == "c" else res["leader"] == fam.best
    dropped = res["drop_k"] > 0
    familywise = (dropped & good[None, :]).any(axis=1)
    alive = ~dropped
    spread = np.where(alive, rates[None, :], np.nan)
    false_tie = res["tied"] & ((np.nanmax(spread, axis=1) - np.nanmin(spread, axis=1)) >= eps)
    return {"scenario": scenario, "share": fam.share, "rule": rule, "pairing": "paired" if paired else "unpaired",
            "cap": cap, "races": races, "leader_right": float(leader_right.mean()),
            "wrong_pick": float(1 - leader_right.mean()), "familywise_errors": float(familywise.mean()),
            "false_answers": float((familywise | false_tie).mean()), "mean_total": float(res["total"].mean()),
            "median_total": float(np.median(res["total"])), "mean_stop": float(res["stop"].mean()),
            "tied": float(res["tied"].mean()), "one_left": float((alive.sum(axis=1) == 1).mean()),
            "mean_dropped": float(dropped.sum(axis=1).mean()), "fixed_total_at_cap": fam.n_policies * cap,
            "mean_episodes_per_policy": np.where(dropped, res["drop_k"], res["stop"][:, None]).mean(axis=0).round(1).tolist(),
            "library_same": checked, "library_checked": min(check, races) if paired else 0,
            "_right": leader_right, "_total": res["total"]}


def compare_fixed(row: dict[str, Any], fam: CheckpointFamily, cap: int) -> dict[str, Any]:
    """(a), (b): the race against the honest comparator (the fixed design at the cap, Bechhofer's n) and, as a
    side column, the oracle comparator on the races' own seed blocks (with its spread over groups of races)."""
    right, total = row.pop("_right"), row.pop("_total")
    k = fam.n_policies
    credit = fixed_credit(fam, row["races"], 3 * cap, 0)  # the races' own seed blocks
    curve = credit.astype(np.float64).mean(axis=0)
    match = first_reaching(curve, row["leader_right"])
    row.update(honest_n=cap, honest_total=k * cap, ratio_honest=k * cap / row["mean_total"],
               fixed_right_at_cap=float(curve[cap]), fixed_n_matched=match,
               ratio=k * match / row["mean_total"] if match else None,
               oracle_spread=oracle_spread(credit, right, total, k))
    return row


def bets_comparison(runs: int, horizon: int) -> dict[str, Any]:
    """Why the race bets as it does: for one pair, the episodes until "B beats A by more than eps" at
    the level of a pair in (b) (alpha / 28), with the race's mixture of constant bets and with the
    predictable plug-in bets of ``--stop-when``'s BettingCS (the same line, 2 / alpha'); and the coverage
    of both sequences under continuous monitoring at 95% (true mean inside at every look)."""
    level = ALPHA / 28
    rows = []
    for pa, pb, eps in ((0.70, 0.80, 0.0), (0.70, 0.80, EPS), (0.633, 0.80, 0.0), (0.30, 0.80, 0.0)):
        x = CheckpointFamily((pa, pb), share=0.0).outcomes(
            FIXED_BASE * 2 + np.arange(runs)[:, None] * RACE_STRIDE + np.arange(horizon)[None, :])
        y = (1.0 + x[1].astype(np.float64) - x[0]) / 2.0
        m = (1.0 + eps) / 2.0
        taus = {}
        for name, wealth in (("mixture", log_wealth(y, m, "long")),
                             ("plug-in", log_capital(y, m, 1.0 - level, side="long") - math.log(0.5))):
            hit = wealth >= math.log(2.0 / level)
            tau = np.where(hit.any(axis=1), hit.argmax(axis=1) + 1.0, np.inf)
            taus[name] = {"median": float(np.median(tau)), "mean_capped": float(np.minimum(tau, horizon).mean()),
                          "not_by_horizon": float(np.isinf(tau).mean())}
        rows.append({"a": pa, "b": pb, "eps": eps, **taus})
    rng = np.random.default_rng(7)
    x = (rng.random((runs, 2000)) < 0.3).astype(np.float64)
    line = math.log(2.0 / ALPHA)
    mix = np.maximum(log_wealth(x, 0.3, "long"), log_wealth(x, 0.3, "short")).max(axis=1) < line
    plug = log_capital(x, 0.3, CONFIDENCE).max(axis=1) < math.log(1.0 / ALPHA)
    return {"runs": runs, "horizon": horizon, "level": level, "rows": rows,
            "coverage": {"mixture": float(mix.mean()), "plug-in": float(plug.mean()), "looks": 2000, "p": 0.3}}


SENSITIVITY = ((0.05, 0.90), (0.05, 0.99), (0.10, 0.95))
"""Other (gap, probability) a user might state in advance (the main rows: 0.05, 0.95)."""


def sensitivity(races: int) -> list[dict[str, Any]]:
    """(a) and (b) without shared difficulty, `best`, paired: the honest comparator for other stated gaps and
    probabilities (the race capped at each Bechhofer n)."""
    rows = []
    for scenario in ("a", "b"):
        fam = CheckpointFamily(SCENARIOS[scenario][1], share=0.0)
        for gap, prob in SENSITIVITY:
            cap = bechhofer_n(fam.n_policies, prob, gap)
            row = compare_fixed(run_config(fam, scenario, RULES[0], cap, races, True, 0), fam, cap)
            rows.append({**row, "gap": gap, "p_stated": prob, "ratio_vs_cap": row["ratio_honest"]})
            print(_row_line(rows[-1]), flush=True)
    return rows


def futility(runs: int, check: int) -> dict[str, Any]:
    """``--stop-when above=T``: episodes to a stop with the futility stop and without it (the module docstring);
    ``check`` runs per row also go through the library's ``StopMonitor`` (its stop must be the one found here)."""
    from fasteval.types.sequential import StopMonitor
    from fasteval.types.sequential.betting import BettingCS

    rows, same, checked = [], 0, 0
    for p in FUTILITY_P:
        for cap in FUTILITY_CAPS:
            rng = np.random.default_rng(int(1000 * p) + cap)
            x = rng.random((runs, cap)) < p
            with_f, without, claims, covered = [], [], 0, 0
            for r in range(runs):
                low, high = BettingCS(CONFIDENCE).update(x[r].astype(np.float64))
                fired = np.flatnonzero(low > FUTILITY_T)
                futile = np.flatnonzero(high < FUTILITY_T)
                stop_claim = int(fired[0]) + 1 if fired.size else cap
                stop_any = min(stop_claim, int(futile[0]) + 1 if futile.size else cap)
                with_f.append(stop_any)
                without.append(stop_claim)
                claims += bool(fired.size) and stop_claim == stop_any
                covered += bool(low[stop_any - 1] <= p <= high[stop_any - 1])
                if r < check:
                    monitor = StopMonitor(f"above={FUTILITY_T}", confidence=CONFIDENCE, cap=cap)
                    monitor.feed(x[r])
                    same += monitor.n == stop_any
                    checked += 1
            mean_with, mean_without = float(np.mean(with_f)), float(np.mean(without))
            rows.append({"p": p, "cap": cap, "runs": runs, "mean_with": mean_with, "mean_without": mean_without,
                         "median_with": float(np.median(with_f)), "saved": 1.0 - mean_with / mean_without,
                         "false_claims": claims / runs, "coverage_at_stop": covered / runs})
            print(f"futility p={p} cap={cap}: {mean_with:.0f} episodes with the futility stop, {mean_without:.0f} "
                  f"without ({100 * rows[-1]['saved']:.0f}% saved)", flush=True)
    return {"threshold": FUTILITY_T, "confidence": CONFIDENCE, "rows": rows, "library_same": same,
            "library_checked": checked}


def honest_caps(scenario: str, tiny: bool = False) -> int:
    """The race's cap and the honest comparator's n: (a), (b) Bechhofer's n for ``HONEST_GAP`` at ``HONEST_P``
    (``tiny``: for ``TINY_GAP``)."""
    return bechhofer_n(len(SCENARIOS[scenario][1]), HONEST_P, TINY_GAP if tiny else HONEST_GAP)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--races", type=int, default=1000)
    ap.add_argument("--check", type=int, default=20, help="races per configuration also run through the library's Race")
    ap.add_argument("--futility-runs", type=int, default=300, help="runs per futility row (p, cap)")
    ap.add_argument("--tiny", action="store_true", help="30 races, shares 0 and 1, (c) capped at 300, 40 futility runs (smoke test)")
    ap.add_argument("--engine-races", type=int, default=20, help="races per (a)/(b) rule also run end to end, through the engine")
    ap.add_argument("--engine-only", action="store_true",
                    help="only the end-to-end rows (caps as in the full run)")
    ap.add_argument("--parts", default=",".join(PARTS),
                    help=f"comma-separated parts to run (default all): {', '.join(PARTS)}; split a full run into "
                         f"shorter ones, each with its own --json")
    ap.add_argument("--no-unpaired", action="store_true",
                    help="skip the unpaired rows of (a), (b) (their per-policy bounds cost minutes per row at full size)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    if args.engine_only:
        return engine_only(args)
    parts = set(args.parts.split(","))
    if not parts <= set(PARTS):
        ap.error(f"--parts: expected some of {', '.join(PARTS)}, got {args.parts!r}")
    races, check = (30, 5) if args.tiny else (args.races, args.check)
    shares = (0.0, 1.0) if args.tiny else (0.0, 0.5, 1.0)
    start = time.perf_counter()
    rows: list[dict[str, Any]] = []
    caps: dict[str, Any] = {}
    for scenario, (label, rates) in SCENARIOS.items():
        if scenario not in parts:
            continue
        fams = {s: CheckpointFamily(rates, share=s) for s in shares}
        if scenario == "c":
            cap_c = min(bechhofer_n(len(rates), P_CAP, EPS), 300) if args.tiny else bechhofer_n(len(rates), P_CAP, EPS)
            scenario_caps = {s: cap_c for s in shares}
        else:
            scenario_caps = {s: honest_caps(scenario, args.tiny) for s in shares}
        caps[scenario] = {str(s): c for s, c in scenario_caps.items()}
        for rule in RULES:
            for s, fam in fams.items():
                cap = scenario_caps[s]
                for paired in ((True, False) if scenario != "c" and not args.no_unpaired else (True,)):
                    row = run_config(fam, scenario, rule, cap, races, paired, check)
                    row["label"] = label
                    row["ratio_vs_cap"] = fam.n_policies * cap / row["mean_total"]
                    if scenario != "c":
                        compare_fixed(row, fam, cap)
                    else:
                        row.pop("_right"), row.pop("_total")
                    rows.append(row)
                    print(_row_line(row), flush=True)
    sections: dict[str, float] = {}

    def timed(name: str, fn: Any) -> Any:
        t0 = time.perf_counter()
        out = fn()
        sections[name] = time.perf_counter() - t0
        return out

    sections["races"] = time.perf_counter() - start
    engine_caps = {sc: {"0.5" if not args.tiny else "1.0": honest_caps(sc, args.tiny)} for sc in ("a", "b")}
    engine_rows = timed("engine", lambda: engine_section(engine_caps, args.tiny, args.engine_races)) if "engine" in parts and args.engine_races > 0 else []
    sens = timed("sensitivity", lambda: sensitivity(races)) if "sensitivity" in parts and not args.tiny else []
    fut = timed("futility", lambda: futility(40 if args.tiny else args.futility_runs, 5 if args.tiny else 20)) \
        if "futility" in parts else None
    bets = timed("bets", lambda: bets_comparison(100 if args.tiny else races, 1000 if args.tiny else 5000)) \
        if "bets" in parts else None
    doc = {"command": command_line(), "alpha": ALPHA, "eps": EPS, "p_cap": P_CAP,
           "honest_gap": TINY_GAP if args.tiny else HONEST_GAP, "honest_p": HONEST_P, "races": races, "caps": caps,
           "rows": rows, "engine": engine_rows, "sensitivity": sens, "futility": fut, "bets": bets, "seconds": 0.0,
           "section_seconds": sections, "load_average": list(os.getloadavg()), "tiny": args.tiny,
           "parts": sorted(parts)}
    doc["seconds"] = time.perf_counter() - start
    print()
    print(markdown(doc))
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2))
    paired = [r for r in rows if r["pairing"] == "paired"]
    ok = all(r["false_answers"] <= ALPHA for r in paired)
    ok &= all(r["library_same"] == r["library_checked"] for r in rows)
    ok &= all(e["same_as_simulator"] == e["races"] for e in engine_rows)
    ok &= fut is None or fut["library_same"] == fut["library_checked"]
    return 0 if ok else 1


def engine_section(caps: dict[str, Any], tiny: bool, engine_races: int) -> list[dict[str, Any]]:
    """The end-to-end rows: (a) and (b), half the seeds shared (at ``tiny``: all), each rule."""
    engine_rows = []
    for scenario in ("a", "b"):
        fam = CheckpointFamily(SCENARIOS[scenario][1], share=0.5 if not tiny else 1.0)
        cap = int(caps[scenario][str(fam.share)])
        for rule in RULES:
            engine_rows.append(engine_check(fam, scenario, rule, cap, 2 if tiny else engine_races,
                                            batch_size=7 if tiny else 16))
            e = engine_rows[-1]
            print(f"engine {scenario} share={fam.share} {rule}: {e['same_as_simulator']}/{e['races']} races equal the "
                  f"simulator's; mean total {e['mean_total']:.0f}; {e['median_seconds_per_race']:.2f} s per race", flush=True)
    return engine_rows


def engine_only(args: argparse.Namespace) -> int:
    """``--engine-only``: the caps of (a) and (b) (Bechhofer's n, as the full run sets them), then the end-to-end
    rows alone, without the simulated races."""
    share = 1.0 if args.tiny else 0.5
    start = time.perf_counter()
    caps = {sc: {str(share): honest_caps(sc, args.tiny)} for sc in ("a", "b")}
    engine_rows = engine_section(caps, args.tiny, args.engine_races)
    doc = {"command": command_line(), "alpha": ALPHA, "eps": EPS, "honest_gap": HONEST_GAP, "honest_p": HONEST_P,
           "caps": caps, "engine": engine_rows, "seconds": time.perf_counter() - start,
           "load_average": list(os.getloadavg())}
    print()
    print(engine_markdown(engine_rows))
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2))
    return 0 if all(e["same_as_simulator"] == e["races"] for e in engine_rows) else 1


def engine_markdown(engine_rows: list[dict[str, Any]]) -> str:
    out = ["**End to end, through the engine** (`evaluate(policy=[...], stop_when=RULE)`: the checkpoints as real "
           "policies on the Bernoulli env, against the simulator's race on the same seeds):", "",
           "| scenario | share | rule | cap | batch | races equal to the simulator's | mean total episodes | "
           "seconds per race (median) |", "|---|---|---|---|---|---|---|---|"]
    for e in engine_rows:
        out.append(f"| ({e['scenario']}) | {e['share']:.1f} | `{e['rule']}` | {e['cap']} | {e['batch_size']} | "
                   f"{e['same_as_simulator']}/{e['races']} | {e['mean_total']:.0f} | {e['median_seconds_per_race']:.2f} |")
    return "\n".join(out)


def _row_line(r: dict[str, Any]) -> str:
    return (f"{r['scenario']} share={r['share']:.1f} {r['rule']:<15} {r['pairing']:<8} cap={r['cap']:<5} "
            f"total={r['mean_total']:.0f} leader_right={r['leader_right']:.3f} false={r['false_answers']:.3f} "
            f"tied={r['tied']:.3f} honest={r.get('ratio_honest') or float('nan'):.2f} "
            f"oracle={r.get('ratio') or float('nan'):.2f} lib={r['library_same']}/{r['library_checked']}")


def _fmt(v: Any, digits: int = 2) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


def _spread(o: dict[str, Any]) -> str:
    if o["median"] is None:
        return f"never matched ({o['unmatched']}/{o['groups']} groups)"
    extra = f"; {o['unmatched']} of {o['groups']} groups unmatched" if o["unmatched"] else ""
    return f"{o['median']:.2f}x [{o['min']:.2f}, {o['max']:.2f}]{extra}"


def markdown(doc: dict[str, Any]) -> str:
    load = doc.get("load_average")
    designs = ", ".join(f"({sc}) {honest_caps(sc, doc.get('tiny', False))}" for sc in ("a", "b"))
    out = [f"{doc['races']} races per row, alpha = {ALPHA} (confidence {CONFIDENCE}), margin {EPS} for "
           f"`best:eps={EPS}`. The honest comparator and the race's cap, set in advance: (a), (b): Bechhofer's n for "
           f"a gap of {doc['honest_gap']} at probability {HONEST_P} ({designs}); "
           f"(c): Bechhofer's n for a {EPS} margin at {P_CAP}. {doc['seconds']:.0f} s ("
           + ", ".join(f"{k} {v:.0f} s" for k, v in doc.get("section_seconds", {}).items()) + ")"
           + (f", load average at the end {load[0]:.2f} (pure computation; ratios do not depend on the load)." if load else "."),
           ""]
    for scenario, (label, rates) in SCENARIOS.items():
        rows = [r for r in doc["rows"] if r["scenario"] == scenario]
        if not rows:
            continue
        out += [f"**({scenario}) {label}**:", ""]
        if scenario != "c":
            out += ["| share | rule | pairing | fixed n = cap | fixed total | race: mean total | **ratio** | leader is the best "
                    "| wrong picks | fixed design right at n | oracle: fixed n, same rate | oracle ratio (all races) | "
                    f"oracle ratio per group: median [min, max] ({ORACLE_GROUPS} groups) | one left | false answers | library |",
                    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
            for r in rows:
                lib = f"{r['library_same']}/{r['library_checked']}" if r["pairing"] == "paired" else "-"
                out.append(f"| {r['share']:.1f} | `{r['rule']}` | {r['pairing']} | {r['cap']} | {r['honest_total']} | "
                           f"{r['mean_total']:.0f} | **{r['ratio_honest']:.2f}x** | {r['leader_right']:.3f} | "
                           f"{r['wrong_pick']:.3f} | {r['fixed_right_at_cap']:.3f} | {r['fixed_n_matched']} | "
                           f"{_fmt(r['ratio'])}x | {_spread(r['oracle_spread'])} | {r['one_left']:.3f} | "
                           f"{r['false_answers']:.3f} | {lib} |")
            target = TARGETS[scenario]
            paired = [r for r in rows if r["pairing"] == "paired"]
            best = max(paired, key=lambda r: r["ratio_honest"])
            out += ["", f"Target >= {target}x fewer episodes than the honest comparator (fixed n = {paired[0]['cap']} per "
                    f"checkpoint), wrong picks <= {ALPHA}: " + ", ".join(
                        f"share {r['share']:.1f} `{r['rule']}` "
                        f"{'PASS' if r['ratio_honest'] >= target and r['wrong_pick'] <= ALPHA else 'FAIL'} "
                        f"({r['ratio_honest']:.2f}x, wrong picks {r['wrong_pick']:.3f})"
                        for r in paired) + f". Best row: {best['ratio_honest']:.2f}x.", ""]
        else:
            out += ["| share | rule | cap | declared tied | one left | mean stop k | race: mean total | fixed total at the cap | "
                    "ratio | false answers | library |", "|---|---|---|---|---|---|---|---|---|---|---|"]
            for r in rows:
                out.append(f"| {r['share']:.1f} | `{r['rule']}` | {r['cap']} | {r['tied']:.3f} | {r['one_left']:.3f} | "
                           f"{r['mean_stop']:.0f} | {r['mean_total']:.0f} | {r['fixed_total_at_cap']} | {r['ratio_vs_cap']:.2f}x | "
                           f"{r['false_answers']:.3f} | {r['library_same']}/{r['library_checked']} |")
            out += ["", "Target declared tied (in most races): " + ", ".join(
                f"share {r['share']:.1f} `{r['rule']}` {'PASS' if r['tied'] >= 0.5 else 'FAIL'} ({r['tied']:.3f})"
                for r in rows) + ".", ""]
    if doc["sensitivity"]:
        out += ["**Other stated gaps and probabilities** (share 0, `best`, paired; the race capped at each Bechhofer n):", "",
                "| scenario | gap | probability | fixed n = cap | race: mean total | ratio | leader is the best | "
                "oracle ratio per group |", "|---|---|---|---|---|---|---|---|"]
        for r in doc["sensitivity"]:
            out.append(f"| ({r['scenario']}) | {r['gap']} | {r['p_stated']} | {r['cap']} | {r['mean_total']:.0f} | "
                       f"{r['ratio_honest']:.2f}x | {r['leader_right']:.3f} | {_spread(r['oracle_spread'])} |")
        out.append("")
    f = doc["futility"] or {"rows": []}
    out += [] if not f["rows"] else [f"**Futility stops** (`--stop-when above={f['threshold']}`, one policy, confidence {f['confidence']}; "
            f"{f['rows'][0]['runs']} runs per row): episodes until the run stops, with the futility stop (the "
            f"anytime-valid upper bound below {f['threshold']}) and without it (on to the cap unless the claim is made);",
            "", "| p | cap | with futility: mean | median | without: mean | **saved** | false claims | interval covers p at the stop |",
            "|---|---|---|---|---|---|---|---|"]
    for r in f["rows"]:
        out.append(f"| {r['p']} | {r['cap']} | {r['mean_with']:.1f} | {r['median_with']:.0f} | {r['mean_without']:.1f} | "
                   f"**{100 * r['saved']:.1f}%** | {r['false_claims']:.3f} | {r['coverage_at_stop']:.3f} |")
    if f["rows"]:
        out += ["", f"The library's `StopMonitor` stopped where these runs did in {f['library_same']}/{f['library_checked']} runs.", ""]
    b = doc["bets"]
    if b is not None:
        out += [f"**The bets** (one pair, level alpha/28 = {b['level']:.5f} as for a pair in (b), {b['runs']} runs of "
                f"{b['horizon']} episodes, share 0): episodes until B is shown better than A by more than eps,", "",
                "| A | B | eps | race's mixture: median | mean (capped) | plug-in (`--stop-when`'s): median | mean (capped) |",
                "|---|---|---|---|---|---|---|"]
        for r in b["rows"]:
            out.append(f"| {r['a']} | {r['b']} | {r['eps']} | {r['mixture']['median']:.0f} | {r['mixture']['mean_capped']:.0f} | "
                       f"{r['plug-in']['median']:.0f} | {r['plug-in']['mean_capped']:.0f} |")
        c = b["coverage"]
        out += ["", f"Coverage at 95% under continuous monitoring (Bernoulli({c['p']}), {c['looks']} looks): mixture "
                f"{c['mixture']:.4f}, plug-in {c['plug-in']:.4f}.", ""]
    paired = [r for r in doc["rows"] if r["pairing"] == "paired"]
    picks = [r for r in paired if r["scenario"] != "c"]
    if paired:
        out.append(f"False answers (a policy within the margin dropped, or a false tie) <= {ALPHA} in every paired row: "
                   f"{'PASS' if all(r['false_answers'] <= ALPHA for r in paired) else 'FAIL'} "
                   f"(max {max(r['false_answers'] for r in paired):.3f})" + (
                       f"; wrong picks (the leader at the stop is not the best) in (a), (b): max "
                       f"{max(r['wrong_pick'] for r in picks):.3f}." if picks else "."))
    checked = sum(r["library_checked"] for r in doc["rows"])
    if not doc["rows"]:
        return "\n".join(out + ([""] + [engine_markdown(doc["engine"])] if doc.get("engine") else []))
    same = sum(r["library_same"] for r in doc["rows"])
    out.append(f"Vectorised races equal the library's `Race` (drops at the same k, stop, tie, leader): {same}/{checked}.")
    if doc.get("engine"):
        out += ["", engine_markdown(doc["engine"])]
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
