"""The paired two-policy e-process: betting against "A and B are equally good".

Two policies run on the same seeds give paired episodes. Each pair becomes one number ``y`` in
[0, 1] whose mean is 1/2 when the policies are equally good:

* **success**: only the *discordant* pairs count (one policy succeeded, the other did not);
  ``y = 1`` when only B succeeded, ``0`` when only A did. Under "equal success rates" (and i.i.d.
  pairs), each discordant pair is B's with probability exactly 1/2, whatever the rates are; the
  concordant pairs carry no evidence and are skipped (the wealth does not move). This is the
  sequential version of McNemar's test.
* **return**: ``y = (r_B - r_A + W) / (2 W)`` with ``W = HI - LO`` from ``--return-bounds``;
  its mean is 1/2 exactly when the mean returns are equal.

Two gamblers bet on the ``y`` in order, each with half the starting wealth: the "B better" one
holds ``prod_t (1 + lam (y_t - 1/2))``, the "B worse" one ``prod_t (1 - lam (y_t - 1/2))``, each
averaged over the fixed bets ``lam_j = 2 (j - 1/2) / K``, ``j = 1..K`` (a uniform mixture of
constant bets, "diversified" betting: for discordant pairs ``lam_j`` is the likelihood ratio of
``P(B wins a discordant pair) = 1/2 + lam_j / 4`` against 1/2, so the mixture tracks the best
constant bet within a log K regret). Every mixture component is a nonnegative martingale with
mean 1 under the null, so their average is too, and by Ville's inequality the chance that either
wealth ever reaches ``2/alpha`` is at most ``alpha/2`` each: rejecting "no difference" the first
time one does keeps the type-I error at most alpha *however long the comparison runs and whenever
it stops*. The one-sided nulls ("B is no better", "B is no worse") are covered too: there the
components are supermartingales.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fasteval.types.sequential.betting import check_confidence, check_unit_interval

NULL_MEAN = 0.5
N_BETS = 40
"""K: the constant bets of the mixture."""
BETS = 2.0 * (np.arange(1, N_BETS + 1) - 0.5) / N_BETS
_LOG_K = math.log(N_BETS)


def discordant_outcomes(a_success: Any, b_success: Any) -> np.ndarray:
    """Per pair: 1.0 when only B succeeded, 0.0 when only A did, NaN for concordant pairs."""
    a = np.asarray(a_success, dtype=bool).reshape(-1)
    b = np.asarray(b_success, dtype=bool).reshape(-1)
    if a.shape != b.shape:
        raise ValueError(f"paired outcomes: expected equal lengths, got {a.size} and {b.size}.")
    return np.where(a == b, np.nan, b.astype(np.float64))


def mapped_differences(a_return: Any, b_return: Any, bounds: tuple[float, float]) -> np.ndarray:
    """``(r_B - r_A + W) / (2 W)``, in [0, 1] when both returns lie in ``bounds = (LO, HI)``."""
    lo, hi = float(bounds[0]), float(bounds[1])
    a = np.asarray(a_return, dtype=np.float64).reshape(-1)
    b = np.asarray(b_return, dtype=np.float64).reshape(-1)
    for name, r in (("A", a), ("B", b)):
        bad = ~((r >= lo) & (r <= hi))
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"return of policy {name} at pair {i}: {r[i]!r} is outside --return-bounds {lo:g},{hi:g}; "
                             f"widen the bounds to cover every possible return.")
    width = hi - lo
    return np.clip((b - a + width) / (2.0 * width), 0.0, 1.0)


def _mixture(log_components: np.ndarray) -> np.ndarray:
    """``log mean_j exp(c_j)`` over the last axis, summed in the order j = 1..K."""
    out = log_components[..., 0]
    for j in range(1, log_components.shape[-1]):
        out = np.logaddexp(out, log_components[..., j])
    return out - _LOG_K


def paired_log_wealth(y: Any) -> tuple[np.ndarray, np.ndarray]:
    """Log wealth of both gamblers after each entry of ``y`` (shape ``(..., n)``; NaN = skipped).

    The batch form of :class:`PairedEProcess` (the same numbers; vectorized over leading axes,
    for simulations). Skipped entries add exactly 0 to every component.
    """
    ys = np.asarray(y, dtype=np.float64)
    bet = ~np.isnan(ys)
    check_unit_interval(ys[bet], "paired values")
    edge = np.where(bet, ys - NULL_MEAN, 0.0)
    better = worse = None
    for lam in BETS:  # one component at a time: memory stays at the size of y
        up = np.cumsum(np.log1p(lam * edge), axis=-1)
        down = np.cumsum(np.log1p(-lam * edge), axis=-1)
        better = up if better is None else np.logaddexp(better, up)
        worse = down if worse is None else np.logaddexp(worse, down)
    return better - _LOG_K, worse - _LOG_K


class PairedEProcess:
    """The two wealth processes, fed pairs in index order; NaN entries (concordant pairs) are skipped.

    ``update(y)`` folds entries until the first one at which a wealth reaches ``2/alpha`` and
    returns the number of pairs seen at that point (the stopping k), or None. After a decision
    further entries are ignored, so ``e_better``, ``e_worse`` and ``n_pairs`` stay those at k.
    Chunks of any size give bit-identical numbers (sequential cumulative sums from the state).
    """

    def __init__(self, confidence: float = 0.95):
        self.confidence = check_confidence(confidence)
        self.alpha = 1.0 - self.confidence
        self.threshold = 2.0 / self.alpha
        self._log_threshold = math.log(self.threshold)
        self.n_pairs = 0
        self.n_bets = 0
        self._up = np.zeros(N_BETS)
        self._down = np.zeros(N_BETS)
        self.log_better = 0.0
        self.log_worse = 0.0
        self.decision = 0
        """+1: B better, -1: B worse, 0: not decided."""
        self._path_b: list[np.ndarray] = []
        self._path_w: list[np.ndarray] = []

    @property
    def e_better(self) -> float:
        return math.exp(self.log_better)

    @property
    def e_worse(self) -> float:
        return math.exp(self.log_worse)

    @property
    def verdict(self) -> str | None:
        return {1: "better", -1: "worse"}.get(self.decision)

    def update(self, y: Any) -> int | None:
        if self.decision:
            return None
        ys = np.asarray(y, dtype=np.float64).reshape(-1)
        bets = np.flatnonzero(~np.isnan(ys))
        yb = check_unit_interval(ys[bets], "paired values")
        if yb.size == 0:
            self._record(ys.size, bets, np.zeros(0), np.zeros(0))
            self.n_pairs += ys.size
            return None
        edge = (yb - NULL_MEAN)[:, None]
        up = np.cumsum(np.concatenate([self._up[None], np.log1p(BETS * edge)]), axis=0)[1:]
        down = np.cumsum(np.concatenate([self._down[None], np.log1p(-BETS * edge)]), axis=0)[1:]
        log_b, log_w = _mixture(up), _mixture(down)
        hit = (log_b >= self._log_threshold) | (log_w >= self._log_threshold)
        j = int(np.argmax(hit)) if hit.any() else yb.size - 1
        self.n_bets += j + 1
        self._up, self._down = up[j].copy(), down[j].copy()
        self.log_better, self.log_worse = float(log_b[j]), float(log_w[j])
        if not hit.any():
            self._record(ys.size, bets, log_b, log_w)
            self.n_pairs += ys.size
            return None
        self.decision = 1 if log_b[j] >= self._log_threshold else -1
        self._record(int(bets[j]) + 1, bets, log_b, log_w)
        self.n_pairs += int(bets[j]) + 1
        return self.n_pairs

    def _record(self, n: int, bets: np.ndarray, log_b: np.ndarray, log_w: np.ndarray) -> None:
        """Keep the wealth after each of the first ``n`` entries (flat over the skipped ones)."""
        last = np.searchsorted(bets, np.arange(n), side="right") - 1  # latest bet at or before each entry
        start_b = self._path_b[-1][-1] if self._path_b and self._path_b[-1].size else 0.0
        start_w = self._path_w[-1][-1] if self._path_w and self._path_w[-1].size else 0.0
        self._path_b.append(np.where(last >= 0, np.concatenate([log_b, [0.0]])[last], start_b))
        self._path_w.append(np.where(last >= 0, np.concatenate([log_w, [0.0]])[last], start_w))

    def trajectory(self, points: int = 500) -> dict[str, list[float]]:
        """Both e-values after each pair, thinned to at most ``points`` (the last one kept)."""
        from fasteval.types.sequential.rules import thin

        log_b = np.concatenate(self._path_b) if self._path_b else np.zeros(0)
        log_w = np.concatenate(self._path_w) if self._path_w else np.zeros(0)
        keep = thin(log_b.size, points)
        return {"k": (keep + 1).tolist(), "e_value_better": np.exp(log_b[keep]).tolist(),
                "e_value_worse": np.exp(log_w[keep]).tolist()}


# -- the anytime-valid interval of B - A ---------------------------------------------------------------------
_BISECTIONS = 45
"""Halvings of a bound's bracket: 2**-45 (3e-14) is far below any difference a report shows."""
_DIFF_COST = 4e7
"""Work budget (values x candidate means x bets) of a difference trajectory: continuous values (returns)
get fewer trajectory points than successes, whose three values make each point cheap."""


