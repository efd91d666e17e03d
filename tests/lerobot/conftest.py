"""Fixtures for the LeRobot tests: small random checkpoints written once per session.

The tests that need LeRobot skip cleanly where it is not installed (the main Python 3.11
environment); CI runs them in the Python 3.12 environment of scripts/lerobot_env.sh.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

PUSHT = "gym_pusht/PushT-v0"
PUSHT_KWARGS = {"obs_type": "pixels_agent_pos", "render_mode": "rgb_array",
                "visualization_width": 384, "visualization_height": 384}


@pytest.fixture(scope="session", autouse=True)
def _torch_on_one_thread():
    """The references (``lerobot_eval`` in this process) run torch on one thread, as fasteval's CPU policies do
    by default (``--cpu-threads 1``). A convolution's summation order may depend on the thread count on some
    CPUs (oneDNN picks its kernels by ISA and threads), and MuJoCo's contacts grow a last-bit difference to
    1e-3 within a few steps: a comparison of the two must not rest on that (the differential tests pin both
    sides the same way)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def pusht_spec(policy: Any, **fields: Any) -> dict[str, Any]:
    """EvalSpec fields for PushT as ``--env.type=pusht`` sets them (episodes cut to ``max_steps``)."""
    base = dict(env=PUSHT, env_kwargs=dict(PUSHT_KWARGS), policy=str(policy), device="cpu", seed=1000,
                observation_format="lerobot")
    base.update(fields)
    return base


@pytest.fixture(scope="session")
def act_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("lerobot")
    from fasteval.robot.lerobot.testing import write_act_checkpoint

    return write_act_checkpoint(tmp_path_factory.mktemp("act"), seed=0)


@pytest.fixture(scope="session")
def diffusion_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """DDIM (deterministic given the initial noise): comparable with LeRobot action for action."""
    pytest.importorskip("lerobot")
    pytest.importorskip("diffusers")
    from fasteval.robot.lerobot.testing import write_diffusion_checkpoint

    return write_diffusion_checkpoint(tmp_path_factory.mktemp("diffusion"), seed=0, scheduler="DDIM")


@pytest.fixture(scope="session")
def ddpm_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """DDPM: noise in every denoising step too (the generator path of the scheduler)."""
    pytest.importorskip("lerobot")
    pytest.importorskip("diffusers")
    from fasteval.robot.lerobot.testing import write_diffusion_checkpoint

    return write_diffusion_checkpoint(tmp_path_factory.mktemp("ddpm"), seed=1, scheduler="DDPM")
