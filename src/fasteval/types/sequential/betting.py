"""The betting confidence sequence for the mean of a [0, 1]-bounded variable.

Waudby-Smith & Ramdas, "Estimating means of bounded random variables by betting" (JRSS-B 2024),
the hedged-capital confidence sequence with predictable plug-in bets (their Theorem 3 and
Section 5.1, the same defaults as their ``confseq`` package's ``betting_cs``):

* running estimates ``mu_t = (1/2 + sum_{i<=t} x_i) / (t + 1)`` and
  ``var_t = (1/4 + sum_{i<=t} (x_i - mu_i)^2) / (t + 1)``;
* the bet at step t uses only steps before it (it is *predictable*):
  ``lam_t = sqrt(2 log(2/alpha) / (var_{t-1} t log(1 + t)))`` (``var_0 = 1/4``);
* for a candidate mean m, two gamblers: ``K+_t(m) = prod (1 + min(lam_i, c/m) (x_i - m))`` bets
  that the mean is above m, ``K-_t(m) = prod (1 - min(lam_i, c/(1-m)) (x_i - m))`` below it;
  ``c = 1/2`` keeps every factor >= 1/2, so the wealth never hits 0;
* at the true mean m, ``K+_t(m)`` and ``K-_t(m)`` are each a nonnegative martingale that starts
  at 1 (each factor has conditional mean 1, because the bet is fixed before ``x_t`` is seen and
  ``E[x_t - m | past] = 0``; it is >= 1/2, so the wealth stays positive). The hedged wealth
  ``K_t(m) = max(theta K+_t(m), (1 - theta) K-_t(m))`` (``theta = 1/2``) is *not* a martingale
  (a maximum of martingales is a submartingale), but it is at most the mixture
  ``M_t = theta K+_t(m) + (1 - theta) K-_t(m)``, which is a nonnegative martingale with
  ``M_0 = theta + (1 - theta) = 1``. Ville's inequality for ``M`` gives
  ``P(exists t: M_t >= 1/alpha) <= alpha``, and ``K_t <= M_t`` carries it over to ``K``:
  ``C_t = {m : K_t(m) < 1/alpha}`` covers the true mean at *every* t at once with probability
  >= 1 - alpha. Any stopping rule may read it. One-sided claims read one gambler alone: the
  lower bound passes m only once ``theta K+_t(m) >= 1/alpha``; when the observations'
  conditional mean stays at or below m, ``K+(m)`` is a nonnegative supermartingale from 1, and
  Ville's inequality bounds that by ``theta alpha`` (the 2.5% of ``above=T`` at 95%).

``K+_t(m)`` is nonincreasing in m and ``K-_t(m)`` nondecreasing, so ``C_t`` is an interval.
:class:`BettingCS` finds it on the grid ``m = 0, 1/G, ..., 1`` and reports the outer grid points
(the lower bound is the largest grid mean that ``K+`` rejects, the upper the smallest that ``K-``
rejects): at most ``1/G`` wider than the exact interval, never narrower, so coverage holds. The
bounds are then intersected with all earlier ones (the running intersection, also valid).

Floating point: every running sum is a sequential ``cumsum`` that starts from the previous
state, so feeding the same values one at a time or in chunks of any size gives bit-identical
bounds (what batch invariance of ``--stop-when`` rests on).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

TRUNCATION = 0.5
"""``c``: a bet is at most ``c/m`` (long) or ``c/(1-m)`` (short), so every factor is >= 1 - c."""
HEDGE = 0.5
"""``theta``: the share of the starting wealth on the long gambler (1/2: a symmetric interval)."""
DEFAULT_GRID = 2000
"""Grid resolution G: bounds are on the grid ``0, 1/G, ..., 1`` (outer points, so conservative)."""
_CHUNK = 256
"""Observations folded per matrix step (memory: chunk x (G + 1) floats, twice)."""


def check_confidence(confidence: float) -> float:
    """``confidence`` as a float in (0, 1), or a ValueError that says what to pass."""
    try:
        value = float(confidence)
    except (TypeError, ValueError):
        raise ValueError(f"confidence: expected a number in (0, 1), e.g. 0.95, got {confidence!r}.") from None
    if not 0.0 < value < 1.0:
        raise ValueError(f"confidence: expected a number in (0, 1), e.g. 0.95, got {confidence!r}.")
    return value


def check_unit_interval(x: Any, what: str = "observations") -> np.ndarray:
    """``x`` as float64, or a ValueError naming the first value outside [0, 1] (NaN included)."""
    arr = np.asarray(x, dtype=np.float64)
    bad = ~((arr >= 0.0) & (arr <= 1.0))
    if bad.any():
        where = np.argwhere(bad)[0]
        raise ValueError(f"{what}: expected values in [0, 1], got {arr[tuple(where)]!r} at position {tuple(int(i) for i in where)}.")
    return arr


def running_estimates(x: np.ndarray, t0: int, sum_x: Any, sum_sq: Any) -> tuple[np.ndarray, ...]:
    """The regularized running mean and variance *before* each of the steps ``t0 + 1 .. t0 + n``
    of ``x`` (last axis = time), from the running sums ``sum_x``, ``sum_sq`` after step ``t0``
    (shape ``x.shape[:-1]``). Returns ``(t, mu_prev, var_prev, sum_x_after, sum_sq_after)``;
    the last two are the running sums after each step (sequential cumsums from the given state).
    """
    n = x.shape[-1]
    t = np.arange(t0 + 1, t0 + n + 1, dtype=np.float64)
    lead = x.shape[:-1] + (1,)
    head = np.broadcast_to(np.expand_dims(np.asarray(sum_x, dtype=np.float64), -1), lead)
    csum = np.cumsum(np.concatenate([head, x], axis=-1), axis=-1)
    mu = (0.5 + csum) / np.concatenate([[t0 + 1.0], t + 1.0])  # mu_{t0}, mu_{t0+1}, ...
    head_sq = np.broadcast_to(np.expand_dims(np.asarray(sum_sq, dtype=np.float64), -1), lead)
    csq = np.cumsum(np.concatenate([head_sq, (x - mu[..., 1:]) ** 2], axis=-1), axis=-1)
    var_prev = (0.25 + csq[..., :-1]) / t  # var_{t-1} = (1/4 + sum_{i<=t-1}) / t
    return t, mu[..., :-1], var_prev, csum[..., 1:], csq[..., 1:]


def _bets(x: np.ndarray, t0: int, sum_x: Any, sum_sq: Any, alpha: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Predictable plug-in bets ``lam_t`` for the steps of ``x`` (see :func:`running_estimates`),
    with the running sums after each step."""
    t, _, var_prev, csum, csq = running_estimates(x, t0, sum_x, sum_sq)
    lam = np.sqrt(2.0 * math.log(2.0 / alpha) / (var_prev * t * np.log1p(t)))
    return lam, csum, csq


