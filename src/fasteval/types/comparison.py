"""One comparison of two policies on paired episodes: per-task tests, Holm, verdicts, the gate.

The layout is the ``compare.json`` schema (docs/how-many-episodes.md). Differences are B - A:
positive means B is better. A task's *primary* metric is success when both runs report a
success signal, else the return (or the one asked for: ``primary``, ``--rank-by``); its verdict is
"better"/"worse" when the primary metric's Holm-adjusted p-value (across tasks) is below alpha, else "no
difference". Each p-value tests the estimand shown beside it: McNemar's exact test the difference of success
rates, the paired t-test the mean difference of returns (or max rewards) with its t-interval. The signed-rank
test and P(B > A) stay in a return block as labelled secondary statistics; no verdict comes from them. In a live
comparison stopped by the e-process (or the truncated design) the verdict is that test's decision
instead (``verdict_basis``), and the fixed-n p-values and bootstrap intervals are not valid after
such a data-dependent stop: they stay in the document as description (``fixed_n_tests``), beside the
anytime-valid interval of B - A (``sequential.difference``).

The non-inferiority gate (``--margin``) is :mod:`fasteval.types.noninferiority`'s exact test on
successes (a t bound on returns); after a live stop it reads the anytime-valid lower bound instead
(:func:`sequential_non_inferiority`).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from fasteval.types.noninferiority import paired_mean, paired_proportions
from fasteval.types.paired import PAIRED_T, holm, paired_t, prob_improvement, signed_rank
from fasteval.types.stats import DEFAULT_N_BOOT, mcnemar_from_counts, paired_bootstrap_ci

SCHEMA = "fasteval.compare/1"
DESCRIPTIVE = "descriptive, not valid after the stop"
"""What the fixed-n p-values and bootstrap intervals of a comparison that stopped on its data are."""
STOPPED_RUNS = "descriptive: a compared run stopped on its data (--stop-when), so its n was not fixed in advance"
"""What the fixed-n tests of two run folders are when one of them stopped on its data (``overall.stopped_runs``)."""


def sequential_basis(seq: dict[str, Any]) -> str:
    """The verdict basis of a live comparison's sequential block: ``e-process`` or ``truncated design``."""
    return "truncated design" if seq.get("design") == "truncated" else "e-process"
VERDICTS = ("better", "worse", "no difference")
GATE_FAILED_EXIT = 3


def _success_block(a: np.ndarray, b: np.ndarray, confidence: float, n_boot: int, seed: int) -> dict[str, Any]:
    only_a, only_b = int(np.sum(a & ~b)), int(np.sum(~a & b))
    test = mcnemar_from_counts(only_a, only_b, exact=True, n_pairs=int(a.size))
    boot = paired_bootstrap_ci(b.astype(np.float64), a.astype(np.float64), confidence=confidence, n_boot=n_boot, seed=seed)
    n = a.size
    return {
        "a_successes": int(a.sum()), "b_successes": int(b.sum()),
        "a_rate": float(a.mean()) if n else math.nan, "b_rate": float(b.mean()) if n else math.nan,
        "diff": boot["mean_diff"], "diff_ci": boot["ci"],
        "only_a": only_a, "only_b": only_b, "n_discordant": only_a + only_b,
        "p_value": test["p_value"], "p_holm": math.nan,
    }


def _return_block(a: np.ndarray, b: np.ndarray, confidence: float, n_boot: int, seed: int) -> dict[str, Any]:
    """The mean difference B - A, its paired t-interval and the paired t-test of it (``p_value``: what the
    verdict rests on); the signed-rank test, P(B > A) and the bootstrap interval beside it, as secondary
    statistics (``secondary``), never a verdict's basis."""
    test = paired_t(a, b, confidence)
    boot = paired_bootstrap_ci(b, a, confidence=confidence, n_boot=n_boot, seed=seed)
    rank = signed_rank(a, b)
    poi = prob_improvement(a, b, confidence=confidence, n_boot=n_boot, seed=seed)
    return {
        "a_mean": float(a.mean()) if a.size else math.nan, "b_mean": float(b.mean()) if b.size else math.nan,
        "diff": test["mean_diff"], "diff_ci": test["ci"], "diff_ci_method": f"paired t {confidence:.0%}",
        "test": PAIRED_T, "t_statistic": test["statistic"], "p_value": test["p_value"], "p_holm": math.nan,
        "diff_ci_bootstrap": boot["ci"],
        "secondary": "signed-rank test and P(B > A): which policy usually wins, not the mean difference; no verdict "
                     "rests on them",
        "signed_rank_statistic": rank["statistic"], "signed_rank_p": rank["p_value"], "signed_rank_method": rank["method"],
        "prob_improvement": poi["value"], "prob_improvement_ci": poi["ci"],
    }


def sequential_non_inferiority(fixed_n: dict[str, Any] | None, difference: dict[str, Any], margin: float,
                               alpha: float) -> dict[str, Any]:
    """The gate of a comparison that stopped on its data: B is non-inferior when the anytime-valid one-sided
    (1 - alpha) lower bound of B - A at the stop (``difference["lower_bound_one_sided"]``) lies above
    -margin. The fixed-n test's block stays, as ``fixed_n``, for description (it is not valid after a
    data-dependent stop)."""
    lower = float(difference["lower_bound_one_sided"])
    return {"margin": float(margin), "method": "anytime-valid one-sided lower bound of B - A at the stop "
            "(valid after a data-dependent stop)", "alpha": float(alpha), "confidence": 1.0 - float(alpha),
            "lower_bound": lower, "non_inferior": bool(lower > -margin), "fixed_n": fixed_n}


