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

from fasteval.types.stats import BOOTSTRAP_UP_TO, mean_interval  # noqa: F401  (the page's interval, as recorded)

MAX_TASK_PLOTS = 120
MAX_ERROR_ROWS = 1000
MAX_TRACEBACKS = 20
VIDEO_NAME = re.compile(r"(?:ep(?P<episode>\d+)_seed(?P<seed>-?\d+)(?:_(?P<outcome>success|failure))?"
                        r"|eval_episode_(?P<lerobot_episode>\d+))\.(?:mp4|webm|gif)$")
"""The names recording.video_path gives: ``ep<episode>_seed<seed>_<success|failure>``, ``ep<episode>_seed<seed>``
(an env without a success signal: MuJoCo's), and ``eval_episode_<episode>`` (``--video-layout lerobot``)."""
LINKED_FILES = ("eval_info.json", "episodes.jsonl", "errors.jsonl", "manifest.json", "config.json")


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
        """The 95% interval of a mean return the document records (``avg_sum_reward_ci95`` of a task's aggregate:
        ``key`` its index; of a group: ``("group", name)``; of the run: ``"all"``), or, for a document written
        before it recorded them, :func:`mean_interval` of ``values``, computed once per ``key``."""
        if key not in self._intervals:
            stored = recorded_return_interval(self.doc, key)
            self._intervals[key] = stored if stored is not None else mean_interval(values)
        return self._intervals[key]


def recorded_return_interval(doc: Mapping[str, Any], key: Any) -> tuple[float, float, str] | None:
    """The ``(low, high, method)`` a document records for ``key`` (see :meth:`RunPageInput.return_interval`)."""
    if key == "all":
        agg = doc.get("overall") or {}
    elif isinstance(key, tuple) and key[:1] == ("group",):
        agg = (doc.get("per_group") or {}).get(key[1]) or {}
    elif isinstance(key, int) and 0 <= key < len(doc.get("per_task") or []):
        agg = (doc["per_task"][key] or {}).get("aggregated") or {}
    else:
        return None
    ci, method = agg.get(RETURN_CI), agg.get(RETURN_CI + "_method")
    if not isinstance(ci, (list, tuple)) or len(ci) != 2 or method is None:
        return None
    return (math.nan if ci[0] is None else float(ci[0]), math.nan if ci[1] is None else float(ci[1]), str(method))


RETURN_CI = "avg_sum_reward_ci95"


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


