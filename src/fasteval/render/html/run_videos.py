"""The videos of a run page: found on disk, matched to their episodes, shown grouped by outcome."""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from fasteval.render.html import page
from fasteval.render.words import NO_SIGNAL
from fasteval.render.html.run_input import VIDEO_NAME, RunPageInput, overall, task_label


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


def find_videos(inp: RunPageInput, scan: bool = True) -> list[Video]:
    """The run's videos: the paths ``eval_info.json`` lists (absolute, or relative to the run's
    working directory or to the folder) and (``scan``) any video file under ``<folder>/videos/``. Each is
    matched to its episode record by episode index, seed and the task folder in its path. ``scan=False``:
    the listed paths only (one policy's of a many-policy run, whose folder holds every policy's)."""
    doc = inp.doc
    listed = [Path(p) for p in (overall(doc).get("video_paths") or [])]
    cwd = (inp.provenance or {}).get("cwd")
    found: dict[Path, None] = {}
    for p in listed:
        for candidate in (p, Path(cwd) / p if cwd and not p.is_absolute() else None, inp.page_dir / p, inp.page_dir / "videos" / p.name):
            if candidate is not None and candidate.is_file():
                found[candidate.resolve()] = None
                break
    root = inp.page_dir / "videos"
    if scan and root.is_dir():
        for p in sorted(root.rglob("*")):
            if VIDEO_NAME.search(p.name):
                found[p.resolve()] = None
    records = _EpisodeLookup(doc.get("per_episode"))
    videos = []
    for path in found:
        m = VIDEO_NAME.search(path.name)
        if m is None:
            continue
        ep = int(m["episode"] if m["episode"] is not None else m["lerobot_episode"])
        seed = int(m["seed"]) if m["seed"] is not None else None  # lerobot's names carry no seed: the record's
        record = _match(records.get(ep, seed), path)
        if seed is None:
            seed = int(record["seed"]) if record else ep + int((doc.get("meta") or {}).get("seed") or 0)
        signal = record.get("has_success_signal", True) if record else overall(doc).get("has_success_signal", True)
        if not signal:
            outcome = NO_SIGNAL
        elif m["outcome"] is not None:
            outcome = m["outcome"]
        elif record is not None:
            outcome = "success" if record.get("success") else "failure"
        else:
            outcome = NO_SIGNAL
        task = task_label(record) if record else path.parent.name
        videos.append(Video(path, ep, seed, outcome, task,
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

    def get(self, episode: int, seed: int | None) -> list[Mapping[str, Any]]:
        """The records of ``episode`` with ``seed`` (``None``: any seed)."""
        if self.index is not None:
            if seed is None:
                return [r for (e, _), rs in self.index.items() if e == episode for r in rs]
            return self.index.get((episode, seed), [])
        if self.table is None:
            return []
        c = self.table.columns
        hit = c["episode_ix"] == episode
        if seed is not None:
            hit &= c["seed"] == seed
        rows = np.flatnonzero(hit)
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
            facts = [f"episode {v.episode}", f"seed {v.seed}"] + ([] if v.outcome == NO_SIGNAL else [v.outcome])  # the heading says it once
            if v.sum_reward is not None:
                facts.append(f"return {page.fmt(float(v.sum_reward), 3)}")
            if v.length is not None:
                facts.append(f"{v.length} steps")
            out.append(f'<figure data-episode="{v.episode}" data-seed="{v.seed}" data-outcome="{escape(v.outcome)}">'
                       f'<video controls muted preload="metadata" src="{escape(href)}"></video>'
                       f'<figcaption><b>{escape(v.task)}</b><br>{escape(", ".join(facts))}</figcaption></figure>')
        out.append("</div>")
    return "".join(out)


def side_by_side(columns: list[tuple[str, RunPageInput]], page_dir: Any) -> str:
    """A many-policy run's videos, one column per policy (in the order given: the ranking's) and one row per
    seed that every policy with videos has a video of: the checkpoints side by side on the same seeds. Empty
    when fewer than two policies have videos or they share no seed."""
    found = {name: {(v.episode, v.seed): v for v in find_videos(inp, scan=False)} for name, inp in columns}
    shown = [name for name, _ in columns if found[name]]
    if len(shown) < 2:
        return ""
    seeds = sorted(set.intersection(*(set(found[n]) for n in shown)))
    if not seeds:
        return ""
    head = "".join(f'<th scope="col">{escape(n)}</th>' for n in shown)
    rows = []
    for episode, seed in seeds:
        cells = []
        for name in shown:
            v = found[name][(episode, seed)]
            facts = ([] if v.outcome == NO_SIGNAL else [v.outcome]) + (
                [f"return {page.fmt(float(v.sum_reward), 3)}"] if v.sum_reward is not None else []) + (
                [f"{v.length} steps"] if v.length is not None else [])
            cells.append(f'<td><figure data-policy="{escape(name)}" data-episode="{episode}" data-seed="{seed}" '
                         f'data-outcome="{escape(v.outcome)}"><video controls muted preload="metadata" '
                         f'src="{escape(page.relative_href(v.path, page_dir))}"></video>'
                         f'<figcaption>{escape(", ".join(facts))}</figcaption></figure></td>')
        rows.append(f'<tr data-episode="{episode}" data-seed="{seed}"><th scope="row">episode {episode}<br>seed {seed}'
                    f'</th>{"".join(cells)}</tr>')
    note = page.note(f"Each row is one seed, each column one policy (ranked order): {len(seeds)} seeds every policy "
                     f"shown has a video of. The videos were rendered after the race by replaying the episodes' "
                     f"recorded actions, so they cost only the episodes shown.")
    return (note + '<div class="side-by-side" style="overflow-x:auto"><table id="side-by-side-videos">'
            f'<thead><tr><th scope="col">seed</th>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>')
