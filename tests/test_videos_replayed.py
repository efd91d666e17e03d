"""``first`` videos are replayed after their episodes (fasteval.robot.recording): no slot of the run renders a
frame, so a chunking policy's unread observations stay skipped with videos on, and each replayed video is, frame
for frame, the video a recording during the run gives (``FASTEVAL_LIVE_VIDEOS=1``). Envs a replay cannot repeat
bit for bit are recorded during the run, and the run's ``meta["videos"]`` says so.
"""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from fasteval import evaluate
from fasteval.core.unread import OFF_VARIABLE
from fasteval.robot import recording
from fasteval.robot.video_encoder import VideoEncoder
from fasteval.testing import ParityPolicy
from fasteval.testing.envs import KnownAnswerEnv
from tests.test_unread import CARTPOLE, CartChunks, outcomes


@pytest.fixture
def frames(monkeypatch):
    """Every frame handed to a video writer, by episode (a replay's key is ``("replay", episode)``)."""
    seen: dict[int, list[np.ndarray]] = {}
    real = VideoEncoder._do_frame

    def spy(self, key, frame):
        if key in self._writers:
            seen.setdefault(key[1] if isinstance(key, tuple) else key, []).append(np.array(frame, copy=True))
        real(self, key, frame)

    monkeypatch.setattr(VideoEncoder, "_do_frame", spy)
    return seen


def _run(tmp_path, name, k, batch, vectorization, layout="fasteval"):
    policy = CartChunks(k)
    result = evaluate(env=CARTPOLE, policy=policy, n_episodes=6, batch_size=batch, vectorization=vectorization,
                      max_steps=40, seed=3, max_episodes_rendered=3, videos_dir=str(tmp_path / name),
                      video_layout=layout)
    return result


@pytest.mark.parametrize("k", [1, 3, 8])
@pytest.mark.parametrize("batch, vectorization", [(1, "sync"), (4, "sync"), (4, "async")])
def test_replayed_first_videos_are_the_videos_recorded_during_the_run(k, batch, vectorization, tmp_path, frames,
                                                                       monkeypatch):
    """Pixel CartPole with a policy that reads every k-th observation: the run with replayed videos skips unread
    frames, the run recording during it does not; the episodes, the video files' names and every frame of every
    video are the same, bit for bit."""
    monkeypatch.setenv(recording.LIVE_VIDEOS_VARIABLE, "1")
    live = _run(tmp_path, "live", k, batch, vectorization)
    live_frames = {e: list(f) for e, f in frames.items()}
    frames.clear()
    monkeypatch.delenv(recording.LIVE_VIDEOS_VARIABLE)
    replayed = _run(tmp_path, "replayed", k, batch, vectorization)
    assert live.meta["videos"] == f"rendered during the run ({recording.LIVE_VIDEOS_VARIABLE}=1)"
    assert live.meta["unread_observations"] == "off (a recorder reads every observation)"
    assert replayed.meta["videos"] == recording.REPLAYED
    assert replayed.meta["unread_observations"] == "on"
    assert outcomes(replayed) == outcomes(live)
    names = [Path(p).relative_to(tmp_path / "replayed") for p in replayed.video_paths]
    assert len(names) == 3 and names == [Path(p).relative_to(tmp_path / "live") for p in live.video_paths]
    assert sorted(frames) == sorted(live_frames) == [0, 1, 2]
    for episode, want in live_frames.items():
        got = frames[episode]
        assert len(got) == len(want) == live.per_episode[episode]["length"] + 1
        for i, (mine, theirs) in enumerate(zip(got, want)):
            assert mine.tobytes() == theirs.tobytes(), (episode, i)


def test_lerobot_layout_is_kept_when_replayed(tmp_path, frames):
    result = _run(tmp_path, "lerobot", 4, 2, "sync", layout="lerobot")
    assert [Path(p).name for p in result.video_paths] == ["eval_episode_0.mp4", "eval_episode_1.mp4",
                                                          "eval_episode_2.mp4"]
    assert all(Path(p).parent == tmp_path / "lerobot" for p in result.video_paths)
    assert result.meta["videos"] == recording.REPLAYED and result.meta["unread_observations"] == "on"


def test_skipping_turned_off_by_hand_still_replays(tmp_path, frames, monkeypatch):
    """Videos and skipping are decided apart: without skipping, the videos are still replayed (no frame in the loop)."""
    monkeypatch.setenv(OFF_VARIABLE, "1")
    result = _run(tmp_path, "noskip", 4, 2, "sync")
    assert result.meta["videos"] == recording.REPLAYED and result.meta["unread_observations"].startswith("off")
    assert len(result.video_paths) == 3


