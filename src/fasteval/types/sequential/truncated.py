"""Truncated sequential designs: tests that spend all of their error budget by a cap given in
advance, and stop as soon as the answer is known (group-sequential, exact binomial boundaries).

The anytime-valid statistics of :mod:`.betting` and :mod:`.eprocess` stay valid however long a
run goes on, and pay for it. When the user gives ``-n`` as a real budget, a design that is valid
only up to that cap can spend all of alpha by it and decide sooner. Two designs:

* :class:`TruncatedThreshold`: one policy against a threshold (``--stop-when above=T`` or
  ``below=T`` on success). ``above=T`` tests ``H0: p <= T`` on the successes, ``below=T`` tests
  ``H0: p >= T`` on the failures (the same test, mirrored). One-sided type-I error at most
  ``alpha`` (``(1 - confidence) / 2`` to keep the meaning of today's rule: one side of the 95%
  sequence).
* :class:`TruncatedPaired`: two policies paired on seeds ("does B beat A?"). Only discordant
  pairs (exactly one policy succeeded) carry evidence; under "equal success rates" each is B's
  with probability 1/2, whatever the rates and however the seeds couple the two policies (the
  exact McNemar setting). Two one-sided tests, "B better" and "B worse", at ``alpha`` each
  (two-sided ``2 alpha``, as the e-process spends ``alpha/2`` per side of ``--alpha``).

**Looks.** ``K`` looks at fixed counts ``n_j = ceil(j cap / K)`` of outcomes (one policy) or of
pairs (two), fixed when the design is built. A decision reads only the outcomes ``0..n_j - 1``,
so it is the same whatever the batch size or finishing order, like ``--stop-when`` today: fed
through :class:`~fasteval.types.sequential.rules.PrefixGate`, the stop k (in episode indices) is
batch-invariant. Between looks nothing is decided.

**Boundaries** (:mod:`.group_sequential`): exact, by recursion over the looks. The efficacy
bound at look j is the smallest count whose exact null probability of a first rejection keeps
the error spent at most ``A(t_j)``, ``t_j = n_j / cap``, with ``A`` the spending function
(:data:`DEFAULT_SPENDING`, chosen by measurement: ``benchmarks/bench_truncated.py``); at the cap
``A = alpha``. One policy: the bounds are computed once, from ``(T, cap, alpha, K, A)``. Paired:
the bound at look j is computed at look j, *conditionally on the numbers of discordant pairs
seen at looks 1..j* (under the null those numbers say nothing about who won the pairs: given
them, B's wins are a fair-coin walk), so the test is exact for every pattern of discordance,
and so unconditionally; the increment between two looks is only known when the look comes.

**Futility** (on by default): the run also stops, without a claim, once the claim has become
unlikely. The bound spends ``beta = 1 - power`` under the alternative *the cap is sized for*
(:func:`implied_alternative`: the smallest effect at which this design has that power); it is
non-binding (the efficacy bounds are computed as if it did not exist), so it cannot raise the
type-I error, whatever it reads. Paired, the alternative is implied from the discordant pairs
expected at the cap (projected from the first look that has seen
:data:`FUTILITY_MIN_DISCORDANT` of them, or from the first look past half the cap), and the
run stops for futility only when both one-sided tests are futile.

**Guarantee** (validity is *until the cap*): with ``n <= cap`` outcomes, the chance of a false
claim is at most alpha (per side), exactly by construction; a design's ``alpha_spent`` is the
exact figure. The guarantee does *not* extend past the cap: a truncated run cannot be resumed
with a larger ``-n`` under the same design (resume it as an anytime-valid run, or plan a new
cap before the first look). A run that ends before the cap with fewer outcomes than planned (an
episode failed for good) takes a last look at what it has (:meth:`TruncatedThreshold.finish`),
spending what is left.

**How the layers above use it.** One policy: ``TruncatedThreshold.from_rule("above=0.8", cap=n,
confidence=c)`` is a monitor with the interface of
:class:`~fasteval.types.sequential.rules.StopMonitor` (``feed``, ``n``, ``fired``, ``stopped``,
``cap``, ``rule``, ``summary``), so a :class:`~fasteval.types.sequential.rules.PrefixGate` can
stand in front of it unchanged; at the end of a run that did not stop, ``finish()`` takes the
last look. Two policies: ``TruncatedPaired(TruncatedDesign(n, alpha / 2))`` takes the same
``update(y)`` as the paired e-process and returns the stop in pairs; ``verdict`` and
``summary()`` give the rest. Both summaries carry ``"design": "truncated"``, the method in
words, the exact ``alpha_spent``, ``reason`` (``rule``, ``futility``, ``cap``) and
``valid_until`` (the cap).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from fasteval.types.sequential.group_sequential import (
    OneSidedExact, efficacy_bounds, futility_bounds, look_points, operating,
)
from fasteval.types.sequential.rules import StopRule, parse_stop_rule
from fasteval.types.sequential.spending import Spending

DEFAULT_LOOKS = 20
"""K: looks per design (chosen by measurement; see benchmarks/RESULTS.md)."""
DEFAULT_SPENDING = Spending("power", 1.5)
"""The alpha spending function ``alpha t^1.5``, between Pocock's and O'Brien-Fleming's (chosen by
measurement: ``bench_truncated.py --explore``, in benchmarks/RESULTS.md)."""
DEFAULT_BETA_SPENDING = Spending("power", 2.0)
"""The futility bound's beta spending function ``beta t^2`` (chosen by measurement)."""
DEFAULT_POWER = 0.9
"""The power the cap is taken to be sized for (only the futility bound reads it)."""
DESIGN_NAME = "truncated"
FUTILITY_MIN_DISCORDANT = 30
"""Paired: the futility bound starts at the first look with this many discordant pairs, or at
the first look past half the cap with any (its alternative is implied from the discordance
projected to the cap; fewer pairs early on project it too noisily, which costs power: measured
in benchmarks/bench_truncated.py)."""


