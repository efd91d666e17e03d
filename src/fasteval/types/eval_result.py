"""The result of an evaluation: the per-episode table plus aggregates, in the classic layout.

``eval_info.json`` keeps the keys LeRobot-style consumers read (``per_episode``,
``per_task``, ``per_group``, ``overall`` with ``avg_sum_reward``, ``avg_max_reward``,
``pc_success``, ``n_episodes``, ``eval_s``, ``eval_ep_s``) and adds ``env_steps``,
``steps_per_s``, ``episodes_per_s``, NaN counts, a 95% interval for success (``pc_success_ci95``,
its method in ``pc_success_ci95_method``) and ``has_success_signal`` (False when no env of the run ever reported ``info["is_success"]``: there is no
success rate to measure, so ``pc_success``, ``pc_success_ci95`` and ``n_success`` are then ``None``,
``null`` in ``eval_info.json``, and absent from :meth:`EvalResult.to_dict` and the sinks, rather than
a false 0%).

The success interval is Wilson's score interval when the number of episodes was fixed in advance. A run
that stopped on its data (``--stop-when``, whose ``stopping`` block is in ``meta``) chose its n from the
episodes, and a fixed-n interval is no longer a 95% interval there; ``pc_success_ci95`` is then the
anytime-valid betting confidence sequence at the stop (:mod:`fasteval.types.sequential.stopped`; a
suite's or a group's: each task's sequence at ``1 - 0.05 / T``, averaged with the tasks' episode
counts), and Wilson's interval stays only as ``pc_success_ci95_fixed_n``, for description.

NaN rewards are never dropped: averages over an episode with a NaN reward are NaN too (unlike
``nanmean``, which would hide it). ``n_nan_reward_episodes`` says how many episodes are affected.
:meth:`EvalResult.to_json` streams the document (:mod:`fasteval.types.json_writer`).
"""

from __future__ import annotations

import copy
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from fasteval.types.episode_table import EpisodeTable, merge_episodes
from fasteval.types.files import safe_filename
from fasteval.types.json_writer import write_json_atomic
from fasteval.types.sequential.stopped import FIXED_N_METHOD, METHOD as STOPPED_METHOD, combined_interval
from fasteval.types.stats import wilson_interval


STATUS_RUNNING, STATUS_COMPLETE, STATUS_INTERRUPTED, STATUS_FAILED = "running", "complete", "interrupted", "failed"
"""A run's status (``meta["status"]``, and the manifest's: ``running`` until the run has ended)."""


RESUMED_GLOBAL_RNG = "resumed_global_rng"
"""``meta`` key of a resumed run whose policy draws from torch's global RNG (``run_meta()["policy_rng"]``):
:data:`RESUMED_GLOBAL_RNG_TEXT`, shown in the summary and on the run page."""
RESUMED_GLOBAL_RNG_TEXT = (
    "the policy draws its noise from torch's global RNG, which a resume seeds anew: the episodes run after a "
    "resume are valid episodes at their seeds, but not the draws one uninterrupted run would have made (nor, "
    "for --noise global, lerobot-eval's). For draws that a resume continues exactly, run with --noise episode "
    "where the policy takes its noise as an argument.")


class FrozenDict(dict):
    """A ``dict`` that refuses every change after construction: a record's ``meta`` and ``timings`` (a
    record is built once; to change it, build another). Reads, ``dict(d)`` copies, JSON and pickling
    work as for a dict."""

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("a run record is built once and never changed: build a new one (fasteval.run.record) "
                        "or copy its fields with dict(...)")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _refuse  # type: ignore[assignment]

    def __reduce__(self) -> Any:
        return (FrozenDict, (dict(self),))

    def __copy__(self) -> "FrozenDict":
        return self

    def __deepcopy__(self, memo: dict) -> "FrozenDict":
        return FrozenDict(copy.deepcopy(dict(self), memo))


def lerobot_empty_keys() -> dict[str, Any]:
    """Keys of ``lerobot-eval``'s ``eval_info.json`` layout (0.6.1) that fasteval has nothing for, written
    empty beside ``video_paths`` in ``overall``, each ``per_group`` entry and each ``per_task`` entry's
    ``metrics``, so that a reader of LeRobot's layout finds every key it knows
    (``tests/lerobot/test_differential.py``): ``predicted_video_paths`` lists the videos of a policy's
    predicted latents (LeRobot's ``save_predicted_video``), which fasteval does not render."""
    return {"predicted_video_paths": []}


