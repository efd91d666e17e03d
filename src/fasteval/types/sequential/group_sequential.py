"""Exact group-sequential boundaries for a count of Bernoulli events, by recursion over the looks.

The setting: Bernoulli observations with event probability p arrive in order; at look j the
test has seen ``n_j`` of them (``0 < n_1 < ... < n_K``) and reads ``S_j``, the number of events
among them. One-sided test of ``H0: p <= p0`` against ``p > p0``:

* **efficacy**: reject H0 at the first look with ``S_j >= c_j``;
* **futility** (optional): stop without rejecting at the first look with ``S_j <= f_j``.

**Construction (exact, no normal approximation).** The sub-density ``g_j(s) = P(S_j = s, no
stop before look j)`` follows from ``g_{j-1}`` by one convolution with the pmf of
``Binomial(n_j - n_{j-1}, p)`` (the events between two looks), after zeroing the states where
the test stopped. Under ``p0``, ``P(first rejection at look j) = sum_{s >= c_j} g_j(s)``, and
``c_j`` is the *smallest* count whose rejection keeps the error spent so far at most
``A(t_j)`` (the spending function, :mod:`.spending`): discreteness leaves some of the budget
unspent at a look, and the next look may use it, never more than ``A(t_j)`` in all. At the last
look ``A = alpha``: the design spends all of alpha by the cap, and no more.

The efficacy recursion under ``p0`` ignores the futility bound (a *non-binding* futility
bound): stopping for futility can only remove rejections, so the type-I error stays at most
alpha whatever futility rule is used, even one that reads the data in any way. The futility
bound itself spends a type-II budget ``beta`` under an alternative ``p1`` (Pampallona & Tsiatis'
beta spending), computed with both bounds, as the test actually runs.

**Why the null's worst case is p0.** The rejection event is increasing in the observations
(raising any observation from 0 to 1 raises every ``S_j``, so it can neither undo a rejection
nor cause a futility stop before it), so its probability increases with p: ``p0`` is the
worst case of ``H0: p <= p0``, with or without the futility bound.

**Conditional use.** The increments ``n_j - n_{j-1}`` need not be known in advance, only
before look j reads ``S_j``: :class:`OneSidedExact` takes them look by look. The paired test
of :mod:`.truncated` uses that to run the recursion on the discordant pairs seen between two
looks (a number that carries no information about who won them under the null).

Shapes and edge cases: a sub-density is a float64 vector indexed by the count ``0..n``; a look
with no new observation (increment 0) is allowed (it may still reject, with budget left by
earlier looks); ``c_j = n_j + 1`` means "no count rejects at this look", ``f_j = -1`` "no
futility stop". Floating point: a boundary is accepted only when its exact error is at most the
budget less ``SLACK`` (relative), so rounding can only make the test more conservative.

:func:`reference_operating` is the plain version, by enumeration of every increment vector, for
small designs; the tests hold the recursion to it.
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache
from typing import Any, Sequence

import numpy as np

from fasteval.types.sequential.spending import Spending

SLACK = 1e-9
"""Relative slack on every spending budget (rounding can only make a bound more conservative)."""


@lru_cache(maxsize=1 << 16)
def binomial_pmf(m: int, p: float) -> np.ndarray:
    """The Binomial(m, p) pmf over ``0..m``: ``log C(m, k)`` as a running sum of
    ``log((m - i) / (i + 1))``, plus ``k log p + (m - k) log(1 - p)`` (relative error below 1e-11
    for m up to thousands, far inside :data:`SLACK`; the tests compare it with exact rational
    arithmetic). ``p`` of 0 or 1: a point mass. Cached; the array is read-only."""
    if p <= 0.0 or p >= 1.0:  # a point mass at 0 or m
        out = np.zeros(m + 1)
        out[0 if p <= 0.0 else m] = 1.0
        out.flags.writeable = False
        return out
    k = np.arange(m + 1, dtype=np.float64)
    i = np.arange(m, dtype=np.float64)
    log_comb = np.concatenate([[0.0], np.cumsum(np.log((m - i) / (i + 1.0)))])
    out = np.exp(log_comb + k * math.log(p) + (m - k) * math.log1p(-p))
    out.flags.writeable = False  # cached: shared by every caller
    return out


def advance(g: np.ndarray, m: int, p: float) -> np.ndarray:
    """``g`` (sub-density over the count ``0..len(g)-1``) after ``m`` more Bernoulli(p)
    observations: its convolution with the Binomial(m, p) pmf (length ``len(g) + m``)."""
    if m == 0:
        return g.copy()
    return np.convolve(g, binomial_pmf(m, p))


def upper_critical(g: np.ndarray, budget: float) -> tuple[int, float]:
    """The smallest count c with ``sum_{s >= c} g(s) <= budget``, and that mass (``len(g)``
    and 0.0 when even the largest count alone costs more)."""
    tail = np.cumsum(g[::-1])[::-1]
    ok = tail <= max(budget, 0.0) * (1.0 - SLACK)
    if not ok.any():
        return g.size, 0.0
    c = int(np.argmax(ok))
    return c, float(tail[c])


def lower_critical(g: np.ndarray, budget: float) -> tuple[int, float]:
    """The largest count f with ``sum_{s <= f} g(s) <= budget``, and that mass (-1 and 0.0 when
    even the count 0 alone costs more)."""
    head = np.cumsum(g)
    ok = head <= max(budget, 0.0) * (1.0 - SLACK)
    f = int(ok.sum()) - 1  # head is nondecreasing: ok is True...True False...False
    return f, (float(head[f]) if f >= 0 else 0.0)


class OneSidedExact:
    """The boundaries of a one-sided exact binomial group-sequential test, computed look by look.

    ``look(m, t)`` folds ``m`` new observations (the increment since the last look) at spending
    fraction ``t`` and returns ``(c, f)``: reject when the count is ``>= c``, stop for futility
    when it is ``<= f`` (``f = -1`` without a futility bound). ``last=True`` spends what is left
    of both budgets (``t`` is then taken as 1) and sets ``f = c - 1``: at the last look every
    count is decided.

    ``p1`` (with ``beta`` > 0): the alternative under which the futility bound spends ``beta``;
    None: efficacy only. State: the two sub-densities (under ``p0`` with rejections removed;
    under ``p1`` with both stops removed), the error spent, and ``power``: P(reject so far)
    under ``p1``.
    """

    def __init__(self, p0: float, alpha: float, spending: Spending, p1: float | None = None, beta: float = 0.0,
                 beta_spending: Spending | None = None):
        if not 0.0 < p0 < 1.0:
            raise ValueError(f"p0: expected a probability in (0, 1), got {p0!r}.")
        if not 0.0 < alpha < 1.0:
            raise ValueError(f"alpha: expected a number in (0, 1), got {alpha!r}.")
        if p1 is not None and not (p0 < p1 < 1.0 and 0.0 < beta < 1.0):
            raise ValueError(f"futility: expected p0 < p1 < 1 and beta in (0, 1), got p1={p1!r}, beta={beta!r}.")
        self.p0, self.alpha, self.spending = float(p0), float(alpha), spending
        self.p1, self.beta = (None if p1 is None else float(p1)), float(beta)
        self.beta_spending = beta_spending or spending
        self.n = 0
        self.spent = 0.0
        self.beta_spent = 0.0
        self.power = 0.0
        self._g0 = np.ones(1)
        self._g1 = np.ones(1) if p1 is not None else None

    def look(self, m: int, t: float, last: bool = False) -> tuple[int, int]:
        m = int(m)
        if m < 0:
            raise ValueError(f"look: expected a nonnegative increment, got {m}.")
        self.n += m
        t = 1.0 if last else float(t)
        g0 = advance(self._g0, m, self.p0)
        budget = (self.alpha if last else self.spending.at(t, self.alpha)) - self.spent
        c, mass = upper_critical(g0, budget)
        self.spent += mass
        g0[c:] = 0.0
        self._g0 = g0
        f = -1
        if self._g1 is not None:
            g1 = advance(self._g1, m, self.p1)
            self.power += float(g1[c:].sum())
            g1[c:] = 0.0
            if last:
                f = c - 1
                mass1 = float(g1[:c].sum())
            else:
                budget1 = self.beta_spending.at(t, self.beta) - self.beta_spent
                f, mass1 = lower_critical(g1, budget1)
                if f >= c:  # the bounds met early: every count at this look is decided
                    f = c - 1
                    mass1 = float(g1[:c].sum())
            self.beta_spent += mass1
            g1[: f + 1] = 0.0
            self._g1 = g1
        return c, f


def look_points(cap: int, looks: int) -> np.ndarray:
    """``n_j = ceil(j cap / K)`` for j = 1..K (duplicates dropped: at most ``cap`` looks)."""
    cap, looks = int(cap), int(looks)
    if cap < 1 or looks < 1:
        raise ValueError(f"looks: expected a cap >= 1 and at least one look, got cap={cap}, looks={looks}.")
    j = np.arange(1, looks + 1)
    return np.unique(-((-j * cap) // looks)).astype(np.int64)


def efficacy_bounds(n: Sequence[int], p0: float, alpha: float, spending: Spending,
                    t: Sequence[float] | None = None) -> tuple[np.ndarray, float]:
    """Efficacy bounds ``c_j`` at the looks ``n`` (the last one spends all of alpha), and the
    exact type-I error they spend at ``p0``. ``t``: the spending fractions (default ``n / n_K``;
    a design that ends early passes its planned fractions for the looks before the last)."""
    n = np.asarray(n, dtype=np.int64)
    rec = OneSidedExact(p0, alpha, spending)
    t = n / n[-1] if t is None else np.asarray(t, dtype=np.float64)
    c = np.array([rec.look(m, tj, last=(j == n.size - 1))[0] for j, (m, tj) in enumerate(zip(np.diff(n, prepend=0), t))])
    return c, rec.spent


def futility_bounds(n: Sequence[int], c: Sequence[int], p0: float, alpha: float, spending: Spending, p1: float,
                    beta: float, beta_spending: Spending | None = None) -> tuple[np.ndarray, float]:
    """Futility bounds ``f_j`` that spend ``beta`` under ``p1`` beside the efficacy bounds ``c``
    (which they do not move: the bound is non-binding), and the power at ``p1``."""
    n = np.asarray(n, dtype=np.int64)
    rec = OneSidedExact(p0, alpha, spending, p1, beta, beta_spending)
    t = n / n[-1]
    f = np.empty(n.size, dtype=np.int64)
    for j, (m, tj) in enumerate(zip(np.diff(n, prepend=0), t)):
        cj, f[j] = rec.look(m, tj, last=(j == n.size - 1))
        if cj != c[j]:
            raise ValueError("futility_bounds: the efficacy bounds do not match the design's.")
    return f, rec.power


def operating(n: Sequence[int], c: Sequence[int], f: Sequence[int] | None, p: float) -> dict[str, Any]:
    """Exact operating characteristics at the event probability ``p`` of the test with looks
    ``n``, efficacy bounds ``c`` and futility bounds ``f`` (None: none; the last look decides
    what is left either way): P(reject), P(stop for futility before the last look), the expected
    and maximum number of observations, and P(stop at each look)."""
    n = np.asarray(n, dtype=np.int64)
    f = np.full(n.size, -1) if f is None else np.asarray(f)
    g = np.ones(1)
    reject = np.zeros(n.size)
    futile = np.zeros(n.size)
    for j, m in enumerate(np.diff(n, prepend=0)):
        g = advance(g, int(m), p)
        reject[j] = g[c[j]:].sum()
        g[c[j]:] = 0.0
        if j == n.size - 1:
            futile[j] = g.sum()
        elif f[j] >= 0:
            futile[j] = g[: f[j] + 1].sum()
            g[: f[j] + 1] = 0.0
    stop = reject + futile
    return {"p": p, "reject": float(reject.sum()), "futility_before_cap": float(futile[:-1].sum()),
            "expected_n": float((stop * n).sum()), "max_n": int(n[-1]), "stop_at_look": stop.tolist(),
            "reject_at_look": reject.tolist()}


def reference_operating(n: Sequence[int], c: Sequence[int], f: Sequence[int] | None, p: float) -> dict[str, float]:
    """The plain version of :func:`operating` for small designs: every vector of increments
    ``(x_1, .., x_K)``, ``0 <= x_j <= n_j - n_{j-1}``, with its probability
    ``prod_j Binomial(x_j; n_j - n_{j-1}, p)``, walked look by look. Cost ``prod_j (m_j + 1)``."""
    n = [int(v) for v in n]
    f = [-1] * len(n) if f is None else [int(v) for v in f]
    incs = np.diff(n, prepend=0).tolist()
    out = {"reject": 0.0, "futility_before_cap": 0.0, "expected_n": 0.0}
    for xs in itertools.product(*[range(m + 1) for m in incs]):
        prob = math.prod(math.comb(m, x) * p ** x * (1.0 - p) ** (m - x) for x, m in zip(xs, incs))
        s = 0
        for j, x in enumerate(xs):
            s += x
            if s >= c[j]:
                out["reject"] += prob
                out["expected_n"] += prob * n[j]
                break
            if j == len(n) - 1 or s <= f[j]:
                out["futility_before_cap"] += prob if j < len(n) - 1 else 0.0
                out["expected_n"] += prob * n[j]
                break
    return out
