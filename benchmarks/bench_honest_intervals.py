"""Intervals that hold for how the run stopped (issue 31, docs/how-many-episodes.md).

Three checks, printed as the Markdown of benchmarks/RESULTS.md's "Intervals that hold for how the run
stopped" section:

* **the interval of a stopped run**: ``--stop-when above=0.8`` on a true rate of 0.82 (``--runs``
  simulated runs through :class:`~fasteval.types.sequential.StopMonitor` and
  :func:`~fasteval.types.sequential.stopped.sequence_bounds` themselves): the share of runs whose
  interval at the stop excludes the true rate, Wilson's against the betting confidence sequence;
* **the ``--margin`` gate at the boundary** ``p_B - p_A = -margin``: the exact rejection rate of
  :func:`~fasteval.types.noninferiority.exact_p_value` (every outcome of n pairs enumerated, the largest
  over the discordant share), beside Tango's statistic read against the normal quantile;
* **across-env success intervals**: the exact coverage of
  :func:`~fasteval.types.stratified.stratified_interval` (every outcome enumerated) over count and rate
  settings.

Everything but the first check is exact; the first is seeded. ``--tiny``: fewer runs and settings.
"""

from __future__ import annotations

import argparse
import itertools
import math
import time
from typing import Any, Callable, Sequence

import numpy as np

from fasteval.types.noninferiority import exact_p_value, tango_statistic
from fasteval.types.sequential import StopMonitor
from fasteval.types.sequential.stopped import sequence_bounds
from fasteval.types.stats import wilson_interval
from fasteval.types.stratified import stratified_interval

Z_95_ONE_SIDED = 1.6448536269514722


def stopped_run_misses(runs: int, cap: int, p: float = 0.82, threshold: float = 0.8, seed: int = 2026) -> dict[str, Any]:
    """Share of ``above=threshold`` runs (true rate ``p``, cap ``cap``) whose interval at the stop excludes ``p``."""
    rng = np.random.default_rng(seed)
    wilson = sequence = fired = 0
    for _ in range(runs):
        x = rng.random(cap) < p
        k = StopMonitor(f"above={threshold}", 0.95, cap=cap).feed(x)
        fired += k is not None
        k = k or cap
        lo, hi = wilson_interval(int(x[:k].sum()), k)
        wilson += not lo <= p <= hi
        lo, hi = sequence_bounds(x[:k], 0.95)
        sequence += not lo <= p <= hi
    return {"p": p, "runs": runs, "cap": cap, "fired": fired / runs, "wilson": wilson / runs, "sequence": sequence / runs}


def _multinomial_log(n: int) -> Callable[[int, int, float, float], float]:
    log_fact = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, n + 1)))])

    def log_p(b: int, c: int, qb: float, qc: float) -> float:
        return (log_fact[n] - log_fact[b] - log_fact[c] - log_fact[n - b - c] + b * math.log(qb)
                + (c * math.log(qc) if c else 0.0) + (n - b - c) * math.log1p(-(qb + qc)))
    return log_p


def boundary_size(n: int, margin: float, rejects: Sequence[tuple[int, int]], shares: Sequence[float]) -> float:
    """The largest probability of the rejection region ``rejects`` ((b, c) pair counts) over the boundary
    nulls with discordant share in ``shares``."""
    log_p = _multinomial_log(n)
    return max(sum(math.exp(log_p(b, c, (s + margin) / 2, (s - margin) / 2)) for b, c in rejects) for s in shares)


def gate_rows(settings: Sequence[tuple[int, float]], shares: int) -> list[dict[str, Any]]:
    rows = []
    for n, margin in settings:
        grid = np.linspace(margin + 1e-3, 0.999, shares)
        pairs = [(b, c) for b in range(n + 1) for c in range(n + 1 - b)]
        exact = [(b, c) for b, c in pairs if exact_p_value(b, c, n, margin)[0] <= 0.05]
        normal = [(b, c) for b, c in pairs if tango_statistic(b, c, n, margin) >= Z_95_ONE_SIDED]
        rows.append({"n": n, "margin": margin, "exact": boundary_size(n, margin, exact, grid),
                     "normal": boundary_size(n, margin, normal, grid)})
    return rows


