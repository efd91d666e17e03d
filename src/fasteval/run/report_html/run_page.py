"""A run's page: the answer at a glance, per-task and per-group tables, plots, videos, where the
time went, errors and provenance, from the run's ``eval_info.json`` document (plain JSON or the
columnar document :meth:`~fasteval.types.results.EvalResult.eval_info_document` gives in memory).

The page aggregates and never lists every episode (a 100,000-episode run's page is the size of
a 100-episode one); it links ``episodes.jsonl`` for the per-episode records.

Numbers shown: success rates with their Wilson 95% interval as ``eval_info.json`` has them (and
the anytime-valid bounds of a ``--stop-when`` run's ``"stopping"`` block when present); mean
returns with a percentile bootstrap 95% interval (2000 resamples, seed 0) up to
:data:`BOOTSTRAP_UP_TO` episodes, and the normal approximation (mean ± 1.96 standard errors)
above, where the two agree and the bootstrap would cost seconds.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from fasteval.run.report_html import page, svg
from fasteval.types.stats import bootstrap_mean_ci

BOOTSTRAP_UP_TO = 5000
MAX_TASK_PLOTS = 120
MAX_ERROR_ROWS = 1000
MAX_TRACEBACKS = 20
NO_SIGNAL = "no success signal"
VIDEO_NAME = re.compile(r"ep(?P<episode>\d+)_seed(?P<seed>-?\d+)_(?P<outcome>success|failure)\.(?:mp4|webm|gif)$")
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


# -- reading the document ---------------------------------------------------------------------------

def _overall(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    return doc.get("overall") or {}


def _tasks(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list(doc.get("per_task") or [])


def _metric(task: Mapping[str, Any], name: str, dtype: Any = np.float64) -> np.ndarray:
    return np.asarray((task.get("metrics") or {}).get(name, []), dtype=dtype).reshape(-1)


def short_name(ref: Any, most: int = 48) -> str:
    """A readable name for an env or task reference: ``pkg.module:make_env`` -> ``make_env``;
    longer than ``most`` characters -> cut in the middle."""
    text = str(ref)
    head, sep, tail = text.rpartition(":")
    if sep and head and "/" not in head and tail:
        text = tail
    return text if len(text) <= most else text[: most // 2 - 1] + "…" + text[-(most // 2 - 1):]


def _task_label(task: Mapping[str, Any]) -> str:
    name, group, tid = task.get("task"), task.get("task_group"), task.get("task_id")
    group_s = short_name(group) if group is not None else None
    if name is not None and str(name) != str(group):
        return f"{group_s}/{tid} {short_name(name)}" if group is not None else short_name(name)
    return f"{group_s}" if tid in (None, 0) else f"{group_s}/{tid}"


def _status(inp: RunPageInput) -> str:
    meta = inp.doc.get("meta") or {}
    return str((inp.manifest or {}).get("status") or meta.get("status") or "unknown")


def _final_errors(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return sorted((e for e in doc.get("errors") or [] if e.get("final")),
                  key=lambda e: (str(e.get("task_group", "")), str(e.get("task_id", "")), e.get("episode_ix", 0)))


def _failed_by_task(doc: Mapping[str, Any]) -> dict[tuple[str, str], int]:
    """Episodes that failed for good, per ``(task_group, task_id)`` (``("", "")``: not labelled)."""
    out: dict[tuple[str, str], int] = {}
    for e in _final_errors(doc):
        if e.get("kind") == "job":  # a sweep job that failed as a whole: not one episode
            continue
        key = (str(e.get("task_group", "")), str(e.get("task_id", "")))
        out[key] = out.get(key, 0) + 1
    return out


# -- sections -----------------------------------------------------------------------------------------

def glance(inp: RunPageInput) -> str:
    doc, o = inp.doc, _overall(inp.doc)
    stopping = doc.get("stopping")
    cards = []
    if not o.get("n_episodes"):
        cards.append(page.card("success rate", "no episodes", "no episode finished", "glance-success", {"value": ""}))
    elif o.get("has_success_signal", True):
        lo, hi = o.get("pc_success_ci95") or [math.nan, math.nan]
        detail = f"Wilson 95% [{page.fmt(lo)}, {page.fmt(hi)}]; {page.fmt(o.get('n_success'))} of {page.fmt(o.get('n_episodes'))}"
        if stopping and stopping.get("metric", "success") == "success":
            detail += (f"<br>anytime-valid {int(round(100 * stopping.get('confidence', 0.95)))}%: "
                       f"[{page.fmt(100 * stopping['cs_low'])}, {page.fmt(100 * stopping['cs_high'])}]")
        cards.append(page.card("success rate", f"{page.fmt(o.get('pc_success'))}%", detail, "glance-success",
                               {"value": o.get("pc_success")}))
    else:
        cards.append(page.card("success rate", NO_SIGNAL, "the env never reported info[\"is_success\"]; compare by return",
                               "glance-success", {"value": ""}))
    returns = _all_returns(doc)
    tasks = _tasks(doc)
    key = 0 if len(tasks) == 1 else "all"  # one task: the same episodes, the same interval
    lo, hi, method = inp.return_interval(key, returns) if returns.size else (None, None, "")
    detail = f"95% {method} [{page.fmt(lo, 3)}, {page.fmt(hi, 3)}]" if returns.size else "no episode finished"
    if stopping and stopping.get("metric") == "return":
        detail += f"<br>anytime-valid: [{page.fmt(stopping['cs_low'], 3)}, {page.fmt(stopping['cs_high'], 3)}]"
    cards.append(page.card("mean return", page.fmt(o.get("avg_sum_reward"), 3) if returns.size else "—", detail, "glance-return",
                           {"value": o.get("avg_sum_reward")}))
    requested = (inp.manifest or {}).get("n_episodes") or (doc.get("meta") or {}).get("n_episodes")
    n = o.get("n_episodes")
    n_detail = f"of {page.fmt(requested)} requested" if requested not in (None, n) else "every requested episode"
    if o.get("n_failed_episodes"):
        n_detail += f"; {page.fmt(o['n_failed_episodes'])} failed for good"
    cards.append(page.card("episodes", page.fmt(n), n_detail, "glance-n", {"value": n}))
    status = _status(inp)
    status_detail = ""
    if status == "interrupted":
        status_detail = "resume with <code>fasteval --resume DIR</code>"
    elif o.get("n_failed_episodes"):
        status_detail = f"{page.fmt(o['n_failed_episodes'])} episodes failed (see Errors)"
    if stopping:
        status_detail += f"{'<br>' if status_detail else ''}stopped by {escape(str(stopping.get('reason')))} at k={page.fmt(stopping.get('k'))}"
    cards.append(f'<div class="card" id="glance-status"><div class="label">status</div><div class="value">'
                 f'{page.badge(status)}</div><div class="detail">{status_detail}</div></div>')
    if n:
        cards.append(page.card("speed", f"{page.fmt(o.get('episodes_per_s'))} ep/s",
                               f"{page.fmt(o.get('steps_per_s'), 0)} env steps/s; {page.fmt(o.get('eval_s'), 2)} s", "glance-speed"))
    return f'<div class="cards">{"".join(cards)}</div>' + _stopping_note(stopping)


def _stopping_note(stopping: Mapping[str, Any] | None) -> str:
    if not stopping:
        return ""
    past = stopping.get("n_computed_past_stop") or 0
    text = (f"Early stopping: rule {stopping.get('rule')!s}, {stopping.get('method') or 'anytime-valid confidence sequence'}; "
            f"the reported episodes are exactly the first k of each task.")
    if past:
        text += f" {past} episodes finished past the stop and are in no aggregate."
    return page.note(text)


def _all_returns(doc: Mapping[str, Any]) -> np.ndarray:
    parts = [_metric(t, "sum_rewards") for t in _tasks(doc)]
    return np.concatenate(parts) if parts else np.zeros(0)


def task_table(inp: RunPageInput) -> str:
    doc = inp.doc
    tasks = _tasks(doc)
    if not tasks:
        return page.note("No episode finished, so there is nothing to tabulate.")
    failed = _failed_by_task(doc)
    single = len(tasks) == 1
    with_stop = any(t.get("stopping") for t in tasks)
    headers = ["task", "n", "successes", "success %", "success 95% CI", "mean return", "return 95% CI", "mean length",
               "failed episodes", "NaN-return episodes"]
    if with_stop:
        headers += ["stop rule", "k", "stopped by", "anytime-valid bounds"]
    rows = []
    for i, t in enumerate(tasks):
        a = t.get("aggregated") or {}
        key = (str(t.get("task_group")), str(t.get("task_id")))
        href = inp.task_pages.get((t.get("task_group"), t.get("task_id")))
        label = _task_label(t)
        cells = [page.link(label, href) if href else page.text(label), page.num(a.get("n_episodes"))]
        if a.get("has_success_signal", True):
            cells += [page.num(a.get("n_success")), page.num(a.get("pc_success")), page.interval(a.get("pc_success_ci95"))]
        else:
            cells += [page.none(NO_SIGNAL), page.none(NO_SIGNAL), page.none("—")]
        lo, hi, _ = inp.return_interval(i, _metric(t, "sum_rewards"))
        n_failed = failed.get(key, 0) + (failed.get(("", ""), 0) if single else 0)
        cells += [page.num(a.get("avg_sum_reward"), 3), page.interval([lo, hi], 3), page.num(a.get("avg_length")),
                  page.num(n_failed), page.num(a.get("n_nan_reward_episodes"))]
        if with_stop:
            cells += _stop_cells(t.get("stopping"))
        rows.append(({"task-group": t.get("task_group"), "task-id": t.get("task_id")}, cells))
    methods = {inp.return_interval(i, _metric(t, "sum_rewards"))[2] for i, t in enumerate(tasks)}
    caption = ("Success: Wilson score 95% interval. Return: " + " / ".join(
        {"bootstrap": "percentile bootstrap of the mean (2000 resamples, seed 0)",
         "normal": f"normal approximation (above {BOOTSTRAP_UP_TO} episodes)"}[m] for m in sorted(methods))
        + ". Click a header to sort.")
    return page.table("per-task", headers, rows, caption=caption) + (
        page.note(f"{NO_SIGNAL}: the env never reported info[\"is_success\"], so a rate would read 0% by construction.")
        if any(not (t.get("aggregated") or {}).get("has_success_signal", True) for t in tasks) else "")


def _stop_cells(stopping: Mapping[str, Any] | None) -> list[page.Cell]:
    if not stopping:
        return [page.none("—")] * 4
    scale = 100.0 if stopping.get("metric", "success") == "success" else 1.0
    bounds = [stopping.get("cs_low"), stopping.get("cs_high")]
    bounds = [b * scale if isinstance(b, (int, float)) else None for b in bounds]
    return [page.text(stopping.get("rule")), page.num(stopping.get("k")), page.text(stopping.get("reason")),
            page.interval(bounds, 1 if scale == 100.0 else 3)]


def group_table(inp: RunPageInput) -> str:
    groups = inp.doc.get("per_group") or {}
    tasks = _tasks(inp.doc)
    if not groups or len(groups) >= len(tasks):
        return ""  # one task per group: the task table says it all
    counts: dict[str, int] = {}
    for t in tasks:
        counts[str(t.get("task_group"))] = counts.get(str(t.get("task_group")), 0) + 1
    rows = []
    for name, a in groups.items():
        signal = a.get("has_success_signal", True)
        cells = [page.text(name), page.num(counts.get(str(name), 0)), page.num(a.get("n_episodes"))]
        cells += ([page.num(a.get("n_success")), page.num(a.get("pc_success")), page.interval(a.get("pc_success_ci95"))]
                  if signal else [page.none(NO_SIGNAL), page.none(NO_SIGNAL), page.none("—")])
        cells += [page.num(a.get("avg_sum_reward"), 3), page.num(a.get("avg_length"))]
        rows.append(({"group": name}, cells))
    return page.table("per-group", ["group", "tasks", "n", "successes", "success %", "success 95% CI", "mean return",
                                    "mean length"], rows)


def plots(inp: RunPageInput) -> str:
    tasks = _tasks(inp.doc)
    if not tasks:
        return ""
    out = ["<h3>Return per task</h3>", '<div class="plots" id="plot-returns">']
    for i, t in enumerate(tasks[:MAX_TASK_PLOTS]):
        out.append(svg.histogram(_metric(t, "sum_rewards"), "return (sum of rewards)", _task_label(t), colour_=svg.colour(i)))
    out.append("</div>")
    if len(tasks) > MAX_TASK_PLOTS:
        out.append(page.note(f"{len(tasks) - MAX_TASK_PLOTS} more tasks not drawn; they are in the table above."))
    signal = [t for t in tasks if (t.get("aggregated") or {}).get("has_success_signal", True)]
    out.append("<h3>Success rate per task</h3>")
    if signal:
        rows = [(_task_label(t), *_rate_and_ci(t)) for t in signal]
        out.append(f'<div class="plots" id="plot-success">{svg.intervals(rows, "success % (Wilson 95% CI)", "success rate per task")}</div>')
    left_out = [_task_label(t) for t in tasks if t not in signal]
    if left_out:
        out.append(page.note(f"not drawn ({NO_SIGNAL}): {', '.join(left_out[:20])}" + (" ..." if len(left_out) > 20 else "")))
    lengths = np.concatenate([_metric(t, "lengths") for t in tasks])
    returns = _all_returns(inp.doc)
    groups = np.concatenate([np.full(_metric(t, "lengths").size, i if len(tasks) <= len(svg.PALETTE) else 0) for i, t in enumerate(tasks)])
    names = [_task_label(t) for t in tasks] if 1 < len(tasks) <= len(svg.PALETTE) else []
    out.append("<h3>Episode length against return</h3>")
    out.append(f'<div id="plot-length-return">{svg.scatter(lengths, returns, "episode length (steps)", "return", "length against return", groups, names)}</div>')
    return "".join(out)


def _rate_and_ci(task: Mapping[str, Any]) -> tuple[float, float, float]:
    a = task.get("aggregated") or {}
    lo, hi = a.get("pc_success_ci95") or [math.nan, math.nan]
    return float(a.get("pc_success", math.nan)), float(lo), float(hi)


# -- videos -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Video:
    path: Path
    episode: int
    seed: int
    outcome: str
    """"success", "failure" or NO_SIGNAL."""
    task: str
    sum_reward: float | None
    length: int | None


def find_videos(inp: RunPageInput) -> list[Video]:
    """The run's videos: the paths ``eval_info.json`` lists (absolute, or relative to the run's
    working directory or to the folder) and any video file under ``<folder>/videos/``. Each is
    matched to its episode record by episode index, seed and the task folder in its path."""
    doc = inp.doc
    listed = [Path(p) for p in (_overall(doc).get("video_paths") or [])]
    cwd = (inp.provenance or {}).get("cwd")
    found: dict[Path, None] = {}
    for p in listed:
        for candidate in (p, Path(cwd) / p if cwd and not p.is_absolute() else None, inp.page_dir / p, inp.page_dir / "videos" / p.name):
            if candidate is not None and candidate.is_file():
                found[candidate.resolve()] = None
                break
    root = inp.page_dir / "videos"
    if root.is_dir():
        for p in sorted(root.rglob("*")):
            if VIDEO_NAME.search(p.name):
                found[p.resolve()] = None
    records = _EpisodeLookup(doc.get("per_episode"))
    videos = []
    for path in found:
        m = VIDEO_NAME.search(path.name)
        if m is None:
            continue
        ep, seed = int(m["episode"]), int(m["seed"])
        record = _match(records.get(ep, seed), path)
        signal = record.get("has_success_signal", True) if record else _overall(doc).get("has_success_signal", True)
        task = _task_label(record) if record else path.parent.name
        videos.append(Video(path, ep, seed, m["outcome"] if signal else NO_SIGNAL, task,
                            record.get("sum_reward") if record else None, record.get("length") if record else None))
    return sorted(videos, key=lambda v: (v.task, v.episode))


class _EpisodeLookup:
    """Episode records by ``(episode_ix, seed)``: from a list of dicts (indexed once), or from an
    :class:`~fasteval.types.results.EpisodeTable` (only the rows asked for are built)."""

    def __init__(self, table: Any):
        self.table = table
        self.index: dict[tuple[int, int], list[Mapping[str, Any]]] | None = None
        if table is not None and not hasattr(table, "columns"):
            self.index = {}
            for r in table:
                self.index.setdefault((int(r["episode_ix"]), int(r["seed"])), []).append(r)

    def get(self, episode: int, seed: int) -> list[Mapping[str, Any]]:
        if self.index is not None:
            return self.index.get((episode, seed), [])
        if self.table is None:
            return []
        c = self.table.columns
        rows = np.flatnonzero((c["episode_ix"] == episode) & (c["seed"] == seed))
        return list(self.table.take(rows)) if rows.size else []


def _match(candidates: list[Mapping[str, Any]], path: Path) -> Mapping[str, Any] | None:
    if len(candidates) <= 1:
        return candidates[0] if candidates else None
    parts = set(path.parts)
    for r in candidates:
        if f"{r.get('task_group')}_{r.get('task_id')}" in parts or str(r.get("task")) in parts:
            return r
    return candidates[0]


def videos_section(inp: RunPageInput, videos: list[Video]) -> str:
    if not videos:
        return ""
    groups = [("failure", "Failures"), ("success", "Successes"), (NO_SIGNAL, f"Episodes ({NO_SIGNAL})")]
    out = []
    for key, title in groups:
        members = [v for v in videos if v.outcome == key]
        if not members:
            continue
        out.append(f'<h3>{escape(title)} ({len(members)})</h3><div class="gallery" data-outcome="{escape(key)}">')
        for v in members:
            href = page.relative_href(v.path, inp.page_dir)
            facts = [f"episode {v.episode}", f"seed {v.seed}", v.outcome]
            if v.sum_reward is not None:
                facts.append(f"return {page.fmt(float(v.sum_reward), 3)}")
            if v.length is not None:
                facts.append(f"{v.length} steps")
            out.append(f'<figure data-episode="{v.episode}" data-seed="{v.seed}" data-outcome="{escape(v.outcome)}">'
                       f'<video controls muted preload="metadata" src="{escape(href)}"></video>'
                       f'<figcaption><b>{escape(v.task)}</b><br>{escape(", ".join(facts))}</figcaption></figure>')
        out.append("</div>")
    return "".join(out)


# -- time, errors, provenance ------------------------------------------------------------------------

def time_section(inp: RunPageInput) -> str:
    timings = {k: float(v) for k, v in (inp.doc.get("timings") or {}).items() if isinstance(v, (int, float))}
    o = _overall(inp.doc)
    meta = inp.doc.get("meta") or {}
    facts = [("engine time", f"{page.fmt(o.get('eval_s'), 3)} s"), ("episodes/s", page.fmt(o.get("episodes_per_s"))),
             ("env steps/s", page.fmt(o.get("steps_per_s"), 0)), ("env steps", page.fmt(o.get("env_steps"))),
             ("dry run", f"{page.fmt(meta.get('dry_run_s'), 4)} s" if meta.get("dry_run_s") is not None else None),
             ("batch", meta.get("batch_size")), ("vectorization", meta.get("vectorization")),
             ("batching", meta.get("batching")), ("kernel backend", meta.get("kernel_backend")),
             ("CUDA graph", meta.get("policy_cuda_graph"))]
    out = [page.kv([f for f in facts if f[1] is not None])]
    if timings:
        total = float(o.get("eval_s") or sum(timings.values()) or 1.0)
        n = o.get("n_episodes") or 0
        rows = [({"stage": k}, [page.text(k), page.num(v, 4), page.num(100.0 * v / total),
                                page.num(1000.0 * v / n, 3) if n else page.none("—")]) for k, v in timings.items()]
        out.append(page.table("stages", ["stage", "seconds", "% of engine time", "ms per episode"], rows))
        out.append(svg.bars(list(timings.items()), "seconds", "time per stage"))
    return "".join(out)


def errors_section(inp: RunPageInput) -> str:
    doc = inp.doc
    errors = list(doc.get("errors") or [])
    if not errors:
        return page.note("No env or policy error: every episode ran to its end on its first attempt.")
    final = _final_errors(doc)
    retried = len(errors) - len(final)
    jobs = sum(1 for e in final if e.get("kind") == "job")
    if jobs:
        out = [page.note(f"{jobs} sweep jobs failed as a whole (their seed blocks have no episodes stored).")]
    else:
        out = [page.note(f"{len(final)} episodes failed for good (they are in no average); {retried} errors were retried "
                         "and their episodes then finished (or failed later). Every record is in errors.jsonl.")]
    if final:
        rows = []
        for e in final[:MAX_ERROR_ROWS]:
            task = f"{e.get('task_group')}/{e.get('task_id')}" if e.get("task_group") is not None else ""
            rows.append(({"episode": e.get("episode_ix"), "seed": e.get("seed")},
                         [page.num(e.get("episode_ix")), page.num(e.get("seed")), page.text(task), page.text(e.get("stage")),
                          page.num(e.get("step")), page.num(e.get("attempt")), page.text(_first_line(e.get("error")))]))
        out.append(page.table("errors", ["episode", "seed", "task", "stage", "step", "attempt", "cause"], rows))
        if len(final) > MAX_ERROR_ROWS:
            out.append(page.note(f"... and {len(final) - MAX_ERROR_ROWS} more failed episodes (all in errors.jsonl)."))
        traces = [e for e in final if e.get("traceback")][:MAX_TRACEBACKS]
        for e in traces:
            out.append(f"<details><summary>traceback of episode {escape(str(e.get('episode_ix')))} (seed "
                       f"{escape(str(e.get('seed')))})</summary><pre>{escape(str(e['traceback']))}</pre></details>")
    return "".join(out)


def _first_line(text: Any) -> str:
    text = str(text or "").strip()
    line = text.splitlines()[0] if text else "(no message)"
    return line if len(line) <= 300 else line[:297] + "..."


def provenance_section(inp: RunPageInput) -> str:
    prov = dict(inp.provenance or {})
    manifest, meta = dict(inp.manifest or {}), dict(inp.doc.get("meta") or {})
    versions = dict(prov.get("versions") or {})
    versions.setdefault("fasteval", manifest.get("fasteval_version") or meta.get("fasteval_version"))
    git = prov.get("git") or {}
    mach = prov.get("machine") or {}
    seed, n = manifest.get("seed", meta.get("seed")), manifest.get("n_episodes", meta.get("n_episodes"))
    per_task = manifest.get("n_episodes_per_task")
    seeds = f"{seed} .. {seed + n - 1} (episode i uses seed {seed} + i)" if isinstance(seed, int) and isinstance(n, int) else None
    if isinstance(seed, int) and isinstance(per_task, int):
        seeds = f"{seed} .. {seed + per_task - 1} in every task (episode i uses seed {seed} + i)"
    if isinstance(meta.get("seeds"), str):
        seeds = meta["seeds"]
    gpu = mach.get("gpu")
    pairs = [
        ("command", prov.get("command")), ("date", prov.get("date")), ("working directory", prov.get("cwd")),
        ("policy", json.dumps(manifest.get("policy", meta.get("policy")), default=str) if (manifest.get("policy") or meta.get("policy")) else None),
        ("policy weight digest (sha256)", manifest.get("policy_digest")),
        ("env", meta.get("env") or manifest.get("env")),
        ("env kwargs", json.dumps(manifest.get("env_kwargs", meta.get("env_kwargs")), default=str)
         if manifest.get("env_kwargs", meta.get("env_kwargs")) is not None else None),
        ("seeds", seeds), ("device", meta.get("device")),
        ("git commit", (git.get("commit") or "") + (" (uncommitted changes)" if git.get("dirty") else "") if git else None),
    ]
    if not prov:  # nothing recorded (a sweep cell): say so once instead of a column of blanks
        pairs = [(k, v) for k, v in pairs if v is not None]
        pairs.append(("versions, machine", "not recorded by the sweep store"))
    pairs += [] if not prov else [(f"{name} version", v or ("not installed" if prov.get("versions") else None)) for name, v in versions.items()
              if v is not None or name in ("fasteval", "torch", "gymnasium", "lerobot")]
    pairs += [] if not prov else [("python", mach.get("python")), ("machine", ", ".join(str(x) for x in (mach.get("hostname"), mach.get("platform")) if x) or None),
              ("CPU", f"{mach.get('cpu')} ({mach.get('cpu_count')} cores)" if mach.get("cpu") else None),
              ("memory", f"{mach.get('memory_gib')} GiB" if mach.get("memory_gib") else None),
              ("GPU", gpu if gpu else ("none" if mach else None))]
    out = []
    if inp.provenance_is_current:
        out.append(page.note("The run did not record its versions and machine; those below were read when this page was "
                             "written, and may differ from the run's."))
    out.append(page.kv([(k, v) for k, v in pairs]))
    config = inp.config or manifest.get("spec")
    if config:
        out.append("<h3>Resolved config</h3><pre id=\"config\">" + escape(json.dumps(config, indent=2, default=str)) + "</pre>")
    links = [f'<a href="{page.relative_href(inp.page_dir / name, inp.page_dir)}">{escape(name)}</a>'
             for name in inp.files if (inp.page_dir / name).is_file()]
    if links:
        out.append("<p>Files: " + " · ".join(links) + " (every episode's record is in episodes.jsonl)</p>")
    return "".join(out)


def render_run_page(inp: RunPageInput) -> str:
    """The whole page as one HTML string."""
    meta = inp.doc.get("meta") or {}
    o = _overall(inp.doc)
    policy = (inp.manifest or {}).get("policy", meta.get("policy"))
    policy_text = policy if isinstance(policy, str) else json.dumps(policy, default=str)
    env = meta.get("env") or (inp.manifest or {}).get("env")
    title = inp.title or f"fasteval: {policy_text} on {env}"
    date = (inp.provenance or {}).get("date")
    subtitle = (f"{page.badge(_status(inp))} {page.fmt(o.get('n_episodes'))} episodes"
                + (f" · {escape(str(date))}" if date else ""))
    videos = find_videos(inp)
    sections = [
        ("glance", "At a glance", glance(inp)),
        ("tasks", "Per task", task_table(inp)),
        ("groups", "Per group", group_table(inp)),
        ("videos", f"Videos ({len(videos)})", videos_section(inp, videos)),
        ("plots", "Plots", plots(inp)),
        ("time", "Where the time went", time_section(inp)),
        ("errors", "Errors", errors_section(inp)),
        ("provenance", "Provenance", provenance_section(inp)),
    ]
    return page.document(title, subtitle, sections, "run")
