"""Which episodes get a video (``--videos K --video-select first|failures|successes|per-task``), the
file names (task, episode, seed, outcome), and mp4s that decode to exactly ``length + 1`` frames.

Outcomes come from ``KnownAnswerEnv`` (success iff ``s % 3 == 0``, or ``s % 6 == 1`` with more than
one step), so the chosen episodes are known in advance.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from click.testing import CliRunner

from fasteval import evaluate
from fasteval.doors.cli import main
from fasteval.types.errors import UserInputError
from fasteval.robot.recording import VideoSelection, task_label, video_path
from fasteval.types.spec import EvalSpec
from fasteval.testing import ParityPolicy, expected_episode

KA = "fasteval.testing.envs:make_known_answer_env"
KA_DIR = "fasteval.testing.envs_make_known_answer_env"


def outcome(seed: int) -> bool:
    return expected_episode(seed, lambda obs: int(round(float(obs[-1]))))["success"]


def decoded_frames(path):
    import imageio.v2 as imageio

    with imageio.get_reader(path) as reader:
        return [np.asarray(frame) for frame in reader]


def name(episode: int, seed: int, success: bool) -> str:
    return f"ep{episode:06d}_seed{seed}_{'success' if success else 'failure'}.mp4"


# -- the selection rule, against a plain model ----------------------------------------------------
def simulate(mode: str, k: int, outcomes: list[bool], batch: int, rng: np.random.Generator) -> list[int]:
    """Episodes start in index order on ``batch`` slots and finish in a random order; returns the kept ones."""
    selection = VideoSelection(mode, k)
    kept: set[int] = set()
    running: list[int] = []
    rendered: set[int] = set()
    next_episode = 0
    while next_episode < len(outcomes) or running:
        while len(running) < batch and next_episode < len(outcomes):
            if selection.wanted(next_episode):
                rendered.add(next_episode)
            running.append(next_episode)
            next_episode += 1
        for episode in list(rendered & set(running)):  # a step: stop recording what can no longer be kept
            if not selection.wanted(episode):
                rendered.discard(episode)
        done = running.pop(int(rng.integers(len(running))))
        if done in rendered:
            keep, dropped = selection.keep(done, outcomes[done])
            if keep:
                kept.add(done)
            kept -= set(dropped)
    return sorted(kept)


@pytest.mark.parametrize("mode", ["first", "failures", "successes", "per-task"])
def test_selection_keeps_the_k_smallest_matching_indices_in_any_order(mode):
    rng = np.random.default_rng(0)  # fixed: the test is the same every run
    for trial in range(200):
        n = int(rng.integers(1, 30))
        outcomes = [bool(x) for x in rng.random(n) < rng.random()]
        k = int(rng.integers(0, 6))
        batch = int(rng.integers(1, 9))
        if mode in ("first", "per-task"):
            want = list(range(min(k, n)))
        else:
            want = [i for i in range(n) if outcomes[i] == (mode == "successes")][:k]
        assert simulate(mode, k, outcomes, batch, rng) == want, (trial, mode, k, batch, outcomes)


def test_names_and_labels():
    assert str(video_path("v", "push-v3", 12, 1012, True)).replace(os.sep, "/") == "v/push-v3/ep000012_seed1012_success.mp4"
    assert str(video_path("v", "gym_pusht/PushT-v0", 3, 3, False)).replace(os.sep, "/") == "v/gym_pusht_PushT-v0/ep000003_seed3_failure.mp4"
    assert task_label("fasteval.doors.suites:make_metaworld_env", {"task": "push-v3"}) == "push-v3"
    assert task_label("Meta-World/MT1", {"env_name": "reach-v3"}) == "reach-v3"
    assert task_label("CartPole-v1", {}) == "CartPole-v1"
    with pytest.raises(UserInputError, match="video_select"):
        EvalSpec(env="CartPole-v1", video_select="worst")


# -- end to end ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["failures", "successes"])
def test_outcome_selection_is_the_same_at_every_batch_size(tmp_path, mode):
    seed, n, k = 10, 12, 2
    matching = [i for i in range(n) if outcome(seed + i) == (mode == "successes")][:k]
    want = [name(i, seed + i, mode == "successes") for i in matching]
    for batch in (1, 3, 12):
        folder = tmp_path / f"b{batch}"
        result = evaluate(env=KA, policy=ParityPolicy(), n_episodes=n, batch_size=batch, seed=seed,
                          max_episodes_rendered=k, video_select=mode, videos_dir=str(folder))
        assert [os.path.basename(p) for p in result.video_paths] == want, batch
        assert sorted(os.listdir(folder / KA_DIR)) == sorted(want)  # nothing else: no spools, no dropped videos
        lengths = {r["episode_ix"]: r["length"] for r in result.per_episode}
        for episode, path in zip(matching, result.video_paths):
            assert len(decoded_frames(path)) == lengths[episode] + 1


def test_fewer_matches_than_k_gives_what_there_is(tmp_path):
    result = evaluate(env=KA, policy=ParityPolicy(), n_episodes=3, batch_size=2, seed=0, max_episodes_rendered=5,
                      video_select="failures", videos_dir=str(tmp_path))
    assert [os.path.basename(p) for p in result.video_paths] == [name(2, 2, False)]  # seeds 0, 1 succeed


def test_cli_videos_and_the_lerobot_alias_write_readable_mp4s(tmp_path):
    runner = CliRunner()
    base = ["--env", KA, "--policy", "fasteval.testing.policies:ParityPolicy", "-n", "6", "-b", "4", "--seed", "1"]
    a = runner.invoke(main, [*base, "--videos", "2", "-o", str(tmp_path / "a")])
    b = runner.invoke(main, [*base, "--max-episodes-rendered", "2", "-o", str(tmp_path / "b")])
    assert a.exit_code == 0 and b.exit_code == 0, a.output + b.output
    info = json.loads((tmp_path / "a" / "eval_info.json").read_text())
    want = [name(r["episode_ix"], r["seed"], r["success"]) for r in info["per_episode"][:2]]
    for run in ("a", "b"):
        folder = tmp_path / run / "videos" / KA_DIR
        assert sorted(os.listdir(folder)) == want
        for record, file in zip(info["per_episode"], want):
            assert len(decoded_frames(folder / file)) == record["length"] + 1
    s = runner.invoke(main, [*base, "--videos", "1", "--video-select", "successes", "-o", str(tmp_path / "s")])
    assert s.exit_code == 0, s.output
    assert os.listdir(tmp_path / "s" / "videos" / KA_DIR) == [name(0, 1, True)]  # seed 1: s % 6 == 1, 8 steps
    bad = runner.invoke(main, [*base, "--videos", "1", "--video-select", "worst", "-o", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "--video-select" in bad.output
