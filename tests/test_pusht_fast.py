"""fasteval's fast PushT is bit-identical to gym-pusht's, step by step.

gym-pusht itself is not bit-reproducible across env instances: pymunk solves contacts in an
order that follows memory addresses, so two ``PushTEnv`` with the same seed and actions drift
apart by an ulp after a few steps (then chaotically), even in one process. Two separately
stepped envs therefore cannot be compared bit for bit. Instead, one physics is stepped and both
observation paths read it: for several seeds, 300 random-action steps each (a whole PushT
episode), the fast env's step (image and state observation, reward, flags, info) equals what
gym-pusht's own ``get_obs``/``_get_info`` code returns on the same state, and so do the
``render()`` frames (with the action marker). The fast class overrides ``_get_img`` only, so
nothing else can differ. ``--env.type=pusht`` uses the fast env only for the gym-pusht versions
this test checked.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from fasteval.robot.fast_envs import FAST_PUSHT, PUSHT_CHECKED_VERSIONS, installed_version, pusht_env_id

pytestmark = pytest.mark.skipif(importlib.util.find_spec("gym_pusht") is None,
                                reason="PushT needs gym-pusht: ./scripts/install.sh pusht")

SEEDS = [0, 1, 7, 1234]
STEPS = 300


def assert_identical(a, b, where: str) -> None:
    if isinstance(a, dict):
        assert set(a) == set(b), where
        for key in a:
            assert_identical(a[key], b[key], f"{where}[{key!r}]")
        return
    if isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_identical(x, y, f"{where}[{i}]")
        return
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape, (where, a.dtype, b.dtype, a.shape, b.shape)
        assert a.tobytes() == b.tobytes(), where  # bit for bit (NaN-safe)
        return
    assert type(a) is type(b) and (a == b or (a != a and b != b)), (where, a, b)


def make_env(obs_type: str):
    from fasteval.robot.fast_envs.pusht import FastPushTEnv

    return FastPushTEnv(obs_type=obs_type, render_mode="rgb_array", visualization_width=384, visualization_height=384)


def gym_pusht_view(env, fn, *args):
    """``fn(*args)`` on ``env``'s current state with gym-pusht's own image path."""
    import types

    from gym_pusht.envs.pusht import PushTEnv

    env._get_img = types.MethodType(PushTEnv._get_img, env)  # an instance attribute shadows the override
    try:
        return fn(*args)
    finally:
        del env._get_img


def gym_pusht_step_outputs(env, outputs):
    """What gym-pusht's ``step`` returns for the state the fast env's step reached."""
    coverage = env._get_coverage()
    success = coverage > env.success_threshold
    info = env._get_info()
    info["is_success"], info["coverage"] = success, coverage
    reward = np.clip(coverage / env.success_threshold, 0.0, 1.0)
    return gym_pusht_view(env, env.get_obs), reward, success, False, info


def test_only_the_image_path_is_overridden():
    from fasteval.robot.fast_envs.pusht import FastPushTEnv

    assert {k for k in vars(FastPushTEnv) if not k.startswith("__")} == {"_get_img"}


@pytest.mark.parametrize("seed", SEEDS)
def test_fast_pusht_matches_gym_pusht_for_a_whole_episode(seed):
    env = make_env("pixels_agent_pos")
    obs, info = env.reset(seed=seed)
    assert_identical(gym_pusht_view(env, env.get_obs), obs, f"seed {seed} reset")
    assert_identical(gym_pusht_view(env, env.render), env.render(), f"seed {seed} reset frame")
    rng = np.random.default_rng(seed)
    for t in range(1, STEPS + 1):
        outputs = env.step(rng.uniform(0, 512, size=2).astype(np.float32))
        assert_identical(gym_pusht_step_outputs(env, outputs), outputs, f"seed {seed} step {t}")
        if t % 25 == 0:  # video frames (384 px, with the action marker)
            assert_identical(gym_pusht_view(env, env.render), env.render(), f"seed {seed} frame {t}")
    env.close()


def test_fast_pusht_pixels_only_observation():
    env = make_env("pixels")
    env.reset(seed=3)
    rng = np.random.default_rng(3)
    for t in range(50):
        obs = env.step(rng.uniform(0, 512, size=2).astype(np.float32))[0]
        assert_identical(gym_pusht_view(env, env.get_obs), obs, f"step {t}")


def test_gym_pusht_observation_is_not_the_fast_path():
    """The comparison above is not vacuous: the shadowing really runs gym-pusht's pixels3d path."""
    import pygame

    env = make_env("pixels")
    env.reset(seed=0)
    calls = []
    original = pygame.surfarray.pixels3d

    def spy(surface):
        calls.append(1)
        return original(surface)

    pygame.surfarray.pixels3d = spy
    try:
        env.get_obs()
        assert calls == []
        gym_pusht_view(env, env.get_obs)
        assert calls == [1]
    finally:
        pygame.surfarray.pixels3d = original


def test_env_type_uses_the_fast_env_only_for_checked_versions(monkeypatch):
    import fasteval.robot.fast_envs as fast_envs

    assert installed_version("gym-pusht") in PUSHT_CHECKED_VERSIONS  # the installed one is checked here
    assert pusht_env_id() == FAST_PUSHT
    monkeypatch.setattr(fast_envs, "installed_version", lambda name: "0.0.1")
    assert pusht_env_id() == "gym_pusht/PushT-v0"
    monkeypatch.setattr(fast_envs, "installed_version", lambda name: None)
    assert pusht_env_id() == "gym_pusht/PushT-v0"