@dataclass(frozen=True)
class TruncatedDesign:
    """What a truncated design is built from.

    ``cap``: the most outcomes (one policy) or pairs (two) the run may use: the design spends
    all of ``alpha`` by it and is valid only up to it. ``alpha``: the type-I error of each
    one-sided claim. ``looks``: K, equally spaced. ``spending``: the alpha spending function.
    ``futility``: stop without a claim once it is unlikely.
    ``power``: the power the cap is taken to be sized for (the futility bound spends
    ``1 - power`` under the effect the cap gives that power). ``beta_spending``: the futility
    bound's spending function (None: :data:`DEFAULT_BETA_SPENDING`).
    """

    cap: int
    alpha: float
    looks: int = DEFAULT_LOOKS
    spending: Spending = DEFAULT_SPENDING
    futility: bool = True
    power: float = DEFAULT_POWER
    beta_spending: Spending | None = None

    def __post_init__(self) -> None:
        if isinstance(self.cap, bool) or not isinstance(self.cap, (int, np.integer)) or self.cap < 1:
            raise ValueError(f"truncated design: the cap (-n) must be a positive integer, got {self.cap!r}.")
        if not 0.0 < float(self.alpha) < 0.5:
            raise ValueError(f"truncated design: alpha must lie in (0, 0.5), got {self.alpha!r}.")
        if isinstance(self.looks, bool) or not isinstance(self.looks, (int, np.integer)) or self.looks < 1:
            raise ValueError(f"truncated design: looks must be a positive integer, got {self.looks!r}.")
        if not isinstance(self.spending, Spending):
            raise ValueError(f"truncated design: spending must be a Spending, got {self.spending!r}.")
        if not 0.5 <= float(self.power) < 1.0:
            raise ValueError(f"truncated design: power must lie in [0.5, 1), got {self.power!r}.")
        if self.beta_spending is None:
            object.__setattr__(self, "beta_spending", DEFAULT_BETA_SPENDING)
        elif not isinstance(self.beta_spending, Spending):
            raise ValueError(f"truncated design: beta_spending must be a Spending, got {self.beta_spending!r}.")
        object.__setattr__(self, "cap", int(self.cap))
        object.__setattr__(self, "looks", int(self.looks))
        object.__setattr__(self, "alpha", float(self.alpha))
        object.__setattr__(self, "power", float(self.power))

    @property
    def beta(self) -> float:
        return 1.0 - self.power

    def look_points(self) -> np.ndarray:
        """The look counts ``n_1 < ... < n_K = cap``."""
        return look_points(self.cap, self.looks)

    def describe(self) -> str:
        return (f"group-sequential, exact binomial bounds, {self.spending.label()} alpha spending, "
                f"{self.look_points().size} looks, all of alpha spent by the cap ({self.cap})"
                + (", non-binding futility" if self.futility else ""))

    def to_dict(self) -> dict[str, Any]:
        return {"design": DESIGN_NAME, "cap": self.cap, "alpha": self.alpha, "looks": self.look_points().tolist(),
                "spending": self.spending.to_dict(),
                "beta_spending": self.beta_spending.to_dict(), "futility": self.futility, "power": self.power}


