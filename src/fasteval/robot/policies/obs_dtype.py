"""Observation dtype: float observations cast to the policy's floating dtype, on the policy device.

MuJoCo and MetaWorld return float64 observations; most policies are float32, and
``Linear(float64 input)`` on float32 weights raises ``mat1 and mat2 must have the same dtype``.
``EvalSpec.obs_dtype`` (``--obs-dtype``) chooses what the policy receives:

==========  =====================================================================================
``auto``    (default) the dtype of the policy's first floating parameter, when the policy is an
            ``nn.Module`` that has one; otherwise observations are kept as they are
``float32`` / ``float64``: that dtype, for every policy
``keep``    no cast: the policy gets the env's dtypes (the old behaviour; a dtype mismatch is the
            policy's own error on the dry run)
==========  =====================================================================================

Only floating entries are cast: integer and ``uint8`` entries (raw images, counters) and
``bool`` entries keep their dtype. In ``lerobot`` format images were already turned into float32
by the observation mapping; they are cast too when the target is not float32.

The cast is one stage of the policy input pipeline (:class:`fasteval.robot.policies.runner.InputPipeline`):
:meth:`ObservationCast.build` allocates the cast buffers **once** per engine observation buffer,
on the device of the observation (the policy device: after the host-to-device copy), and each
step is one in-place ``out.copy_(src)`` per entry that needs it: no new tensor per step, and
nothing to do in a CUDA graph beyond the copy. Entries that already have the target dtype are
passed through as they are (no copy); a run whose observations all match pays nothing (no stage).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from fasteval.types.spec import OBS_DTYPES

TORCH_DTYPES = {"float32": torch.float32, "float64": torch.float64}


def policy_float_dtype(policy: Any) -> torch.dtype | None:
    """The dtype of the first floating parameter of an ``nn.Module`` policy; ``None`` when the policy
    is not a module or has no floating parameter (a parameter-free module, a ``select_action`` object)."""
    if not isinstance(policy, nn.Module):
        return None
    for param in policy.parameters():
        if param.is_floating_point():
            return param.dtype
    return None


def resolve_obs_dtype(mode: str, policy: Any) -> torch.dtype | None:
    """The dtype float observations are cast to for ``mode`` (see the module docstring); ``None``: no cast."""
    if mode not in OBS_DTYPES:
        raise ValueError(f"obs_dtype: expected one of {', '.join(OBS_DTYPES)}, got {mode!r}.")
    if mode == "keep":
        return None
    if mode == "auto":
        return policy_float_dtype(policy)
    return TORCH_DTYPES[mode]


def _leaves(obs: Any) -> list[torch.Tensor]:
    if isinstance(obs, torch.Tensor):
        return [obs]
    out: list[torch.Tensor] = []
    for key in obs.keys():
        value = obs.get(key)
        if isinstance(value, torch.Tensor):
            out.append(value)
        elif hasattr(value, "keys"):
            out.extend(_leaves(value))
    return out


def needs_cast(obs: Any, dtype: torch.dtype) -> bool:
    """Whether ``obs`` (a Tensor, or a TensorDict) has a floating entry whose dtype is not ``dtype``."""
    return any(t.is_floating_point() and t.dtype != dtype for t in _leaves(obs))


class ObservationCast:
    """Pipeline stage: ``build(obs) -> (cast obs, [in-place steps])``; see the module docstring.

    ``build`` is called once per observation buffer (the engine reuses its buffers). The output
    is the input object itself when nothing needs a cast, else a new Tensor / TensorDict (same
    keys and batch size) whose floating entries are buffers of ``dtype``, refreshed by the steps.
    """

    def __init__(self, dtype: torch.dtype):
        if not dtype.is_floating_point:
            raise ValueError(f"ObservationCast: expected a floating dtype, got {dtype}.")
        self.dtype = dtype

    def build(self, obs: Any) -> tuple[Any, list[Callable[[], Any]]]:
        steps: list[Callable[[], Any]] = []
        return self._build(obs, steps), steps

    def _build(self, obs: Any, steps: list[Callable[[], Any]]) -> Any:
        if isinstance(obs, torch.Tensor):
            if not obs.is_floating_point() or obs.dtype == self.dtype:
                return obs
            out = torch.empty(obs.shape, dtype=self.dtype, device=obs.device)
            steps.append(_copy_step(obs, out))
            return out
        if not needs_cast(obs, self.dtype):
            return obs
        from tensordict import TensorDict

        entries = {}
        for key in obs.keys():
            value = obs.get(key)
            entries[key] = self._build(value, steps) if isinstance(value, torch.Tensor) or hasattr(value, "keys") else value
        return TensorDict(entries, batch_size=obs.batch_size, device=obs.device)


def _copy_step(src: torch.Tensor, out: torch.Tensor) -> Callable[[], Any]:
    return lambda: out.copy_(src)


def build_obs_cast(mode: str, policy: Any, example: Any, after_stages: bool = False) -> ObservationCast | None:
    """The cast stage for a run, or ``None`` when nothing would be cast.

    ``example`` is the policy input before this stage. ``after_stages``: earlier stages (mapping,
    normalization) exist and may change dtypes, so the stage is kept even if ``example`` matches
    (its :meth:`~ObservationCast.build` then adds no step where nothing needs a cast).
    """
    dtype = resolve_obs_dtype(mode, policy)
    if dtype is None or not (after_stages or needs_cast(example, dtype)):
        return None
    return ObservationCast(dtype)
