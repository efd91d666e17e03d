"""``--stop-when`` rules, ``--return-bounds``, and the monitors that find where a run stops.

Rules (``parse_stop_rule``):

=====================  ====================================================================
``ci<=EPS``            the success rate's confidence sequence has half-width <= EPS (a rate)
``above=T``            the success rate is decided above T (the sequence's lower bound > T), or
                       surely not above T (its upper bound < T: a futility stop, no claim of above)
``below=T``            the success rate is decided below T (its upper bound < T), or surely not
                       below T (its lower bound > T: futility)
``return:ci<=E``       the same for the mean return, E in return units (needs --return-bounds)
``return:above=T``     the mean return is decided above T
``return:below=T``     the mean return is decided below T
``decided``            comparisons only: the paired e-process says B is better or worse
=====================  ====================================================================

:class:`StopMonitor` feeds one task's outcomes, in episode-index order, to the betting
confidence sequence and reports the first prefix length k at which the rule holds.
:class:`PrefixGate` takes finished episodes in *any* order, keeps them until every smaller index
has finished, and feeds the monitor only that contiguous prefix: k, and so the reported set
``0..k-1``, cannot depend on batch size, vectorization, pipelining or finishing order.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from fasteval.types.sequential.betting import BettingCS, check_confidence

METRICS = ("success", "return")
KINDS = ("ci", "above", "below", "decided")
METHOD = "betting confidence sequence (Waudby-Smith & Ramdas 2024, hedged capital, predictable plug-in bets)"
_RULE = re.compile(r"^(?:(?P<metric>success|return):)?(?:(?P<ci>ci)\s*<=\s*|(?P<side>above|below)\s*=\s*)(?P<value>[^\s]+)$")
TRAJECTORY_POINTS = 500
DECIDED_BY = "anytime-valid betting confidence sequence (valid at every n, however long the run goes on)"
_EXAMPLES = "ci<=0.05, above=0.8, below=0.8, return:ci<=5, return:above=100, return:below=100"


def thin(n: int, points: int = TRAJECTORY_POINTS) -> np.ndarray:
    """At most ``points`` indices of ``0..n-1``, evenly spread, always with the first and last."""
    if n <= points:
        return np.arange(n)
    return np.unique(np.round(np.linspace(0, n - 1, points)).astype(np.int64))


@dataclass(frozen=True)
class StopRule:
    """A parsed rule. ``value``: EPS (``ci``), T (``above``/``below``), None (``decided``)."""

    text: str
    metric: str
    kind: str
    value: float | None = None

    @property
    def needs_return_bounds(self) -> bool:
        return self.metric == "return"

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.text, "metric": self.metric, "kind": self.kind, "value": self.value}


def parse_stop_rule(text: Any, allow_decided: bool = False) -> StopRule:
    """``text`` -> :class:`StopRule`, or a ValueError that lists the accepted forms."""
    if isinstance(text, StopRule):
        return text
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"--stop-when: expected a rule such as {_EXAMPLES}, got {text!r}.")
    raw = text.strip()
    if raw == "decided":
        if not allow_decided:
            raise ValueError("--stop-when decided: 'decided' is for `fasteval compare` (two policies); for one "
                             f"policy use a rule such as {_EXAMPLES}.")
        return StopRule(raw, "paired", "decided")
    match = _RULE.match(raw)
    if match is None:
        forms = _EXAMPLES + (", decided" if allow_decided else "")
        raise ValueError(f"--stop-when: cannot read {raw!r}; expected one of the forms {forms}.")
    metric = match["metric"] or "success"
    kind = "ci" if match["ci"] else match["side"]
    try:
        value = float(match["value"])
    except ValueError:
        raise ValueError(f"--stop-when {raw}: {match['value']!r} is not a number.") from None
    if not math.isfinite(value):
        raise ValueError(f"--stop-when {raw}: expected a finite number, got {match['value']!r}.")
    if kind == "ci" and value <= 0:
        raise ValueError(f"--stop-when {raw}: the half-width must be > 0, e.g. ci<=0.05.")
    if metric == "success" and kind == "ci" and value >= 0.5:
        raise ValueError(f"--stop-when {raw}: a success-rate half-width is a fraction below 0.5 (ci<=0.05 "
                         f"is +-5 points), got {value:g}.")
    if metric == "success" and kind != "ci" and not 0.0 < value < 1.0:
        raise ValueError(f"--stop-when {raw}: a success-rate threshold is a fraction in (0, 1) (above=0.8 "
                         f"is 80%), got {value:g}.")
    return StopRule(raw, metric, kind, value)


def parse_return_bounds(value: Any) -> tuple[float, float] | None:
    """``"LO,HI"`` (or a pair) -> ``(LO, HI)`` with LO < HI; None stays None."""
    if value is None:
        return None
    parts = value.split(",") if isinstance(value, str) else list(value)
    try:
        lo, hi = (float(p) for p in parts)
    except (TypeError, ValueError):
        raise ValueError(f"--return-bounds: expected LO,HI (two numbers, e.g. -1,1), got {value!r}.") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"--return-bounds: expected finite LO < HI, got {lo:g},{hi:g}.")
    return (lo, hi)


def check_rule_setup(rule: StopRule, return_bounds: tuple[float, float] | None) -> None:
    """Raise ValueError when a return rule has no bounds, or its threshold lies outside them."""
    if rule.metric != "return":
        return
    if return_bounds is None:
        raise ValueError(f"--stop-when {rule.text}: a mean-return rule needs --return-bounds LO,HI (the smallest "
                         f"and largest possible episode return), so that its interval is valid.")
    lo, hi = return_bounds
    if rule.kind in ("above", "below") and not lo < rule.value < hi:
        raise ValueError(f"--stop-when {rule.text}: the threshold must lie inside --return-bounds {lo:g},{hi:g}.")


class StopMonitor:
    """One task's confidence sequence and rule, fed outcomes in episode order.

    ``feed(values)`` takes the next outcomes (successes as booleans, or episode returns) and
    returns the number of outcomes at which the rule first held, or None. After that it ignores
    further values, so ``n``, ``estimate`` and the bounds stay those at the stop.
    """

    def __init__(self, rule: StopRule | str, confidence: float = 0.95, return_bounds: Any = None, cap: int | None = None,
                 decides: bool = True):
        self.rule = parse_stop_rule(rule)
        self.decides = bool(decides)
        """False: the sequence only gives the interval and never stops the run (another design decides)."""
        self.return_bounds = parse_return_bounds(return_bounds)
        check_rule_setup(self.rule, self.return_bounds)
        self.confidence = check_confidence(confidence)
        self.cap = cap
        self.cs = BettingCS(self.confidence)
        self.fired = False
        self.futile = False
        """``above=T`` / ``below=T``: the run stopped because the interval lies wholly on the other side of T
        ("surely not above T"): a futility stop. The sequence holds at every stopping time, so this stop is as
        valid as the rule's, and the interval at it still covers the mean with probability >= confidence."""
        self._lows: list[np.ndarray] = []
        self._highs: list[np.ndarray] = []
        self._sums: list[np.ndarray] = []
        """Running sums of the outcomes (in the unit scale), one per outcome: the estimate's path."""

    @property
    def n(self) -> int:
        return self.cs.n

    @property
    def stopped(self) -> bool:
        """The run stops at ``n``: the rule fired, or (``above``/``below``) it surely cannot (futility)."""
        return self.fired or self.futile

    def _unit(self, values: Any) -> np.ndarray:
        if self.rule.metric == "success":
            return np.asarray(values, dtype=bool).reshape(-1).astype(np.float64)
        lo, hi = self.return_bounds
        r = np.asarray(values, dtype=np.float64).reshape(-1)
        bad = ~((r >= lo) & (r <= hi))
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"--return-bounds {lo:g},{hi:g}: the episode return {r[i]!r} (outcome {self.n + i} of "
                             f"this task) lies outside them; the interval would not be valid. Rerun with bounds "
                             f"that cover every possible return.")
        return (r - lo) / (hi - lo)

    def _futile(self, low: np.ndarray, high: np.ndarray) -> np.ndarray:
        """``above=T``: the upper bound below T ("surely not above"); ``below=T``: the lower bound above T."""
        if not self.decides or self.rule.kind not in ("above", "below"):
            return np.zeros(low.shape, dtype=bool)
        threshold = self._to_unit(self.rule.value)
        return high < threshold if self.rule.kind == "above" else low > threshold

    def _holds(self, low: np.ndarray, high: np.ndarray) -> np.ndarray:
        if not self.decides:
            return np.zeros(low.shape, dtype=bool)
        scale = 1.0 if self.rule.metric == "success" else self.return_bounds[1] - self.return_bounds[0]
        if self.rule.kind == "ci":
            return (high - low) / 2.0 * scale <= self.rule.value
        threshold = self._to_unit(self.rule.value)
        return low > threshold if self.rule.kind == "above" else high < threshold

    def _to_unit(self, value: float) -> float:
        if self.rule.metric == "success":
            return value
        lo, hi = self.return_bounds
        return (value - lo) / (hi - lo)

    def _from_unit(self, value: float) -> float:
        if self.rule.metric == "success":
            return value
        lo, hi = self.return_bounds
        return lo + value * (hi - lo)

    def feed(self, values: Any) -> int | None:
        if self.stopped:
            return None
        x = self._unit(values)
        if self.cap is not None:
            x = x[: max(0, self.cap - self.n)]
        start = self.n
        for begin in range(0, x.size, 256):  # fold in pieces, so a stop needs no refold
            part = x[begin:begin + 256]
            saved = copy.copy(self.cs)  # its arrays are replaced on update, never changed in place
            low, high = self.cs.update(part)
            holds = self._holds(low, high)
            futile = self._futile(low, high)
            if holds.any() or futile.any():
                j = int(np.argmax(holds | futile))
                self.cs = saved
                low, high = self.cs.update(part[: j + 1])
                self._lows.append(low)
                self._highs.append(high)
                self._add_sums(part[: j + 1])
                self.fired = bool(holds[j])
                self.futile = not self.fired
                return start + begin + j + 1
            self._lows.append(low)
            self._highs.append(high)
            self._add_sums(part)
        return None

    def _add_sums(self, part: np.ndarray) -> None:
        before = self._sums[-1][-1] if self._sums and self._sums[-1].size else 0.0
        self._sums.append(before + np.cumsum(part))

    def trajectory(self, points: int = TRAJECTORY_POINTS) -> dict[str, list[float]]:
        """The bounds and the estimate (the mean of the first k outcomes) after each outcome, thinned
        to at most ``points`` (the last one always kept)."""
        lows = np.concatenate(self._lows) if self._lows else np.zeros(0)
        highs = np.concatenate(self._highs) if self._highs else np.zeros(0)
        sums = np.concatenate(self._sums) if self._sums else np.zeros(0)
        keep = thin(lows.size, points)
        return {"k": (keep + 1).tolist(), "cs_low": [self._from_unit(v) for v in lows[keep]],
                "cs_high": [self._from_unit(v) for v in highs[keep]],
                "estimate": [self._from_unit(v) for v in sums[keep] / (keep + 1)]}

    def summary(self) -> dict[str, Any]:
        """This task's ``stopping`` block (see docs/how-many-episodes.md); the engine adds ``k`` (in
        episode indices), ``computed_past_stop`` and ``n_cancelled``."""
        low, high = self._from_unit(self.cs.lower), self._from_unit(self.cs.upper)
        decision = None
        if self.fired and self.rule.kind in ("above", "below"):
            decision = self.rule.kind
        elif self.futile:
            decision = "not_" + self.rule.kind
        return {
            "rule": self.rule.text, "metric": self.rule.metric, "confidence": self.confidence,
            "return_bounds": list(self.return_bounds) if self.return_bounds else None,
            "cap": self.cap, "k": self.n,
            "reason": "rule" if self.fired else "futility" if self.futile else (
                "cap" if self.cap is not None and self.n >= self.cap else "incomplete"),
            "fired": self.fired,
            "estimate": self._from_unit(self.cs.mean) if self.n else math.nan,
            "cs_low": low, "cs_high": high, "half_width": (high - low) / 2.0,
            "decision": decision,
            "threshold": self.rule.value if self.rule.kind in ("above", "below") else None,
            "epsilon": self.rule.value if self.rule.kind == "ci" else None,
            "method": METHOD,
            "design": "anytime",
            "decided_by": DECIDED_BY,
            "trajectory": self.trajectory(),
        }


