"""Stable-Baselines3 policies in fasteval: a live model or policy, or a ``.zip`` checkpoint.

:func:`adapt_sb3` turns an SB3 ``BaseAlgorithm`` (``PPO``, ``A2C``, ``DQN``, ``SAC``, ...) or ``BasePolicy``
into a fasteval policy object that calls SB3's own ``policy.predict`` on the observation batch, so its
actions are exactly the ones ``evaluate_policy`` would take for the same observations: SB3's observation
preprocessing (``obs_to_tensor``: image transposes, Dict observations), its ``_predict``, and its action
post-processing (clipping to a ``Box``, or unscaling for squashed policies). Observations reach it as NumPy
arrays (SB3's ``predict`` takes NumPy), in the env's own dtypes; a model trained behind ``VecNormalize``
has its observations normalized with the training env's statistics as they are at each call, as SB3's
``EvalCallback`` does with ``sync_envs_normalization``.

* ``deterministic=True`` (fasteval's ``exploration="deterministic"``): one ``predict`` per batch.
* ``deterministic=False`` (``exploration="random"``): one ``predict`` per row, each row sampling from its
  slot's per-episode generator (:mod:`fasteval.robot.policies.episode_noise`), so that the draws do not
  depend on the batch. These are samples of the same distribution as SB3's, not SB3's own draws (it samples
  from the global RNG across its batch), and DQN's epsilon-greedy ``model.predict`` is not reproduced: the
  Q-network's greedy policy is the deterministic one.

Recurrent policies (sb3-contrib's ``RecurrentPPO``) are not supported.

:func:`load_sb3_zip` loads the policy of a checkpoint written by ``model.save(path)``. Its ``data`` entry is
a JSON document whose values are cloudpickled Python objects (the policy class, the spaces, the schedules):
loading it runs code from the file, so it needs ``trust_remote_code`` (``--trust-remote-code``).
"""

from __future__ import annotations

import inspect
import sys
import zipfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from fasteval.robot.policies.episode_noise import EpisodeNoise
from fasteval.types.errors import PolicyLoadError, UserInputError


def is_sb3_policy(obj: Any) -> bool:
    """Whether ``obj`` is an SB3 model or policy (without importing SB3: if it was never imported, it cannot be)."""
    policies = sys.modules.get("stable_baselines3.common.policies")
    base = sys.modules.get("stable_baselines3.common.base_class")
    return ((policies is not None and isinstance(obj, policies.BasePolicy))
            or (base is not None and isinstance(obj, base.BaseAlgorithm)))


def adapt_sb3(obj: Any, deterministic: bool, n_slots: int) -> "SB3Policy":
    """The fasteval policy of an SB3 model or policy (module docstring)."""
    from stable_baselines3.common.base_class import BaseAlgorithm

    model = obj if isinstance(obj, BaseAlgorithm) else None
    policy = obj.policy if model is not None else obj
    if any("Recurrent" in cls.__name__ for cls in type(policy).__mro__):  # sb3_contrib's RecurrentActorCriticPolicy
        raise UserInputError(f"the SB3 policy {type(policy).__name__} is recurrent; fasteval evaluates feed-forward SB3 "
                             f"policies (its hidden states would need per-slot episode starts).")
    cls = SB3Policy if deterministic else SB3SampledPolicy
    return cls(policy, model, n_slots)


class SB3Policy:
    """Calls ``policy.predict(obs, deterministic=True)`` on the batch (module docstring)."""

    deterministic = True

    def __init__(self, policy: Any, model: Any | None, n_slots: int):
        self.policy, self.model = policy, model
        self.dict_obs = hasattr(policy.observation_space, "spaces") and isinstance(policy.observation_space.spaces, dict)

    def _numpy(self, obs: Any) -> Any:
        if isinstance(obs, torch.Tensor):
            arrays: Any = obs.cpu().numpy()
        else:
            arrays = {k: obs.get(k).cpu().numpy() for k in obs.keys()}
        normalizer = self.model.get_vec_normalize_env() if self.model is not None else None
        return normalizer.normalize_obs(arrays) if normalizer is not None else arrays

    def _predict(self, arrays: Any, deterministic: bool) -> np.ndarray:
        training = self.policy.training
        try:
            actions, _state = self.policy.predict(arrays, deterministic=deterministic)
        finally:
            self.policy.set_training_mode(training)  # predict leaves the policy in eval mode; give its mode back
        return actions

    def select_action(self, obs: Any) -> torch.Tensor:
        return torch.as_tensor(self._predict(self._numpy(obs), True))

    def run_meta(self) -> dict[str, Any]:
        """``meta["exploration"]`` of the run (copied by the engine)."""
        return {"exploration": "deterministic", "sb3_policy": type(self.policy).__name__}


