"""The ``compare.json`` document of two paired runs, and its table and Markdown renderings."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

from fasteval.doors.compare.inputs import Side, _has_signal, pair_episodes
from fasteval.types.comparison import SCHEMA, compare_task, finish
from fasteval.types.results import write_json_atomic


# -- the document -----------------------------------------------------------------------------------
def build_document(a: Side, b: Side, *, alpha: float = 0.05, margin: float | None = None, fail_if_worse: bool = False,
                   confidence: float = 0.95, n_boot: int = 2000, boot_seed: int = 0, mode: str = "runs",
                   sequential: dict[tuple[Any, Any], dict[str, Any]] | None = None) -> dict[str, Any]:
    """The ``compare.json`` document of two paired runs (see the module docstring)."""
    tasks = []
    for paired in pair_episodes(a, b):
        ra, rb = paired["a"], paired["b"]
        task = compare_task(
            [r["success"] for r in ra], [r["success"] for r in rb],
            [r["sum_reward"] for r in ra], [r["sum_reward"] for r in rb],
            has_success=_has_signal(ra) and _has_signal(rb), alpha=alpha, confidence=confidence,
            margin=margin, n_boot=n_boot, seed=boot_seed)
        key = (paired["task_group"], paired["task_id"])
        head = {"task_group": paired["task_group"], "task_id": paired["task_id"], "task": paired["task"],
                "unpaired_a": paired["unpaired_a"], "unpaired_b": paired["unpaired_b"]}
        if sequential is not None:
            task["sequential"] = sequential.get(key)
        tasks.append({**head, **task})
    overall = finish(tasks, alpha=alpha, margin=margin, fail_if_worse=fail_if_worse)
    seq_top = tasks[0].get("sequential") if sequential is not None and len(tasks) == 1 else None
    return {"schema": SCHEMA, "mode": mode, "a": a.header(), "b": b.header(), "alpha": alpha, "margin": margin,
            "correction": "holm", "n_boot": n_boot, "boot_seed": boot_seed, "confidence": confidence,
            "tasks": tasks, "overall": overall, "sequential": seq_top}


# -- rendering -----------------------------------------------------------------------------------------
def _num(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def _ci(pair: Sequence[float] | None, digits: int = 3) -> str:
    return "-" if not pair else f"[{_num(pair[0], digits)}, {_num(pair[1], digits)}]"


def _task_name(task: dict[str, Any]) -> str:
    group, tid = task.get("task_group"), task.get("task_id")
    return str(group) if tid in (None, 0) and str(group) == str(task.get("task")) else f"{group}/{tid}"


def table_rows(doc: dict[str, Any]) -> list[list[str]]:
    rows = []
    for t in doc["tasks"]:
        s, r = t.get("success"), t["return"]
        rows.append([
            _task_name(t), str(t["n_pairs"]),
            _num(s["a_rate"]) if s else "-", _num(s["b_rate"]) if s else "-",
            f"{_num(s['diff'])} {_ci(s['diff_ci'])}" if s else "-",
            f"{_num(s['p_value'], 4)} ({_num(s['p_holm'], 4)})" if s else "-",
            f"{_num(r['diff'])} {_ci(r['diff_ci'])}", f"{_num(r['p_value'], 4)} ({_num(r['p_holm'], 4)})",
            _num(r["prob_improvement"]), t["verdict"],
        ])
    return rows


HEADERS = ["task", "n", "A rate", "B rate", "diff B-A [CI]", "McNemar p (Holm)", "return diff [CI]",
           "signed-rank p (Holm)", "P(B>A)", "verdict"]


def render_markdown(doc: dict[str, Any]) -> str:
    """The Markdown section: a heading, one row per task, the overall verdict."""
    a, b = doc["a"]["label"], doc["b"]["label"]
    lines = [f"## Comparison: {b} vs {a}", "",
             f"{b} = `{doc['b']['policy']}`, {a} = `{doc['a']['policy']}`, env `{doc['a']['env']}`; differences are "
             f"{b} - {a}; alpha = {doc['alpha']} with Holm's correction across tasks.", "",
             "| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(row) + " |" for row in table_rows(doc)]
    o = doc["overall"]
    lines += ["", f"**Overall: {o['verdict']}** ({o['n_better']} better, {o['n_worse']} worse of {o['n_tasks']} tasks)"
              + (f"; non-inferior within {doc['margin']}: {o['non_inferior']}" if doc["margin"] is not None else "")
              + (f"; gate: {'FAILED (exit 3)' if o['exit_code'] else 'passed'}" if o["fail_if_worse"] else "") + "."]
    seq = [t for t in doc["tasks"] if t.get("sequential")]
    for t in seq:
        q = t["sequential"]
        lines.append(f"Sequential ({_task_name(t)}): stopped at k = {q['k']} ({q['reason']}), decision "
                     f"{q['decision'] or 'none'}, e-values {_num(q['e_value_better'], 2)} (better) / "
                     f"{_num(q['e_value_worse'], 2)} (worse) against {_num(q['threshold'], 1)}.")
    return "\n".join(lines) + "\n"


def render_table(doc: dict[str, Any]) -> str:
    rows = [HEADERS] + table_rows(doc)
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADERS))]
    text = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    o = doc["overall"]
    text.append(f"overall: {o['verdict']} ({o['n_better']} better, {o['n_worse']} worse of {o['n_tasks']} tasks; "
                f"B = {doc['b']['source']}, A = {doc['a']['source']}; differences B - A)")
    return "\n".join(text)


def write_outputs(doc: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = write_json_atomic(out_dir / "compare.json", doc)
    md_path = out_dir / "compare.md"
    md_path.write_text(render_markdown(doc))
    return json_path, md_path