def exact_coverage(rates: Sequence[float], counts: Sequence[int], confidence: float = 0.95) -> float:
    """P(:func:`stratified_interval` covers the mean of ``rates``), summed over every per-env outcome."""
    true = float(np.mean(rates))
    pmfs = []
    for p, n in zip(rates, counts):
        k = np.arange(n + 1)
        log_c = np.array([math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) for i in k])
        with np.errstate(divide="ignore"):
            pmfs.append(np.exp(log_c + k * np.log(p) + (n - k) * np.log1p(-p)))
    cover = 0.0
    for xs in itertools.product(*[range(n + 1) for n in counts]):
        _, lo, hi = stratified_interval(list(xs), list(counts), confidence)
        if lo <= true <= hi:
            cover += math.prod(pmf[x] for pmf, x in zip(pmfs, xs))
    return cover


COUNTS = [(10, 10), (5, 20), (8, 8, 8), (12, 4, 20), (30, 30)]
RATES = [(0.5, 0.5, 0.5), (0.1, 0.9, 0.5), (0.95, 0.99, 0.8), (0.05, 0.3, 0.7), (0.2, 0.6, 0.9)]


def markdown(stop: dict[str, Any], gates: list[dict[str, Any]], coverage: list[tuple[Any, Any, float]]) -> str:
    se = math.sqrt(stop["wilson"] * (1 - stop["wilson"]) / stop["runs"])
    lines = [f"**The interval of a stopped run** (`above=0.8`, true rate {stop['p']}, cap {stop['cap']}, "
             f"{stop['runs']} runs, {stop['fired']:.1%} stopped by the rule): Wilson's 95% interval at the stop "
             f"excluded the rate in {stop['wilson']:.1%} of runs (se {se:.1%}), the betting confidence sequence in "
             f"{stop['sequence']:.1%}.", "",
             "| n pairs, margin | exact unconditional test (the gate) | Tango's statistic read as N(0, 1) |", "|---|---|---|"]
    lines += [f"| {g['n']}, {g['margin']} | {g['exact']:.4f} | {g['normal']:.4f} |" for g in gates]
    worst = min(coverage, key=lambda row: row[2])
    lines += ["", f"Across-env interval, exact coverage over {len(coverage)} settings: at least {worst[2]:.4f} "
              f"(at counts {worst[0]}, rates {worst[1]})."]
    ok = stop["sequence"] <= 0.05 and all(g["exact"] <= 0.05 for g in gates) and worst[2] >= 0.95
    lines.append(f"{'PASS' if ok else 'FAIL'}: the sequence misses <= 0.05 at the stop, the gate's level <= 0.05, "
                 f"the across-env coverage >= 0.95.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1500, help="simulated stopped runs")
    ap.add_argument("--cap", type=int, default=1000)
    ap.add_argument("--tiny", action="store_true", help="40 runs, cap 200, one gate setting, four coverage settings")
    args = ap.parse_args(argv)
    start = time.time()
    runs, cap = (40, 200) if args.tiny else (args.runs, args.cap)
    stop = stopped_run_misses(runs, cap)
    gates = gate_rows([(15, 0.1)] if args.tiny else [(20, 0.1), (30, 0.2), (40, 0.1), (50, 0.1)],
                      25 if args.tiny else 100)
    settings = [(c, r[:len(c)]) for c in (COUNTS[:2] if args.tiny else COUNTS) for r in (RATES[:2] if args.tiny else RATES)]
    coverage = [(c, r, exact_coverage(r, c)) for c, r in settings]
    print(markdown(stop, gates, coverage))
    print(f"\n({time.time() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