class SB3SampledPolicy(SB3Policy):
    """``policy.predict(obs_row, deterministic=False)`` one row at a time, per-episode noise (module docstring)."""

    deterministic = False
    calls_one_row_at_a_time = True
    """Every ``predict`` has one row (:class:`fasteval.core.capabilities.CallsOneRowAtATime`)."""

    def __init__(self, policy: Any, model: Any | None, n_slots: int):
        super().__init__(policy, model, n_slots)
        self.noise = EpisodeNoise(n_slots)

    def reset(self, env_ids: torch.Tensor, seeds: Sequence[int] | None = None) -> None:
        self.noise.reset(env_ids, seeds)

    def select_action(self, obs: Any) -> torch.Tensor:
        arrays = self._numpy(obs)
        n = len(next(iter(arrays.values()))) if isinstance(arrays, dict) else len(arrays)
        row = (lambda r: {k: v[r:r + 1] for k, v in arrays.items()}) if isinstance(arrays, dict) else (lambda r: arrays[r:r + 1])
        rows = self.noise.per_row(lambda r: self._predict(row(r), False), n, self.policy.device)
        return torch.as_tensor(np.concatenate(rows))

    def run_meta(self) -> dict[str, Any]:
        return {"exploration": "random", "sb3_policy": type(self.policy).__name__,
                "exploration_noise": "per-episode torch.Generator seeded with the episode seed (batch-invariant)"}


# -- .zip checkpoints -----------------------------------------------------------------------------------
SB3_ENTRIES = ("data", "policy.pth")


def is_sb3_zip(path: Path) -> bool:
    """Whether ``path`` is a zip archive with SB3's ``data`` and ``policy.pth`` entries (nothing is unpickled)."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
    except (zipfile.BadZipFile, OSError):
        return False
    return all(name in names for name in SB3_ENTRIES)


def load_sb3_zip(path: Path, trust_remote_code: bool, device: str = "auto") -> Any:
    """The policy (an SB3 ``BasePolicy``) of the checkpoint ``path``, built as SB3's ``BaseAlgorithm.load`` builds it.

    Refused without ``trust_remote_code``: the checkpoint's ``data`` holds pickles (module docstring).
    """
    if not is_sb3_zip(path):
        raise PolicyLoadError(f"policy {str(path)!r} is a .zip file but not a Stable-Baselines3 checkpoint (expected the "
                              f"entries {' and '.join(SB3_ENTRIES)} written by model.save).")
    if not trust_remote_code:
        raise UserInputError(
            f"policy {str(path)!r} is a Stable-Baselines3 checkpoint. Its 'data' entry holds cloudpickled Python objects "
            f"(the policy class, the observation and action spaces, the schedules), and loading it runs code from the "
            f"file. Pass --trust-remote-code if you trust it.")
    try:
        from stable_baselines3.common.save_util import load_from_zip_file
    except ImportError as exc:
        raise PolicyLoadError(f"policy {str(path)!r} is a Stable-Baselines3 checkpoint, and stable-baselines3 is not "
                              f"installed ({exc}): ./scripts/install.sh sb3.") from None
    target = "cpu" if device == "auto" else device
    data, params, _ = load_from_zip_file(path, device=target)
    kwargs = dict(data.get("policy_kwargs") or {})
    kwargs.pop("device", None)  # as BaseAlgorithm.load does
    net_arch = kwargs.get("net_arch")
    if net_arch and isinstance(net_arch, list) and isinstance(net_arch[0], dict):
        kwargs["net_arch"] = net_arch[0]
    policy_class = data["policy_class"]
    if "use_sde" in inspect.signature(policy_class.__init__).parameters and "use_sde" not in kwargs:
        kwargs["use_sde"] = bool(data.get("use_sde", False))  # on-policy algorithms pass it beside the kwargs
    policy = policy_class(data["observation_space"], data["action_space"], lambda _progress: 0.0, **kwargs)
    policy.load_state_dict(params["policy"])
    policy.to(target).set_training_mode(False)
    return policy