def _log_factors(x: np.ndarray, lam: np.ndarray, m: Any) -> tuple[np.ndarray, np.ndarray]:
    """``log(1 + lam+ (x - m))`` and ``log(1 - lam- (x - m))`` (broadcast over ``m``)."""
    m = np.asarray(m, dtype=np.float64)
    with np.errstate(divide="ignore"):
        cap_long = np.where(m > 0, TRUNCATION / np.where(m > 0, m, 1.0), np.inf)
        cap_short = np.where(m < 1, TRUNCATION / np.where(m < 1, 1.0 - m, 1.0), np.inf)
    diff = x - m
    return np.log1p(np.minimum(lam, cap_long) * diff), np.log1p(-np.minimum(lam, cap_short) * diff)


def log_capital(x: Any, m: float, confidence: float = 0.95, side: str = "both") -> np.ndarray:
    """Log wealth at the candidate mean ``m`` after each step, for ``x`` of shape ``(..., n)``.

    ``side="both"``: ``log K_t(m)``, the hedged wealth; the sequence excludes m at step t exactly
    when it is ``>= log(1/alpha)``, so m is outside at some step of a run iff the run's maximum
    reaches that line (what the coverage simulations check at the true mean). ``"long"`` /
    ``"short"``: ``log(theta K+_t(m))`` / ``log((1 - theta) K-_t(m))`` alone (the lower bound
    exceeds m once the long one reaches the line). Vectorized over leading axes (simulation runs).
    """
    if side not in ("both", "long", "short"):
        raise ValueError(f"side: expected 'both', 'long' or 'short', got {side!r}.")
    alpha = 1.0 - check_confidence(confidence)
    xs = check_unit_interval(x)
    lam, _, _ = _bets(xs, 0, np.zeros(xs.shape[:-1]), np.zeros(xs.shape[:-1]), alpha)
    log_up, log_down = _log_factors(xs, lam, m)
    up = math.log(HEDGE) + np.cumsum(log_up, axis=-1) if side != "short" else None
    down = math.log(1.0 - HEDGE) + np.cumsum(log_down, axis=-1) if side != "long" else None
    return up if down is None else down if up is None else np.maximum(up, down)