def has_success_signal(flags: Any) -> bool:
    """The one success-signal rule of a group of episodes (a run, a task, a sweep cell): it has a success
    signal when the env of at least one of its episodes had reported ``info["is_success"]``. ``flags``: the
    episodes' ``has_success_signal`` values (an array, or a sequence where ``None`` means unknown, as in
    stores made before the field, and counts as reporting). A group of no episodes has none: there is no
    rate to give, so its success fields are ``None`` rather than a made-up 0% or NaN."""
    if isinstance(flags, np.ndarray):
        return bool(flags.any())
    return any(flag is not False for flag in flags)


@dataclass(frozen=True)
class EarlierSegments:
    """What earlier segments of a resumed run recorded: their episodes (in any order) and their
    engine seconds. The engine folds them into the one result of the run."""

    records: EpisodeTable
    eval_s: float = 0.0
    segments: int = 0
    """How many segments ran before this one."""
    n_cancelled: int = 0
    """Episodes the earlier segments' stop rule cancelled in flight (their stopping blocks' ``n_cancelled``)."""
    resumed_global_rng: bool = False
    """An earlier segment ran episodes after episodes were recorded, with a policy on torch's global RNG
    (:data:`RESUMED_GLOBAL_RNG`): the record says so whatever this segment runs."""

    def merged(self, new: EpisodeTable) -> EpisodeTable:
        """The earlier records plus ``new``, in episode order."""
        return merge_episodes(self.records, new)


