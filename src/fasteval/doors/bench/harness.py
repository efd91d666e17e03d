"""Timed, repeated runs of one spec through the engine, and grids of them.

The harness has no rollout code: it builds one :class:`~fasteval.run.engine.Engine` per
cell (the engine the CLI and the library use), warms it up, then calls ``engine.run()``
``repeats`` times and keeps what each run reports (``eval_s`` and the stage timers).

What is timed, and what is not:

* **not timed**: building the engine (envs, policy loading, buffers) and the warm-up run,
  which holds the policy's dry run, ``torch.compile`` / CUDA-graph capture, the Numba JIT
  (when that backend is chosen) and the first touch of every env slot;
* **timed**: ``eval_s`` of each repeat, the engine's own clock around its hot loop
  (start-up of the run and the per-episode result table excluded), split by stage:
  ``env_step``, ``h2d``, ``policy``, ``d2h``, ``bookkeeping`` (see
  :mod:`fasteval.core.timing`). Time inside the loop but outside every stage timer is
  reported as ``other``.

The evaluator's overhead per env step is ``(eval_s - env_step - policy) / env_steps``:
everything fasteval adds around the env and the policy (transfers, bookkeeping, the
loop itself).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any, Callable, Sequence

from fasteval.core.timing import STAGES
from fasteval.types.errors import UserInputError
from fasteval.types.spec import VECTORIZATIONS, EvalSpec

OVERHEAD_STAGES = ("h2d", "d2h", "bookkeeping", "other")
"""What counts as the evaluator's own overhead (everything but the env and the policy)."""


@dataclass(frozen=True)
class RepeatSample:
    """One timed ``engine.run()``."""

    eval_s: float
    """The engine's time for the run (its hot loop; build and warm-up excluded)."""
    wall_s: float
    """Wall time of the ``engine.run()`` call (adds run start-up and the result table)."""
    n_episodes: int
    env_steps: int
    timings: dict[str, float]
    """Seconds per stage (``env_step``, ``h2d``, ``policy``, ``d2h``, ``bookkeeping``)."""
    avg_sum_reward: float

    @property
    def episodes_per_s(self) -> float:
        return self.n_episodes / self.eval_s if self.eval_s > 0 else math.nan

    @property
    def steps_per_s(self) -> float:
        return self.env_steps / self.eval_s if self.eval_s > 0 else math.nan

    @property
    def other_s(self) -> float:
        """Time in the loop outside every stage timer (never below zero)."""
        return max(0.0, self.eval_s - sum(self.timings.values()))

    @property
    def overhead_us_per_step(self) -> float:
        """(eval_s - env_step - policy) / env_steps, in microseconds."""
        if not self.env_steps:
            return math.nan
        return 1e6 * (self.eval_s - self.timings.get("env_step", 0.0) - self.timings.get("policy", 0.0)) / self.env_steps


