"""Small, randomly initialised LeRobot checkpoints for tests and benchmarks (no network, CPU-sized).

:func:`write_act_checkpoint` and :func:`write_diffusion_checkpoint` build a LeRobot policy for
PushT's features (``observation.image`` ``[3, 96, 96]``, ``observation.state`` ``[2]``, ``action``
``[2]``), with a random ResNet-18 backbone (``pretrained_backbone_weights=None``) and tiny heads,
and save it with LeRobot's own ``save_pretrained``: ``config.json`` (with ``"type"``),
``model.safetensors`` and the ``policy_preprocessor*`` / ``policy_postprocessor*`` files, whose
normalization uses :func:`synthetic_pusht_stats`. :func:`write_metaworld_act_checkpoint` and
:func:`write_libero_act_checkpoint`: the same for LeRobot's Meta-World and LIBERO features. Needs the
``lerobot`` extra.

The weights follow ``torch.manual_seed(seed)`` (the global RNG is forked, not consumed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

IMAGE_SHAPE = (3, 96, 96)
STATE_DIM = 2
ACTION_DIM = 2


def synthetic_pusht_stats(image_key: str = "observation.image") -> dict[str, dict[str, torch.Tensor]]:
    """Dataset statistics with PushT's shapes and plausible ranges (pixels in [0, 512], images in [0, 1])."""
    def entry(mean: list[float], std: list[float], lo: list[float], hi: list[float], shape: tuple[int, ...]) -> dict:
        return {name: torch.tensor(v, dtype=torch.float32).reshape(shape)
                for name, v in (("mean", mean), ("std", std), ("min", lo), ("max", hi))}

    return {
        image_key: entry([0.9, 0.9, 0.9], [0.2, 0.2, 0.2], [0.0] * 3, [1.0] * 3, (3, 1, 1)),
        "observation.state": entry([256.0, 256.0], [120.0, 120.0], [10.0, 10.0], [500.0, 500.0], (2,)),
        "action": entry([256.0, 256.0], [120.0, 120.0], [10.0, 10.0], [500.0, 500.0], (2,)),
    }


def _features(image_key: str = "observation.image") -> tuple[dict[str, Any], dict[str, Any]]:
    from lerobot.configs.types import FeatureType, PolicyFeature

    inputs = {
        image_key: PolicyFeature(type=FeatureType.VISUAL, shape=IMAGE_SHAPE),
        "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(STATE_DIM,)),
    }
    outputs = {"action": PolicyFeature(type=FeatureType.ACTION, shape=(ACTION_DIM,))}
    return inputs, outputs


def _save(config: Any, folder: str | Path, seed: int, image_key: str = "observation.image",
          stats: dict[str, dict[str, torch.Tensor]] | None = None) -> Path:
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        policy = get_policy_class(config.type)(config=config)
    stats = synthetic_pusht_stats(image_key) if stats is None else stats
    preprocessor, postprocessor = make_pre_post_processors(config, dataset_stats=stats)
    policy.save_pretrained(folder)
    preprocessor.save_pretrained(folder)
    postprocessor.save_pretrained(folder)
    return folder


def write_act_checkpoint(folder: str | Path, seed: int = 0, chunk_size: int = 10, n_action_steps: int = 10,
                         image_key: str = "observation.image", **overrides: Any) -> Path:
    """A tiny ACT (dim 32, one encoder and one decoder layer, no VAE) for PushT; returns ``folder``.

    ``image_key``: the camera's feature name (another name than PushT's needs LeRobot's ``rename_map``)."""
    from lerobot.policies.act.configuration_act import ACTConfig

    inputs, outputs = _features(image_key)
    settings: dict[str, Any] = dict(
        input_features=inputs, output_features=outputs, device="cpu", pretrained_backbone_weights=None,
        chunk_size=chunk_size, n_action_steps=n_action_steps, dim_model=32, n_heads=2, dim_feedforward=64,
        n_encoder_layers=1, n_decoder_layers=1, use_vae=False, dropout=0.0,
    )
    settings.update(overrides)  # e.g. LeRobot's defaults for a full-size ACT (dim_model=512, ...)
    return _save(ACTConfig(**settings), folder, seed, image_key)


METAWORLD_IMAGE_SHAPE = (3, 480, 480)
METAWORLD_STATE_DIM = METAWORLD_ACTION_DIM = 4