@dataclass(frozen=True)
class EvalResult:
    """The record of a run: per-episode results (``per_episode``, an :class:`EpisodeTable` in episode
    order) plus its facts, built once (:mod:`fasteval.run.record` builds a run's) and never changed:
    every file, page and summary of a run is a view of it.

    Attributes:
        per_episode: the per-episode table; a list of dicts with ``EPISODE_FIELDS`` is accepted and
            converted. It reads like a list of dicts (see :class:`EpisodeTable`).
        eval_s: engine wall time in seconds (env building and start-up excluded).
        timings: seconds per stage (see ``fasteval.core.timing``).
        meta: the run's facts (spec, kernel backend, batch size, fasteval version, ``status``), read-only.
    """

    per_episode: EpisodeTable
    eval_s: float
    timings: Mapping[str, float] = field(default_factory=dict)
    meta: Mapping[str, Any] = field(default_factory=dict)
    video_paths: Sequence[str] = ()
    """The videos the run rendered (paths), in episode order."""
    errors: Sequence[dict[str, Any]] = ()
    """Fault records (env raised/hung/died, non-finite actions), retried ones included."""
    n_failed: int = 0
    """Episodes that failed for good; they are not in ``per_episode`` nor in any average."""
    episode_data: Any = None
    """With ``return_episode_data``: the rollouts of exactly these episodes, cut at their ends."""

    def __post_init__(self) -> None:
        if not isinstance(self.per_episode, EpisodeTable):
            object.__setattr__(self, "per_episode", EpisodeTable.from_records(self.per_episode))
        object.__setattr__(self, "timings", FrozenDict(self.timings))
        object.__setattr__(self, "meta", FrozenDict(self.meta))
        object.__setattr__(self, "video_paths", tuple(str(p) for p in self.video_paths))
        object.__setattr__(self, "errors", tuple(FrozenDict(e) for e in self.errors))

    # -- aggregates ---------------------------------------------------------------------------
    def overall(self) -> dict[str, Any]:
        """What the CLI writes under ``overall``."""
        out = self._after_stop(aggregate(self.per_episode), [part for _, part in self.per_episode.groups("task")])
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
            **lerobot_empty_keys(),
        )
        return out

    def task_videos(self, group: Any, task_id: Any) -> list[str]:
        """The videos of one task: those in its folder ``.../<group>_<task_id>/...`` (:func:`task_folder`: a
        suite's, and LeRobot's layout), or every video when the result holds that one task only."""
        if len(self.per_episode.tasks) == 1:
            return list(self.video_paths)
        folder = f"/{task_folder(group, task_id)}/"
        return [p for p in self.video_paths if folder in f"/{p}"]

    def per_group(self) -> dict[str, dict[str, Any]]:
        table = self.per_episode
        tasks = [key for key, _ in table.groups("task")]
        out = {}
        for (name,), part in table.groups("group"):
            agg = self._after_stop(aggregate(part), [t for _, t in part.groups("task")])
            agg["video_paths"] = [p for group, task_id in tasks if str(group) == name
                                  for p in self.task_videos(group, task_id)]
            agg.update(lerobot_empty_keys())
            out[name] = agg
        return out

    def per_task(self) -> list[dict[str, Any]]:
        return [_plain_task(t) for t in self._per_task_columns()]

    def _per_task_columns(self) -> list[dict[str, Any]]:
        """``per_task`` with the long per-episode lists as arrays (streamed by the JSON writer)."""
        table = self.per_episode
        out = []
        for (group, task_id), part in table.groups("task"):
            out.append({
                "task_group": group,
                "task_id": task_id,
                "task": part.tasks[int(part.task_codes[0])][2],
                "metrics": {
                    "sum_rewards": part.columns["sum_reward"],
                    "max_rewards": part.columns["max_reward"],
                    "successes": part.columns["success"],
                    "lengths": part.columns["length"],
                    "seeds": part.columns["seed"],
                    "video_paths": self.task_videos(group, task_id),
                    **lerobot_empty_keys(),
                },
                "aggregated": self._after_stop(aggregate(part), [part]),
            })
        return out

    def _after_stop(self, agg: dict[str, Any], tasks: Sequence[EpisodeTable]) -> dict[str, Any]:
        """``agg`` with the interval of a run that stopped on its data (``meta["stopping"]``): the 95%
        betting confidence sequence at the stop over ``tasks`` (the aggregate's tasks; several: each at
        ``1 - 0.05 / T``, count-weighted), Wilson's kept as ``pc_success_ci95_fixed_n``. Cached: the
        record never changes."""
        if not ("stopping" in self.meta or self.meta.get("stop_when")) or agg["pc_success_ci95"] is None:
            return agg
        cache = self.__dict__.setdefault("_stopped_intervals", {})
        key = tuple((len(t), int(t.columns["episode_ix"][0]) if len(t) else -1, t.tasks[int(t.task_codes[0])]
                     if len(t) else None) for t in tasks)
        if key not in cache:
            lo, hi = combined_interval([t.columns["success"] for t in tasks], 0.95)
            cache[key] = [100.0 * lo, 100.0 * hi]
        return {**agg, "pc_success_ci95": list(cache[key]), "pc_success_ci95_method": STOPPED_METHOD,
                "pc_success_ci95_fixed_n": agg["pc_success_ci95"]}

    # -- export --------------------------------------------------------------------------------
    def to_eval_info(self) -> dict[str, Any]:
        """The full ``eval_info.json`` document as plain data (lists of dicts; O(n) Python objects).
        To write it, use :meth:`to_json`, which streams instead."""
        doc = self.eval_info_document()
        doc["per_episode"] = self.per_episode.to_list()
        doc["per_task"] = [_plain_task(t) for t in doc["per_task"]]
        return doc

    def eval_info_document(self) -> dict[str, Any]:
        """The ``eval_info.json`` document with the per-episode table and ``per_task``'s lists left
        columnar (an :class:`EpisodeTable` and arrays): pass it to :func:`write_json_atomic`."""
        doc = {
            "per_episode": self.per_episode,
            "per_task": self._per_task_columns(),
            "per_group": self.per_group(),
            "overall": self.overall(),
            "timings": self.timings,
            "errors": list(self.errors),
            "meta": self.meta,
        }
        self._add_return_intervals(doc)
        return _with_stopping(doc) if "stopping" in self.meta else doc

    def _add_return_intervals(self, doc: dict[str, Any]) -> None:
        """Each aggregate of ``doc`` (tasks, groups, the run) gets the 95% interval of its mean return, which the run
        page shows: ``avg_sum_reward_ci95`` and ``avg_sum_reward_ci95_method`` (:func:`fasteval.types.stats.mean_interval`:
        bootstrap up to 5000 episodes, normal above). Computed here, once per document, so that every number the page
        shows is in eval_info.json (issue 42); not in :meth:`overall`, which stays cheap."""
        from fasteval.types.stats import mean_interval

        def put(agg: dict[str, Any], values: Any) -> None:
            if len(values):
                lo, hi, method = mean_interval(values)
                agg["avg_sum_reward_ci95"], agg["avg_sum_reward_ci95_method"] = [lo, hi], method

        for task in doc["per_task"]:
            put(task["aggregated"], task["metrics"]["sum_rewards"])
        for (name,), part in self.per_episode.groups("group"):
            if name in doc["per_group"]:
                put(doc["per_group"][name], part.columns["sum_reward"])
        put(doc["overall"], self.per_episode.columns["sum_reward"])

    def to_dict(self, prefix: str = "") -> dict[str, float]:
        """Flat scalars (``{prefix}avg_sum_reward`` ...), ready for TensorBoard or W&B."""
        out = {}
        for key, value in self.overall().items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            out[f"{prefix}{key}"] = float(value)
        ci = self.overall()["pc_success_ci95"]
        if ci is not None:  # None: no success signal (and no pc_success either)
            out[f"{prefix}pc_success_ci95_low"], out[f"{prefix}pc_success_ci95_high"] = ci
        return out

    def to_json(self, path: str | os.PathLike) -> Path:
        """Write ``eval_info.json`` atomically (temp file + rename), streamed; return the path."""
        return write_json_atomic(path, self.eval_info_document())

    def column(self, name: str) -> np.ndarray:
        """One per-episode field as an array, in episode order."""
        return np.asarray(self.per_episode.column(name))


