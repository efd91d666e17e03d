"""The LeRobot internals fasteval relies on, in one place (LeRobot 0.6.x; docs/lerobot.md, "Internals we rely on").

fasteval calls LeRobot's public entry points (``PreTrainedConfig.from_pretrained``, ``get_policy_class``,
``make_pre_post_processors``, ``make_env_config``, ``make_env_pre_post_processors``,
``preprocess_observation``) and, for continuous batching and per-episode noise, a few pieces that are
not an API. Every one of them is named in :data:`REQUIRED` and used only through this module:

* **the offline branch of** ``predict_action_chunk``: with its observation queues empty (fasteval never
  calls ``select_action`` on a per-slot policy), ACT and Diffusion read the batch they are given, Diffusion
  with the ``n_obs_steps`` history in dim 1 (``DiffusionPolicy.predict_action_chunk``);
* **Diffusion's initial noise**: ``predict_action_chunk(batch, noise=...)``, one ``[horizon, action_dim]``
  row per slot (:func:`noise_shape`, :func:`takes_noise`);
* **Diffusion's per-step noise**: ``policy.diffusion.noise_scheduler``, a diffusers scheduler whose
  ``step(..., generator=...)`` takes a list with one generator per row; LeRobot passes none, so
  :class:`scheduler_generators` patches ``step`` on the instance for the duration of one call;
* **the config fields** ``n_action_steps``, ``n_obs_steps``, ``temporal_ensemble_coeff``, ``horizon``,
  ``action_feature`` and ``type``;
* **processor step class names** (:data:`STATELESS_STEPS`, :data:`ELEMENTWISE_STEPS`), which say what may
  be skipped or run once per chunk, and ``ProcessorMigrationError`` (a checkpoint without processor files);
* **the env factory's shape**: ``EnvConfig.create_envs(n_envs, use_async_envs)`` returns
  ``{group: {task_id: VectorEnv}}``, LeRobot's step limit is the env's ``_max_episode_steps``, Meta-World's
  task groups are ``lerobot.envs.metaworld.DIFFICULTY_TO_TASKS``;
* ``lerobot.utils.random_utils.set_seed`` (the global-RNG noise mode, as ``lerobot-eval`` seeds);
* LIBERO's ``LiberoEnv`` (``lerobot.envs.libero``, imported only once LIBERO's config is written): its
  ``_init_states`` and the ``init_state_id`` its ``reset`` reads (:mod:`fasteval.robot.lerobot.libero`), and
  the attributes the protocol card reads (``num_steps_wait``, ``hard_reset``, ``camera_name``, ...).

:func:`missing_internals` checks that each is where fasteval expects it; ``tests/lerobot/test_internals.py``
fails, naming the piece, when a LeRobot release moves one.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import torch
from torch import nn

SUPPORTED = ">=0.6.1,<0.7"
"""The LeRobot versions these internals were checked against (the ``lerobot`` extra pins the same range)."""

STATELESS_STEPS = {"RenameObservationsProcessorStep", "AddBatchDimensionProcessorStep", "DeviceProcessorStep",
                   "NormalizerProcessorStep", "TokenizerProcessorStep"}
"""Policy preprocessor steps that are pure functions of their input (LeRobot 0.6). A pipeline with any
other step (relative actions cache the state for the postprocessor) runs on every step, as in LeRobot."""

STATELESS_ENV_STEPS = {"LiberoProcessorStep"}
"""Env preprocessor steps that are pure functions of their input (LeRobot 0.6's LIBERO step flips the images and
turns the eef quaternion into axis-angle): with only these, steps that need no chunk may skip the preprocessing,
and a chunking policy reads only the observations its chunks come from (:mod:`fasteval.core.unread`)."""

ELEMENTWISE_STEPS = {"UnnormalizerProcessorStep", "DeviceProcessorStep"}
"""Postprocessor steps that map each action value on its own (an affine map per action dimension, a copy):
running them on a chunk ``[B * n, action_dim]`` gives bit for bit what running them on each action gives."""

REQUIRED: list[tuple[str, str, str]] = [
    ("lerobot.configs.policies", "PreTrainedConfig.from_pretrained",
     "reading config.json; --policy.<field> overrides as its cli_overrides (draccus)"),
    ("lerobot.policies.factory", "get_policy_class", "the policy class of a type"),
    ("lerobot.policies.factory", "make_pre_post_processors", "the checkpoint's processors (rename_map, device)"),
    ("lerobot.processor", "PolicyProcessorPipeline", "identity env processors"),
    ("lerobot.processor.pipeline", "ProcessorMigrationError", "a checkpoint without processor files"),
    ("lerobot.processor.rename_processor", "RenameObservationsProcessorStep", "rename_map"),
    ("lerobot.processor.normalize_processor", "NormalizerProcessorStep", "STATELESS_STEPS"),
    ("lerobot.processor.normalize_processor", "UnnormalizerProcessorStep", "ELEMENTWISE_STEPS"),
    ("lerobot.processor.device_processor", "DeviceProcessorStep", "STATELESS_STEPS, ELEMENTWISE_STEPS"),
    ("lerobot.processor.batch_processor", "AddBatchDimensionProcessorStep", "STATELESS_STEPS"),
    ("lerobot.processor.env_processor", "LiberoProcessorStep", "STATELESS_ENV_STEPS"),
    ("lerobot.processor.tokenizer_processor", "TokenizerProcessorStep", "STATELESS_STEPS"),
    ("lerobot.envs.utils", "preprocess_observation", "the observation keys (fasteval's plan follows it)"),
    ("lerobot.envs.factory", "make_env_config", "--env.type"),
    ("lerobot.envs.factory", "make_env_pre_post_processors", "the env-side processors"),
    ("lerobot.envs.configs", "EnvConfig.create_envs", "one task's env"),
    ("lerobot.envs.metaworld", "DIFFICULTY_TO_TASKS", "Meta-World's task groups"),
    ("lerobot.envs.configs", "LiberoEnv", "LIBERO's config class (its subclasses are LIBERO types too)"),
    ("lerobot.utils.random_utils", "set_seed", "the global-RNG noise mode"),
    ("lerobot.policies.act.modeling_act", "ACTPolicy.predict_action_chunk", "ACT's chunks"),
    ("lerobot.policies.diffusion.modeling_diffusion", "DiffusionPolicy.predict_action_chunk", "Diffusion's chunks"),
    ("lerobot.policies.diffusion.modeling_diffusion", "DiffusionModel.conditional_sample", "noise_scheduler.step"),
]
"""``(module, attribute path, what fasteval uses it for)``: every LeRobot name fasteval imports."""


def _resolve(module: str, path: str) -> Any:
    obj: Any = importlib.import_module(module)
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def missing_internals() -> list[str]:
    """One line per internal that is not where fasteval expects it (empty: all there)."""
    from fasteval.robot.env_kinds.headless import ensure_headless_gl

    ensure_headless_gl()  # lerobot.envs.metaworld imports MuJoCo
    problems = []
    for module, path, use in REQUIRED:
        try:
            _resolve(module, path)
        except (ImportError, AttributeError) as exc:
            problems.append(f"{module}.{path} ({use}): {type(exc).__name__}: {exc}")
    try:
        from lerobot.policies.diffusion.modeling_diffusion import DiffusionPolicy

        if "noise" not in inspect.signature(DiffusionPolicy.predict_action_chunk).parameters:
            problems.append("DiffusionPolicy.predict_action_chunk takes no `noise` argument (per-episode noise)")
        if "noise_scheduler.step(" not in inspect.getsource(_resolve(
                "lerobot.policies.diffusion.modeling_diffusion", "DiffusionModel.conditional_sample")):
            problems.append("DiffusionModel.conditional_sample no longer calls self.noise_scheduler.step "
                            "(per-step noise generators)")
    except (ImportError, OSError, TypeError) as exc:
        problems.append(f"Diffusion internals: {type(exc).__name__}: {exc}")
    return problems


# -- Diffusion's noise ------------------------------------------------------------------------------
def takes_noise(policy: nn.Module) -> bool:
    """Whether ``policy.predict_action_chunk`` takes the initial ``noise``."""
    try:
        return "noise" in inspect.signature(policy.predict_action_chunk).parameters
    except (AttributeError, TypeError, ValueError):
        return False


def noise_shape(policy: Any) -> tuple[int, ...] | None:
    """One row of the initial noise ``predict_action_chunk(noise=...)`` takes, for the types known here."""
    config = policy.config
    if config.type == "diffusion" and takes_noise(policy):
        return (int(config.horizon), int(config.action_feature.shape[0]))
    return None


def has_noise_scheduler(policy: Any) -> bool:
    """Whether the policy's denoising steps go through ``policy.diffusion.noise_scheduler.step``."""
    # probe: LeRobot's internals; only Diffusion's model holds a ``diffusion`` (DiffusionModel) with a noise scheduler
    diffusion = getattr(policy, "diffusion", None)
    scheduler = diffusion.noise_scheduler if diffusion is not None else None
    return scheduler is not None and "generator" in inspect.signature(type(scheduler).step).parameters