def centred_differences(a: Any, b: Any) -> np.ndarray:
    """``(1 + x_B - x_A) / 2`` per pair, in [0, 1] (successes or values in [0, 1]; NaN stays NaN): the
    values whose mean is ``(1 + mu_B - mu_A) / 2``, on every pair (a concordant success pair is 1/2)."""
    x = np.asarray(a, dtype=np.float64).reshape(-1)
    y = np.asarray(b, dtype=np.float64).reshape(-1)
    if x.shape != y.shape:
        raise ValueError(f"paired outcomes: expected equal lengths, got {x.size} and {y.size}.")
    return np.clip((1.0 + y - x) / 2.0, 0.0, 1.0)


def _log_wealth(values: np.ndarray, counts: np.ndarray, m: np.ndarray, side: int) -> np.ndarray:
    """Mixture log-wealth at null means ``m`` (shape ``(S,)``) of the values ``values`` (``(U,)``) seen
    ``counts`` times (``(S, U)``): the long gambler (side +1, bets ``f_j / m``) or the short one (``-f_j / (1 - m)``),
    with the e-process's constant bets (``f_j = (j - 1/2) / K``; at m = 1/2 the bets are :data:`BETS`)."""
    f = BETS / 2.0  # (K,)
    lam = f[None, :] / (m[:, None] if side > 0 else -(1.0 - m[:, None]))  # (S, K)
    edge = values[None, :, None] - m[:, None, None]  # (S, U, 1)
    comps = (counts[:, :, None] * np.log1p(lam[:, None, :] * edge)).sum(axis=1)  # (S, K)
    return _mixture(comps)