def _stats(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


@dataclass
class BenchCell:
    """The repeats of one configuration (one engine): batch size, vectorization, the rest of the spec."""

    spec: EvalSpec
    batch_size: int
    """Env slots the engine built (``min(spec.batch_size, spec.n_episodes)``)."""
    vectorization: str
    build_s: float
    warmup_s: float
    warmup_episodes: int
    samples: list[RepeatSample] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    """The engine's run facts (device, kernel backend, batching, policy acceleration)."""

    @property
    def label(self) -> str:
        return f"batch {self.batch_size}, {self.vectorization}"

    @property
    def exact_across_repeats(self) -> bool:
        """Every repeat gave the same average return (it must: same seeds, same episodes)."""
        first = self.samples[0].avg_sum_reward
        return all(s.avg_sum_reward == first or (math.isnan(s.avg_sum_reward) and math.isnan(first)) for s in self.samples)

    def stage_seconds(self) -> dict[str, float]:
        """Median seconds per repeat of each stage, plus ``transfers`` (h2d + d2h) and ``other``."""
        out = {stage: statistics.median(s.timings.get(stage, 0.0) for s in self.samples) for stage in STAGES}
        out["transfers"] = statistics.median(s.timings.get("h2d", 0.0) + s.timings.get("d2h", 0.0) for s in self.samples)
        out["other"] = statistics.median(s.other_s for s in self.samples)
        return out

    def summary(self) -> dict[str, Any]:
        """Medians, minima and maxima over the repeats, the stage breakdown and the overhead."""
        s0 = self.samples[0]
        eval_s = statistics.median(s.eval_s for s in self.samples)
        stages = self.stage_seconds()
        return {
            "batch_size": self.batch_size,
            "vectorization": self.vectorization,
            "n_episodes": s0.n_episodes,
            "env_steps": s0.env_steps,
            "repeats": len(self.samples),
            "warmup_episodes": self.warmup_episodes,
            "build_s": self.build_s,
            "warmup_s": self.warmup_s,
            "eval_s": _stats([s.eval_s for s in self.samples]),
            "wall_s": _stats([s.wall_s for s in self.samples]),
            "episodes_per_s": _stats([s.episodes_per_s for s in self.samples]),
            "steps_per_s": _stats([s.steps_per_s for s in self.samples]),
            "stages_s": stages,
            "stages_share": {k: (v / eval_s if eval_s > 0 else math.nan) for k, v in stages.items()},
            "stages_us_per_step": {k: (1e6 * v / s0.env_steps if s0.env_steps else math.nan) for k, v in stages.items()},
            "overhead_us_per_step": _stats([s.overhead_us_per_step for s in self.samples]),
            "avg_sum_reward": s0.avg_sum_reward,
            "exact_across_repeats": self.exact_across_repeats,
            "device": self.meta.get("device"),
            "batching": self.meta.get("batching"),
            "kernel_backend": self.meta.get("kernel_backend"),
            "cuda_graph": self.meta.get("policy_cuda_graph", "off"),  # captured | eager (reason) | off
            "torch_threads": self.meta.get("torch_threads"),
        }


@dataclass
class BenchGrid:
    """Cells of a grid (batch sizes x vectorizations), in the order they were run."""

    cells: list[BenchCell]

    def fastest(self) -> BenchCell:
        """The cell with the highest median episodes/s (every cell runs the same episodes)."""
        return max(self.cells, key=lambda c: statistics.median(s.episodes_per_s for s in c.samples))


def default_warmup_episodes(spec: EvalSpec) -> int:
    """One episode per env slot (every slot is reset and stepped), at least 2."""
    return max(2, spec.n_slots)


def bench_cell(
    spec: EvalSpec,
    repeats: int = 5,
    warmup_episodes: int | None = None,
    on_repeat: Callable[[int, RepeatSample], None] | None = None,
) -> BenchCell:
    """Build an engine for ``spec``, warm it up (untimed), then time ``repeats`` runs of
    ``spec.n_episodes`` episodes (seeds ``spec.seed + i``, the same in every repeat).

    ``warmup_episodes``: episodes of the untimed warm-up run (default: one per slot, at
    least 2; 0 skips it, and the first repeat then pays for the dry run and any capture).
    """
    from fasteval.run.api import policy_eval_mode
    from fasteval.run.engine import Engine

    if not isinstance(repeats, int) or repeats < 1:
        raise UserInputError(f"repeats: expected an integer >= 1, got {repeats!r}.")
    n_warm = default_warmup_episodes(spec) if warmup_episodes is None else int(warmup_episodes)
    if n_warm < 0:
        raise UserInputError(f"warmup_episodes: expected an integer >= 0, got {warmup_episodes!r}.")
    t0 = perf_counter()
    engine = Engine(spec)
    try:
        build_s = perf_counter() - t0
        with policy_eval_mode(engine.policy):
            warmup_s = 0.0
            if n_warm:
                t0 = perf_counter()
                engine.run(n_warm, spec.seed)
                warmup_s = perf_counter() - t0
            cell = BenchCell(spec, engine.n_slots, spec.vectorization, build_s, warmup_s, n_warm)
            for k in range(repeats):
                t0 = perf_counter()
                result = engine.run()
                wall = perf_counter() - t0
                o = result.overall()
                sample = RepeatSample(
                    eval_s=result.eval_s, wall_s=wall, n_episodes=int(o["n_episodes"]), env_steps=int(o["env_steps"]),
                    timings=dict(result.timings), avg_sum_reward=float(o["avg_sum_reward"]),
                )
                cell.samples.append(sample)
                cell.meta = dict(result.meta)
                if on_repeat is not None:
                    on_repeat(k, sample)
    finally:
        engine.close()
    return cell


def parse_batch_sizes(text: str | Sequence[int] | None) -> list[int]:
    """``"1,16,64"`` -> ``[1, 16, 64]`` (each >= 1, duplicates dropped, order kept)."""
    if text is None:
        return []
    items = text.split(",") if isinstance(text, str) else list(text)
    out: list[int] = []
    for item in items:
        raw = str(item).strip()
        if not raw:
            continue
        try:
            value = int(raw)
        except ValueError:
            raise UserInputError(f"batch sizes: expected comma-separated integers >= 1 (like 1,16,64,256), got {text!r}.") from None
        if value < 1:
            raise UserInputError(f"batch sizes: every batch size must be >= 1, got {value} in {text!r}.")
        if value not in out:
            out.append(value)
    if not out:
        raise UserInputError(f"batch sizes: expected at least one integer >= 1, got {text!r}.")
    return out


def parse_vectorizations(text: str | Sequence[str]) -> list[str]:
    """``"sync,async"`` -> ``["sync", "async"]`` (each one of :data:`~fasteval.types.spec.VECTORIZATIONS`)."""
    items = text.split(",") if isinstance(text, str) else list(text)
    out: list[str] = []
    for item in items:
        name = str(item).strip()
        if not name:
            continue
        if name not in VECTORIZATIONS:
            raise UserInputError(f"vectorization: expected a comma-separated list of {', '.join(VECTORIZATIONS)}, "
                                 f"got {name!r} in {text!r}.")
        if name not in out:
            out.append(name)
    if not out:
        raise UserInputError(f"vectorization: expected at least one of {', '.join(VECTORIZATIONS)}, got {text!r}.")
    return out


def bench_grid(
    spec: EvalSpec,
    batch_sizes: Sequence[int],
    vectorizations: Sequence[str],
    repeats: int = 5,
    warmup_episodes: int | None = None,
    on_cell: Callable[[BenchCell], None] | None = None,
) -> BenchGrid:
    """One :func:`bench_cell` per (batch size, vectorization), the spec otherwise unchanged.

    Cells run one after another (one engine alive at a time: an async cell holds one
    process per slot). Each cell's repeats are back to back, so on a noisy machine compare
    cells with care; the peer suite (``benchmarks/bench_peers.py``) interleaves instead.
    """
    cells = []
    for vectorization in vectorizations:
        for b in batch_sizes:
            cell = bench_cell(spec.replace(batch_size=int(b), vectorization=vectorization), repeats, warmup_episodes)
            cells.append(cell)
            if on_cell is not None:
                on_cell(cell)
    return BenchGrid(cells)