@lru_cache(maxsize=4096)
def implied_alternative(p0: float, design: TruncatedDesign) -> float | None:
    """The effect the cap is sized for: the smallest event probability ``p1 > p0`` at which the
    design (efficacy bounds, and a futility bound spending ``1 - power`` under p1 itself) rejects
    with probability at least ``design.power``; None when no p1 < 1 reaches it (a cap too small
    for that power). Found by bisection to 1e-6; exact power at each step."""
    n = design.look_points()
    c, _ = efficacy_bounds(n, p0, design.alpha, design.spending)

    def power(p1: float) -> float:
        return futility_bounds(n, c, p0, design.alpha, design.spending, p1, design.beta, design.beta_spending)[1]

    hi = 1.0 - 1e-9
    if power(hi) < design.power:
        return None
    lo = p0
    while hi - lo > 1e-6:
        mid = (lo + hi) / 2.0
        lo, hi = (lo, mid) if power(mid) >= design.power else (mid, hi)
    return hi


class TruncatedThreshold:
    """One policy against a threshold T, truncated at ``design.cap`` outcomes.

    ``side="above"``: claim "the success rate is above T" (H0: p <= T); ``"below"``: claim "below
    T" (H0: p >= T, the same test on the failures). Fed successes in episode order, like
    :class:`~fasteval.types.sequential.rules.StopMonitor`: ``feed(values)`` returns the number of
    outcomes at which the run stops (a claim, or futility), else None; after a stop it ignores
    further values. Attributes read after a stop: ``n`` (outcomes used: the stop's k), ``reason``
    (``"rule"``: the claim holds; ``"futility"``; ``"cap"``: the last look, no claim),
    ``fired`` (the claim holds), ``stopped``.

    Bounds (arrays over the looks): ``looks`` (outcome counts), ``c`` (events needed to claim),
    ``f`` (events at or below which the run stops for futility; -1: none); events are successes
    for ``above``, failures for ``below``. ``alpha_spent``: the exact type-I error at p = T.
    """

    def __init__(self, threshold: float, side: str, design: TruncatedDesign):
        if side not in ("above", "below"):
            raise ValueError(f"truncated threshold: side must be 'above' or 'below', got {side!r}.")
        if not 0.0 < float(threshold) < 1.0:
            raise ValueError(f"truncated threshold: T must lie in (0, 1), got {threshold!r}.")
        self.threshold, self.side, self.design = float(threshold), side, design
        self.p0 = self.threshold if side == "above" else 1.0 - self.threshold
        self.looks = design.look_points()
        self.c, self.alpha_spent = efficacy_bounds(self.looks, self.p0, design.alpha, design.spending)
        self.p1 = implied_alternative(self.p0, design) if design.futility else None
        if self.p1 is not None:
            self.f, self.power_at_p1 = futility_bounds(self.looks, self.c, self.p0, design.alpha, design.spending,
                                                       self.p1, design.beta, design.beta_spending)
        else:
            self.f, self.power_at_p1 = np.full(self.looks.size, -1), math.nan
            self.f[-1] = self.c[-1] - 1
        self.rule = StopRule(f"{side}={self.threshold:g}", "success", side, self.threshold)
        self.n = 0
        self.events = 0
        self._j = 0
        self.reason: str | None = None
        self._seen: list[tuple[int, int, int, int]] = []

    @classmethod
    def from_rule(cls, rule: Any, cap: int, confidence: float = 0.95, **design: Any) -> "TruncatedThreshold":
        """The design for a ``--stop-when above=T`` / ``below=T`` rule on success with cap ``-n``, at
        the rule's meaning of ``confidence``: a false claim in at most ``(1 - confidence) / 2`` of runs."""
        parsed = parse_stop_rule(rule)
        if parsed.metric != "success" or parsed.kind not in ("above", "below"):
            raise ValueError(f"--stop-when {parsed.text}: a truncated design tests a success rate against a threshold "
                             f"(above=T or below=T); this rule keeps the anytime-valid sequence.")
        return cls(parsed.value, parsed.kind, TruncatedDesign(cap, (1.0 - confidence) / 2.0, **design))

    @property
    def cap(self) -> int:
        return self.design.cap

    @property
    def stopped(self) -> bool:
        return self.reason is not None

    @property
    def fired(self) -> bool:
        return self.reason == "rule"

    @property
    def implied_success_rate(self) -> float | None:
        """The success rate the cap is sized for (``design.power`` to claim), None without one."""
        if self.p1 is None:
            return None
        return self.p1 if self.side == "above" else 1.0 - self.p1

    def _events(self, values: Any) -> np.ndarray:
        x = np.asarray(values, dtype=bool).reshape(-1)
        return x if self.side == "above" else ~x

    def feed(self, values: Any) -> int | None:
        if self.stopped:
            return None
        e = self._events(values)[: max(0, self.design.cap - self.n)]
        if e.size == 0:
            return None
        counts = self.events + np.cumsum(e)
        end = self.n + e.size
        while self._j < self.looks.size and self.looks[self._j] <= end:
            j = self._j
            nj = int(self.looks[j])
            s = int(counts[nj - self.n - 1])
            self._seen.append((nj, s, int(self.c[j]), int(self.f[j])))
            self._j += 1
            if s >= self.c[j] or s <= self.f[j]:
                self.reason = "rule" if s >= self.c[j] else ("cap" if j == self.looks.size - 1 else "futility")
                self.n, self.events = nj, s
                return nj
        self.n, self.events = end, int(counts[-1])
        return None

    def finish(self) -> int | None:
        """The run ended (no more outcomes will come) before the cap with ``n`` outcomes past the
        last look: a last look at ``n`` spends what is left of alpha (the earlier looks keep their
        bounds). Returns n if that look claims; otherwise the run ends at the cap rule: no claim."""
        if self.stopped or self.n == 0 or (self._j and self.looks[self._j - 1] == self.n):
            if not self.stopped and self.n:
                self.reason = "cap"
            return None
        n = np.concatenate([self.looks[: self._j], [self.n]])
        t = np.concatenate([self.looks[: self._j] / self.design.cap, [1.0]])
        c, _ = efficacy_bounds(n, self.p0, self.design.alpha, self.design.spending, t)
        self._seen.append((self.n, self.events, int(c[-1]), int(c[-1]) - 1))
        self.reason = "rule" if self.events >= c[-1] else "cap"
        return self.n if self.fired else None

    def operating(self, success_rate: float) -> dict[str, Any]:
        """Exact operating characteristics at a true success rate (P(claim), P(futility stop),
        expected and maximum outcomes), by the recursion of :mod:`.group_sequential`."""
        p = success_rate if self.side == "above" else 1.0 - success_rate
        out = operating(self.looks, self.c, self.f, p)
        out["success_rate"] = success_rate
        return out

    def bounds(self) -> dict[str, list[int]]:
        """The bounds per look in successes: claim ``above`` at >= ``claim``, stop for futility at
        <= ``futile`` (``below``: claim at <= ``claim`` successes, futility at >= ``futile``)."""
        if self.side == "above":
            return {"n": self.looks.tolist(), "claim": self.c.tolist(), "futile": self.f.tolist()}
        return {"n": self.looks.tolist(), "claim": (self.looks - self.c).tolist(), "futile": (self.looks - self.f).tolist()}

    def summary(self) -> dict[str, Any]:
        """The design's part of a ``stopping`` block: which design decided, on what, and why
        (``confidence`` is the two-sided reading ``1 - 2 alpha`` that ``from_rule`` inverts). It
        carries no interval: the betting confidence sequence, run on the same outcomes, stays a
        valid interval at whatever k this design stopped (it holds at every stopping time)."""
        successes = self.events if self.side == "above" else self.n - self.events
        return {
            "design": DESIGN_NAME, "method": self.design.describe(), "rule": self.rule.text, "metric": "success",
            "confidence": 1.0 - 2.0 * self.design.alpha,
            "threshold": self.threshold, "decision": self.side if self.fired else None,
            "cap": self.design.cap, "alpha": self.design.alpha, "alpha_spent": self.alpha_spent,
            "k": self.n, "successes": successes, "estimate": successes / self.n if self.n else math.nan,
            "reason": self.reason or "incomplete", "fired": self.fired,
            "implied_success_rate": self.implied_success_rate, "power_at_implied": self.power_at_p1,
            "valid_until": self.design.cap,
            "looks": [{"n": n, "events": s, "claim_at": c, "futile_at": f} for n, s, c, f in self._seen],
            "bounds": self.bounds(),
        }


