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

import contextlib
import logging
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch

from fasteval.types.errors import PolicyLoadError
from fasteval.robot.lerobot import internals
from fasteval.robot.lerobot.checkpoint import lerobot_policy_type
from fasteval.robot.lerobot.extra import require_lerobot
from fasteval.robot.lerobot.policy import EPISODE_NOISE, LeRobotPolicy, LeRobotWavePolicy, _Pipelines, check_noise_mode

logger = logging.getLogger(__name__)

PER_SLOT_TYPES = {"act", "diffusion"}
"""Checked against LeRobot 0.6's modeling code: ``select_action`` pops a queue filled with
``predict_action_chunk(batch)[:, :n_action_steps]`` (Diffusion: over an ``n_obs_steps`` history)."""

PROCESSOR_FILES = ("policy_preprocessor.json", "policy_postprocessor.json")
WEIGHTS_FILE = "model.safetensors"


def resolve_lerobot_device(requested: str, config_device: str | None) -> torch.device:
    """``auto`` -> the checkpoint's device when it is usable here, else cuda when available, else cpu."""
    if requested != "auto":
        return torch.device(requested)
    if config_device:
        device = torch.device(config_device)
        if device.type == "cpu" or (device.type == "cuda" and torch.cuda.is_available()):
            return device
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def one_line(exc: BaseException, limit: int = 300) -> str:
    """``Type: first line of the message`` (whitespace folded, cut at ``limit``): LeRobot's errors span many lines."""
    text = " ".join(str(exc).split("\n\n")[0].split())
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@contextlib.contextmanager
def reading(folder: Path, kind: str, what: str, hint: str = "") -> Iterator[None]:
    """Any error LeRobot raises inside the block becomes one :class:`PolicyLoadError` line naming ``what``."""
    try:
        yield
    except PolicyLoadError:
        raise
    except Exception as exc:  # LeRobot raises many types (draccus, safetensors, hub, its own): each becomes one line
        raise PolicyLoadError(f"LeRobot checkpoint {folder} (type {kind!r}): {what}: {one_line(exc)}"
                              f"{'. ' + hint if hint else ''}") from exc


def load_lerobot_policy(folder: str | Path, n_slots: int, device: str = "auto",
                        rename_map: Mapping[str, str] | None = None, env_config: Any = None,
                        cuda_graph: bool | None = None, noise: str = EPISODE_NOISE,
                        overrides: Mapping[str, str] | None = None) -> Any:
    """The fasteval policy object for the LeRobot checkpoint in ``folder``. Raises PolicyLoadError (one line).

    ``rename_map`` goes to LeRobot's own rename step, as ``lerobot-eval``'s does; ``cuda_graph`` (the spec's
    ``--cuda-graph``): graph the chunk prediction of per-slot types on CUDA (``None``: where CUDA exists);
    ``noise``: ``episode`` (per-episode generators) or ``global`` (LeRobot's global RNG, seeded as
    ``lerobot-eval`` seeds it); see :mod:`fasteval.robot.lerobot.policy`. ``overrides``: ``{field: value}`` set on
    the saved config before the policy is built, as ``lerobot-eval``'s ``--policy.<field>=value`` (LeRobot's
    ``PreTrainedConfig.from_pretrained(..., cli_overrides=[...])``: LeRobot parses each value, and an unknown
    field gets LeRobot's error, as one line)."""
    folder = Path(folder)
    kind = lerobot_policy_type(folder)
    if kind is None:
        raise PolicyLoadError(f"{folder}: not a LeRobot checkpoint (config.json without a \"type\" field).")
    check_noise_mode(noise)
    require_lerobot(f"the LeRobot checkpoint {folder} (type {kind!r})")
    config, policy, target = _load_model(folder, kind, device, dict(overrides or {}))
    pipelines = _Pipelines(_pipeline_builder(config, folder, kind, dict(rename_map or {}), env_config), target)
    return wrap_lerobot_policy(policy, pipelines, n_slots, cuda_graph=cuda_graph, noise=noise)


def wrap_lerobot_policy(policy: Any, pipelines: _Pipelines, n_slots: int, cuda_graph: bool | None = None,
                        noise: str = EPISODE_NOISE) -> Any:
    """The fasteval policy object over a LeRobot policy and its four processors (``pipelines``): per-slot queues for
    :data:`PER_SLOT_TYPES`, else wave mode. Also for a live policy (``fasteval-lerobot-train`` wraps the one being
    trained, with the processors ``lerobot-train`` built)."""
    config = policy.config
    kind = str(config.type)
    if kind in PER_SLOT_TYPES and (kind != "act" or config.temporal_ensemble_coeff is None):  # ACT's option only
        shape = internals.noise_shape(policy)
        scheduler = shape is not None and internals.has_noise_scheduler(policy)
        wrapped: Any = LeRobotPolicy(policy, pipelines, n_slots, shape, scheduler, cuda_graph=cuda_graph, noise=noise)
    else:
        logger.info("LeRobot %s: no per-slot queues for this type; it runs in wave mode, as LeRobot runs it.", kind)
        wrapped = LeRobotWavePolicy(policy, pipelines, n_slots)
    if not wrapped.batch_invariant:
        logger.warning("LeRobot %s draws noise from the global torch RNG (seeded per run): its results depend on "
                       "the batch size and on the order of episodes.", kind)
    return wrapped


