"""Simulation proofs of fasteval's anytime-valid statistics (docs/how-many-episodes.md).

Three checks, each over ``--runs`` simulated runs (10,000 by default), vectorized in NumPy (and
how often Wilson's interval, watched after every episode, misses the true rate at some look):

1. **Coverage under continuous monitoring.** The betting confidence sequence is looked at after
   every episode up to ``--horizon``; a run counts as covered when the true mean is inside at
   every look. Bernoulli p in {0.05, 0.5, 0.95} and two bounded-return distributions. Wilson's
   interval, looked at the same way, is shown beside it (it is not valid under optional stopping).
   The vectorized check reads the wealth at the true mean (the sequence excludes m exactly when
   that wealth reaches 1/alpha); a smaller batch of runs goes through ``BettingCS`` itself.
2. **Type-I error of the live paired comparison** under the null (two equally good policies):
   the e-process with early stopping (reject the first time it decides, within the cap), without
   (decide once at the cap), fixed-n McNemar at the cap, and naive McNemar peeking every 10 pairs.
3. **Savings**: average episodes to a decision, against the fixed-n test with the same error
   rates (same guaranteed type-I error, same power): p = 0.9 against the threshold 0.8 (rule
   ``above=0.8``), and A = 0.7 against B = 0.8 (the paired e-process). The sequential cap is set
   so that its power equals the target (the target-quantile of its stopping time).

Run: ``PYTHONPATH=src python benchmarks/bench_sequential.py [--runs 10000] [--json out.json]``;
``--tiny`` for the smoke test (300 runs). Pure CPU; seconds at 10,000 runs.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import command_line  # noqa: E402

from fasteval.types.sequential import BettingCS, StopMonitor  # noqa: E402
from fasteval.types.sequential.betting import DEFAULT_GRID, log_capital  # noqa: E402
from fasteval.types.sequential.eprocess import BETS, PairedEProcess, discordant_outcomes, paired_log_wealth  # noqa: E402

ALPHA = 0.05
CONFIDENCE = 1.0 - ALPHA
CHUNK = 1000
STEP_FIGURE = ("STEP (Snyder et al., RSS 2025, arXiv 2503.10966): 'reduces the number of evaluation trials by up to 40% "
               "as compared to state-of-the-art baselines' (v1 abstract; the v4 abstract says up to 32%): its baselines are "
               "other sequential tests (Lai's test, SAVI: in STEP's own package), not a fixed-n test, so the figure does not "
               "compare with the fixed-n savings above. 'Beyond Binary Success' (arXiv 2603.13616): 'up to 70% reduction in "
               "evaluation burden compared to standard batch methods and up to 50% reduction compared to state-of-the-art "
               "sequential procedures designed for binary outcomes'. benchmarks/bench_step_peers.py runs STEP, Lai and SAVI "
               "beside fasteval's tests at the same cap.")


def in_chunks(runs: int, fn: Callable[[int, np.random.Generator], np.ndarray], seed: int) -> np.ndarray:
    """``fn(size, rng)`` over blocks of at most CHUNK runs, concatenated (bounded memory)."""
    rng = np.random.default_rng(seed)
    return np.concatenate([fn(min(CHUNK, runs - s), rng) for s in range(0, runs, CHUNK)])


# -- 1. coverage --------------------------------------------------------------------------------------
def wilson_ever_excludes(x: np.ndarray, mean: float, z: float = 1.959963984540054) -> np.ndarray:
    t = np.arange(1, x.shape[1] + 1)
    phat = np.cumsum(x, axis=1) / t
    centre = (phat + z * z / (2 * t)) / (1 + z * z / t)
    half = z * np.sqrt(phat * (1 - phat) / t + z * z / (4 * t * t)) / (1 + z * z / t)
    return ((mean < centre - half) | (mean > centre + half)).any(axis=1)


def coverage_row(name: str, draw: Callable, mean: float, runs: int, horizon: int, seed: int) -> dict[str, Any]:
    def one(size, rng):
        x = draw(rng, (size, horizon))
        covered = log_capital(x, mean, CONFIDENCE).max(axis=1) < math.log(1 / ALPHA)
        return np.stack([covered, ~wilson_ever_excludes(x, mean)], axis=1)

    both = in_chunks(runs, one, seed)
    cov, wil = both[:, 0].mean(), both[:, 1].mean()
    se = math.sqrt(max(cov * (1 - cov), 1e-12) / runs)
    return {"distribution": name, "mean": mean, "runs": runs, "horizon": horizon, "coverage": float(cov),
            "coverage_se": se, "wilson_coverage": float(wil), "pass": bool(cov >= CONFIDENCE)}


WILSON_RATES = (0.05, 0.1, 0.2, 0.5, 0.8, 0.9, 0.95)


def wilson_peeking(runs: int, horizon: int) -> list[dict[str, Any]]:
    """Share of runs in which Wilson's 95% interval, looked at after every episode, excludes the
    true rate at some look (docs/how-many-episodes.md quotes it)."""
    rows = []
    for i, p in enumerate(WILSON_RATES):
        miss = in_chunks(runs, lambda size, rng, p=p: wilson_ever_excludes((rng.random((size, horizon)) < p).astype(np.float64), p),
                         100 + i)
        rows.append({"p": p, "runs": runs, "horizon": horizon, "missed_at_some_look": float(miss.mean()),
                     "se": math.sqrt(miss.mean() * (1 - miss.mean()) / runs)})
    return rows


def grid_consistency(runs: int, horizon: int, p: float, seed: int) -> dict[str, Any]:
    """``BettingCS`` (the grid, what fasteval reports) covers at least where the wealth says so."""
    rng = np.random.default_rng(seed)
    x = (rng.random((runs, horizon)) < p).astype(np.float64)
    by_wealth = log_capital(x, p, CONFIDENCE).max(axis=1) < math.log(1 / ALPHA)
    by_grid = np.empty(runs, dtype=bool)
    for r in range(runs):
        low, high = BettingCS(CONFIDENCE).update(x[r])
        by_grid[r] = bool(((low <= p) & (p <= high)).all())
    return {"runs": runs, "p": p, "grid_coverage": float(by_grid.mean()), "wealth_coverage": float(by_wealth.mean()),
            "grid_misses_where_wealth_covers": int(np.sum(by_wealth & ~by_grid))}


def coverage(runs: int, horizon: int) -> list[dict[str, Any]]:
    rows = []
    for i, p in enumerate((0.05, 0.5, 0.95)):
        rows.append(coverage_row(f"Bernoulli({p})", lambda rng, s, p=p: (rng.random(s) < p).astype(np.float64), p, runs, horizon, 10 + i))
    rows.append(coverage_row("Beta(2,5) return", lambda rng, s: rng.beta(2, 5, s), 2 / 7, runs, horizon, 20))
    bimodal_mean = 0.3 * 0.875 + 0.7 / 6

    def bimodal(rng, s):
        hit = rng.random(s) < 0.3
        u = rng.random(s)
        return np.where(hit, 0.75 + 0.25 * u, u / 3)

    rows.append(coverage_row("bimodal return", bimodal, bimodal_mean, runs, horizon, 21))
    return rows


# -- 2. type-I error of the paired comparison ---------------------------------------------------------
_TABLES: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def wealth_tables(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Success outcomes: both gamblers' log wealth after D discordant pairs of which S were B's,
    ``log mean_j (1 + lam_j/2)^S (1 - lam_j/2)^(D - S)`` (and mirrored), for all S <= D <= n.
    The closed form of ``paired_log_wealth`` on binary data (equal up to rounding; the
    consistency check below compares decisions run by run)."""
    if n not in _TABLES:
        d = np.arange(n + 1, dtype=np.float64)[:, None]
        s = np.arange(n + 1, dtype=np.float64)[None, :]
        better = worse = None
        for lam in BETS:
            win, lose = math.log1p(lam / 2), math.log1p(-lam / 2)
            up, down = s * win + (d - s) * lose, s * lose + (d - s) * win
            better = up if better is None else np.logaddexp(better, up)
            worse = down if worse is None else np.logaddexp(worse, down)
        _TABLES[n] = (better - math.log(BETS.size), worse - math.log(BETS.size))
    return _TABLES[n]


