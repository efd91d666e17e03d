"""One comparison of two policies on paired episodes: per-task tests, Holm, verdicts, the gate.

The layout is the ``compare.json`` schema (docs/how-many-episodes.md). Differences are B - A:
positive means B is better. A task's *primary* metric is success when both runs report a
success signal, else the return; its verdict is "better"/"worse" when the primary metric's
Holm-adjusted p-value (across tasks) is below alpha, else "no difference". In a live
comparison stopped by the e-process the verdict is the e-process's decision instead (fixed-n
p-values are not valid after a data-dependent stop; they stay in the document as description).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from fasteval.types.paired import holm, prob_improvement, signed_rank
from fasteval.types.stats import DEFAULT_N_BOOT, mcnemar_from_counts, paired_bootstrap_ci

SCHEMA = "fasteval.compare/1"
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
    boot = paired_bootstrap_ci(b, a, confidence=confidence, n_boot=n_boot, seed=seed)
    test = signed_rank(a, b)
    poi = prob_improvement(a, b, confidence=confidence, n_boot=n_boot, seed=seed)
    return {
        "a_mean": float(a.mean()) if a.size else math.nan, "b_mean": float(b.mean()) if b.size else math.nan,
        "diff": boot["mean_diff"], "diff_ci": boot["ci"],
        "signed_rank_statistic": test["statistic"], "p_value": test["p_value"], "p_holm": math.nan,
        "signed_rank_method": test["method"],
        "prob_improvement": poi["value"], "prob_improvement_ci": poi["ci"],
    }


def _non_inferiority(a: np.ndarray, b: np.ndarray, margin: float, alpha: float, n_boot: int, seed: int) -> dict[str, Any]:
    """B is non-inferior when the one-sided (1 - alpha) lower bound of B - A is above -margin."""
    boot = paired_bootstrap_ci(b, a, confidence=1.0 - 2.0 * alpha, n_boot=n_boot, seed=seed)
    lower = boot["ci"][0]
    return {"margin": margin, "lower_bound": lower, "confidence": 1.0 - alpha,
            "non_inferior": bool(lower > -margin) if not math.isnan(lower) else False}


def compare_task(a_success: Any, b_success: Any, a_return: Any, b_return: Any, *, has_success: bool = True,
                 alpha: float = 0.05, confidence: float = 0.95, margin: float | None = None,
                 n_boot: int = DEFAULT_N_BOOT, seed: int = 0) -> dict[str, Any]:
    """The tests of one task's paired episodes (``p_holm`` and ``verdict`` are set by :func:`finish`)."""
    sa, sb = (np.asarray(v, dtype=bool).reshape(-1) for v in (a_success, b_success))
    ra, rb = (np.asarray(v, dtype=np.float64).reshape(-1) for v in (a_return, b_return))
    if not (sa.size == sb.size == ra.size == rb.size):
        raise ValueError(f"compare: expected paired episodes of equal count, got {sa.size}, {sb.size}, {ra.size}, {rb.size}.")
    primary = "success" if has_success else "return"
    task = {
        "n_pairs": int(sa.size), "primary": primary,
        "success": _success_block(sa, sb, confidence, n_boot, seed) if has_success else None,
        "return": _return_block(ra, rb, confidence, n_boot, seed),
        "non_inferiority": None, "verdict": "no difference", "verdict_basis": "holm", "p_holm": math.nan,
    }
    if margin is not None:
        x, y = (sa.astype(np.float64), sb.astype(np.float64)) if has_success else (ra, rb)
        task["non_inferiority"] = _non_inferiority(x, y, float(margin), alpha, n_boot, seed)
    return task


def _holm_within(tasks: Sequence[dict[str, Any]], metric: str) -> None:
    blocks = [t[metric] for t in tasks if t.get(metric)]
    for block, p in zip(blocks, holm([b["p_value"] for b in blocks])):
        block["p_holm"] = float(p)


def _verdict(task: dict[str, Any], alpha: float) -> str:
    seq = task.get("sequential")
    if seq and seq.get("decision"):
        task["verdict_basis"] = "e-process"
        return seq["decision"]
    if seq:
        task["verdict_basis"] = "e-process"
        return "no difference"
    block = task[task["primary"]]
    if block is None or math.isnan(task["p_holm"]) or task["p_holm"] >= alpha:
        return "no difference"
    return "better" if block["diff"] > 0 else "worse"


def finish(tasks: list[dict[str, Any]], *, alpha: float = 0.05, margin: float | None = None,
           fail_if_worse: bool = False) -> dict[str, Any]:
    """Holm across tasks, a verdict per task, and the ``overall`` block (with the gate's exit code)."""
    _holm_within(tasks, "success")
    _holm_within(tasks, "return")
    primary_p = holm([t[t["primary"]]["p_value"] if t[t["primary"]] else math.nan for t in tasks])
    for task, p in zip(tasks, primary_p):
        task["p_holm"] = float(p)
        task["verdict"] = _verdict(task, alpha)
    n_better = sum(t["verdict"] == "better" for t in tasks)
    n_worse = sum(t["verdict"] == "worse" for t in tasks)
    non_inferior = None
    if margin is not None:
        non_inferior = all(t["non_inferiority"] and t["non_inferiority"]["non_inferior"] for t in tasks)
    failed = fail_if_worse and (n_worse > 0 or non_inferior is False)
    return {
        "verdict": "worse" if n_worse else ("better" if n_better else "no difference"),
        "n_tasks": len(tasks), "n_better": n_better, "n_worse": n_worse, "any_worse": n_worse > 0,
        "non_inferior": non_inferior, "fail_if_worse": bool(fail_if_worse),
        "exit_code": GATE_FAILED_EXIT if failed else 0,
    }
