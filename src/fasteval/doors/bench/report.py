"""Readable tables for stdout, and the JSON document of ``fasteval bench --json``."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Sequence

from fasteval.doors.bench.harness import BenchCell, BenchGrid
from fasteval.doors.bench.machine import format_machine

JSON_SCHEMA = "fasteval.doors.bench/1"
"""Bumped when the JSON layout changes incompatibly."""


def fmt_rate(value: float) -> str:
    """12345.6 -> '12.3k', 1234567 -> '1.23M', small values with 3 significant digits."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    a = abs(value)
    if a >= 1e6:
        return f"{value / 1e6:.2f}M"
    if a >= 1e4:
        return f"{value / 1e3:.1f}k"
    if a >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}"


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]], align: str | None = None) -> str:
    """A plain aligned table (``align``: one ``l``/``r`` per column; default: first two left)."""
    align = align or ("ll" + "r" * (len(headers) - 2))
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h)) for i, h in enumerate(headers)]

    def line(cells: Sequence[Any]) -> str:
        return "  ".join(str(c).ljust(w) if a == "l" else str(c).rjust(w) for c, w, a in zip(cells, widths, align)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def _range(stats: dict[str, float]) -> str:
    return f"{fmt_rate(stats['median'])} [{fmt_rate(stats['min'])}-{fmt_rate(stats['max'])}]"


def throughput_table(cells: Sequence[BenchCell]) -> str:
    rows = []
    for cell in cells:
        s = cell.summary()
        rows.append([
            str(s["batch_size"]), s["vectorization"], _range(s["episodes_per_s"]), _range(s["steps_per_s"]),
            f"{s['overhead_us_per_step']['median']:.2f}", f"{s['eval_s']['median']:.4f}", f"{s['avg_sum_reward']:.4g}",
        ])
    return text_table(
        ["batch", "vec", "episodes/s median [min-max]", "env steps/s median [min-max]", "overhead us/step",
         "eval_s", "avg return"],
        rows,
    )


def breakdown_table(cells: Sequence[BenchCell]) -> str:
    """Median seconds per repeat by stage, each with its share of eval_s and its us per env step."""
    parts = ("env_step", "policy", "transfers", "bookkeeping", "other")
    rows = []
    for cell in cells:
        s = cell.summary()
        eval_s = s["eval_s"]["median"]
        row = [str(s["batch_size"]), s["vectorization"], f"{eval_s:.4f}"]
        for part in parts:
            sec = s["stages_s"][part]
            share = 100.0 * sec / eval_s if eval_s > 0 else math.nan
            row.append(f"{sec:.4f} ({share:.0f}%, {s['stages_us_per_step'][part]:.2f} us)")
        rows.append(row)
    return text_table(["batch", "vec", "eval_s", *parts], rows)


def run_threads(grid: BenchGrid) -> list[int]:
    """The torch intra-op thread counts the timed runs used (one per cell, deduplicated, sorted)."""
    return sorted({int(t) for t in (c.meta.get("torch_threads") for c in grid.cells) if t is not None})


def format_report(grid: BenchGrid, spec_facts: dict[str, Any], machine: dict[str, Any]) -> str:
    """The whole stdout report: header, throughput, stage breakdown, the fastest configuration."""
    cells = grid.cells
    first = cells[0].summary()
    lines = [
        f"fasteval bench: env {spec_facts['env']}, policy {spec_facts['policy']}, device {first['device']}, "
        f"CUDA graph {first.get('cuda_graph', 'off')}; "
        f"{first['n_episodes']} episodes (seeds {spec_facts['seed']}..{spec_facts['seed'] + first['n_episodes'] - 1}) "
        f"x {first['repeats']} timed repeats per configuration, after an untimed build and warm-up run",
        format_machine(machine, run_threads=run_threads(grid)),
        "",
        throughput_table(cells),
        "",
        "stage breakdown: median seconds per repeat (share of eval_s, us per env step); "
        "transfers = h2d + d2h; other = loop time outside the stage timers",
        breakdown_table(cells),
        "",
        "overhead us/step = (eval_s - env_step - policy) / env steps: what the evaluator adds around env and policy.",
    ]
    if any(not c.exact_across_repeats for c in cells):
        bad = ", ".join(c.label for c in cells if not c.exact_across_repeats)
        lines.append(f"WARNING: the average return changed between repeats ({bad}); the policy or env is not deterministic.")
    if len(cells) > 1:
        best = grid.fastest().summary()
        lines.append(
            f"fastest: batch {best['batch_size']}, {best['vectorization']} "
            f"({fmt_rate(best['episodes_per_s']['median'])} episodes/s, {fmt_rate(best['steps_per_s']['median'])} env steps/s)"
        )
    return "\n".join(lines)


def report_document(grid: BenchGrid, spec_facts: dict[str, Any], machine: dict[str, Any], command: str) -> dict[str, Any]:
    """The JSON document: schema, machine header, command, spec, one entry per cell, the fastest."""
    best = grid.fastest()
    return {
        "schema": JSON_SCHEMA,
        "machine": machine,
        "torch_threads": run_threads(grid),
        "command": command,
        "spec": spec_facts,
        "cells": [dict(c.summary(), samples=[_sample_dict(s) for s in c.samples]) for c in grid.cells],
        "fastest": {"batch_size": best.batch_size, "vectorization": best.vectorization,
                    "episodes_per_s": best.summary()["episodes_per_s"]["median"]},
    }


def _sample_dict(sample: Any) -> dict[str, Any]:
    return {
        "eval_s": sample.eval_s, "wall_s": sample.wall_s, "n_episodes": sample.n_episodes, "env_steps": sample.env_steps,
        "episodes_per_s": sample.episodes_per_s, "steps_per_s": sample.steps_per_s, "timings": sample.timings,
        "overhead_us_per_step": sample.overhead_us_per_step, "avg_sum_reward": sample.avg_sum_reward,
    }


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    if hasattr(obj, "item"):
        return _jsonable(obj.item())
    return str(obj)


def write_json(path: str | os.PathLike, document: dict[str, Any]) -> Path:
    """Write ``document`` (NaN and infinities become null)."""
    path = Path(path)
    if path.parent != Path(""):
        path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_jsonable(document), indent=2) + "\n")
    return path
