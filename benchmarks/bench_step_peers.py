"""STEP and its own baselines (Lai, SAVI), from STEP's own code, beside fasteval's truncated design,
its anytime-valid e-process and fixed-n tests, in STEP's setting (issue 31).

The setting of STEP (Snyder et al., RSS 2025, arXiv 2503.10966): two policies, independent
Bernoulli trials, one trial of each per step; one-sided test of "B is better than A" at
alpha = 0.05; a cap ``n_max`` trials per policy. Only the caps whose STEP policies ship in the
package (200 and 500) are run: other caps would need STEP's offline policy synthesis.

Peers, all at the same cap, on the same simulated trials:

* ``STEP``: ``sequentialized_barnard_tests.step.StepTest`` (randomized decisions: its own seeded
  generator); ``Lai``: ``lai.LaiTest`` (its offline calibration); ``SAVI``: ``savi.SaviTest``
  (anytime-valid, no cap);
* ``fasteval truncated``: :class:`~fasteval.types.sequential.truncated.TruncatedPaired` at
  ``alpha = 0.05`` per side, trial i of A paired with trial i of B (with independent trials the
  pairing is arbitrary, and the conditional test on discordant pairs stays exact);
* ``fasteval e-process``: the live comparison's e-process at ``--alpha 0.1`` (0.05 per side);
* ``fixed n``: McNemar's exact one-sided test at 0.05 with all ``n_max`` pairs.

``sequentialized-barnard-tests`` is not a dependency of fasteval (CC BY-NC 4.0; it pulls
matplotlib and pytest): install it in a separate environment to run this
(``pip install sequentialized-barnard-tests``); without it the script prints SKIP and exits 0.

Run: ``PYTHONPATH=src python benchmarks/bench_step_peers.py [--runs 1000] [--savi-runs 100] [--json out.json]``
(SAVI's step is about 100 times slower than the others: it runs on the first ``--savi-runs`` of
each row); ``--tiny`` for the smoke test (40 runs, cap 200 only).
"""

from __future__ import annotations

import argparse
import io
import json
import math
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sequential import binary_log_wealth, first_true, mcnemar_exact_p  # noqa: E402
from common import command_line  # noqa: E402

from fasteval.types.sequential.eprocess import discordant_outcomes  # noqa: E402
from fasteval.types.sequential.truncated import TruncatedDesign, TruncatedPaired  # noqa: E402

ALPHA = 0.05
CASES = ((200, 0.5, 0.5), (200, 0.5, 0.65), (200, 0.3, 0.7), (500, 0.65, 0.65), (500, 0.6, 0.7), (500, 0.4, 0.6))


def load_step() -> Any:
    try:
        from sequentialized_barnard_tests.base import Decision, Hypothesis
        from sequentialized_barnard_tests.lai import LaiTest
        from sequentialized_barnard_tests.savi import SaviTest
        from sequentialized_barnard_tests.step import StepTest
    except ImportError:
        return None
    return Decision, Hypothesis, StepTest, LaiTest, SaviTest


def run_peer(test: Any, accept: Any, a: np.ndarray, b: np.ndarray) -> tuple[int, bool]:
    """Steps one STEP-package test through the trials until it accepts the alternative."""
    test.reset()
    for t in range(a.size):
        if test.step(int(a[t]), int(b[t])).decision == accept:
            return t + 1, True
    return a.size, False


