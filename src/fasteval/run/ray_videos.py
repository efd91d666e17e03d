"""Videos of a run on Ray (``--backend ray --videos K``): the kept episodes replayed in the driver after the run.

The workers render nothing. Once every block is back, the driver knows each episode's outcome, so it picks the
videos as a local run does (:func:`video_episodes`: the K smallest episode indices among the episodes that
count, the ones that failed or succeeded for ``video_select`` ``failures`` / ``successes``; ``per-task`` is
``first`` in one run), then runs exactly those episodes again in a local engine of the same spec that
renders them (``video_select first`` with K past the last of them: every episode it runs), with their seeds. Episode ``i`` is defined by
its seed, so the replay is the episode the workers ran: checked, row against row, and a replay that differs
(an env that is not deterministic given its seed) is dropped with a warning, never kept as a video of
another episode. The driver needs the env and the policy (the run's own spec) to do this.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from fasteval.types.spec import EvalSpec

SAME = ("sum_reward", "length", "success")
"""What a replayed episode must share with the worker's run of it."""


def video_episodes(spec: EvalSpec, ledger: Any, k: int | None = None) -> list[int]:
    """The episode indices a local run of ``spec`` keeps videos of, read off the finished ``ledger``
    (``k``: a stop rule's decision, the episodes that count are ``0..k-1``)."""
    ok = ledger.finished & ~ledger.failed
    if k is not None:
        ok &= ledger.episode_ids < k
    if spec.video_select == "failures":
        ok &= ~ledger.success
    elif spec.video_select == "successes":
        ok &= ledger.success
    return sorted(int(i) for i in ledger.episode_ids[ok])[: int(spec.max_episodes_rendered)]


def replay_videos(spec: EvalSpec, ledger: Any, k: int | None = None) -> tuple[str, ...]:
    """Render the videos a local run of ``spec`` keeps (see the module docstring); their paths, in episode order."""
    from fasteval.robot.recording import check_renderable
    from fasteval.run.engine import Engine

    chosen = video_episodes(spec, ledger, k)
    if not chosen:
        return ()
    # "first" renders the episodes i < K of those it runs: with K past the last chosen, every chosen one
    replay = spec.replace(video_select="first", max_episodes_rendered=chosen[-1] + 1, return_episode_data=False,
                          stop_when=None, design="anytime")
    engine = Engine(replay, n_slots=min(spec.n_slots, len(chosen)))
    try:
        check_renderable(engine)
        segment = engine.run_segment(episodes=chosen, seed=ledger.seed)
    finally:
        engine.close()
    paths = tuple(str(p) for p in segment.outputs.get("video_paths", ()))
    differ = _differing(ledger, segment.ledger, chosen)
    if differ:
        warnings.warn(f"--backend ray --videos: the replay of episodes {differ[:10]} in the driver differs from the "
                      f"workers' run (the env is not deterministic given its seed); their videos are dropped.",
                      RuntimeWarning, stacklevel=2)
        kept = []
        for path in paths:
            if _episode_of(path) in differ:
                Path(path).unlink(missing_ok=True)
            else:
                kept.append(path)
        paths = tuple(kept)
    return paths


def _differing(ran: Any, replayed: Any, chosen: list[int]) -> list[int]:
    """The episodes of ``chosen`` whose replay's row differs from the workers' (or that did not finish)."""
    where = {int(i): r for r, i in enumerate(ran.episode_ids.tolist())}
    again = {int(i): r for r, i in enumerate(replayed.episode_ids.tolist())}
    out = []
    for ix in chosen:
        a, b = where[ix], again.get(ix)
        if b is None or not replayed.finished[b] or replayed.failed[b] or any(
                not np.array_equal(getattr(ran, c)[a], getattr(replayed, c)[b]) for c in SAME):
            out.append(ix)
    return out


def _episode_of(path: str) -> int | None:
    """The episode index in a video's file name (``ep000012_seed...`` or LeRobot's ``eval_episode_12.mp4``)."""
    match = re.search(r"(?:^ep|eval_episode_)(\d+)", Path(path).name)
    return int(match.group(1)) if match else None
