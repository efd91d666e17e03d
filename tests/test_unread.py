"""Unread observations are skipped exactly (fasteval.core.unread, fasteval.robot.env_kinds.unread).

A chunking policy with ``n_action_steps`` k reads one observation per k steps; the envs skip the others' work
(PushT: the render). With and without skipping, across batch sizes and the worker pool, every episode's
rewards, success and length are bitwise equal, and so is every observation the policy reads. A skipped
observation's row holds the marker (255 pixels, NaN positions): the policy turns a marked row into NaN
actions, so a marked row it used would end its episode with a bad action, which the equality rules out.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch
from torch import nn

from fasteval import evaluate
from fasteval.core.capabilities import Capabilities
from fasteval.core.unread import OFF_VARIABLE, is_marked, marker_value, marker_writer, skip_decision

needs_pusht = pytest.mark.skipif(importlib.util.find_spec("gym_pusht") is None,
                                 reason="PushT needs gym-pusht: pip install 'fasteval[pusht]'")
FAST_PUSHT = "fasteval.robot.fast_envs.pusht:make_pusht"
PIXELS = {"obs_type": "pixels_agent_pos", "render_mode": "rgb_array"}


class ReadsEveryK(nn.Module):
    """PushT: chunks of 8 actions from the agent position and the image's pixel sum (exact integers, row by row);
    executes the first ``k``. Records every batch it is called with. A marked row gives NaN actions."""

    def __init__(self, k: int):
        super().__init__()
        self.n_action_steps = k
        self.calls: list[dict[str, np.ndarray]] = []

    def forward(self, obs):
        pixels, pos = obs["pixels"], obs["agent_pos"]
        self.calls.append({"pixels": pixels.numpy().copy(), "agent_pos": pos.numpy().copy()})
        marked = (pixels == 255).flatten(1).all(1)
        shift = (pixels.long().flatten(1).sum(1) % 41 - 20).to(pos.dtype)
        base = torch.where(marked[:, None], torch.full_like(pos, float("nan")), pos + shift[:, None])
        offsets = torch.arange(8, dtype=pos.dtype)[None, :, None] * torch.tensor([3.0, -2.0], dtype=pos.dtype)
        return (base[:, None, :] + offsets).clamp(0, 512)


class CartChunks(nn.Module):
    """Pixel CartPole: chunks of 8 discrete actions from the pole's state and the frame's pixel sum (exact, row by
    row); executes the first ``k``. Records every batch. A marked row asks for action 7 (out of range)."""

    def __init__(self, k: int):
        super().__init__()
        self.n_action_steps = k
        self.calls: list[dict[str, np.ndarray]] = []

    def forward(self, obs):
        pixels, state = obs["pixels"], obs["state"]
        self.calls.append({"pixels": pixels.numpy().copy(), "state": state.numpy().copy()})
        marked = (pixels == 255).flatten(1).all(1)
        push = (state[:, 2] > 0.04).long()  # a poor controller: the pole falls after a seed-dependent time
        wobble = pixels.long().flatten(1).sum(1) % 2  # the frame matters: a wrong frame changes the episode
        first = torch.where(marked, torch.full_like(push, 7), push ^ (wobble & (state[:, 0].abs() < 0.05).long()))
        return torch.stack([first] + [torch.where(marked, torch.full_like(push, 7), push)] * 7, dim=1)


CARTPOLE = "fasteval.testing.envs:make_pixel_cartpole"


def run(k: int, batch: int, vectorization: str = "sync", env: str = FAST_PUSHT, n_episodes: int = 5, **kw):
    policy = (ReadsEveryK if env != CARTPOLE else CartChunks)(k)
    env_kwargs = PIXELS if env != CARTPOLE else {}
    result = evaluate(env=env, env_kwargs=env_kwargs, policy=policy, n_episodes=n_episodes, batch_size=batch,
                      vectorization=vectorization, max_steps=40, seed=3, **kw)
    return result, policy


def outcomes(result):
    return [(r["sum_reward"], r["max_reward"], r["success"], r["length"]) for r in result.per_episode]


@pytest.mark.parametrize("k", [1, 3, 8])
def test_pixel_env_skips_unread_frames_exactly(k, monkeypatch):
    """Bit for bit, per episode and per observation read, across batch sizes and the pool."""
    monkeypatch.setenv(OFF_VARIABLE, "1")
    reference, ref_policy = run(k, 1, env=CARTPOLE, n_episodes=6)
    assert reference.meta["unread_observations"] == f"off ({OFF_VARIABLE}=1)"
    want = outcomes(reference)
    assert len({row[3] for row in want}) > 1  # episodes of several lengths: slots go out of step
    monkeypatch.delenv(OFF_VARIABLE)
    for batch, vectorization in [(1, "sync"), (4, "sync"), (4, "async")]:
        result, policy = run(k, batch, vectorization, env=CARTPOLE, n_episodes=6)
        assert result.meta["unread_observations"] == "on", (batch, vectorization)
        assert outcomes(result) == want, (k, batch, vectorization)
        assert result.meta["n_out_of_range_actions"] == 0  # no marked row was ever used
        if batch == 1:  # each call reads its one row: the same observations, in the same order
            assert len(policy.calls) == len(ref_policy.calls)
            for got, ref in zip(policy.calls, ref_policy.calls):
                for key in ref:
                    assert got[key].tobytes() == ref[key].tobytes()


@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_rows_not_read_are_marked_and_the_others_are_exact(vectorization, monkeypatch):
    """At batch 4 the policy sees every row; a row that is not marked is the observation it would have had
    without skipping, and some rows are marked (slots out of step with the call: their frames were skipped)."""
    monkeypatch.setenv(OFF_VARIABLE, "1")
    reference, ref_policy = run(3, 4, vectorization, env=CARTPOLE, n_episodes=6)
    monkeypatch.delenv(OFF_VARIABLE)
    result, policy = run(3, 4, vectorization, env=CARTPOLE, n_episodes=6)
    assert outcomes(result) == outcomes(reference)
    assert len(policy.calls) == len(ref_policy.calls)
    n_marked = 0
    for got, ref in zip(policy.calls, ref_policy.calls):
        for row in range(4):
            if is_marked({key: got[key][row] for key in got}):
                n_marked += 1
                continue
            for key in ref:
                assert got[key][row].tobytes() == ref[key][row].tobytes()
    assert n_marked > 0


@needs_pusht
@pytest.mark.parametrize("env", [FAST_PUSHT, "gym_pusht/PushT-v0"])
@pytest.mark.parametrize("k", [1, 4])
def test_pusht_skips_unread_frames(env, k, monkeypatch):
    """PushT skips its unread renders. gym-pusht is not bit-reproducible between env instances (pymunk orders
    contacts by memory address, tests/test_pusht_fast.py): two runs without skipping may already differ by an
    ulp on an episode (k=1 skips nothing and shows it), so PushT is compared to that noise: the same lengths and
    success, rewards within 1e-9. The exactness of skipping itself is the pixel-CartPole tests'."""
    monkeypatch.setenv(OFF_VARIABLE, "1")
    reference, _ = run(k, 1, env=env, n_episodes=4)
    monkeypatch.delenv(OFF_VARIABLE)
    for batch, vectorization in [(1, "sync"), (3, "async")]:
        result, _ = run(k, batch, vectorization, env=env, n_episodes=4)
        assert result.meta["unread_observations"] == "on"
        got, want = outcomes(result), outcomes(reference)
        assert [r[2:] for r in got] == [r[2:] for r in want]
        np.testing.assert_allclose([r[:2] for r in got], [r[:2] for r in want], rtol=1e-9, atol=0)
        assert not any(r.get("error") for r in result.per_episode)


