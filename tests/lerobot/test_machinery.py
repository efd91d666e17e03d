"""LeRobot's own machinery, not a copy of it: internals, observation rules, load errors, env closing, MUJOCO_GL."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("lerobot")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fasteval.types.errors import PolicyLoadError  # noqa: E402

SRC = Path(__file__).resolve().parents[2] / "src"


def test_every_lerobot_internal_fasteval_relies_on_is_there() -> None:
    """Fails loudly, naming the piece, when a LeRobot release moves an internal (docs/lerobot.md lists them)."""
    from fasteval.robot.lerobot.internals import missing_internals

    assert missing_internals() == []


def test_the_scheduler_patch_is_one_call_long(ddpm_checkpoint: Path) -> None:
    """The one patch fasteval makes: noise_scheduler.step takes the per-row generators inside the block only."""
    from fasteval.robot.lerobot.internals import scheduler_generators
    from fasteval.robot.lerobot.loader import load_lerobot_policy

    policy = load_lerobot_policy(ddpm_checkpoint, n_slots=2, device="cpu").policy
    scheduler = policy.diffusion.noise_scheduler
    assert "step" not in vars(scheduler)
    out = torch.zeros(2, 16, 2)
    scheduler.set_timesteps(4)
    t = scheduler.timesteps[0]
    draws = []
    for _ in range(2):
        gens = [torch.Generator().manual_seed(7), torch.Generator().manual_seed(8)]
        with scheduler_generators(policy, gens):
            assert "step" in vars(scheduler)
            draws.append(scheduler.step(out, t, out).prev_sample)
        assert "step" not in vars(scheduler)
    assert torch.equal(draws[0], draws[1]) and not torch.equal(draws[0][0], draws[0][1])


# -- observation rules: fasteval's re-implementation against LeRobot's own function ---------------------------
KEYS = ["pixels", "pixels/top", "pixels/wrist", "agent_pos", "environment_state", "state", "image", "top",
        "robot_state/eef/pos", "robot_state/joints", "policy", "camera_obs", "gripper", "images.top"]


@st.composite
def observation_spaces(draw):
    import gymnasium as gym

    keys = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=6, unique=True))
    if "pixels" in keys:  # LeRobot's pixels is one image or a Dict of cameras, not both
        keys = [k for k in keys if not k.startswith("pixels/")]
    spaces = {}
    for key in keys:
        if key.startswith("pixels") or draw(st.booleans()) and key in ("image", "top", "camera_obs"):
            h, w = draw(st.integers(4, 7)), draw(st.integers(4, 7))
            spaces[key] = gym.spaces.Box(0, 255, (h, w, 3), np.uint8)
        else:
            dtype = draw(st.sampled_from([np.float32, np.float64, np.int64, np.uint8]))
            spaces[key] = gym.spaces.Box(0, 9, (draw(st.integers(1, 4)),), dtype)
    return gym.spaces.Dict(spaces)


@settings(max_examples=60, deadline=None)
@given(space=observation_spaces(), seed=st.integers(0, 2**16))
def test_fastevals_rules_are_lerobots_preprocess_observation(space, seed) -> None:
    """On random observation Dicts: fasteval's rules (used where LeRobot is not installed) give LeRobot's keys
    and, applied on the device by fasteval's adapter, LeRobot's tensors bit for bit; the traced plan agrees."""
    from lerobot.envs.utils import preprocess_observation
    from tensordict import TensorDict

    from fasteval.robot.lerobot.observations import flatten, nest, probe_observation, space_keys, traced_plan
    from fasteval.robot.policies.obs_mapping import ObservationAdapter, lerobot_rules

    rules = lerobot_rules(space)
    assert {(p.source, p.target, p.kind) for p in rules} == set(traced_plan(space))
    arrays = probe_observation(space_keys(space), batch=3, seed=seed)
    theirs = flatten(preprocess_observation(nest(arrays)))
    obs = TensorDict({k: torch.from_numpy(v.copy()) for k, v in arrays.items()}, batch_size=[3])
    mapped, steps = ObservationAdapter(rules, torch.device("cpu")).build(obs)
    for step in steps:
        step()
    assert set(mapped.keys()) == set(theirs)
    for key, value in theirs.items():
        value = torch.as_tensor(value)
        assert mapped[key].dtype == value.dtype and torch.equal(mapped[key], value), key


# -- load errors: one line, exit 2, naming the file ---------------------------------------------------------
def _broken(act_checkpoint: Path, tmp_path: Path, case: str) -> Path:
    folder = tmp_path / case
    shutil.copytree(act_checkpoint, folder)
    if case == "no_processors":
        for name in ("policy_preprocessor.json", "policy_postprocessor.json"):
            (folder / name).unlink()
    elif case == "no_weights":
        (folder / "model.safetensors").unlink()
    elif case == "bad_weights":
        (folder / "model.safetensors").write_bytes(b"not safetensors")
    elif case == "bad_config":
        config = json.loads((folder / "config.json").read_text())
        config["no_such_field"] = 1
        (folder / "config.json").write_text(json.dumps(config))
    elif case == "bad_processor":
        (folder / "policy_preprocessor.json").write_text("{not json")
    elif case == "wrong_shapes":
        config = json.loads((folder / "config.json").read_text())
        config["dim_model"] = 48
        (folder / "config.json").write_text(json.dumps(config))
    return folder


CASES = {"no_processors": "policy_preprocessor.json and policy_postprocessor.json missing",
         "no_weights": "model.safetensors is missing", "bad_weights": "loading model.safetensors failed",
         "bad_config": "reading config.json failed", "bad_processor": "processor files",
         "wrong_shapes": "loading model.safetensors failed"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_load_error_is_one_line_naming_the_file(act_checkpoint: Path, tmp_path: Path, case: str) -> None:
    from fasteval.robot.lerobot.loader import load_lerobot_policy

    folder = _broken(act_checkpoint, tmp_path, case)
    with pytest.raises(PolicyLoadError) as info:
        load_lerobot_policy(folder, n_slots=1, device="cpu")
    message = str(info.value)
    assert "\n" not in message and CASES[case] in message and str(folder) in message, message


def test_a_checkpoint_without_processor_files_exits_2_with_one_line(act_checkpoint: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from fasteval.doors.cli import main

    folder = _broken(act_checkpoint, tmp_path, "no_processors")
    result = CliRunner().invoke(main, ["--policy", str(folder), "--env", "fasteval.robot.lerobot.testing:make_varying_env",
                                       "-n", "1", "-b", "1", "--device", "cpu"])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and "migrate_policy_normalization" in errors[0] and "Traceback" not in result.output


# -- envs ---------------------------------------------------------------------------------------------------
def test_closing_the_env_closes_lerobots_vector_env() -> None:
    pytest.importorskip("gym_pusht")
    from fasteval.robot.lerobot.envs import make_env

    env = make_env("pusht")
    vector = env.vector
    env.reset(seed=0)
    env.close()
    assert vector.closed


def test_metaworld_through_lerobot_renders_headless_without_mujoco_gl() -> None:
    """MUJOCO_GL unset and no display: fasteval sets MUJOCO_GL=egl before LeRobot's Meta-World imports MuJoCo
    (without it: MuJoCo's FatalError, or exit 134)."""
    pytest.importorskip("metaworld")
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM", "DISPLAY",
                                                              "WAYLAND_DISPLAY")}
    env["PYTHONPATH"] = str(SRC)
    code = ("from fasteval.robot.lerobot.envs import suite_tasks, make_env\n"
            "suite_tasks('metaworld', 'push-v3,reach-v3')\n"
            "env = make_env('metaworld', task='push-v3')\n"
            "obs, _ = env.reset(seed=0)\n"
            "assert obs['pixels'].shape == (480, 480, 3), obs['pixels'].shape\n"
            "env.close()\n")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]