def test_envs_a_replay_cannot_repeat_are_recorded_during_the_run():
    """Declared, never probed: envs not bit-reproducible by themselves (PushT's pymunk, LeRobot's Meta-World whose
    first frame depends on the episode its env ran before), and live env objects, are recorded during the run;
    outcome-chosen videos are replayed whatever the env (checked to a tolerance, as before)."""
    reason = recording.live_reason
    assert reason(CARTPOLE, {}, "first", environ={}) is None
    assert reason("CartPole-v1", {}, "per-task", environ={}) is None
    assert "pymunk" in reason("fasteval.robot.fast_envs.pusht:make_pusht", {}, "first", environ={})
    assert "pymunk" in reason("gym_pusht/PushT-v0", {}, "first", environ={})
    assert "Meta-World" in reason("fasteval.robot.lerobot.envs:make_env", {"type": "metaworld"}, "first", environ={})
    assert "live env object" in reason(KnownAnswerEnv(), {}, "first", environ={})
    assert reason("gym_pusht/PushT-v0", {}, "failures", environ={}) is None
    assert reason(CARTPOLE, {}, "first", environ={recording.LIVE_VIDEOS_VARIABLE: "1"}) == "FASTEVAL_LIVE_VIDEOS=1"


class NudgedEnv(KnownAnswerEnv):
    """Each instance adds 1e-12 times its own number to every reward: within the outcome replays' tolerance, and
    not the episode bit for bit."""

    made = 0

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        NudgedEnv.made += 1
        self.nudge = 1e-12 * NudgedEnv.made

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward + self.nudge, terminated, truncated, info


def make_nudged_env(**kwargs) -> NudgedEnv:
    return NudgedEnv(**kwargs)


def test_a_first_replay_must_be_its_episode_bit_for_bit(tmp_path):
    """A ``first`` video stands in for the episode's own frames: a replay whose return differs in its last bits is
    dropped with a warning that names the way out (FASTEVAL_LIVE_VIDEOS=1)."""
    NudgedEnv.made = 0
    with pytest.warns(RuntimeWarning, match="FASTEVAL_LIVE_VIDEOS=1"):
        result = evaluate(env=f"{__name__}:make_nudged_env", policy=ParityPolicy(), n_episodes=3, batch_size=1,
                          seed=0, max_episodes_rendered=2, videos_dir=str(tmp_path))
    assert list(result.video_paths) == []
    assert not [p for p in Path(tmp_path).rglob("*") if p.is_file()]


class OneCallAtATime(gym.Wrapper):
    """Pixel CartPole that notes every time two threads are inside env calls at once (each call sleeps 1 ms
    inside, so an overlap is not a rare race). gymnasium's pygame renderer is not thread-safe: such an overlap
    changed a pixel observation, and with it an episode (fasteval.core.env_lock)."""

    inside = 0
    overlaps = 0
    guard = threading.Lock()

    @contextlib.contextmanager
    def _one_call(self):
        with OneCallAtATime.guard:
            OneCallAtATime.inside += 1
            OneCallAtATime.overlaps += OneCallAtATime.inside > 1
        time.sleep(0.001)
        try:
            yield
        finally:
            with OneCallAtATime.guard:
                OneCallAtATime.inside -= 1

    def step(self, action):
        with self._one_call():
            return self.env.step(action)

    def reset(self, **kwargs):
        with self._one_call():
            return self.env.reset(**kwargs)

    def render(self):
        with self._one_call():
            return self.env.render()


def make_guarded_cartpole(**kwargs):
    from fasteval.testing.envs import make_pixel_cartpole

    return OneCallAtATime(make_pixel_cartpole(**kwargs))


@pytest.mark.parametrize("select", ["first", "failures"])
def test_replays_never_call_an_env_while_the_loop_does(select, tmp_path):
    """Sync envs step in the main thread while the encoder's thread replays episodes: the two never step, reset
    or render at the same time, and the replayed videos are still written."""
    OneCallAtATime.inside = OneCallAtATime.overlaps = 0
    result = evaluate(env=f"{__name__}:make_guarded_cartpole", policy=CartChunks(4), n_episodes=8, batch_size=2,
                      max_steps=30, seed=3, max_episodes_rendered=3, video_select=select,
                      videos_dir=str(tmp_path))
    assert result.meta["videos"] == recording.REPLAYED
    assert len(result.video_paths) >= 1
    assert OneCallAtATime.overlaps == 0


@pytest.mark.parametrize("select", ["first", "failures"])
def test_a_segment_of_scattered_episodes_replays_every_kept_one(select, tmp_path):
    """A resume (or Ray's driver) runs episodes such as [1, 3, 6]: ledger rows are not episode indices, and every
    kept episode is replayed at the end, the largest too (a bug kept only those below the number of rows)."""
    from fasteval.run.engine import Engine
    from fasteval.types.spec import EvalSpec

    from tests.test_videos import KA

    spec = EvalSpec(env=KA, policy=ParityPolicy(), n_episodes=7, batch_size=2, seed=1, device="cpu",
                    max_episodes_rendered=7, video_select=select, videos_dir=str(tmp_path))
    engine = Engine(spec, n_slots=2)
    try:
        segment = engine.run_segment(episodes=[1, 3, 6], seed=1)
    finally:
        engine.close()
    success = dict(zip(segment.ledger.episode_ids.tolist(), segment.ledger.success.tolist()))
    want = [e for e in (1, 3, 6) if select == "first" or not success[e]]
    assert len(want) >= 2
    names = sorted(Path(p).name for p in segment.outputs.get("video_paths", ()))
    assert [int(n[2:8]) for n in names] == want