def binary_log_wealth(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``paired_log_wealth`` of paired successes ``a``, ``b`` (runs x pairs), by table lookup."""
    better, worse = wealth_tables(a.shape[1])
    disc = np.cumsum(a != b, axis=1)
    wins = np.cumsum(~a & b, axis=1)
    return better[disc, wins], worse[disc, wins]


def mcnemar_exact_p(only_b: np.ndarray, discordant: np.ndarray) -> np.ndarray:
    low = np.minimum(only_b, discordant - only_b)
    return np.where(discordant > 0, np.minimum(1.0, 2 * stats.binom.cdf(low, discordant, 0.5)), 1.0)


def null_pairs_success(rng, size, cap, p, rho):
    """Equal success rates p; with probability rho a pair shares its scene (one uniform for both)."""
    shared = rng.random((size, cap)) < rho
    ua = rng.random((size, cap))
    ub = np.where(shared, ua, rng.random((size, cap)))
    return ua < p, ub < p


def type_one_row(name: str, y_fn: Callable, runs: int, cap: int, seed: int, success: bool) -> dict[str, Any]:
    line = math.log(2 / ALPHA)

    def one(size, rng):
        y, a, b = y_fn(rng, size)
        lb, lw = binary_log_wealth(a, b) if success else paired_log_wealth(y)
        anytime = (np.maximum(lb, lw) >= line).any(axis=1)
        at_end = np.maximum(lb[:, -1], lw[:, -1]) >= line
        cols = [anytime, at_end]
        if success:
            only_b = np.cumsum(~a & b, axis=1)
            disc = np.cumsum(a != b, axis=1)
            cols.append(mcnemar_exact_p(only_b[:, -1], disc[:, -1]) <= ALPHA)
            looks = np.arange(9, cap, 10)
            cols.append((mcnemar_exact_p(only_b[:, looks], disc[:, looks]) <= ALPHA).any(axis=1))
        return np.stack(cols, axis=1)

    res = in_chunks(runs, one, seed).mean(axis=0)
    row = {"null": name, "runs": runs, "cap": cap, "e_process_early_stopping": float(res[0]),
           "e_process_at_cap": float(res[1])}
    if success:
        row.update(mcnemar_at_cap=float(res[2]), mcnemar_peeking_every_10=float(res[3]))
    row["pass"] = bool(res[0] <= ALPHA and res[1] <= ALPHA)
    return row


def type_one(runs: int, cap: int) -> list[dict[str, Any]]:
    rows = []
    for p, rho in ((0.7, 0.0), (0.5, 0.0), (0.7, 0.5)):
        def y_fn(rng, size, p=p, rho=rho):
            a, b = null_pairs_success(rng, size, cap, p, rho)
            return np.where(a == b, np.nan, b.astype(np.float64)), a, b
        rows.append(type_one_row(f"success A = B = {p}" + (f", scene shared w.p. {rho}" if rho else ", independent"), y_fn, runs, cap, 30, True))

    def y_returns(rng, size):
        ra, rb = rng.beta(2, 5, (size, cap)), rng.beta(2, 5, (size, cap))
        return (rb - ra + 1.0) / 2.0, None, None
    rows.append(type_one_row("return A = B ~ Beta(2,5) in [0,1]", y_returns, runs, cap, 31, False))
    return rows


# -- 3. savings ------------------------------------------------------------------------------------------
def first_true(mask: np.ndarray) -> np.ndarray:
    """1-based index of the first True per row; inf where none."""
    hit = mask.any(axis=1)
    return np.where(hit, np.argmax(mask, axis=1) + 1.0, np.inf)


def fixed_n_threshold(p1: float, threshold: float, alpha_one_sided: float, power: float, n_max: int = 5000) -> int:
    """Smallest n whose exact one-sided binomial test (H0: p <= threshold, level alpha) has the power."""
    for n in range(1, n_max):
        c = stats.binom.isf(alpha_one_sided, n, threshold) + 1  # reject when successes >= c
        while stats.binom.sf(c - 1, n, threshold) > alpha_one_sided:
            c += 1
        if stats.binom.sf(c - 1, n, p1) >= power:
            return n
    return n_max


def fixed_n_mcnemar(p_only_a: float, p_only_b: float, power: float, n_max: int = 4000) -> int:
    """Smallest n at which McNemar's exact two-sided test at ALPHA rejects with ``power``
    (computed exactly: discordant count ~ Bin(n, d), B's share ~ Bin(D, q))."""
    d = p_only_a + p_only_b
    q = p_only_b / d
    reject_given_d = np.zeros(n_max + 1)
    for n in range(1, n_max + 1):
        c = np.arange(n + 1)  # reject_given_d[m]: McNemar rejects, in B's favour, with m discordant pairs
        rej = (mcnemar_exact_p(c, np.full(n + 1, n)) <= ALPHA) & (c > n / 2)
        reject_given_d[n] = float(stats.binom.pmf(c[rej], n, q).sum())
        if float((stats.binom.pmf(np.arange(n + 1), n, d) * reject_given_d[: n + 1]).sum()) >= power:
            return n
    return n_max


def savings_row(name: str, tau_correct: np.ndarray, tau_stop: np.ndarray, n_fixed: int, power: float) -> dict[str, Any]:
    """``tau_correct``: when the right decision came (inf: never); ``tau_stop``: when the procedure
    stopped with any decision (inf: never). The cap is the power-quantile of ``tau_correct``."""
    finite = np.isfinite(tau_correct)
    cap = int(np.quantile(tau_correct, power, method="higher")) if finite.mean() >= power else None
    avg = float(np.minimum(tau_stop, cap).mean()) if cap else math.nan
    wrong = np.isfinite(tau_stop) & (tau_stop < tau_correct) & (tau_stop <= (cap or np.inf))
    return {"case": name, "runs": int(tau_correct.size), "target_power": power, "sequential_cap": cap,
            "avg_episodes_sequential": avg, "median_stop": float(np.median(tau_stop)),
            "wrong_decisions": float(wrong.mean()), "fixed_n": n_fixed,
            "saving": 1.0 - avg / n_fixed if cap else math.nan}


def savings(runs: int, horizon: int, power: float) -> list[dict[str, Any]]:
    rows = []
    # (a) one policy, p = 0.9, rule above=0.8: the lower bound passes 0.8 once the long gambler
    # rejects the first grid mean above 0.8 (the bound is the grid point below the first kept mean)
    m_star = (math.floor(0.8 * DEFAULT_GRID) + 1) / DEFAULT_GRID
    line = math.log(1 / ALPHA)

    def tau_single(p):
        def one(size, rng):
            x = (rng.random((size, horizon)) < p).astype(np.float64)
            return first_true(log_capital(x, m_star, CONFIDENCE, side="long") >= line)
        return one

    for i, p in enumerate((0.9, 0.95)):
        tau = in_chunks(runs, tau_single(p), 40 + i)
        n_fixed = fixed_n_threshold(p, 0.8, ALPHA / 2, power)
        rows.append(savings_row(f"p = {p} vs threshold 0.8 (above=0.8)", tau, tau, n_fixed, power))
    tau_null = in_chunks(runs, tau_single(0.8), 49)
    rows[0]["fired_at_p_0.8_within_horizon"] = float(np.isfinite(tau_null).mean())

    # (b) paired: A = 0.7, B = 0.8, independent outcomes (STEP's setting) and a shared scene
    log_line = math.log(2 / ALPHA)
    cases = (("independent", 0.0, 0.7), ("shared scene (known-answer env)", 1.0, 0.7), ("independent", 0.0, 0.5))
    for i, (label, rho, pa) in enumerate(cases):
        def one(size, rng, rho=rho, pa=pa):
            shared = rng.random((size, horizon)) < rho
            ua = rng.random((size, horizon))
            ub = np.where(shared, ua, rng.random((size, horizon)))
            a, b = ua < pa, ub < 0.8
            lb, lw = binary_log_wealth(a, b)
            return np.stack([first_true(lb >= log_line), first_true(lw >= log_line)], axis=1)

        taus = in_chunks(runs, one, 50 + i)
        tau_b, tau_w = taus[:, 0], taus[:, 1]
        tau_correct = np.where(tau_b < tau_w, tau_b, np.inf)
        n_fixed = fixed_n_mcnemar(pa * 0.2, (1 - pa) * 0.8, power) if rho == 0 else _fixed_n_all_b(0.8 - pa, power)
        rows.append(savings_row(f"A = {pa} vs B = 0.8, paired, {label}", tau_correct, np.minimum(tau_b, tau_w), n_fixed, power))
    return rows


def _fixed_n_all_b(p_only_b: float, power: float) -> int:
    """Shared scene: every discordant pair is B's; McNemar needs 6 of them (p = 2/64 < 0.05)."""
    need = next(m for m in range(1, 100) if 2 * 0.5 ** m <= ALPHA)
    n = need
    while stats.binom.sf(need - 1, n, p_only_b) < power:
        n += 1
    return n


def consistency_single(runs: int, horizon: int) -> dict[str, Any]:
    """The vectorized stopping time of ``above=0.8`` equals :class:`StopMonitor`'s k, run by run."""
    rng = np.random.default_rng(60)
    x = rng.random((runs, horizon)) < 0.9
    m_star = (math.floor(0.8 * DEFAULT_GRID) + 1) / DEFAULT_GRID
    fast = first_true(log_capital(x.astype(np.float64), m_star, CONFIDENCE, side="long") >= math.log(1 / ALPHA))
    slow = np.array([StopMonitor("above=0.8", CONFIDENCE).feed(row) or np.inf for row in x], dtype=np.float64)
    paired = []
    for r in range(runs):
        a, b = rng.random(horizon) < 0.7, rng.random(horizon) < 0.8
        e = PairedEProcess(CONFIDENCE)
        k = e.update(discordant_outcomes(a, b))
        lb, lw = binary_log_wealth(a[None], b[None])
        vec = first_true(np.maximum(lb, lw) >= math.log(2 / ALPHA))[0]
        paired.append((k or np.inf) == vec)
    return {"runs": runs, "single_rule_same_k": int(np.sum(fast == slow)), "paired_same_k": int(sum(paired))}


# -- report -----------------------------------------------------------------------------------------------
def markdown(doc: dict[str, Any]) -> str:
    out = [f"Runs: {doc['runs']} per row, alpha = {ALPHA}, confidence {CONFIDENCE}; {doc['seconds']:.1f} s.", "",
           "**Coverage under continuous monitoring** (true mean inside at every one of the first "
           f"{doc['coverage'][0]['horizon']} looks):", "",
           "| distribution | mean | betting CS coverage | Wilson, looked at every episode | >= 0.95 |", "|---|---|---|---|---|"]
    for r in doc["coverage"]:
        out.append(f"| {r['distribution']} | {r['mean']:.4f} | {r['coverage']:.4f} (se {r['coverage_se']:.4f}) | "
                   f"{r['wilson_coverage']:.4f} | {'PASS' if r['pass'] else 'FAIL'} |")
    out += ["", f"**Wilson's 95% interval watched after each of the first {doc['wilson'][0]['horizon']} episodes**: share of "
            "runs in which it excluded the true rate at some look:", "", "| true rate | " + " | ".join(f"{r['p']:g}" for r in doc["wilson"])
            + " |", "|---|" + "---|" * len(doc["wilson"]),
            "| missed at some look | " + " | ".join(f"{r['missed_at_some_look']:.3f}" for r in doc["wilson"]) + " |"]
    g = doc["grid"]
    out += ["", f"Grid check ({g['runs']} runs, p = {g['p']}, through `BettingCS`): coverage {g['grid_coverage']:.4f} "
            f"(wealth test {g['wealth_coverage']:.4f}); runs the grid misses where the wealth covers: "
            f"{g['grid_misses_where_wealth_covers']}.", "",
            f"**Type-I error of the paired comparison under the null** (cap {doc['type_one'][0]['cap']} pairs):", "",
            "| null | e-process, early stopping | e-process, at the cap only | McNemar at the cap | McNemar peeking every 10 | <= 0.05 |",
            "|---|---|---|---|---|---|"]
    for r in doc["type_one"]:
        out.append(f"| {r['null']} | {r['e_process_early_stopping']:.4f} | {r['e_process_at_cap']:.4f} | "
                   f"{r.get('mcnemar_at_cap', float('nan')):.4f} | {r.get('mcnemar_peeking_every_10', float('nan')):.4f} | "
                   f"{'PASS' if r['pass'] else 'FAIL'} |")
    out += ["", f"**Savings** (power {doc['savings'][0]['target_power']}, same guaranteed type-I error as the "
            "fixed-n test; the sequential cap is its stopping time's power-quantile):", "",
            "| case | avg episodes (sequential) | cap | fixed n | saving | wrong-direction decisions |", "|---|---|---|---|---|---|"]
    for r in doc["savings"]:
        out.append(f"| {r['case']} | {r['avg_episodes_sequential']:.1f} | {r['sequential_cap']} | {r['fixed_n']} | "
                   f"{100 * r['saving']:.0f}% | {r['wrong_decisions']:.4f} |")
    c = doc["consistency"]
    out += ["", f"Vectorized stopping times equal the library's monitors run by run: single rule "
            f"{c['single_rule_same_k']}/{c['runs']}, paired {c['paired_same_k']}/{c['runs']}.", "", doc["step_figure"]]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--horizon", type=int, default=1000, help="looks per run (coverage), pairs (type-I cap)")
    ap.add_argument("--power", type=float, default=0.9)
    ap.add_argument("--tiny", action="store_true", help="300 runs, horizon 300 (smoke test)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    runs, horizon = (300, 300) if args.tiny else (args.runs, args.horizon)
    start = time.perf_counter()
    doc: dict[str, Any] = {"command": command_line(), "runs": runs, "alpha": ALPHA}
    doc["coverage"] = coverage(runs, horizon)
    doc["wilson"] = wilson_peeking(runs, horizon)
    doc["grid"] = grid_consistency(20 if args.tiny else 200, horizon, 0.5, 70)
    doc["type_one"] = type_one(runs, horizon)
    doc["savings"] = savings(runs, 600 if args.tiny else max(3 * horizon, 3000), args.power)
    doc["consistency"] = consistency_single(20 if args.tiny else 200, 600)
    doc["step_figure"] = STEP_FIGURE
    doc["seconds"] = time.perf_counter() - start
    text = markdown(doc)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2))
    ok = all(r["pass"] for r in doc["coverage"] + doc["type_one"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