@needs_pusht
def test_state_observations_and_recorders_do_not_skip():
    state = evaluate(env=FAST_PUSHT, env_kwargs={"obs_type": "state"}, policy=_StateChunks(), n_episodes=1,
                     max_steps=3)
    assert state.meta["unread_observations"] == "off (the env cannot skip an observation's work)"
    recorded = evaluate(env=FAST_PUSHT, env_kwargs=PIXELS, policy=ReadsEveryK(4), n_episodes=1, max_steps=3,
                        return_episode_data=True)
    assert recorded.meta["unread_observations"] == "off (a recorder reads every observation)"


class _StateChunks(nn.Module):
    n_action_steps = 2

    def forward(self, obs):
        return obs[:, None, :2].expand(-1, 4, -1).clamp(0, 512)


def test_a_policy_that_reads_every_observation_skips_nothing():
    class Envs:
        asked = []

        def skip_unread(self, on):
            self.asked.append(on)
            return on

    envs = Envs()
    assert skip_decision(Capabilities(), None, envs) == (
        "off (the policy reads every observation, or cannot tell which it reads)")
    assert skip_decision(Capabilities(reads_per_slot=True), None, envs) == "on"
    assert envs.asked == [False, True]


def test_the_marker_fills_one_row_of_every_key():
    obs = {"pixels": np.zeros((3, 2, 2, 3), np.uint8), "pos": np.zeros((3, 2)), "n": np.zeros(3, np.int32)}
    mark = marker_writer(obs)
    mark(1)
    assert is_marked({k: v[1] for k, v in obs.items()})
    assert not is_marked({k: v[0] for k, v in obs.items()}) and not obs["pixels"][2].any()
    assert marker_value(np.uint8) == 255 and np.isnan(marker_value(np.float32)) and marker_value(bool) is True