# -- other policy types: built from their config with random weights, no hub download -----------------------
BUILDABLE_TYPES = ["vqbet", "tdmpc"]
"""Types whose config builds a policy offline (random weights); pi0, pi05, SmolVLA, GR00T, X-VLA need hub weights or
tokenizers (untested, docs/lerobot.md)."""


@pytest.mark.parametrize("kind", BUILDABLE_TYPES)
def test_other_policy_types_load_and_run_one_episode(kind: str, tmp_path: Path) -> None:
    """Saved with LeRobot's save_pretrained, loaded through fasteval's LeRobot loader, one episode in wave mode
    (LeRobot's own select_action on the whole batch)."""
    from lerobot.policies.factory import make_policy_config

    from fasteval import evaluate
    from fasteval.robot.lerobot.testing import VARYING_ENV_REF, _features, _save

    inputs, outputs = _features()
    config = make_policy_config(kind, input_features=inputs, output_features=outputs, device="cpu")
    if hasattr(config, "pretrained_backbone_weights"):
        config.pretrained_backbone_weights = None
    folder = _save(config, tmp_path / kind, seed=0)
    result = evaluate(env=VARYING_ENV_REF, policy=str(folder), device="cpu", seed=0, n_episodes=1, batch_size=1,
                      max_steps=4)
    assert result.meta["lerobot_policy_type"] == kind and result.meta["batching"] == "wave"
    assert len(result.per_episode) == 1 and np.isfinite(result.per_episode[0]["sum_reward"])