def read_config(folder: Path, kind: str, overrides: Mapping[str, str] | None = None) -> Any:
    """``PreTrainedConfig.from_pretrained(folder, cli_overrides=...)``: the saved config with ``overrides`` applied
    by LeRobot's own parser (draccus). Raises :class:`PolicyLoadError` with LeRobot's reason, as one line: an
    unknown field (draccus exits with argparse's ``unrecognized arguments``), a value that does not parse, or
    a config its own checks refuse (``n_action_steps`` > ``chunk_size``)."""
    import io

    given = dict(overrides or {})
    what = ("applying " + ", ".join(f"--policy.{k}={v}" for k, v in given.items()) + " to config.json failed"
            if given else "reading config.json failed")
    stderr = io.StringIO()
    with reading(folder, kind, what):
        import lerobot.policies.factory  # noqa: F401  (imports, and so registers, every policy type's config class)
        from lerobot.configs.policies import PreTrainedConfig

        try:
            with contextlib.redirect_stderr(stderr):
                return PreTrainedConfig.from_pretrained(str(folder), cli_overrides=cli_overrides(given))
        except SystemExit:  # argparse (inside draccus) printed its usage and "error: ..." and exited
            lines = [ln for ln in stderr.getvalue().splitlines() if "error:" in ln]
            reason = lines[-1].split("error:", 1)[1].strip() if lines else "LeRobot's parser refused them"
            raise ValueError(f"{reason} (the fields of type {kind!r} are its config class's: "
                             f"{_config_fields(kind)})") from None
        except Exception as exc:
            cause = exc.__cause__ or exc.__context__
            if cause is not None and str(cause) and str(cause) not in str(exc):
                raise ValueError(f"{exc} ({one_line(cause)})") from exc
            raise


def _config_fields(kind: str, limit: int = 12) -> str:
    import dataclasses

    from lerobot.configs.policies import PreTrainedConfig

    names = [f.name for f in dataclasses.fields(PreTrainedConfig.get_choice_class(kind))]
    return ", ".join(names[-limit:]) + (", ..." if len(names) > limit else "")


def cli_overrides(overrides: Mapping[str, str]) -> list[str]:
    """``{field: value}`` -> LeRobot's ``cli_overrides`` (``["--field=value", ...]``), what ``lerobot-eval``
    hands ``PreTrainedConfig.from_pretrained`` for ``--policy.field=value``."""
    return [f"--{name}={value}" for name, value in overrides.items()]


def _load_model(folder: Path, kind: str, device: str,
                overrides: Mapping[str, str] | None = None) -> tuple[Any, Any, torch.device]:
    """LeRobot's config (with ``overrides`` applied by LeRobot's own parser) and policy (on the device, in
    eval mode); each failure is one line naming the file or the override."""
    config = read_config(folder, kind, overrides)
    target = resolve_lerobot_device(device, config.device)  # a field of every LeRobot policy config
    config.device = str(target)
    config.pretrained_path = str(folder)
    with reading(folder, kind, f"the policy class for type {kind!r} could not be imported",
                 hint="Install the LeRobot extra this policy type needs (pip install 'lerobot[...]')."):
        from lerobot.policies.factory import get_policy_class

        policy_class = get_policy_class(kind)
    if not (folder / WEIGHTS_FILE).is_file():
        raise PolicyLoadError(f"LeRobot checkpoint {folder} (type {kind!r}): {WEIGHTS_FILE} is missing; a checkpoint "
                              f"saved with save_pretrained has config.json, {WEIGHTS_FILE} and the processor files.")
    with reading(folder, kind, f"loading {WEIGHTS_FILE} failed"):
        policy = policy_class.from_pretrained(str(folder), config=config)
        policy.to(target).eval()
    return config, policy, target


def _pipeline_builder(config: Any, folder: Path, kind: str, rename_map: dict[str, str], env_config: Any):
    def build(device: torch.device) -> tuple[Any, Any, Any, Any]:
        from lerobot.policies.factory import make_pre_post_processors
        from lerobot.processor import PolicyProcessorPipeline

        missing = [name for name in PROCESSOR_FILES if not (folder / name).is_file()]
        if missing:
            raise PolicyLoadError(
                f"LeRobot checkpoint {folder} (type {kind!r}): {' and '.join(missing)} missing; LeRobot >= 0.4 "
                f"saves the normalization and device steps there; for an older checkpoint run "
                f"`python -m lerobot.processor.migrate_policy_normalization --pretrained-path {folder}`.")
        overrides = {"device_processor": {"device": str(device)},
                     "rename_observations_processor": {"rename_map": rename_map}}
        with reading(folder, kind, f"its processor files ({', '.join(PROCESSOR_FILES)}) could not be loaded"):
            pre, post = make_pre_post_processors(config, pretrained_path=str(folder), preprocessor_overrides=overrides)
        if env_config is not None:
            from lerobot.envs.factory import make_env_pre_post_processors

            with reading(folder, kind, f"LeRobot's env processors for --env.type={env_config.type} failed"):
                env_pre, env_post = make_env_pre_post_processors(env_config, config)
        else:
            env_pre, env_post = PolicyProcessorPipeline(steps=[]), PolicyProcessorPipeline(steps=[])
        return pre, post, env_pre, env_post

    return build