class TruncatedPaired:
    """B against A on paired episodes, truncated at ``design.cap`` pairs; ``design.alpha`` per side.

    Fed like :class:`~fasteval.types.sequential.eprocess.PairedEProcess`: ``update(y)`` with one
    entry per pair in index order (1: only B succeeded, 0: only A did, NaN: concordant, or no
    outcome); returns the pair count at which it stops (a decision or futility), else None.
    ``decision``: +1 (B better), -1 (B worse), 0 (none: futility, the cap, or not yet);
    ``reason``: ``"rule"``, ``"futility"``, ``"cap"``, or None while running.

    At look j with D discordant pairs of which S are B's: "better" when ``S >= c_j``, "worse"
    when ``D - S >= c_j`` (the same bound: under the null both counts are the same fair-coin
    walk), futility when ``S <= f_j`` and ``D - S <= f_j``. ``c_j``, ``f_j`` are computed at the
    look, from the discordant counts of looks 1..j (see the module docstring). ``theta1``: B's
    share of discordant pairs the futility bound is sized for; None: implied by the cap (from
    the discordance of the first look that saw :data:`FUTILITY_MIN_DISCORDANT` discordant
    pairs, or of the first look past half the cap, projected to the cap; no futility stop before
    that look).
    """

    def __init__(self, design: TruncatedDesign, theta1: float | None = None):
        self.design = design
        self.looks = design.look_points()
        self._t = self.looks / design.cap
        self._theta_given = theta1
        self.theta1 = theta1
        self._exact = OneSidedExact(0.5, design.alpha, design.spending)
        self._futile: OneSidedExact | None = None
        self._increments: list[int] = []
        self.n_pairs = 0
        self.n_discordant = 0
        self.b_wins = 0
        self._j = 0
        self.decision = 0
        self.reason: str | None = None
        self._seen: list[tuple[int, int, int, int, int]] = []
        self.n_discordant_at_last_look = 0
        if theta1 is not None and design.futility:
            self._start_futility(theta1)

    @property
    def verdict(self) -> str | None:
        return {1: "better", -1: "worse"}.get(self.decision)

    @property
    def stopped(self) -> bool:
        return self.reason is not None

    @property
    def alpha_spent(self) -> float:
        """The exact type-I error per side spent so far, given the discordant counts seen."""
        return self._exact.spent

    def _start_futility(self, theta1: float) -> None:
        self.theta1 = theta1
        self._futile = OneSidedExact(0.5, self.design.alpha, self.design.spending, theta1, self.design.beta,
                                     self.design.beta_spending)
        for j, m in enumerate(self._increments):  # replay the looks already taken (their bounds are unchanged)
            self._futile.look(m, self._t[j], last=False)

    def _look(self, j: int, d: int, s: int) -> int | None:
        m = d - self.n_discordant_at_last_look
        last = j == self.looks.size - 1
        c, _ = self._exact.look(m, self._t[j], last)
        if (self._futile is None and self.design.futility and self._theta_given is None and d > 0
                and (d >= FUTILITY_MIN_DISCORDANT or 2 * self.looks[j] >= self.design.cap)):
            expected = max(1, int(round(d * self.design.cap / self.looks[j])))
            theta1 = implied_alternative(0.5, dataclasses.replace(self.design, cap=expected))
            if theta1 is not None:
                self._start_futility(theta1)
        f = -1
        if self._futile is not None:
            c1, f = self._futile.look(m, self._t[j], last)
            assert c1 == c
        self._increments.append(m)
        self.n_discordant_at_last_look = d
        if last:
            f = c - 1
        self._seen.append((int(self.looks[j]), d, s, int(c), int(f)))
        if s >= c or d - s >= c:
            self.decision = 1 if s - (d - s) > 0 else -1
            self.reason = "rule"
        elif last:
            self.reason = "cap"
        elif s <= f and d - s <= f:
            self.reason = "futility"
        return int(self.looks[j]) if self.reason else None

    def update(self, y: Any) -> int | None:
        if self.stopped:
            return None
        ys = np.asarray(y, dtype=np.float64).reshape(-1)[: max(0, self.design.cap - self.n_pairs)]
        if ys.size == 0:
            return None
        bad = ~np.isnan(ys) & (ys != 0.0) & (ys != 1.0)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"paired values: expected 1 (only B succeeded), 0 (only A) or NaN, got {ys[i]!r} at {i}.")
        disc = self.n_discordant + np.cumsum(~np.isnan(ys))
        wins = self.b_wins + np.cumsum(ys == 1.0)
        end = self.n_pairs + ys.size
        while self._j < self.looks.size and self.looks[self._j] <= end:
            j = self._j
            i = int(self.looks[j]) - self.n_pairs - 1
            self._j += 1
            hit = self._look(j, int(disc[i]), int(wins[i]))
            if hit is not None:
                self.n_pairs, self.n_discordant, self.b_wins = hit, int(disc[i]), int(wins[i])
                return hit
        self.n_pairs, self.n_discordant, self.b_wins = end, int(disc[-1]), int(wins[-1])
        return None

    def summary(self) -> dict[str, Any]:
        """The design's part of the live comparison's ``sequential`` block."""
        return {
            "design": DESIGN_NAME, "method": self.design.describe() + ", on discordant pairs (conditional exact McNemar)",
            "cap": self.design.cap, "alpha_per_side": self.design.alpha, "alpha_spent_per_side": self.alpha_spent,
            "k": self.n_pairs, "n_discordant": self.n_discordant, "b_wins": self.b_wins,
            "a_wins": self.n_discordant - self.b_wins, "decision": self.verdict,
            "reason": self.reason or "incomplete", "theta1": self.theta1, "valid_until": self.design.cap,
            "looks": [{"n": n, "discordant": d, "b_wins": s, "decide_at": c, "futile_at": f} for n, d, s, c, f in self._seen],
        }