def compare_task(a_success: Any, b_success: Any, a_return: Any, b_return: Any, *, has_success: bool = True,
                 alpha: float = 0.05, confidence: float = 0.95, margin: float | None = None,
                 n_boot: int = DEFAULT_N_BOOT, seed: int = 0, primary: str | None = None,
                 a_max_reward: Any = None, b_max_reward: Any = None) -> dict[str, Any]:
    """The tests of one task's paired episodes (``p_holm`` and ``verdict`` are set by :func:`finish`).
    ``primary``: the verdict's metric (``success``, ``return`` or ``max_reward``, with ``a_max_reward`` /
    ``b_max_reward``); None: success where both sides have a success signal, else the return. ``success``
    without a success signal raises ValueError."""
    sa, sb = (np.asarray(v, dtype=bool).reshape(-1) for v in (a_success, b_success))
    ra, rb = (np.asarray(v, dtype=np.float64).reshape(-1) for v in (a_return, b_return))
    if not (sa.size == sb.size == ra.size == rb.size):
        raise ValueError(f"compare: expected paired episodes of equal count, got {sa.size}, {sb.size}, {ra.size}, {rb.size}.")
    if primary == "success" and not has_success:
        raise ValueError("compare --rank-by success: the runs report no success signal (no info['is_success']), so "
                         "every success rate would read 0%; compare by return or max_reward instead.")
    primary = primary or ("success" if has_success else "return")
    max_block = None
    if primary == "max_reward":
        ma, mb = (np.asarray(v, dtype=np.float64).reshape(-1) for v in (a_max_reward, b_max_reward))
        max_block = _return_block(ma, mb, confidence, n_boot, seed)
    task = {
        "n_pairs": int(sa.size), "primary": primary,
        "success": _success_block(sa, sb, confidence, n_boot, seed) if has_success else None,
        "return": _return_block(ra, rb, confidence, n_boot, seed),
        **({"max_reward": max_block} if max_block is not None else {}),
        "non_inferiority": None, "verdict": "no difference", "verdict_basis": "holm", "p_holm": math.nan,
    }
    if margin is not None:
        task["non_inferiority"] = (paired_proportions(sa, sb, float(margin), alpha) if primary == "success"
                                   else paired_mean(ma, mb, float(margin), alpha) if primary == "max_reward"
                                   else paired_mean(ra, rb, float(margin), alpha))
    return task


def _holm_within(tasks: Sequence[dict[str, Any]], metric: str) -> None:
    blocks = [t[metric] for t in tasks if t.get(metric)]
    for block, p in zip(blocks, holm([b["p_value"] for b in blocks])):
        block["p_holm"] = float(p)


def _verdict(task: dict[str, Any], alpha: float) -> str:
    seq = task.get("sequential")
    if seq:  # the sequential test decided (or reached the cap undecided): the fixed-n tests are descriptive
        task["verdict_basis"] = sequential_basis(seq)
        task["fixed_n_tests"] = DESCRIPTIVE
        return seq.get("decision") or "no difference"
    block = task[task["primary"]]
    if block is None or math.isnan(task["p_holm"]) or task["p_holm"] >= alpha:
        return "no difference"
    return "better" if block["diff"] > 0 else "worse"


def finish(tasks: list[dict[str, Any]], *, alpha: float = 0.05, margin: float | None = None,
           fail_if_worse: bool = False) -> dict[str, Any]:
    """Holm across tasks, a verdict per task, and the ``overall`` block (with the gate's exit code)."""
    _holm_within(tasks, "success")
    _holm_within(tasks, "return")
    _holm_within(tasks, "max_reward")
    primary_p = holm([t[t["primary"]]["p_value"] if t[t["primary"]] else math.nan for t in tasks])
    for task, p in zip(tasks, primary_p):
        task["p_holm"] = float(p)
        task["verdict"] = _verdict(task, alpha)
    for task in tasks:
        seq = task.get("sequential")
        if margin is not None and seq and seq.get("difference", {}).get("lower_bound_one_sided") is not None:
            task["non_inferiority"] = sequential_non_inferiority(task.get("non_inferiority"), seq["difference"],
                                                                 float(margin), alpha)
    n_better = sum(t["verdict"] == "better" for t in tasks)
    n_worse = sum(t["verdict"] == "worse" for t in tasks)
    non_inferior = None
    if margin is not None:
        non_inferior = all(t["non_inferiority"] and t["non_inferiority"]["non_inferior"] for t in tasks)
    failed = fail_if_worse and (n_worse > 0 or non_inferior is False)
    bases = sorted({t["verdict_basis"] for t in tasks})
    return {
        "verdict": "worse" if n_worse else ("better" if n_better else "no difference"),
        "verdict_basis": bases[0] if len(bases) == 1 else "mixed",
        "n_tasks": len(tasks), "n_better": n_better, "n_worse": n_worse, "any_worse": n_worse > 0,
        "non_inferior": non_inferior, "fail_if_worse": bool(fail_if_worse),
        "exit_code": GATE_FAILED_EXIT if failed else 0,
    }
