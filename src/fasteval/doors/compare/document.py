"""The ``compare.json`` document of two paired runs, and the files it is written to (its terminal
table and Markdown section are rendered by :mod:`fasteval.render.compare_text`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fasteval.doors.compare.inputs import Side, _has_signal, block_note, pair_episodes
from fasteval.render.compare_text import render_markdown
from fasteval.types.comparison import SCHEMA, STOPPED_RUNS, compare_task, finish
from fasteval.types.errors import UserInputError
from fasteval.types.results import write_json_atomic


# -- the document -----------------------------------------------------------------------------------
def build_document(a: Side, b: Side, *, alpha: float = 0.05, margin: float | None = None, fail_if_worse: bool = False,
                   confidence: float = 0.95, n_boot: int = 2000, boot_seed: int = 0, mode: str = "runs",
                   sequential: dict[tuple[Any, Any], dict[str, Any]] | None = None,
                   rank_by: str | None = None) -> dict[str, Any]:
    """The ``compare.json`` document of two paired runs (see the module docstring)."""
    tasks = []
    for paired in pair_episodes(a, b):
        ra, rb = paired["a"], paired["b"]
        try:
            task = compare_task(
                [r["success"] for r in ra], [r["success"] for r in rb],
                [r["sum_reward"] for r in ra], [r["sum_reward"] for r in rb],
                has_success=_has_signal(ra) and _has_signal(rb), alpha=alpha, confidence=confidence,
                margin=margin, n_boot=n_boot, seed=boot_seed, primary=rank_by,
                a_max_reward=[r.get("max_reward", float("nan")) for r in ra],
                b_max_reward=[r.get("max_reward", float("nan")) for r in rb])
        except ValueError as exc:
            raise UserInputError(str(exc)) from None
        key = (paired["task_group"], paired["task_id"])
        head = {"task_group": paired["task_group"], "task_id": paired["task_id"], "task": paired["task"],
                "unpaired_a": paired["unpaired_a"], "unpaired_b": paired["unpaired_b"]}
        if sequential is not None:
            task["sequential"] = sequential.get(key)
        tasks.append({**head, **task})
    stopped = [s.label for s in (a, b) if s.stop_when] if sequential is None else []
    if stopped:  # a run chose its n from its data: fixed-n p-values and intervals are not valid for it
        for task in tasks:
            task["fixed_n_tests"] = STOPPED_RUNS
    overall = finish(tasks, alpha=alpha, margin=margin, fail_if_worse=fail_if_worse)
    if stopped:
        overall["stopped_runs"] = stopped
    seq_top = tasks[0].get("sequential") if sequential is not None and len(tasks) == 1 else None
    return {"schema": SCHEMA, "mode": mode, "a": a.header(), "b": b.header(), "alpha": alpha, "margin": margin,
            "rank_by": rank_by, "correction": "holm", "n_boot": n_boot, "boot_seed": boot_seed, "confidence": confidence,
            "tasks": tasks, "overall": overall, "sequential": seq_top,
            "notes": [note for note in (block_note(a, b),) if note]}


def write_outputs(doc: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = write_json_atomic(out_dir / "compare.json", doc)
    md_path = out_dir / "compare.md"
    md_path.write_text(render_markdown(doc))
    return json_path, md_path