def test_render_observation_wrapper_skips_its_render():
    """A gymnasium pixel env (a frame as the observation): the unread step is the inner env's step."""
    import gymnasium as gym

    from fasteval.robot.env_kinds.unread import unread_step

    env = gym.wrappers.AddRenderObservation(gym.make("CartPole-v1", render_mode="rgb_array"))
    step = unread_step(env)
    assert step is not None
    env.reset(seed=0)
    twin = gym.wrappers.AddRenderObservation(gym.make("CartPole-v1", render_mode="rgb_array"))
    twin.reset(seed=0)
    for t in range(10):
        a = t % 2
        got = step(a)
        want = twin.step(a)
        assert got[1:4] == want[1:4]
    assert env.render().tobytes() == twin.render().tobytes()  # the same state after unread steps
    assert unread_step(gym.make("CartPole-v1")) is None


def test_only_wrappers_that_hand_the_observation_on_let_an_env_skip():
    """Declared by class (fasteval.robot.env_kinds.unread.passes_observation_through): TimeLimit, OrderEnforcing and
    wrappers that keep gym.Wrapper.step (LeRobot's one-env wrapper) pass the inner step through; an observation
    wrapper or gymnasium's PassiveEnvChecker (it checks the first step's observation) does not."""
    import gymnasium as gym

    from fasteval.robot.env_kinds.unread import passes_observation_through

    class Plain(gym.Wrapper):
        def close(self):
            super().close()

    base = gym.make("CartPole-v1").unwrapped
    assert passes_observation_through(base)
    assert passes_observation_through(Plain(gym.wrappers.TimeLimit(gym.wrappers.OrderEnforcing(base), 10)))
    assert not passes_observation_through(Plain(gym.wrappers.TransformObservation(base, lambda o: o, base.observation_space)))
    assert not passes_observation_through(gym.wrappers.PassiveEnvChecker(base))


@needs_pusht
def test_pusht_behind_pass_through_wrappers_skips_and_behind_others_does_not():
    """PushT is found by its unwrapped class (LeRobot's pusht env type wraps it); its unread step goes through the
    wrappers (TimeLimit still counts it) and leaves the physics as the full step does."""
    import gymnasium as gym

    from fasteval.robot.env_kinds.unread import unread_step
    from fasteval.robot.fast_envs.pusht import make_pusht

    def wrapped():
        return gym.wrappers.TimeLimit(gym.wrappers.OrderEnforcing(make_pusht(**PIXELS)), 5)

    env, twin = wrapped(), wrapped()
    step = unread_step(env)
    assert step is not None
    env.reset(seed=0)
    twin.reset(seed=0)
    for t in range(5):
        action = np.array([200.0 + 10 * t, 300.0])
        got, want = step(action), twin.step(action)
        assert got[0] is None and got[1:4] == want[1:4]
    assert got[3] is True  # TimeLimit counted the unread steps
    assert env.unwrapped.agent.position == twin.unwrapped.agent.position
    observed = gym.wrappers.TransformObservation(make_pusht(**PIXELS), lambda o: o, None)
    assert unread_step(observed) is None
