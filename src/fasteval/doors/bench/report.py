"""The document of a bench run (``fasteval bench --json``), and the file it is written to. The
terminal report is rendered from the same document (:mod:`fasteval.render.bench_text`)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from fasteval.doors.bench.harness import BenchGrid

JSON_SCHEMA = "fasteval.doors.bench/1"
"""Bumped when the JSON layout changes incompatibly."""


def run_threads(grid: BenchGrid) -> list[int]:
    """The torch intra-op thread counts the timed runs used (one per cell, deduplicated, sorted)."""
    return sorted({int(t) for t in (c.meta.get("torch_threads") for c in grid.cells) if t is not None})


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