def row(n_max: int, pa: float, pb: float, runs: int, savi_runs: int, seed: int, step: Any) -> dict[str, Any]:
    Decision, Hypothesis, StepTest, LaiTest, SaviTest = step
    rng = np.random.default_rng(seed)
    a, b = rng.random((runs, n_max)) < pa, rng.random((runs, n_max)) < pb
    with redirect_stdout(io.StringIO()):  # the package prints while loading its policies
        peers = {"STEP": StepTest(Hypothesis.P0LessThanP1, n_max, ALPHA, random_seed=seed),
                 "Lai": LaiTest(Hypothesis.P0LessThanP1, n_max, ALPHA),
                 "SAVI": SaviTest(Hypothesis.P0LessThanP1, ALPHA)}
    out: dict[str, Any] = {"n_max": n_max, "a": pa, "b": pb, "runs": runs, "savi_runs": min(runs, savi_runs), "null": pa == pb}
    for name, test in peers.items():
        n = min(runs, savi_runs) if name == "SAVI" else runs  # SAVI's Python step is ~100x slower: fewer runs
        res = np.array([run_peer(test, Decision.AcceptAlternative, a[i], b[i]) for i in range(n)], dtype=np.float64)
        out[name] = {"expected_n": float(res[:, 0].mean()), "claims_b_better": float(res[:, 1].mean())}
    design = TruncatedDesign(n_max, ALPHA)
    res = []
    for i in range(runs):
        test = TruncatedPaired(design)
        test.update(discordant_outcomes(a[i], b[i]))
        res.append((test.n_pairs, test.decision == 1))
    res = np.asarray(res, dtype=np.float64)
    out["fasteval truncated"] = {"expected_n": float(res[:, 0].mean()), "claims_b_better": float(res[:, 1].mean())}
    lb, lw = binary_log_wealth(a, b)
    line = math.log(2 / (2 * ALPHA))
    tb, tw = first_true(lb >= line), first_true(lw >= line)
    out["fasteval e-process"] = {"expected_n": float(np.minimum(np.minimum(tb, tw), n_max).mean()),
                                 "claims_b_better": float(((tb <= n_max) & (tb < tw)).mean())}
    only_b, disc = np.sum(~a & b, axis=1), np.sum(a != b, axis=1)
    one_sided = np.where(disc > 0, mcnemar_exact_p(only_b, disc) / 2, 1.0)  # exact one-sided p (B's side)
    out["fixed n"] = {"expected_n": float(n_max), "claims_b_better": float(((one_sided <= ALPHA) & (2 * only_b > disc)).mean())}
    print(f"row n_max={n_max} {pa} vs {pb}: " + ", ".join(f"{p} {out[p]['expected_n']:.1f}/{out[p]['claims_b_better']:.3f}"
                                                            for p in PEERS), file=sys.stderr, flush=True)
    return out


PEERS = ("STEP", "Lai", "SAVI", "fasteval truncated", "fasteval e-process", "fixed n")


def markdown(doc: dict[str, Any]) -> str:
    out = [f"Runs: {doc['runs']} per row (SAVI: the first {doc['rows'][0]['savi_runs']}); one-sided alpha {ALPHA}; E[n] = expected trials per policy, claims = share of runs "
           f"that claim B better (the type-I error in null rows); {doc['seconds']:.0f} s.", "",
           "| n_max | A vs B | " + " | ".join(PEERS) + " |", "|---|---|" + "---|" * len(PEERS)]
    for r in doc["rows"]:
        label = f"{r['a']} vs {r['b']}" + (" (null)" if r["null"] else "")
        cells = " | ".join(f"{r[p]['expected_n']:.1f} / {r[p]['claims_b_better']:.3f}" for p in PEERS)
        out.append(f"| {r['n_max']} | {label} | {cells} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--savi-runs", type=int, default=100, help="runs for SAVI (the first ones of each row)")
    ap.add_argument("--tiny", action="store_true", help="40 runs, cap 200 only (smoke test)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    step = load_step()
    if step is None:
        print("SKIP: sequentialized-barnard-tests (STEP's own code) is not installed; it is not a dependency of fasteval "
              "(CC BY-NC 4.0): pip install it in a separate environment to run this comparison.")
        return 0
    runs = 40 if args.tiny else args.runs
    cases = [c for c in CASES if c[0] == 200][:2] if args.tiny else CASES
    start = time.perf_counter()
    doc: dict[str, Any] = {"command": command_line(), "runs": runs, "alpha": ALPHA,
                           "rows": [row(n, pa, pb, runs, 10 if args.tiny else args.savi_runs, 500 + i, step) for i, (n, pa, pb) in enumerate(cases)]}
    doc["seconds"] = time.perf_counter() - start
    print(markdown(doc))
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
