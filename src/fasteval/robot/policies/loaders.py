"""Turn a policy reference into a policy object.

References, tried in this order:

* ``zero`` / ``random``: built-in policies for the env's action space;
* a LeRobot checkpoint folder (``config.json`` with LeRobot's ``"type"``): loaded through LeRobot's
  own API (:mod:`fasteval.robot.lerobot.loader`; the ``lerobot`` extra, Python >= 3.12);
* a checkpoint folder (``config.json`` + ``model.safetensors``) of a fasteval architecture;
* ``hf://org/repo[@revision]``: a Hugging Face Hub snapshot, loaded like a checkpoint folder
  (see :mod:`fasteval.robot.policies.hub`);
* ``ws://HOST:PORT`` / ``openpi+ws://HOST:PORT``: a policy served by ``fasteval serve`` or an openpi
  server (:mod:`fasteval.robot.policies.remote`; the ``serve`` extra);
* ``path/model.zip``: a Stable-Baselines3 checkpoint (``model.save``), whose policy is loaded through SB3
  (:mod:`fasteval.robot.policies.sb3`); its data holds pickles, so it needs ``trust_remote_code``;
* ``module:callable`` (or ``path/file.py:callable`` with ``trust_remote_code``): the callable
  is called with ``observation_space`` and/or ``action_space`` keyword arguments if it takes
  them, and must return an ``nn.Module`` or an object with ``select_action``;
* a live object (``nn.Module``, a policy object) is used as it is.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import gymnasium as gym

from fasteval.core.capabilities import SelectsActions
from fasteval.types.errors import PolicyLoadError, UserInputError
from fasteval.robot.policies.builtin import BUILTIN_POLICIES
from fasteval.robot.policies.checkpoint import WEIGHTS_NAME, check_observation_fit, is_checkpoint_dir, load_checkpoint
from fasteval.robot.lerobot.checkpoint import is_lerobot_checkpoint
from fasteval.robot.policies.hub import is_hf_ref, resolve_hf_ref
from fasteval.robot.policies.remote import connect_remote, is_remote_ref
from fasteval.types.refs import resolve_callable, split_callable_ref


def load_policy(
    ref: Any,
    observation_space: gym.Space,
    action_space: gym.Space,
    n_slots: int,
    trust_remote_code: bool = False,
    *,
    device: str = "auto",
    env: str | None = None,
    env_kwargs: dict[str, Any] | None = None,
    cuda_graph: bool | None = None,
    rename: dict[str, str] | None = None,
    noise: str = "episode",
    policy_overrides: dict[str, str] | None = None,
    exploration: str = "deterministic",
) -> Any:
    """Return a policy object for ``ref`` (see the module docstring). Raises PolicyLoadError/UserInputError.

    ``exploration`` (the spec's): a TorchRL / tensordict actor is wrapped to run under that exploration type
    (:mod:`fasteval.robot.policies.torchrl_actors`), an SB3 model or policy is adapted with
    ``deterministic=(exploration == "deterministic")`` (:mod:`fasteval.robot.policies.sb3`).

    ``device`` (the spec's) places a LeRobot policy as LeRobot's ``--policy.device`` does; ``env`` and
    ``env_kwargs`` (the spec's) tell which LeRobot env config, if any, pairs its env-side processors;
    ``cuda_graph`` (the spec's) allows or forbids capturing its chunk prediction on a GPU; ``rename`` (the
    spec's) goes to its own processors (LeRobot's ``rename_map``), ``noise`` picks where Diffusion's noise
    comes from (``episode`` or ``global``; :func:`fasteval.robot.lerobot.loader.load_lerobot_policy`),
    ``policy_overrides`` (the spec's) set fields of a LeRobot checkpoint's config (LeRobot's ``--policy.<field>``);
    any other policy refuses them.
    """
    overrides = dict(policy_overrides or {})
    lerobot_args = (n_slots, device, env, env_kwargs or {}, cuda_graph, dict(rename or {}), noise, overrides)
    if overrides and not _is_lerobot_ref(ref):
        names = ", ".join(f"--policy.{k}" for k in overrides)
        raise UserInputError(f"{names}: policy config overrides apply to LeRobot checkpoints only (they set fields of "
                             f"its config.json); {ref if isinstance(ref, str) else type(ref).__name__!r} is not one.")
    policy = _load(ref, observation_space, action_space, n_slots, trust_remote_code, lerobot_args)
    return with_exploration(policy, exploration, action_space, n_slots)


def with_exploration(policy: Any, exploration: str, action_space: gym.Space, n_slots: int) -> Any:
    """``policy`` under the spec's exploration type: TorchRL / tensordict actors wrapped, SB3 models and policies
    adapted; any other policy only with the default (``deterministic``: nothing to set)."""
    from fasteval.core.tensordict_policy import is_tensordict_module
    from fasteval.robot.policies.sb3 import adapt_sb3, is_sb3_policy

    if is_tensordict_module(policy):
        from fasteval.robot.policies.torchrl_actors import wrap_actor

        return wrap_actor(policy, exploration, action_space, n_slots)
    if is_sb3_policy(policy):
        return adapt_sb3(policy, deterministic=exploration == "deterministic", n_slots=n_slots)
    if exploration != "deterministic":
        from fasteval.robot.policies.torchrl_actors import refuse_exploration

        refuse_exploration(policy)
    return policy


def _load(ref: Any, observation_space: gym.Space, action_space: gym.Space, n_slots: int, trust_remote_code: bool,
          lerobot_args: tuple) -> Any:
    if not isinstance(ref, str):
        return ref
    if is_remote_ref(ref):  # ws://HOST:PORT, openpi+ws://HOST:PORT: a served policy (the serve extra)
        return connect_remote(ref)
    if ref in BUILTIN_POLICIES:
        return BUILTIN_POLICIES[ref](action_space, n_slots)
    if is_hf_ref(ref):  # hf://org/repo[@revision]: a hub snapshot, loaded like a checkpoint folder
        folder = resolve_hf_ref(ref)
        if is_lerobot_checkpoint(folder):
            return _load_lerobot(folder, *lerobot_args)
        if not is_checkpoint_dir(folder):
            raise PolicyLoadError(f"policy {ref!r}: the snapshot {folder} has no config.json; expected a checkpoint "
                                  f"folder (config.json + {WEIGHTS_NAME}).")
        return check_observation_fit(load_checkpoint(folder), folder, observation_space)
    path = Path(ref)
    if is_lerobot_checkpoint(path):  # config.json with LeRobot's "type": LeRobot's own API (the lerobot extra)
        return _load_lerobot(path, *lerobot_args)
    if is_checkpoint_dir(path):
        return check_observation_fit(load_checkpoint(path), path, observation_space)
    if path.is_dir():
        raise PolicyLoadError(
            f"policy {ref!r} is a folder but has no config.json; a checkpoint folder needs config.json and {WEIGHTS_NAME}."
        )
    if path.is_file() and path.suffix == ".zip":  # a Stable-Baselines3 checkpoint (pickles inside)
        from fasteval.robot.policies.sb3 import load_sb3_zip

        return load_sb3_zip(path, trust_remote_code=trust_remote_code, device=lerobot_args[1])
    if path.is_file() and path.suffix in (".pt", ".pth", ".bin", ".pkl", ".ckpt"):
        raise PolicyLoadError(
            f"policy {ref!r} is a bare {path.suffix} file. fasteval loads checkpoint folders "
            f"(config.json + {WEIGHTS_NAME}) or module:callable references, never pickled code."
        )
    if split_callable_ref(ref) is not None:
        factory = resolve_callable(ref, what="policy", trust_remote_code=trust_remote_code)
        kwargs = _space_kwargs(factory, observation_space, action_space)
        try:
            policy = factory(**kwargs)
        except Exception as exc:  # the user's factory: report, don't crash with a traceback
            raise PolicyLoadError(f"policy {ref!r}: calling the factory raised {type(exc).__name__}: {exc}") from exc
        if not (isinstance(policy, SelectsActions) or callable(policy)):
            raise PolicyLoadError(f"policy {ref!r} returned {type(policy).__name__}, which is neither an nn.Module nor has select_action().")
        return policy
    raise UserInputError(
        f"policy {ref!r}: expected 'zero', 'random', a checkpoint folder (config.json + {WEIGHTS_NAME}), "
        f"or module:callable; no such folder exists and it is not of the form module:callable."
    )


def _is_lerobot_ref(ref: Any) -> bool:
    """A LeRobot checkpoint folder, or a hub snapshot of one (resolved from the cache or the hub)."""
    if not isinstance(ref, str):
        return False
    if is_hf_ref(ref):
        return is_lerobot_checkpoint(resolve_hf_ref(ref))
    return is_lerobot_checkpoint(Path(ref))


def _load_lerobot(folder: Path, n_slots: int, device: str, env: str | None, env_kwargs: dict[str, Any],
                  cuda_graph: bool | None, rename: dict[str, str], noise: str, overrides: dict[str, str]) -> Any:
    from fasteval.robot.lerobot.envs import config_for
    from fasteval.robot.lerobot.loader import load_lerobot_policy

    env_config = config_for(env, env_kwargs) if env is not None else None
    return load_lerobot_policy(folder, n_slots, device=device, rename_map=rename, env_config=env_config,
                               cuda_graph=cuda_graph, noise=noise, overrides=overrides)


def _space_kwargs(factory: Any, observation_space: gym.Space, action_space: gym.Space) -> dict[str, Any]:
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return {}
    offered = {"observation_space": observation_space, "action_space": action_space}
    return {name: value for name, value in offered.items() if name in params}


def policy_folder(ref: Any) -> Path | None:
    """The checkpoint folder behind a policy reference (a local folder or an ``hf://`` snapshot), else ``None``.

    Used to find files that travel with the weights (``normalization.safetensors``).
    """
    if is_hf_ref(ref):
        return resolve_hf_ref(ref)
    if isinstance(ref, str) and ref not in BUILTIN_POLICIES and is_checkpoint_dir(ref):
        return Path(ref)
    return None