class PrefixGate:
    """Finished episodes in any order in, the contiguous index prefix out, to a :class:`StopMonitor`
    (or any monitor with its ``feed``/``n``/``stopped``/``cap``/``summary``, such as
    :class:`~fasteval.types.sequential.truncated.TruncatedThreshold`).

    ``add(ixs, values)``: episode indices (relative to the task's first, 0-based) and their
    outcomes; ``None`` for an episode that failed for good (it counts as finished and carries no
    outcome). Returns k (indices ``0..k-1`` are the reported set) the first time the rule holds,
    else None. Episodes that arrive at or past k after the stop are listed in ``past_stop``.

    ``min_feed``: prefix outcomes are handed to the monitor ``min_feed`` at a time (and by
    :meth:`flush`), to bound the per-call cost. k does not depend on it (the monitor's numbers are
    the same for any chunking); only how soon a stop is seen, so how much runs past it, does.
    """

    def __init__(self, monitor: StopMonitor, first_index: int = 0, min_feed: int = 1):
        self.monitor = monitor
        self.next_index = first_index
        self.min_feed = max(1, int(min_feed))
        self._waiting: dict[int, Any] = {}
        self._run_ix: list[int] = []
        self._run_vals: list[Any] = []
        self.k: int | None = None
        self.past_stop: list[int] = []
        self.n_failed = 0
        """Episodes of the prefix that failed for good (no outcome)."""

    @property
    def stopped(self) -> bool:
        return self.k is not None

    def add(self, ixs: Any, values: Any) -> int | None:
        for ix, value in zip(ixs, values):
            ix = int(ix)
            if self.k is not None:
                if ix >= self.k:
                    self.past_stop.append(ix)
                continue
            self._waiting[ix] = value
        if self.k is not None:
            return None
        while self.next_index in self._waiting:
            self._run_ix.append(self.next_index)
            self._run_vals.append(self._waiting.pop(self.next_index))
            self.next_index += 1
        return self.flush() if len(self._run_ix) >= self.min_feed else None

    def flush(self) -> int | None:
        """Hand the buffered prefix outcomes to the monitor now; k if the rule fired."""
        run_ix, run_vals = self._run_ix, self._run_vals
        if self.k is not None or not run_ix:
            return None
        self._run_ix, self._run_vals = [], []
        present = [v is not None for v in run_vals]
        values = [v for v in run_vals if v is not None]
        seen = self.monitor.n
        hit = self.monitor.feed(values) if values else None
        if hit is None:
            self.n_failed += present.count(False)
            return None
        # hit outcomes were used: the stop is at the index of the hit-th outcome (+1)
        count = seen
        for ix, has in zip(run_ix, present):
            count += has
            if has and count == hit:
                self.k = ix + 1
                break
        self.n_failed += sum(1 for ix, has in zip(run_ix, present) if not has and ix < self.k)
        self.past_stop.extend([ix for ix in run_ix if ix >= self.k] + sorted(self._waiting))
        self._waiting.clear()
        return self.k

    def summary(self, n_cancelled: int = 0) -> dict[str, Any]:
        """The task's ``stopping`` block: the monitor's, with ``k`` in episode indices."""
        self.flush()
        out = self.monitor.summary()
        k = self.k if self.k is not None else self.next_index
        cap = self.monitor.cap
        out["k"] = k
        if not self.monitor.stopped:
            out["reason"] = "cap" if cap is not None and k >= cap else "incomplete"
        out["n_failed_in_prefix"] = self.n_failed
        out["computed_past_stop"] = sorted(set(self.past_stop))
        out["n_computed_past_stop"] = len(out["computed_past_stop"])
        out["n_cancelled"] = int(n_cancelled)
        return out


