"""Unread observations skipped on LIBERO (fasteval.robot.env_kinds.unread): robosuite's cameras keep their last
frame on steps whose observation is not read, and on a reset's settle steps but the last. With and without
skipping, across batch sizes and the pool, every episode and every observation the policy reads are bitwise
equal. LIBERO steps are slow (0.1-0.2 s): 32 px images, few steps and episodes.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from torch import nn

pytest.importorskip("lerobot")
from fasteval.core.unread import OFF_VARIABLE, is_marked  # noqa: E402
from fasteval.robot.lerobot.libero import assets_dir, libero_dir, write_config  # noqa: E402

needs_libero = pytest.mark.skipif(libero_dir() is None or assets_dir() is None,
                                  reason="hf-libero or LIBERO's scene assets are not installed")
TASK0 = {"type": "libero", "task": "libero_spatial", "task_id": 0, "observation_height": 32, "observation_width": 32}


class LiberoChunks(nn.Module):
    """Chunks of 6 actions (7-dim) from every key of the observation, row by row (integer sums of the images, the
    state's sum); executes the first ``k``. Records every batch; a marked row gives NaN actions."""

    def __init__(self, k: int):
        super().__init__()
        self.n_action_steps = k
        self.calls: list[dict[str, np.ndarray]] = []

    def forward(self, obs):
        keys = sorted(obs.keys())
        self.calls.append({key: obs[key].numpy().copy() for key in keys})
        n = obs[keys[0]].shape[0]
        score = torch.zeros(n, dtype=torch.float64)
        marked = torch.zeros(n, dtype=torch.bool)
        for key in keys:
            value = obs[key].flatten(1)
            if value.dtype == torch.uint8:
                marked |= (value == 255).all(1)
                score = score + (value.long().sum(1) % 13).double()
            else:
                score = score + value.double().sum(1)
        score = torch.where(marked, torch.full_like(score, float("nan")), score)
        step = torch.tanh(score)[:, None, None] * 0.3
        signs = torch.tensor([1.0, -1.0, 0.5, 0.0, 0.0, 0.0, -1.0], dtype=torch.float64)
        return (step * signs[None, None, :]).expand(n, 6, 7).float()


@pytest.fixture(scope="module")
def libero_home(tmp_path_factory):
    folder = tmp_path_factory.mktemp("libero_config")
    old = os.environ.get("LIBERO_CONFIG_PATH")
    os.environ["LIBERO_CONFIG_PATH"] = str(folder)
    write_config(folder / "config.yaml")
    yield folder
    if old is None:
        os.environ.pop("LIBERO_CONFIG_PATH", None)
    else:
        os.environ["LIBERO_CONFIG_PATH"] = old


def _run(k: int, batch: int, vectorization: str = "sync"):
    from fasteval import evaluate
    from fasteval.robot.lerobot.envs import ENV_REF

    policy = LiberoChunks(k)
    result = evaluate(env=ENV_REF, env_kwargs=dict(TASK0), policy=policy, n_episodes=3, seed=1000, max_steps=7,
                      batch_size=batch, vectorization=vectorization, device="cpu")
    return result, policy


def _outcomes(result):
    return [(r["sum_reward"], r["max_reward"], r["success"], r["length"]) for r in result.per_episode]


@needs_libero
@pytest.mark.parametrize("k", [3])
def test_libero_skips_unread_frames_exactly(k, libero_home, monkeypatch):
    monkeypatch.setenv(OFF_VARIABLE, "1")
    reference, ref_policy = _run(k, 1)
    assert reference.meta["unread_observations"].startswith("off")
    monkeypatch.delenv(OFF_VARIABLE)
    for batch, vectorization in [(1, "sync"), (2, "async")]:
        result, policy = _run(k, batch, vectorization)
        assert result.meta["unread_observations"] == "on"
        assert _outcomes(result) == _outcomes(reference), (batch, vectorization)
        assert not any(r.get("error") for r in result.per_episode)
        if batch == 1:  # the observations read, in order, bit for bit (the reset's too: settle steps skipped)
            assert len(policy.calls) == len(ref_policy.calls)
            for got, ref in zip(policy.calls, ref_policy.calls):
                assert not is_marked({key: v[0] for key, v in got.items()})
                for key in ref:
                    assert got[key].tobytes() == ref[key].tobytes(), key


class MetaWorldChunks(nn.Module):
    """Meta-World (``pixels_agent_pos``): chunks of 5 actions (4-dim) from the frame's pixel sum and the agent
    position, row by row; executes the first ``k``. Records every batch; a marked row gives NaN actions."""

    def __init__(self, k: int):
        super().__init__()
        self.n_action_steps = k
        self.calls: list[dict[str, np.ndarray]] = []

    def forward(self, obs):
        pixels, pos = obs["pixels"], obs["agent_pos"]
        self.calls.append({"pixels": pixels.numpy().copy(), "agent_pos": pos.numpy().copy()})
        marked = (pixels == 255).flatten(1).all(1)
        score = (pixels.long().flatten(1).sum(1) % 17).double() + pos.double().sum(1)
        score = torch.where(marked, torch.full_like(score, float("nan")), score)
        signs = torch.tensor([1.0, -1.0, 0.5, -0.5], dtype=torch.float64)
        return (torch.tanh(score)[:, None, None] * signs[None, None, :]).expand(-1, 5, 4).float()


def test_metaworld_renders_every_frame_until_skipping_is_proven_exact(monkeypatch):
    """Meta-World through LeRobot's env does not skip unread renders (robot/env_kinds/unread.py says why): a
    chunking policy that reads every 4th observation runs with ``unread_observations`` off, and its episodes equal
    the run with skipping turned off by hand."""
    pytest.importorskip("metaworld")
    from fasteval import evaluate
    from fasteval.robot.lerobot.envs import ENV_REF

    def run():
        return evaluate(env=ENV_REF, env_kwargs={"type": "metaworld", "task": "push-v3", "obs_type": "pixels_agent_pos"},
                        policy=MetaWorldChunks(4), n_episodes=2, seed=0, max_steps=8, batch_size=1, device="cpu")

    result = run()
    assert result.meta["unread_observations"].startswith("off (the env cannot skip"), result.meta["unread_observations"]
    monkeypatch.setenv(OFF_VARIABLE, "1")
    assert _outcomes(run()) == _outcomes(result)