"""``fasteval-lerobot-train``: a few real training steps of ``lerobot-train`` on a tiny local PushT dataset, its
periodic evaluation run by fasteval, checked against ``lerobot-eval``'s numbers for the saved checkpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lerobot")
pytest.importorskip("gym_pusht")

REPO = Path(__file__).resolve().parents[2]
SEED, EPISODES, LENGTH = 1000, 2, 20


def write_tiny_pusht_dataset(root: Path) -> Path:
    """Three 12-frame episodes of gym-pusht under random actions, as a local LeRobot dataset (images, no videos)."""
    import gymnasium as gym
    import gym_pusht  # noqa: F401
    import numpy as np
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    features = {
        "observation.image": {"dtype": "image", "shape": (96, 96, 3), "names": ["height", "width", "channel"]},
        "observation.state": {"dtype": "float32", "shape": (2,), "names": None},
        "action": {"dtype": "float32", "shape": (2,), "names": None},
    }
    dataset = LeRobotDataset.create("local/pusht_tiny", fps=10, features=features, root=root, use_videos=False)
    env = gym.make("gym_pusht/PushT-v0", obs_type="pixels_agent_pos")
    rng = np.random.default_rng(0)
    for episode in range(3):
        obs, _ = env.reset(seed=episode)
        for _ in range(12):
            action = rng.uniform(0, 512, size=2).astype(np.float32)
            dataset.add_frame({"observation.image": obs["pixels"], "observation.state": obs["agent_pos"].astype(np.float32),
                               "action": action, "task": "Push the T-shaped block onto the T-shaped target."})
            obs, *_ = env.step(action)
        dataset.save_episode()
    dataset.finalize()
    env.close()
    return root


TRAIN_ARGS = [
    "--policy.type=act", "--policy.device=cpu", "--policy.push_to_hub=false", "--policy.pretrained_backbone_weights=null",
    "--policy.chunk_size=5", "--policy.n_action_steps=5", "--policy.dim_model=32", "--policy.n_heads=2",
    "--policy.dim_feedforward=64", "--policy.n_encoder_layers=1", "--policy.n_decoder_layers=1",
    "--env.type=pusht", f"--env.episode_length={LENGTH}", "--steps=4", "--env_eval_freq=2", "--save_freq=4",
    f"--eval.n_episodes={EPISODES}", "--eval.batch_size=2", "--eval.use_async_envs=false", "--batch_size=2",
    "--num_workers=0", "--wandb.enable=false", "--log_freq=1", f"--seed={SEED}",
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    pytest.importorskip("accelerate", reason="lerobot-train needs LeRobot's training extra (lerobot[training])")
    root = tmp_path_factory.mktemp("lerobot_train")
    dataset = write_tiny_pusht_dataset(root / "dataset")
    out = root / "out"
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "HF_HUB_OFFLINE": "1", "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    proc = subprocess.run([sys.executable, "-m", "fasteval.integrations.lerobot_train",
                           "--dataset.repo_id=local/pusht_tiny", f"--dataset.root={dataset}", f"--output_dir={out}",
                           *TRAIN_ARGS], capture_output=True, text=True, timeout=1500, env=env, cwd=root)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return out, proc.stdout + proc.stderr


def test_evaluations_run_through_fasteval_with_lerobots_files(trained):
    out, log = trained
    for step in ("000002", "000004"):
        videos = sorted((out / "eval" / f"videos_step_{step}" / "pusht_0").glob("eval_episode_*.mp4"))
        assert [v.name for v in videos] == ["eval_episode_0.mp4", "eval_episode_1.mp4"]
        info = json.loads((out / "eval" / f"eval_info_step_{step}.json").read_text())
        assert [r["seed"] for r in info["per_episode"]] == [SEED, SEED + 1]
        assert [r["length"] for r in info["per_episode"]] == [LENGTH] * EPISODES
    assert "Suite overall aggregated" in log  # lerobot-train logged the dictionary fasteval returned
    assert "Running rollout" not in log  # LeRobot's own rollout loop never ran


def test_the_last_evaluation_equals_lerobot_eval_of_the_saved_checkpoint(trained):
    """Step 4's evaluation saw the weights of step 4's checkpoint: lerobot-eval gives the same per-seed numbers."""
    from fasteval.robot.lerobot.reference import lerobot_eval

    out, log = trained
    ours = json.loads((out / "eval" / "eval_info_step_000004.json").read_text())["per_episode"]
    assert any(r["sum_reward"] > 0 for r in ours)  # a comparison of numbers, not of zeros
    theirs = lerobot_eval(out / "checkpoints" / "000004" / "pretrained_model", n_episodes=EPISODES, batch_size=2,
                          seed=SEED, episode_length=LENGTH)["per_episode"]
    for a, b in zip(ours, theirs):
        assert (a["seed"], a["success"]) == (b["seed"], b["success"])
        assert a["sum_reward"] == pytest.approx(b["sum_reward"], abs=1e-4)
        assert a["max_reward"] == pytest.approx(b["max_reward"], abs=1e-4)
    logged = [line for line in log.splitlines() if "Suite overall aggregated" in line][-1]
    mean = sum(r["sum_reward"] for r in ours) / EPISODES
    assert f"'avg_sum_reward': {mean}" in logged or f"'avg_sum_reward': {mean!r}" in logged


def test_install_refuses_a_script_without_the_patch_points():
    import types

    from fasteval.integrations.lerobot_train import install
    from fasteval.types.errors import UserInputError

    with pytest.raises(UserInputError, match="_make_eval_envs"):
        install(types.SimpleNamespace(eval_policy_all=lambda **kw: None))


def test_lerobot_summary_aggregates_as_lerobot_does():
    from fasteval.integrations.lerobot_train import lerobot_summary

    per_task = [{"task_group": "g", "task_id": 0, "metrics": {"sum_rewards": [1.0, float("nan"), 3.0],
                                                             "max_rewards": [1.0, 1.0, 2.0],
                                                             "successes": [True, False, False], "video_paths": []}}]
    out = lerobot_summary(per_task, 2.0)
    assert out["overall"]["avg_sum_reward"] == 2.0  # nanmean, as LeRobot's _agg_from_list
    assert out["overall"]["pc_success"] == pytest.approx(100 / 3) and out["overall"]["eval_ep_s"] == pytest.approx(2 / 3)
    assert set(out) == {"per_task", "per_group", "overall"} and out["per_group"]["g"]["n_episodes"] == 3


# -- the env settings of a training config, as the records store them (issue 42) -----------------------------
def _needs(module: str) -> None:
    pytest.importorskip(module, reason=f"--env.type needs {module}")


NON_DEFAULT_SETTINGS = [
    pytest.param("pusht", {"obs_type": "environment_state_agent_pos"}, None, id="pusht-env-state"),
    pytest.param("pusht", {"observation_height": 96, "observation_width": 96}, None, id="pusht-96px"),
    pytest.param("libero", {"task": "libero_spatial", "observation_height": 128, "observation_width": 128},
                 "libero", id="libero-128px"),
    pytest.param("libero", {"task": "libero_spatial", "task_ids": [3], "obs_type": "pixels",
                            "camera_name_mapping": {"agentview_image": "front"}}, "libero", id="libero-pixels"),
    pytest.param("metaworld", {"task": "push-v3", "obs_type": "pixels"}, "metaworld", id="metaworld-pixels"),
]


@pytest.mark.parametrize(("env_type", "settings", "module"), NON_DEFAULT_SETTINGS)
def test_non_default_env_settings_are_recorded_and_rebuild_the_same_config(env_type, settings, module, tmp_path):
    """LeRobot derives ``features`` (``PolicyFeature`` values, not JSON) from the other settings: env_options leaves
    them out, the record of the evaluation is written, and the options rebuild the same config (features too)."""
    if module is not None:
        _needs(module)
    from lerobot.envs.factory import make_env_config

    from fasteval.integrations.lerobot_train import ENV_REF, _tasks, env_options
    from fasteval.types.json_writer import write_json_atomic
    from fasteval.types.spec import EvalSpec

    cfg = make_env_config(env_type, **settings)
    options = env_options(cfg)
    assert "features" not in options and "features_map" not in options
    assert {k: options[k] for k in settings if k != "task"} == {k: v for k, v in settings.items() if k != "task"}
    rebuilt = make_env_config(env_type, **({"task": cfg.task} if cfg.task is not None else {}), **options)
    assert (rebuilt.features, rebuilt.features_map) == (cfg.features, cfg.features_map)
    for _group, _task_id, kwargs in _tasks(cfg):
        what = EvalSpec(env=ENV_REF, env_kwargs=kwargs, policy="ckpt").what.to_dict()
        json.dumps(what, allow_nan=True)  # no default=: plain values only
        write_json_atomic(tmp_path / "eval_info.json", {"meta": {"what": what}})


def test_features_set_by_hand_are_refused_with_the_reason():
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.envs.factory import make_env_config

    from fasteval.integrations.lerobot_train import env_options
    from fasteval.types.errors import UserInputError

    cfg = make_env_config("pusht")
    cfg.features["extra"] = PolicyFeature(type=FeatureType.STATE, shape=(3,))
    with pytest.raises(UserInputError, match="features differ from what LeRobot derives"):
        env_options(cfg)


def test_an_evaluation_with_non_default_env_settings_writes_its_record(act_checkpoint, tmp_path):
    """The wrapper's evaluation itself, as lerobot-train calls it, with PushT's image size set (a non-default setting:
    LeRobot derives other ``features``): the evaluation runs and writes ``eval_info_step_<step>.json`` (issue 42:
    ``TypeError: Object of type PolicyFeature is not JSON serializable``, the training run killed)."""
    import types

    import torch
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.envs.factory import make_env_config, make_env_pre_post_processors
    from lerobot.policies.factory import make_policy, make_pre_post_processors

    from fasteval.integrations.lerobot_train import TrainEnvs, close, eval_policy_all

    env_cfg = make_env_config("pusht", episode_length=3, observation_height=96, observation_width=96)
    cfg = types.SimpleNamespace(env=env_cfg, seed=SEED, eval=types.SimpleNamespace(batch_size=2, use_async_envs=False))
    policy_cfg = PreTrainedConfig.from_pretrained(str(act_checkpoint))
    policy_cfg.pretrained_path, policy_cfg.device = str(act_checkpoint), "cpu"
    policy = make_policy(cfg=policy_cfg, env_cfg=env_cfg).eval()
    pre, post = make_pre_post_processors(policy_cfg=policy_cfg, pretrained_path=str(act_checkpoint),
                                         preprocessor_overrides={"device_processor": {"device": "cpu"}})
    env_pre, env_post = make_env_pre_post_processors(env_cfg=env_cfg, policy_cfg=policy_cfg)
    videos = tmp_path / "eval" / "videos_step_000002"
    try:
        with torch.no_grad():
            out = eval_policy_all(TrainEnvs(cfg), policy, env_pre, env_post, pre, post, n_episodes=2,
                                  max_episodes_rendered=0, videos_dir=videos, start_seed=SEED)
    finally:
        close()
    assert out["overall"]["n_episodes"] == 2
    info = json.loads((tmp_path / "eval" / "eval_info_step_000002.json").read_text())
    assert [r["seed"] for r in info["per_episode"]] == [SEED, SEED + 1]
    assert info["meta"]["env_kwargs"]["observation_height"] == 96 and "features" not in info["meta"]["env_kwargs"]