def overall_stopping(blocks: list[dict[str, Any]], outcomes: list[Any]) -> dict[str, Any]:
    """The overall ``stopping`` block of a run from its per-task blocks and each task's reported
    outcomes (successes, or returns for ``return:`` rules, of episodes ``0..k-1`` in index order).

    The bounds are simultaneous bounds on the mean over tasks of the task means: each task's
    sequence rerun at confidence ``1 - (1 - confidence) / n_tasks`` (Bonferroni; one task: its
    own bounds), averaged. With probability >= confidence every task's mean lies in its widened
    interval at its stop, so their average lies in the average interval.
    """
    if not blocks:
        raise ValueError("overall_stopping: expected at least one task block.")
    first = blocks[0]
    n = len(blocks)
    confidence = first["confidence"]
    if n == 1:
        low, high, estimate = first["cs_low"], first["cs_high"], first["estimate"]
    else:
        widened = 1.0 - (1.0 - confidence) / n
        lows, highs = [], []
        for block, values in zip(blocks, outcomes):
            monitor = StopMonitor(block["rule"], widened, block["return_bounds"])
            monitor.cs.update(monitor._unit(values)) if len(values) else None
            lows.append(monitor._from_unit(monitor.cs.lower))
            highs.append(monitor._from_unit(monitor.cs.upper))
        low, high = float(np.mean(lows)), float(np.mean(highs))
        estimate = float(np.mean([b["estimate"] for b in blocks]))
    n_fired = sum(bool(b["fired"]) for b in blocks)
    return {
        "rule": first["rule"], "metric": first["metric"], "confidence": confidence,
        "return_bounds": first["return_bounds"], "cap": first["cap"],
        "k": int(sum(b["k"] for b in blocks)), "n_tasks": n, "n_fired": n_fired, "n_capped": n - n_fired,
        "reason": _overall_reason([b["reason"] for b in blocks]),
        "estimate": estimate, "cs_low": low, "cs_high": high,
        "n_computed_past_stop": int(sum(b["n_computed_past_stop"] for b in blocks)),
        "n_cancelled": int(sum(b["n_cancelled"] for b in blocks)),
        "design": first.get("design", "anytime"), "decided_by": first.get("decided_by", DECIDED_BY),
        # a run at its cap may go on with a larger -n, unless a truncated design decided: it is valid up to its cap only
        "resumable": any(b["reason"] == "cap" for b in blocks) and first.get("design", "anytime") != "truncated",
        **({"trajectory": first["trajectory"]} if n == 1 and "trajectory" in first else {}),
    }


def _overall_reason(reasons: list[str]) -> str:
    """One word for the tasks' reasons: theirs when they agree, ``incomplete`` when some task has not
    finished (an interrupted or failed run), else ``mixed`` (some stopped by the rule, some at the cap)."""
    if len(set(reasons)) == 1:
        return reasons[0]
    return "incomplete" if "incomplete" in reasons else "mixed"