def synthetic_metaworld_stats() -> dict[str, dict[str, torch.Tensor]]:
    """Statistics with the shapes of LeRobot's Meta-World (``pixels_agent_pos``): one camera, ``agent_pos`` [4]
    (hand position and gripper), actions [4] in [-1, 1]."""
    def entry(mean: float, std: float, lo: float, hi: float, shape: tuple[int, ...]) -> dict[str, torch.Tensor]:
        return {name: torch.full(shape, v, dtype=torch.float32)
                for name, v in (("mean", mean), ("std", std), ("min", lo), ("max", hi))}

    return {"observation.image": entry(0.5, 0.25, 0.0, 1.0, (3, 1, 1)),
            "observation.state": entry(0.0, 0.5, -1.0, 1.0, (METAWORLD_STATE_DIM,)),
            "action": entry(0.0, 0.5, -1.0, 1.0, (METAWORLD_ACTION_DIM,))}


def write_metaworld_act_checkpoint(folder: str | Path, seed: int = 0, chunk_size: int = 5, n_action_steps: int = 5,
                                   **overrides: Any) -> Path:
    """A tiny ACT (as :func:`write_act_checkpoint`) for LeRobot's Meta-World: ``observation.image``
    ``[3, 480, 480]`` (its ``corner2`` camera), ``observation.state`` ``[4]``, ``action`` ``[4]``."""
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig

    settings: dict[str, Any] = dict(
        input_features={"observation.image": PolicyFeature(type=FeatureType.VISUAL, shape=METAWORLD_IMAGE_SHAPE),
                        "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(METAWORLD_STATE_DIM,))},
        output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(METAWORLD_ACTION_DIM,))},
        device="cpu", pretrained_backbone_weights=None, chunk_size=chunk_size, n_action_steps=n_action_steps,
        dim_model=32, n_heads=2, dim_feedforward=64, n_encoder_layers=1, n_decoder_layers=1, use_vae=False, dropout=0.0,
    )
    settings.update(overrides)
    return _save(ACTConfig(**settings), folder, seed, stats=synthetic_metaworld_stats())


LIBERO_IMAGE_SIZE = 128
LIBERO_STATE_DIM, LIBERO_ACTION_DIM = 8, 7
LIBERO_CAMERAS = ("observation.images.image", "observation.images.image2")
"""LeRobot's LIBERO features: the agent view and the wrist camera (``LiberoEnv``'s ``camera_name_mapping``), the
8-d state of LeRobot's ``LiberoProcessorStep`` (eef position, eef axis-angle, gripper qpos) and 7-d actions."""


def synthetic_libero_stats(image_size: int = LIBERO_IMAGE_SIZE) -> dict[str, dict[str, torch.Tensor]]:
    """Statistics with LIBERO's shapes: two cameras in [0, 1], ``observation.state`` [8], actions [7] in [-1, 1]."""
    def entry(mean: float, std: float, lo: float, hi: float, shape: tuple[int, ...]) -> dict[str, torch.Tensor]:
        return {name: torch.full(shape, v, dtype=torch.float32)
                for name, v in (("mean", mean), ("std", std), ("min", lo), ("max", hi))}

    stats = {camera: entry(0.5, 0.25, 0.0, 1.0, (3, 1, 1)) for camera in LIBERO_CAMERAS}
    stats["observation.state"] = entry(0.0, 0.5, -1.5, 1.5, (LIBERO_STATE_DIM,))
    stats["action"] = entry(0.0, 0.5, -1.0, 1.0, (LIBERO_ACTION_DIM,))
    return stats


