"""What a run page is made from (:class:`RunPageInput`) and how its document is read: the
eval_info document's tasks, their metrics and labels, the run's status and failed episodes, and
the interval of a mean return (:func:`mean_interval`).

Mean returns get a percentile bootstrap 95% interval (2000 resamples, seed 0) up to
:data:`BOOTSTRAP_UP_TO` episodes, and the normal approximation (mean ± 1.96 standard errors)
above, where the two agree and the bootstrap would cost seconds.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from fasteval.types.stats import bootstrap_mean_ci

BOOTSTRAP_UP_TO = 5000
MAX_TASK_PLOTS = 120
MAX_ERROR_ROWS = 1000
MAX_TRACEBACKS = 20
VIDEO_NAME = re.compile(r"(?:ep(?P<episode>\d+)_seed(?P<seed>-?\d+)(?:_(?P<outcome>success|failure))?"
                        r"|eval_episode_(?P<lerobot_episode>\d+))\.(?:mp4|webm|gif)$")
"""The names recording.video_path gives: ``ep<episode>_seed<seed>_<success|failure>``, ``ep<episode>_seed<seed>``
(an env without a success signal: MuJoCo's), and ``eval_episode_<episode>`` (``--video-layout lerobot``)."""
LINKED_FILES = ("eval_info.json", "episodes.jsonl", "errors.jsonl", "manifest.json", "config.json")


def mean_interval(values: Any) -> tuple[float, float, str]:
    """``(low, high, method)``: a 95% interval of the mean of ``values`` (see the module doc)."""
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    if x.size <= BOOTSTRAP_UP_TO:
        lo, hi = bootstrap_mean_ci(x)
        return lo, hi, "bootstrap"
    if np.isnan(x).any():
        return math.nan, math.nan, "normal"
    half = 1.959963984540054 * float(x.std(ddof=1)) / math.sqrt(x.size)
    m = float(x.mean())
    return m - half, m + half, "normal"


@dataclass
class RunPageInput:
    """What a run page is made from. ``doc`` is the eval_info document; the rest may be missing."""

    doc: Mapping[str, Any]
    page_dir: Path
    """The folder the page is written into (links are relative to it)."""
    manifest: Mapping[str, Any] | None = None
    config: Mapping[str, Any] | None = None
    provenance: Mapping[str, Any] | None = None
    provenance_is_current: bool = False
    """The provenance was collected when the page was written, not when the run ran."""
    task_pages: Mapping[tuple[str, Any], str] = field(default_factory=dict)
    """``(task_group, task_id) -> href`` of each task's own page (suites)."""
    title: str | None = None
    files: Sequence[str] = LINKED_FILES
    _intervals: dict[Any, tuple[float, float, str]] = field(default_factory=dict, repr=False)

    def return_interval(self, key: Any, values: Any) -> tuple[float, float, str]:
        """:func:`mean_interval` of ``values``, computed once per ``key`` (a task index, "all")."""
        if key not in self._intervals:
            self._intervals[key] = mean_interval(values)
        return self._intervals[key]


def overall(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    return doc.get("overall") or {}


def tasks_of(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list(doc.get("per_task") or [])


def metric(task: Mapping[str, Any], name: str, dtype: Any = np.float64) -> np.ndarray:
    return np.asarray((task.get("metrics") or {}).get(name, []), dtype=dtype).reshape(-1)


def short_name(ref: Any, most: int = 48) -> str:
    """A readable name for an env or task reference: ``pkg.module:make_env`` -> ``make_env``;
    longer than ``most`` characters -> cut in the middle."""
    text = str(ref)
    head, sep, tail = text.rpartition(":")
    if sep and head and "/" not in head and tail:
        text = tail
    return text if len(text) <= most else text[: most // 2 - 1] + "…" + text[-(most // 2 - 1):]


def policy_title(ref: Any) -> str:
    """A policy's name for a title: a checkpoint folder's short name (``src/fasteval/assets/cartpole_mlp`` ->
    ``cartpole_mlp``, LeRobot's ``.../checkpoints/005000/pretrained_model`` -> ``5000``) rather than its raw relative
    path (issue 42), as the many-policy pages name policies; other references as :func:`short_name` gives them."""
    from fasteval.types.policy_names import short_names

    text = str(ref)
    if "/" in text and "://" not in text and ":" not in text.rpartition("/")[2]:
        try:
            return short_name(short_names([text])[0])
        except Exception:  # a name the checkpoint rules cannot read: the plain short name
            pass
    return short_name(text)


def task_label(task: Mapping[str, Any]) -> str:
    name, group, tid = task.get("task"), task.get("task_group"), task.get("task_id")
    group_s = short_name(group) if group is not None else None
    if name is not None and str(name) != str(group):
        return f"{group_s}/{tid} {short_name(name)}" if group is not None else short_name(name)
    return f"{group_s}" if tid in (None, 0) else f"{group_s}/{tid}"


def status_of(inp: RunPageInput) -> str:
    meta = inp.doc.get("meta") or {}
    return str((inp.manifest or {}).get("status") or meta.get("status") or "unknown")


def final_errors(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return sorted((e for e in doc.get("errors") or [] if e.get("final")),
                  key=lambda e: (str(e.get("task_group", "")), str(e.get("task_id", "")), e.get("episode_ix", 0)))


def failed_by_task(doc: Mapping[str, Any]) -> dict[tuple[str, str], int]:
    """Episodes that failed for good, per ``(task_group, task_id)`` (``("", "")``: not labelled)."""
    out: dict[tuple[str, str], int] = {}
    for e in final_errors(doc):
        if e.get("kind") == "job":  # a sweep job that failed as a whole: not one episode
            continue
        key = (str(e.get("task_group", "")), str(e.get("task_id", "")))
        out[key] = out.get(key, 0) + 1
    return out


def all_returns(doc: Mapping[str, Any]) -> np.ndarray:
    parts = [metric(t, "sum_rewards") for t in tasks_of(doc)]
    return np.concatenate(parts) if parts else np.zeros(0)