def decided_by(design: TruncatedDesign) -> str:
    """The words a report uses for a truncated design that decided a run."""
    looks = design.look_points()
    step = f"every {looks[0]} episodes" if looks.size > 1 and np.all(np.diff(looks) == looks[0]) else "at fixed counts"
    return (f"truncated design, valid up to -n {design.cap} ({looks.size} looks {step}, exact binomial bounds, "
            f"{design.spending.label()} alpha spending" + (", non-binding futility" if design.futility else "") + ")")


class TruncatedStopMonitor:
    """``--stop-when above=T`` / ``below=T`` with ``--design truncated``, as a monitor for
    :class:`~fasteval.types.sequential.rules.PrefixGate` (``feed``, ``n``, ``stopped``, ``fired``, ``cap``,
    ``rule``, ``finish``, ``summary``).

    The :class:`TruncatedThreshold` decides (a claim, futility, or the cap). Beside it, on exactly the
    same outcomes, the betting confidence sequence runs without deciding anything
    (:class:`~fasteval.types.sequential.rules.StopMonitor` with ``decides=False``): it gives the interval
    of the run at its stop, valid there whatever decided the stop, and the trajectory for plots. Both
    read outcomes in index order and are chunk-invariant, so the stop k and every number are the same
    at any batch size. The summary is the ``stopping`` block of an anytime run (the same keys) with the
    design's facts: ``design: "truncated"``, ``decided_by``, ``alpha_spent``, ``valid_until``, the looks
    taken and the bounds.
    """

    def __init__(self, rule: Any, confidence: float = 0.95, cap: int | None = None):
        from fasteval.types.sequential.rules import StopMonitor

        if cap is None:
            raise ValueError("--design truncated: the design spends its error by the cap, so it needs -n (the cap).")
        self.design = TruncatedThreshold.from_rule(rule, cap, confidence)
        self.interval = StopMonitor(rule, confidence, None, cap, decides=False)
        self.rule = self.interval.rule
        self.confidence = self.interval.confidence
        self.cap = int(cap)
        self.return_bounds = None

    @property
    def n(self) -> int:
        return self.design.n

    @property
    def stopped(self) -> bool:
        return self.design.stopped

    @property
    def fired(self) -> bool:
        return self.design.fired

    def feed(self, values: Any) -> int | None:
        x = np.asarray(values, dtype=bool).reshape(-1)
        before = self.design.n
        hit = self.design.feed(x)
        self.interval.feed(x[: self.design.n - before])  # the outcomes the design used, no more
        return hit

    def finish(self) -> int | None:
        """Every episode up to the cap has finished (some failed for good, so fewer outcomes than the
        cap): the design's last look at what it has (:meth:`TruncatedThreshold.finish`)."""
        return self.design.finish()

    def summary(self) -> dict[str, Any]:
        out = self.interval.summary()
        d = self.design.summary()
        out.update(
            design=DESIGN_NAME, decided_by=decided_by(self.design.design), method=d["method"],
            interval_method=out["method"], reason=d["reason"], fired=d["fired"], decision=d["decision"],
            k=d["k"], alpha=d["alpha"], alpha_spent=d["alpha_spent"], valid_until=d["valid_until"],
            implied_success_rate=d["implied_success_rate"], power_at_implied=d["power_at_implied"],
            looks=d["looks"], bounds=d["bounds"])
        out["decision_bound"] = decision_bound(d)
        out["interval_note"] = ("the anytime-valid interval holds at any stop and is wider than the design's test, "
                                "which decided (decision_bound)") if d["fired"] else None
        return out


def decision_bound(d: dict[str, Any]) -> str | None:
    """The design's exact bound at the look that decided, in words: ``31 successes of 33, at or above the
    design's bound of 30 at this look (alpha spent 0.0241)``; None when no look decided a claim."""
    if not d.get("fired") or not d.get("looks"):
        return None
    look = d["looks"][-1]
    n, side = look["n"], d["decision"]
    successes = d["successes"]
    claim = d["bounds"]["claim"][[b for b in d["bounds"]["n"]].index(n)] if n in d["bounds"]["n"] else None
    if claim is None:  # a last look at fewer outcomes than planned (finish): its own bound
        claim = look["claim_at"] if side == "above" else n - look["claim_at"]
    where = "at or above" if side == "above" else "at or below"
    return (f"{successes} successes of {n}, {where} the design's exact bound of {claim} at this look "
            f"(one-sided alpha spent {d['alpha_spent']:.4g})")
