"""Load a LeRobot checkpoint folder through LeRobot's own API.

:func:`load_lerobot_policy` does what ``lerobot_eval.eval_main`` does, minus the env:

1. ``PreTrainedConfig.from_pretrained(folder)`` (the ``"type"`` picks the config class);
2. the policy class registered for the type (``lerobot.policies.factory.get_policy_class``),
   ``from_pretrained(folder, config=...)``, on the device, in eval mode;
3. ``make_pre_post_processors(config, pretrained_path=folder)`` with LeRobot's eval overrides:
   ``device_processor`` -> the policy's device, ``rename_observations_processor`` -> ``rename_map``;
4. the env-side processors LeRobot pairs with the env type (``make_env_pre_post_processors``),
   when the env is a LeRobot env built by :mod:`fasteval.robot.lerobot.envs` (else identity, which is
   what LeRobot's default ``EnvConfig.get_env_processors`` returns too).

The result is a :class:`~fasteval.robot.lerobot.policy.LeRobotPolicy` (per-slot queues: continuous
batching) for the types whose ``select_action`` is a queue over ``predict_action_chunk``
(:data:`PER_SLOT_TYPES`), else a :class:`~fasteval.robot.lerobot.policy.LeRobotWavePolicy`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping

import torch

from fasteval.types.errors import PolicyLoadError
from fasteval.types.spec import NOISE_MODES
from fasteval.robot.lerobot.checkpoint import lerobot_policy_type
from fasteval.robot.lerobot.extra import require_lerobot
from fasteval.robot.lerobot.policy import LeRobotPolicy, LeRobotWavePolicy, _Pipelines, predict_takes_noise

logger = logging.getLogger(__name__)

PER_SLOT_TYPES = {"act", "diffusion"}

"""Checked against LeRobot 0.6's modeling code: ``select_action`` pops a queue filled with
``predict_action_chunk(batch)[:, :n_action_steps]`` (Diffusion: over an ``n_obs_steps`` history)."""


def resolve_lerobot_device(requested: str, config_device: str | None) -> torch.device:
    """``auto`` -> the checkpoint's device when it is usable here, else cuda when available, else cpu."""
    if requested != "auto":
        return torch.device(requested)
    if config_device:
        device = torch.device(config_device)
        if device.type == "cpu" or (device.type == "cuda" and torch.cuda.is_available()):
            return device
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def load_lerobot_policy(folder: str | Path, n_slots: int, device: str = "auto",
                        rename_map: Mapping[str, str] | None = None, env_config: Any = None,
                        cuda_graph: bool | None = None, noise: str = "episode") -> Any:
    """The fasteval policy object for the LeRobot checkpoint in ``folder``. Raises PolicyLoadError.

    ``cuda_graph`` (the spec's ``--cuda-graph``): graph the chunk prediction of per-slot types on CUDA
    (``None``: where CUDA exists; see :mod:`fasteval.robot.lerobot.policy`). ``noise`` (``--noise``):
    ``episode`` draws each episode's noise from its own generator; ``global`` keeps LeRobot's global-RNG
    draws, aligned with ``lerobot-eval``'s (its per-seed numbers in wave mode)."""
    if noise not in NOISE_MODES:
        raise PolicyLoadError(f"noise: expected one of {', '.join(NOISE_MODES)}, got {noise!r}.")
    folder = Path(folder)
    kind = lerobot_policy_type(folder)
    if kind is None:
        raise PolicyLoadError(f"{folder}: not a LeRobot checkpoint (config.json without a \"type\" field).")
    require_lerobot(f"the LeRobot checkpoint {folder} (type {kind!r})")
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.policies.factory import get_policy_class

    try:
        config = PreTrainedConfig.from_pretrained(str(folder))
        target = resolve_lerobot_device(device, getattr(config, "device", None))
        config.device = str(target)
        config.pretrained_path = str(folder)
        policy = get_policy_class(kind).from_pretrained(str(folder), config=config)
    except (ImportError, ValueError, KeyError, OSError, RuntimeError) as exc:
        raise PolicyLoadError(f"LeRobot checkpoint {folder} (type {kind!r}): loading failed: "
                              f"{type(exc).__name__}: {exc}") from exc
    policy.to(target).eval()
    pipelines = _Pipelines(_pipeline_builder(config, folder, dict(rename_map or {}), env_config), target)
    if kind in PER_SLOT_TYPES and getattr(config, "temporal_ensemble_coeff", None) is None:
        shape = _noise_shape(policy) if predict_takes_noise(policy) else None
        scheduler = kind == "diffusion" and shape is not None
        wrapped: Any = LeRobotPolicy(policy, pipelines, n_slots, shape, scheduler, cuda_graph=cuda_graph,
                                     global_noise=noise == "global")
    else:
        logger.info("LeRobot %s: no per-slot queues for this type; it runs in wave mode, as LeRobot runs it.", kind)
        wrapped = LeRobotWavePolicy(policy, pipelines, n_slots)
    if not wrapped.batch_invariant:
        logger.warning("LeRobot %s draws noise from the global torch RNG (seeded per run): its results depend on "
                       "the batch size and on the order of episodes.", kind)
    return wrapped


def _pipeline_builder(config: Any, folder: Path, rename_map: dict[str, str], env_config: Any):
    from lerobot.policies.factory import make_pre_post_processors
    from lerobot.processor import PolicyProcessorPipeline

    def build(device: torch.device) -> tuple[Any, Any, Any, Any]:
        overrides = {"device_processor": {"device": str(device)},
                     "rename_observations_processor": {"rename_map": rename_map}}
        try:
            pre, post = make_pre_post_processors(config, pretrained_path=str(folder), preprocessor_overrides=overrides)
        except (ImportError, ValueError, KeyError, OSError, RuntimeError) as exc:
            raise PolicyLoadError(f"LeRobot checkpoint {folder}: its processor files (policy_preprocessor.json, "
                                  f"policy_postprocessor.json) could not be loaded: {type(exc).__name__}: {exc}"
                                  ) from exc
        if env_config is not None:
            from lerobot.envs.factory import make_env_pre_post_processors

            env_pre, env_post = make_env_pre_post_processors(env_config, config)
        else:
            env_pre, env_post = PolicyProcessorPipeline(steps=[]), PolicyProcessorPipeline(steps=[])
        return pre, post, env_pre, env_post

    return build


def _noise_shape(policy: Any) -> tuple[int, ...] | None:
    """One row of the initial noise ``predict_action_chunk(noise=...)`` takes, for the types known here."""
    config = policy.config
    if config.type == "diffusion":
        return (int(config.horizon), int(config.action_feature.shape[0]))
    return None
