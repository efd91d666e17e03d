"""Evaluation results: the per-episode table plus aggregates, in the classic layout.

``eval_info.json`` keeps the keys LeRobot-style consumers read (``per_episode``,
``per_task``, ``per_group``, ``overall`` with ``avg_sum_reward``, ``avg_max_reward``,
``pc_success``, ``n_episodes``, ``eval_s``, ``eval_ep_s``) and adds ``env_steps``,
``steps_per_s``, ``episodes_per_s``, NaN counts and a Wilson 95% interval for success.

NaN rewards are never dropped: an episode with a NaN reward has a NaN sum and max,
its ``nan_rewards`` count is > 0, and averages over it are NaN too (unlike ``nanmean``,
which would hide it). ``n_nan_reward_episodes`` says how many episodes are affected.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from fasteval.stats import wilson_interval

EPISODE_FIELDS = ("episode_ix", "seed", "sum_reward", "max_reward", "length", "success", "nan_rewards", "task_group", "task_id", "task")


@dataclass
class EvalResult:
    """Per-episode records (``per_episode``, a list of dicts in episode order) plus run facts.

    Attributes:
        per_episode: one dict per episode with ``EPISODE_FIELDS``.
        eval_s: engine wall time in seconds (env building and start-up excluded).
        timings: seconds per stage (see ``fasteval.core.timing``).
        meta: free-form run facts (spec, kernel backend, batch size, fasteval version).
    """

    per_episode: list[dict[str, Any]]
    eval_s: float
    timings: dict[str, float] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    video_paths: list[str] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    """Fault records (env raised/hung/died, non-finite actions), retried ones included."""
    n_failed: int = 0
    """Episodes that failed for good; they are not in ``per_episode`` nor in any average."""
    episode_data: Any = None
    """With ``return_episode_data``: the rollouts of exactly these episodes, cut at their ends."""

    # -- aggregates ---------------------------------------------------------------------------
    @property
    def aggregated(self) -> dict[str, Any]:
        """What the CLI writes under ``overall``."""
        return self.overall()

    def overall(self) -> dict[str, Any]:
        out = aggregate(self.per_episode)
        n = out["n_episodes"]
        steps = out["env_steps"]
        out.update(
            eval_s=self.eval_s,
            eval_ep_s=self.eval_s / n if n else math.nan,
            steps_per_s=steps / self.eval_s if self.eval_s > 0 else math.nan,
            episodes_per_s=n / self.eval_s if self.eval_s > 0 else math.nan,
            n_failed_episodes=self.n_failed,
            n_env_errors=len(self.errors),
            video_paths=list(self.video_paths),
        )
        return out

    def per_group(self) -> dict[str, dict[str, Any]]:
        groups: dict[str, list[dict[str, Any]]] = {}
        for record in self.per_episode:
            groups.setdefault(str(record["task_group"]), []).append(record)
        out = {}
        for name, records in groups.items():
            agg = aggregate(records)
            agg["video_paths"] = [p for p in self.video_paths if f"/{name}_" in p or p.startswith(f"{name}_")]
            out[name] = agg
        return out

    def per_task(self) -> list[dict[str, Any]]:
        tasks: dict[tuple[str, Any], list[dict[str, Any]]] = {}
        for record in self.per_episode:
            tasks.setdefault((str(record["task_group"]), record["task_id"]), []).append(record)
        return [
            {
                "task_group": group,
                "task_id": task_id,
                "task": records[0]["task"],
                "metrics": {
                    "sum_rewards": [r["sum_reward"] for r in records],
                    "max_rewards": [r["max_reward"] for r in records],
                    "successes": [r["success"] for r in records],
                    "lengths": [r["length"] for r in records],
                    "seeds": [r["seed"] for r in records],
                    "video_paths": [],
                },
                "aggregated": aggregate(records),
            }
            for (group, task_id), records in tasks.items()
        ]

    # -- export --------------------------------------------------------------------------------
    def to_eval_info(self) -> dict[str, Any]:
        """The full ``eval_info.json`` document."""
        return {
            "per_episode": self.per_episode,
            "per_task": self.per_task(),
            "per_group": self.per_group(),
            "overall": self.overall(),
            "timings": self.timings,
            "errors": self.errors,
            "meta": self.meta,
        }

    def to_dict(self, prefix: str = "") -> dict[str, float]:
        """Flat scalars (``{prefix}avg_sum_reward`` ...), ready for TensorBoard or W&B."""
        out = {}
        for key, value in self.overall().items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            out[f"{prefix}{key}"] = float(value)
        lo, hi = self.overall()["pc_success_ci95"]
        out[f"{prefix}pc_success_ci95_low"], out[f"{prefix}pc_success_ci95_high"] = lo, hi
        return out

    def to_json(self, path: str | os.PathLike) -> Path:
        """Write ``to_eval_info()`` atomically (temp file + rename) and return the path."""
        return write_json_atomic(path, self.to_eval_info())

    def column(self, name: str) -> np.ndarray:
        """One per-episode field as an array, in episode order."""
        return np.asarray([record[name] for record in self.per_episode])


def aggregate(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Aggregates over episode records. Averages are plain means: a NaN episode makes them NaN."""
    records = list(records)
    n = len(records)
    sums = np.asarray([r["sum_reward"] for r in records], dtype=np.float64)
    maxes = np.asarray([r["max_reward"] for r in records], dtype=np.float64)
    successes = int(sum(bool(r["success"]) for r in records))
    lo, hi = wilson_interval(successes, n)
    return {
        "avg_sum_reward": float(sums.mean()) if n else math.nan,
        "avg_max_reward": float(maxes.mean()) if n else math.nan,
        "pc_success": 100.0 * successes / n if n else math.nan,
        "pc_success_ci95": [100.0 * lo, 100.0 * hi],
        "n_success": successes,
        "n_episodes": n,
        "env_steps": int(sum(int(r["length"]) for r in records)),
        "avg_length": float(np.mean([r["length"] for r in records])) if n else math.nan,
        "n_nan_reward_episodes": int(sum(1 for r in records if r["nan_rewards"] > 0)),
    }


def write_json_atomic(path: str | os.PathLike, document: Any) -> Path:
    """Write JSON to ``path`` via a temp file in the same folder and an atomic rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; results are ordinary files
        with os.fdopen(fd, "w") as f:
            json.dump(document, f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path
