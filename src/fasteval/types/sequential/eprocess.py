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