def write_libero_act_checkpoint(folder: str | Path, seed: int = 0, image_size: int = LIBERO_IMAGE_SIZE,
                                chunk_size: int = 5, n_action_steps: int = 5, **overrides: Any) -> Path:
    """A tiny random ACT (as :func:`write_act_checkpoint`) for LeRobot's LIBERO: two cameras ``[3, image_size,
    image_size]`` (``observation.images.image``, ``observation.images.image2``), ``observation.state`` ``[8]``,
    ``action`` ``[7]``; ``pretrained_backbone_weights=None`` (no hub weights). A ResNet takes any image size, so
    the env may render smaller images than the features say (``--env.observation_height``)."""
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig

    inputs = {camera: PolicyFeature(type=FeatureType.VISUAL, shape=(3, image_size, image_size))
              for camera in LIBERO_CAMERAS}
    inputs["observation.state"] = PolicyFeature(type=FeatureType.STATE, shape=(LIBERO_STATE_DIM,))
    settings: dict[str, Any] = dict(
        input_features=inputs,
        output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(LIBERO_ACTION_DIM,))},
        device="cpu", pretrained_backbone_weights=None, chunk_size=chunk_size, n_action_steps=n_action_steps,
        dim_model=32, n_heads=2, dim_feedforward=64, n_encoder_layers=1, n_decoder_layers=1, use_vae=False, dropout=0.0,
    )
    settings.update(overrides)
    return _save(ACTConfig(**settings), folder, seed, stats=synthetic_libero_stats(image_size))


ACT_DEFAULT_SIZE = dict(chunk_size=100, n_action_steps=100, dim_model=512, n_heads=8, dim_feedforward=3200,
                        n_encoder_layers=4, n_decoder_layers=1, use_vae=True, dropout=0.1)
"""ACTConfig's own defaults for the model size (what ``lerobot-train --policy.type=act`` trains)."""


def write_diffusion_checkpoint(folder: str | Path, seed: int = 0, scheduler: str = "DDIM", **overrides: Any) -> Path:
    """A tiny Diffusion policy (U-Net 16/32, horizon 16, 8 action steps, 2 obs steps, 4 denoising steps)."""
    from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig

    inputs, outputs = _features()
    settings: dict[str, Any] = dict(
        input_features=inputs, output_features=outputs, device="cpu", pretrained_backbone_weights=None,
        n_obs_steps=2, horizon=16, n_action_steps=8, down_dims=(16, 32), kernel_size=3, n_groups=4,
        diffusion_step_embed_dim=16, spatial_softmax_num_keypoints=8, crop_shape=(84, 84),
        use_group_norm=True, noise_scheduler_type=scheduler, num_train_timesteps=20, num_inference_steps=4,
    )
    settings.update(overrides)
    return _save(DiffusionConfig(**settings), folder, seed)


# -- a PushT-shaped env whose episode lengths follow from the seed -----------------------------------
VARYING_ENV_REF = "fasteval.robot.lerobot.testing:make_varying_env"


def make_varying_env(min_length: int = 7, spread: int = 13) -> VaryingLengthEnv:
    """``VaryingLengthEnv``: PushT's observation layout, episodes of ``min_length + seed % spread`` steps.

    Slots of a batch then finish at different steps, so continuous batching refills them while the
    others are mid-chunk (PushT itself only ends early on success, which a random policy never reaches).
    """
    return VaryingLengthEnv(min_length, spread)


class VaryingLengthEnv(gym.Env):
    """Observations: ``pixels`` uint8 ``96x96x3`` and ``agent_pos`` float64 ``[2]``, drawn from the seed's
    generator; reward ``tanh(action . w)`` with a per-episode ``w`` (so actions matter); terminates
    after ``min_length + seed % spread`` steps; never succeeds."""

    metadata = {"render_modes": []}

    def __init__(self, min_length: int = 7, spread: int = 13) -> None:
        self.min_length, self.spread = int(min_length), int(spread)
        self.observation_space = gym.spaces.Dict({
            "pixels": gym.spaces.Box(0, 255, (96, 96, 3), np.uint8),
            "agent_pos": gym.spaces.Box(0.0, 512.0, (2,), np.float64),
        })
        self.action_space = gym.spaces.Box(0.0, 512.0, (2,), np.float32)
        self.rng = np.random.default_rng(0)
        self.left = self.min_length
        self.w = np.zeros(2)

    def _obs(self) -> dict[str, np.ndarray]:
        return {"pixels": self.rng.integers(0, 256, (96, 96, 3), dtype=np.uint8),
                "agent_pos": self.rng.uniform(0.0, 512.0, 2)}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        seed = 0 if seed is None else int(seed)
        self.rng = np.random.default_rng(seed)
        self.left = self.min_length + seed % self.spread
        self.w = self.rng.normal(size=2) / 256.0
        return self._obs(), {}

    def step(self, action: np.ndarray):
        self.left -= 1
        reward = float(np.tanh(np.asarray(action, dtype=np.float64) @ self.w))
        return self._obs(), reward, self.left <= 0, False, {"is_success": False}
