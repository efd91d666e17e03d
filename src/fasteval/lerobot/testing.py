"""Small, randomly initialised LeRobot checkpoints for tests and benchmarks (no network, CPU-sized).

:func:`write_act_checkpoint` and :func:`write_diffusion_checkpoint` build a LeRobot policy for
PushT's features (``observation.image`` ``[3, 96, 96]``, ``observation.state`` ``[2]``, ``action``
``[2]``), with a random ResNet-18 backbone (``pretrained_backbone_weights=None``) and tiny heads,
and save it with LeRobot's own ``save_pretrained``: ``config.json`` (with ``"type"``),
``model.safetensors`` and the ``policy_preprocessor*`` / ``policy_postprocessor*`` files, whose
normalization uses :func:`synthetic_pusht_stats`. Needs the ``lerobot`` extra.

The weights follow ``torch.manual_seed(seed)`` (the global RNG is forked, not consumed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

IMAGE_SHAPE = (3, 96, 96)
STATE_DIM = 2
ACTION_DIM = 2


def synthetic_pusht_stats() -> dict[str, dict[str, torch.Tensor]]:
    """Dataset statistics with PushT's shapes and plausible ranges (pixels in [0, 512], images in [0, 1])."""
    def entry(mean: list[float], std: list[float], lo: list[float], hi: list[float], shape: tuple[int, ...]) -> dict:
        return {name: torch.tensor(v, dtype=torch.float32).reshape(shape)
                for name, v in (("mean", mean), ("std", std), ("min", lo), ("max", hi))}

    return {
        "observation.image": entry([0.9, 0.9, 0.9], [0.2, 0.2, 0.2], [0.0] * 3, [1.0] * 3, (3, 1, 1)),
        "observation.state": entry([256.0, 256.0], [120.0, 120.0], [10.0, 10.0], [500.0, 500.0], (2,)),
        "action": entry([256.0, 256.0], [120.0, 120.0], [10.0, 10.0], [500.0, 500.0], (2,)),
    }


def _features() -> tuple[dict[str, Any], dict[str, Any]]:
    from lerobot.configs.types import FeatureType, PolicyFeature

    inputs = {
        "observation.image": PolicyFeature(type=FeatureType.VISUAL, shape=IMAGE_SHAPE),
        "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(STATE_DIM,)),
    }
    outputs = {"action": PolicyFeature(type=FeatureType.ACTION, shape=(ACTION_DIM,))}
    return inputs, outputs


def _save(config: Any, folder: str | Path, seed: int) -> Path:
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        policy = get_policy_class(config.type)(config=config)
    preprocessor, postprocessor = make_pre_post_processors(config, dataset_stats=synthetic_pusht_stats())
    policy.save_pretrained(folder)
    preprocessor.save_pretrained(folder)
    postprocessor.save_pretrained(folder)
    return folder


def write_act_checkpoint(folder: str | Path, seed: int = 0, chunk_size: int = 10, n_action_steps: int = 10,
                         **overrides: Any) -> Path:
    """A tiny ACT (dim 32, one encoder and one decoder layer, no VAE) for PushT; returns ``folder``."""
    from lerobot.policies.act.configuration_act import ACTConfig

    inputs, outputs = _features()
    config = ACTConfig(
        input_features=inputs, output_features=outputs, device="cpu", pretrained_backbone_weights=None,
        chunk_size=chunk_size, n_action_steps=n_action_steps, dim_model=32, n_heads=2, dim_feedforward=64,
        n_encoder_layers=1, n_decoder_layers=1, use_vae=False, dropout=0.0, **overrides,
    )
    return _save(config, folder, seed)


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