def _bounds(values: np.ndarray, counts: np.ndarray, line: float) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``counts``: the confidence sequence's bounds (bisection on each side of the row's mean,
    reported at the rejected end, so never inside the exact interval); no values: 0 and 1."""
    n = counts.sum(axis=1)
    mean = np.where(n > 0, counts @ values / np.maximum(n, 1), 0.5)
    out = []
    for side in (+1, -1):
        rejected = np.zeros_like(mean) if side > 0 else np.ones_like(mean)
        inner = mean.copy()
        for _ in range(_BISECTIONS):
            mid = (rejected + inner) / 2.0
            rej = _log_wealth(values, counts, np.clip(mid, 1e-300, 1.0 - 1e-16), side) >= line
            rejected = np.where(rej, mid, rejected)
            inner = np.where(rej, inner, mid)
        out.append(np.where(n > 0, rejected, 0.0 if side > 0 else 1.0))
    return out[0], out[1]


def difference_sequence(y: Any, confidence: float = 0.95, points: int = 500, one_sided: bool = False) -> dict[str, Any]:
    """The anytime-valid confidence sequence for the mean of ``y`` (values in [0, 1], NaN skipped: pairs
    of :func:`centred_differences` or of :func:`mapped_differences`) at the end of ``y`` and along it.

    The sequence of :mod:`.race_cs` with the e-process's own bets: at a candidate mean m a long gambler
    holds ``mean_j prod_t (1 + (f_j / m)(y_t - m))``, a short one ``mean_j prod_t (1 - (f_j / (1 - m))(y_t - m))``
    (``f_j = (j - 1/2) / K``), and m is rejected once either reaches ``2 / alpha``. At the true mean both
    are nonnegative martingales from 1, so by Ville's inequality the sequence covers it at every pair count
    at once with probability >= ``confidence``: it is valid at a data-dependent stop. At ``m = 1/2`` (no
    difference) the two gamblers *are* :class:`PairedEProcess`'s (concordant pairs, 1/2, leave every
    wealth unchanged), so the interval excludes "no difference" at a pair count exactly when the
    e-process's wealth is past its line there. ``one_sided``: the lower bound alone at level
    ``confidence`` (the long gambler's line is ``1 / alpha``), for a non-inferiority gate.

    Returns ``low``, ``high`` (after all of ``y``) and ``trajectory`` (``k``, ``low``, ``high`` at up to
    ``points`` pair counts, evenly spread, the last one kept; fewer for continuous values, to bound the
    work).
    """
    from fasteval.types.sequential.rules import thin

    alpha = 1.0 - check_confidence(confidence)
    ys = np.asarray(y, dtype=np.float64).reshape(-1)
    seen = ~np.isnan(ys)
    check_unit_interval(ys[seen], "paired values")
    values, codes = np.unique(ys[seen], return_inverse=True)
    line = math.log((1.0 if one_sided else 2.0) / alpha)
    if ys.size == 0:
        return {"low": 0.0, "high": 1.0, "trajectory": {"k": [], "low": [], "high": []}}
    budget = max(2, int(_DIFF_COST // max(1, values.size * N_BETS * 2 * _BISECTIONS)))
    rows = np.unique(np.concatenate([thin(ys.size, min(points, budget)), [ys.size - 1]]))
    width = max(values.size, 1)
    at = np.cumsum(seen)  # values seen after each pair
    counts = np.zeros((rows.size, width))
    running, done = np.zeros(width), 0
    for i, r in enumerate(rows):  # the counts of each value after pair r, one prefix at a time (memory: rows x values)
        upto = int(at[r])
        running = running + np.bincount(codes[done:upto], minlength=width)
        counts[i], done = running, upto
    low, high = _bounds(values if values.size else np.array([0.5]), counts, line)
    if one_sided:
        high = np.ones_like(high)
    return {"low": float(low[-1]), "high": float(high[-1]),
            "trajectory": {"k": (rows + 1).tolist(), "low": low.tolist(), "high": high.tolist()}}