def task_folder(group: Any, task_id: Any) -> str:
    """The folder of one task's files in a run (``<group>_<task_id>``, made safe for a file name): a suite's
    ``tasks/<folder>/`` and ``videos/<folder>/``, and LeRobot's ``videos/<group>_<task_id>/``."""
    return f"{safe_filename(group)}_{safe_filename(task_id)}"


def _with_stopping(doc: dict[str, Any]) -> dict[str, Any]:
    """``--stop-when`` runs: the overall ``stopping`` block at the top, each task's in its ``per_task``
    entry (both out of ``meta``, where the engine keeps them). See docs/how-many-episodes.md."""
    meta = {k: v for k, v in doc["meta"].items() if k not in ("stopping", "stopping_per_task")}
    blocks = {(b.get("task_group"), b.get("task_id")): b for b in doc["meta"].get("stopping_per_task", [])}
    for task in doc["per_task"]:
        block = blocks.get((task["task_group"], task["task_id"]))
        if block is not None:
            task["stopping"] = {k: v for k, v in block.items() if k not in ("task_group", "task_id", "task")}
    return {**doc, "meta": meta, "stopping": doc["meta"]["stopping"]}


def _plain_task(task: dict[str, Any]) -> dict[str, Any]:
    metrics = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in task["metrics"].items()}
    return {**task, "metrics": metrics}


def aggregate(records: EpisodeTable | Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Aggregates over episodes (a table or records). Averages are plain means: a NaN episode makes
    them NaN. ``has_success_signal`` follows :func:`has_success_signal`; without a signal the success
    fields are ``None`` (no rate was measured)."""
    table = records if isinstance(records, EpisodeTable) else EpisodeTable.from_records(records)
    c = table.columns
    n = len(table)
    successes = int(np.count_nonzero(c["success"]))
    lo, hi = wilson_interval(successes, n)
    signal = has_success_signal(c["has_success_signal"])
    return {
        "avg_sum_reward": float(c["sum_reward"].mean()) if n else math.nan,
        "avg_max_reward": float(c["max_reward"].mean()) if n else math.nan,
        "pc_success": (100.0 * successes / n if n else math.nan) if signal else None,
        "pc_success_ci95": [100.0 * lo, 100.0 * hi] if signal else None,
        "pc_success_ci95_method": FIXED_N_METHOD if signal else None,
        "n_success": successes if signal else None,
        "n_episodes": n,
        "env_steps": int(c["length"].sum()),
        "avg_length": float(c["length"].mean()) if n else math.nan,
        "n_nan_reward_episodes": int(np.count_nonzero(c["nan_rewards"] > 0)),
        "has_success_signal": signal,
    }
