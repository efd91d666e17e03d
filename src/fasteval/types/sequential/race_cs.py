"""Betting on a bounded mean against any null m: the e-processes and confidence sequences of the race.

The race (:mod:`.race`) compares policies on paired episodes. Each pair of policies (i, j) gives, per
episode t, one value in [0, 1], ``y_t = (1 + x_it - x_jt) / 2`` (``x`` a success in {0, 1} or a
return mapped to [0, 1]); its mean is ``(1 + mu_i - mu_j) / 2``. "i beats j by more than eps" is
"the mean of y is above ``m = (1 + eps) / 2``". This module bets on such values.

**The gamblers.** For a null mean ``m`` in (0, 1), a *long* gambler bets that the mean is above m
and a *short* one that it is below:

* long: ``prod_t (1 + lam (y_t - m))`` with ``lam = f / m``;
* short: ``prod_t (1 - lam (y_t - m))`` with ``lam = f / (1 - m)``;

each averaged over the constant bet fractions ``f_j = c (j - 1/2) / N``, ``j = 1..N`` (``N = 40``,
``c = 1/2``: every factor is at least ``1 - c = 1/2``, the truncation of :mod:`.betting`). This is
the uniform mixture of constant bets of :mod:`.eprocess`, moved from m = 1/2 to any m: at ``m = 1/2``
with ``c = 1`` the long wealth *is* :class:`~.eprocess.PairedEProcess`'s "B better" wealth
(``tests/test_race.py`` checks it bit for bit).

**Validity.** If the mean is at most m (values independent across t), each long factor has
conditional mean ``1 + lam (mu - m) <= 1``, so every component, and their average, is a nonnegative
supermartingale that starts at 1; by Ville's inequality it ever reaches ``1/a`` with probability at
most a, however long one watches and wherever one stops. The short gambler mirrors it.

**The confidence sequence.** ``C_t = {m : long_t(m) < 2/a and short_t(m) < 2/a}``. At the true mean
both wealths are martingales, so their average is one and ``C_t`` covers the mean at every t at once
with probability >= 1 - a. Every factor ``1 + f (y - m) / m = 1 - f + f y / m`` falls with m (and
the short one rises), so ``C_t`` is an interval; it always contains the sample mean (at
``m = mean(y)`` every component is <= 1, since ``log(1 + z) <= z``). With constant bets the wealth
after t steps depends only on the values seen, not their order.

Shapes: series on the leading axes, time on the last; NaN values are skipped (factor 1: an episode
that failed for good, or a pair where one side has no outcome). Floating point: every running
log-wealth is a sequential cumulative sum from the previous state and the mixture a sequential
``logaddexp`` over j, so feeding the same values in chunks of any size gives bit-identical numbers.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fasteval.types.sequential.betting import TRUNCATION, check_confidence, check_unit_interval

N_BETS = 40
"""N: the constant bets of the mixture."""
MAX_BET = TRUNCATION
"""c: the largest bet fraction (1/2 keeps every factor >= 1/2; PairedEProcess's bets are c = 1 at m = 1/2)."""
_BISECTIONS = 60
"""Halvings of [0, 1] when a bound is searched: 2**-60 is below float64 resolution near 1."""


def fractions(max_bet: float = MAX_BET, n_bets: int = N_BETS) -> np.ndarray:
    """The bet fractions ``f_j = c (j - 1/2) / N``, shape ``(N,)``."""
    return float(max_bet) * (np.arange(1, int(n_bets) + 1) - 0.5) / int(n_bets)


def signed_bets(m: Any, side: Any, max_bet: float = MAX_BET, n_bets: int = N_BETS) -> np.ndarray:
    """Bets ``b`` such that each factor is ``1 + b (y - m)``: ``f / m`` (long, side +1) or
    ``-f / (1 - m)`` (short, side -1). ``m``, ``side``: shape ``(B,)`` (or scalars); returns ``(B, N)``."""
    m = np.atleast_1d(np.asarray(m, dtype=np.float64))
    side = np.broadcast_to(np.atleast_1d(np.asarray(side)), m.shape)
    if np.any((m <= 0.0) | (m >= 1.0)):
        raise ValueError(f"null means must lie in (0, 1), got {m.tolist()}.")
    if np.any((side != 1) & (side != -1)):
        raise ValueError(f"sides must be +1 (long) or -1 (short), got {side.tolist()}.")
    f = fractions(max_bet, n_bets)[None, :]
    return np.where(side[:, None] > 0, f / m[:, None], -f / (1.0 - m[:, None]))


def mixture(log_components: np.ndarray) -> np.ndarray:
    """``log mean_j exp(c_j)`` over the last axis, summed in the order j = 1..N (deterministic)."""
    out = log_components[..., 0]
    for j in range(1, log_components.shape[-1]):
        out = np.logaddexp(out, log_components[..., j])
    return out - math.log(log_components.shape[-1])


def log_factors(y: np.ndarray, m: np.ndarray, bets: np.ndarray) -> np.ndarray:
    """``log(1 + b (y - m))`` for values ``y`` of shape ``(..., n)`` and B boundaries (``m``: ``(B,)``,
    ``bets``: ``(B, N)``): shape ``(..., B, n, N)``; 0 where y is NaN (skipped)."""
    edge = y[..., None, :, None] - m[:, None, None]  # (..., B, n, 1)
    out = np.log1p(bets[:, None, :] * edge)
    return np.where(np.isnan(edge), 0.0, out)


def fold(state: np.ndarray, factors: np.ndarray) -> np.ndarray:
    """Running component log-wealth after each step: ``state`` ``(..., B, N)`` plus the cumulative
    sums of ``factors`` ``(..., B, n, N)`` along time, sequentially from the state. Returns
    ``(..., B, n, N)``; its last step is the new state."""
    return np.cumsum(np.concatenate([state[..., None, :], factors], axis=-2), axis=-2)[..., 1:, :]


def log_wealth(y: Any, m: float, side: str = "long", max_bet: float = MAX_BET) -> np.ndarray:
    """The mixture log-wealth after each value of ``y`` (shape ``(..., n)``, values in [0, 1] or NaN)
    against the null mean ``m``: the batch form (vectorised over leading axes, for simulations).
    ``side``: ``"long"`` (bets that the mean is above m) or ``"short"`` (below)."""
    if side not in ("long", "short"):
        raise ValueError(f"side: expected 'long' or 'short', got {side!r}.")
    ys = np.asarray(y, dtype=np.float64)
    check_unit_interval(ys[~np.isnan(ys)], "values")
    bets = signed_bets([m], [1 if side == "long" else -1], max_bet)[0]
    edge = np.where(np.isnan(ys), 0.0, ys - float(m))
    comps = None
    for b in bets:  # one component at a time: memory stays at the size of y
        c = np.cumsum(np.log1p(b * edge), axis=-1)[..., None]
        comps = c if comps is None else np.concatenate([comps, c], axis=-1)
    return mixture(comps)


def _final_log_wealth(y: np.ndarray, m: np.ndarray, side: int) -> np.ndarray:
    """Mixture log-wealth after all of ``y`` (``(S, n)``, NaN skipped) at per-series nulls ``m`` ``(S,)``."""
    f = fractions()
    lam = f[None, :] / (m[:, None] if side > 0 else -(1.0 - m[:, None]))  # (S, N)
    edge = np.where(np.isnan(y), 0.0, y - m[:, None])  # (S, n)
    comps = np.log1p(lam[:, None, :] * edge[:, :, None]).sum(axis=1)  # (S, N)
    return mixture(comps)


def mixture_cs(y: Any, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds of the confidence sequence ``C_n`` after all of ``y`` (shape ``(..., n)``,
    values in [0, 1], NaN skipped), at ``confidence`` (two-sided: each gambler's line is ``2/a``).

    Found by bisection on each side of the sample mean (inside ``C_n``) and reported at the rejected
    end of the last bracket: a bound is never inside the exact interval, so coverage holds. With no
    values the bounds are 0 and 1. Returns arrays of shape ``y.shape[:-1]``.
    """
    alpha = 1.0 - check_confidence(confidence)
    ys = np.atleast_1d(np.asarray(y, dtype=np.float64))
    lead = ys.shape[:-1]
    flat = ys.reshape(int(np.prod(lead)), ys.shape[-1])
    check_unit_interval(flat[~np.isnan(flat)], "values")
    count = (~np.isnan(flat)).sum(axis=1)
    mean = np.where(count > 0, np.nansum(flat, axis=1) / np.maximum(count, 1), 0.5)
    line = math.log(2.0 / alpha)
    lower = _search(flat, np.zeros_like(mean), mean.copy(), +1, line)
    upper = _search(flat, mean.copy(), np.ones_like(mean), -1, line)
    lower = np.where(count > 0, lower, 0.0)
    upper = np.where(count > 0, upper, 1.0)
    return lower.reshape(lead), upper.reshape(lead)


def _search(y: np.ndarray, lo: np.ndarray, hi: np.ndarray, side: int, line: float) -> np.ndarray:
    """Bisection for the edge of ``C_n``. Long side (+1): the long wealth falls with m; the bound is
    the largest rejected m in [lo, hi] = [0, mean] (0 if none). Short side (-1): the smallest rejected
    m in [mean, 1] (1 if none)."""
    rejected_end = lo.copy() if side > 0 else hi.copy()  # 0 and 1 are rejected by convention
    inner = hi.copy() if side > 0 else lo.copy()  # the mean: never rejected
    for _ in range(_BISECTIONS):
        mid = (rejected_end + inner) / 2.0
        safe = np.clip(mid, 1e-300, 1.0 - 1e-16)
        rej = _final_log_wealth(y, safe, side) >= line
        rejected_end = np.where(rej, mid, rejected_end)
        inner = np.where(rej, inner, mid)
    return rejected_end
