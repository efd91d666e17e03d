"""Shared pieces of the benchmark scripts: machine header, timers, tables, JSON output.

Benchmarks run on shared machines, so every number they report is the median of
several repeats, and the scripts interleave their rows (repeat loop outermost) so
that background noise hits all rows alike.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np


# -- machine header ----------------------------------------------------------------------------
def machine_info() -> dict[str, Any]:
    """Facts that make a benchmark number comparable: ``fasteval bench``'s machine header (CPU, cores,
    GPU, library versions, kernel backend, date), plus the load at start and the git commit."""
    from fasteval.doors.bench.machine import machine_info as bench_machine_info

    info = bench_machine_info()
    load = info.get("load_avg")
    info["load_avg_at_start"] = ", ".join(f"{x:.2f}" for x in load) if load else "n/a"
    info["git"] = git_revision()
    return info


def git_revision() -> str:
    """``<short commit>`` of the checkout, with ``+dirty`` when src/ has uncommitted changes."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        if rev.returncode != 0:
            return "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src"], cwd=root, capture_output=True, text=True, timeout=10)
        return rev.stdout.strip() + ("+dirty (uncommitted changes under src/)" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def format_machine(info: dict[str, Any]) -> str:
    """The header as a few markdown bullet lines."""
    return "\n".join(
        [
            f"- date: {info['date']}",
            f"- CPU: {info['cpu']}; {info['cores']} cores ({info['usable_cores']} usable); "
            f"load average at start {info['load_avg_at_start']}",
            f"- {info['os']}, Python {info['python']}",
            f"- torch {info['torch']} ({info['torch_threads']} threads), gymnasium {info['gymnasium']}, "
            f"numpy {info['numpy']}, fasteval {info['fasteval']}, kernel backend `{info['kernel_backend']}`",
            f"- git: {info.get('git', 'unknown')}",
        ]
    )


def command_line() -> str:
    """How this script was launched, for the record."""
    return " ".join(["python", *sys.argv])


# -- timing ------------------------------------------------------------------------------------
def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Run ``fn`` once; return (seconds, its result)."""
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def median_time(fn: Callable[[], Any], repeats: int = 5, warmup: int = 1) -> float:
    """Median seconds of ``repeats`` calls of ``fn`` after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    return statistics.median(timed(fn)[0] for _ in range(max(1, repeats)))


def calls_per_budget(fn: Callable[[], Any], budget_s: float, min_calls: int = 10) -> tuple[int, float]:
    """Call ``fn`` in a tight loop for about ``budget_s`` seconds; return (calls, seconds)."""
    calls, t0 = 0, time.perf_counter()
    deadline = t0 + budget_s
    while True:
        for _ in range(min_calls):
            fn()
        calls += min_calls
        now = time.perf_counter()
        if now >= deadline:
            return calls, now - t0


class Samples:
    """Named lists of measurements, filled one repeat at a time (rows interleaved); medians at the end."""

    def __init__(self) -> None:
        self._data: dict[Any, list[float]] = defaultdict(list)

    def add(self, key: Any, value: float) -> None:
        self._data[key].append(float(value))

    def median(self, key: Any) -> float:
        values = self._data.get(key)
        return statistics.median(values) if values else float("nan")

    def values(self, key: Any) -> list[float]:
        return list(self._data.get(key, []))

    def to_dict(self) -> dict[str, list[float]]:
        return {"|".join(map(str, k)) if isinstance(k, tuple) else str(k): v for k, v in self._data.items()}


# -- limits ------------------------------------------------------------------------------------
def env_only_replay(envs: list, actions: list, seed: int, obs_buf: np.ndarray | None = None) -> tuple[float, list[int]]:
    """Step ``envs`` in a tight loop, replaying precomputed per-episode ``actions``.

    Episode ``i`` is reset with seed ``seed + i``; a slot whose episode ends (terminated or
    truncated, as in fasteval) takes the next episode at once (continuous batching, per-slot
    seeded resets). Observations are written into a ``[b, *obs_shape]`` host buffer
    (``obs_buf``, allocated here if not given), as any policy needs. Returns (seconds, each episode's length), so the caller can check that the replay
    took exactly fasteval's steps.
    """
    b, n = len(envs), len(actions)
    if obs_buf is None:
        space = envs[0].observation_space
        obs_buf = np.zeros((b, *space.shape), dtype=space.dtype)
    slot_acts: list[list[int]] = [[] for _ in range(b)]
    slot_ep = [0] * b
    slot_t = [0] * b
    lengths = [0] * n
    t0 = time.perf_counter()
    next_ep = 0
    active = []
    for slot in range(min(b, n)):
        obs, _ = envs[slot].reset(seed=seed + next_ep)
        obs_buf[slot] = obs
        slot_acts[slot], slot_ep[slot], slot_t[slot] = actions[next_ep], next_ep, 0
        next_ep += 1
        active.append(slot)
    while active:
        freed = False
        for slot in active:
            t = slot_t[slot]
            acts = slot_acts[slot]
            obs, _r, term, trunc, _info = envs[slot].step(acts[t])
            obs_buf[slot] = obs
            t += 1
            slot_t[slot] = t
            if term or trunc or t == len(acts):
                lengths[slot_ep[slot]] = t
                if next_ep < n:
                    obs, _ = envs[slot].reset(seed=seed + next_ep)
                    obs_buf[slot] = obs
                    slot_acts[slot], slot_ep[slot], slot_t[slot] = actions[next_ep], next_ep, 0
                    next_ep += 1
                else:
                    slot_ep[slot] = -1
                    freed = True
        if freed:
            active = [s for s in active if slot_ep[s] >= 0]
    return time.perf_counter() - t0, lengths



# -- output ------------------------------------------------------------------------------------
def fmt_num(value: Any, digits: int = 3) -> str:
    """Compact human formatting: 1234567 -> '1.23M', 0.5 -> '0.500', NaN -> 'n/a'."""
    if value is None:
        return "n/a"
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return str(value)
    v = float(value)
    if v != v:
        return "n/a"
    a = abs(v)
    if a >= 1e9:
        return f"{v / 1e9:.{digits - 1}f}G"
    if a >= 1e6:
        return f"{v / 1e6:.{digits - 1}f}M"
    if a >= 1e4:
        return f"{v / 1e3:.{digits - 1}f}k"
    if a >= 100 or float(v).is_integer():
        return f"{v:.0f}"
    return f"{v:.{digits}g}" if a >= 1 else f"{v:.{digits}f}"


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], align: Sequence[str] | None = None) -> str:
    """A GitHub-markdown table. Cells that are not strings go through :func:`fmt_num`.

    ``align``: one of ``l``/``r`` per column (default: first column left, the rest right).
    """
    rows = [[c if isinstance(c, str) else fmt_num(c) for c in row] for row in rows]
    align = list(align or ["l"] + ["r"] * (len(headers) - 1))
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(cells, widths, align)) + " |"

    sep = "| " + " | ".join(("-" * (w - 1) + ":") if a == "r" else ("-" * w) for w, a in zip(widths, align)) + " |"
    return "\n".join([line(headers), sep, *(line(r) for r in rows)])


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float) and obj != obj:
        return None
    if hasattr(obj, "item") and callable(obj.item):  # numpy / torch scalars
        return _jsonable(obj.item())
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    return str(obj)


def write_json(path: str | os.PathLike, document: dict[str, Any]) -> Path:
    """Write ``document`` as JSON (NaN -> null, numpy scalars -> numbers)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_jsonable(document), indent=2) + "\n")
    return path


def check_line(name: str, ok: bool | None, detail: str) -> str:
    """``PASS``/``FAIL``/``SKIP`` line for an explicit target."""
    tag = "SKIP" if ok is None else ("PASS" if ok else "FAIL")
    return f"{tag}: {name} -- {detail}"