class scheduler_generators:
    """Within the block, the diffusion scheduler's ``step`` draws its noise from per-row generators.

    The one patch fasteval makes to a LeRobot object: ``noise_scheduler.step`` is replaced on the
    instance (not the class) on entry and removed on exit, so the class's own ``step`` is back after
    the call. diffusers' ``randn_tensor`` draws each row from its generator on the generator's device
    (device generators on CUDA: no host draw, no upload per denoising step)."""

    def __init__(self, policy: nn.Module, gens: list[torch.Generator]):
        self.scheduler = policy.diffusion.noise_scheduler
        self.gens = gens if len(gens) > 1 else gens[0]

    def __enter__(self) -> None:
        original = type(self.scheduler).step.__get__(self.scheduler)
        gens = self.gens

        def step(*args: Any, generator: Any = None, **kwargs: Any) -> Any:
            return original(*args, generator=gens if generator is None else generator, **kwargs)

        self.scheduler.step = step

    def __exit__(self, *exc: Any) -> None:
        del self.scheduler.step


def seed_global_rng(seed: int) -> None:
    """LeRobot's ``set_seed`` (Python, NumPy, torch and CUDA global RNGs), as ``lerobot-eval`` seeds."""
    from lerobot.utils.random_utils import set_seed

    set_seed(int(seed))