class BettingCS:
    """The confidence sequence, fed observations in order: ``update(x)`` returns the bounds after
    each new observation. State: the step count, two running sums, and the log wealth of both
    gamblers at the grid means still inside the reported interval (the *window*). See the module
    docstring for the method and its guarantee.

    The window: reported bounds only ever move inwards (running intersection), and the long
    gambler's wealth falls with m (the short one's rises), so a grid mean at or below the
    reported lower bound (at or above the upper) can never move a bound again: its wealth is no
    longer tracked. The cost of an observation is the window's size, which shrinks like the
    interval (a run at half-width 0.05 tracks 200 of the 2001 grid means).
    """

    def __init__(self, confidence: float = 0.95, grid: int = DEFAULT_GRID):
        self.confidence = check_confidence(confidence)
        self.alpha = 1.0 - self.confidence
        if int(grid) < 2:
            raise ValueError(f"grid: expected an integer >= 2, got {grid!r}.")
        self.size = int(grid)
        self.grid = np.linspace(0.0, 1.0, self.size + 1)
        with np.errstate(divide="ignore"):
            self._cap_long = np.where(self.grid > 0, TRUNCATION / self.grid, np.inf)
            self._cap_short = np.where(self.grid < 1, TRUNCATION / (1.0 - self.grid), np.inf)
        self._threshold = math.log(1.0 / self.alpha)
        self.n = 0
        self.sum_x = 0.0
        self._sum_sq = 0.0
        self._lo, self._hi = 0, self.size  # the window: grid indices lo..hi (inclusive)
        self._log_up = np.full(self.grid.size, math.log(HEDGE))
        self._log_down = np.full(self.grid.size, math.log(1.0 - HEDGE))
        self.lower, self.upper = 0.0, 1.0

    @property
    def mean(self) -> float:
        return self.sum_x / self.n if self.n else math.nan

    @property
    def half_width(self) -> float:
        return (self.upper - self.lower) / 2.0

    def update(self, x: Any) -> tuple[np.ndarray, np.ndarray]:
        """Fold in ``x`` (1-D, values in [0, 1]); return the bounds after each of its values."""
        xs = check_unit_interval(np.asarray(x, dtype=np.float64).reshape(-1))
        lows, highs = np.empty(xs.size), np.empty(xs.size)
        for start in range(0, xs.size, _CHUNK):
            part = xs[start:start + _CHUNK]
            lows[start:start + part.size], highs[start:start + part.size] = self._fold(part)
        return lows, highs

    def _fold(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lam, csum, csq = _bets(x, self.n, self.sum_x, self._sum_sq, self.alpha)
        self.n += x.size
        self.sum_x, self._sum_sq = float(csum[-1]), float(csq[-1])
        lo, hi = self._lo, self._hi
        if lo > hi:  # no grid mean left between the bounds: they cannot move on this grid
            return np.full(x.size, self.lower), np.full(x.size, self.upper)
        window = slice(lo, hi + 1)
        diff = x[:, None] - self.grid[None, window]
        lam = lam[:, None]
        up = np.cumsum(np.concatenate([self._log_up[None], np.log1p(np.minimum(lam, self._cap_long[window]) * diff)]), axis=0)[1:]
        down = np.cumsum(np.concatenate([self._log_down[None], np.log1p(-np.minimum(lam, self._cap_short[window]) * diff)]),
                         axis=0)[1:]
        lows = np.maximum.accumulate(np.concatenate([[self.lower], self._lower_bounds(up)]))[1:]
        highs = np.minimum.accumulate(np.concatenate([[self.upper], self._upper_bounds(down)]))[1:]
        self.lower, self.upper = float(lows[-1]), float(highs[-1])
        new_lo = max(lo, int(round(self.lower * self.size)) + 1)
        new_hi = min(hi, int(round(self.upper * self.size)) - 1)
        self._log_up, self._log_down = up[-1, new_lo - lo:new_hi - lo + 1].copy(), down[-1, new_lo - lo:new_hi - lo + 1].copy()
        self._lo, self._hi = new_lo, new_hi
        return lows, highs

    def _lower_bounds(self, log_up: np.ndarray) -> np.ndarray:
        """Per row: the grid point just below the first window mean the long gambler does not reject
        (the window's last point when it rejects them all)."""
        lo, hi = self._lo, self._hi
        keep = log_up < self._threshold
        first = lo + np.argmax(keep, axis=1)
        bound = np.where(first > 0, self.grid[np.maximum(first - 1, 0)], 0.0)
        return np.where(keep.any(axis=1), bound, self.grid[hi])

    def _upper_bounds(self, log_down: np.ndarray) -> np.ndarray:
        """Per row: the grid point just above the last window mean the short gambler does not reject
        (the window's first point when it rejects them all)."""
        lo, hi = self._lo, self._hi
        keep = log_down < self._threshold
        last = hi - np.argmax(keep[:, ::-1], axis=1)
        bound = np.where(last < self.size, self.grid[np.minimum(last + 1, self.size)], 1.0)
        return np.where(keep.any(axis=1), bound, self.grid[lo])


def betting_cs(x: Any, confidence: float = 0.95, grid: int = DEFAULT_GRID) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds of the confidence sequence after each value of ``x`` (1-D, in [0, 1])."""
    return BettingCS(confidence, grid).update(x)
