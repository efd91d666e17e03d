"""Observation conventions: the env's raw observations -> the keys a (LeRobot-style) policy reads.

Chosen once per engine (``EvalSpec.observation_format`` and ``EvalSpec.rename``):

* ``raw`` (the default, no renames): no adapter at all; the policy gets the observation buffer
  itself (a Tensor, or a TensorDict of the env's Dict keys).
* ``lerobot``: the policy gets a TensorDict ``[B]`` with LeRobot's keys:

  ==========================================  ==========================================
  env observation                             policy key
  ==========================================  ==========================================
  ``pixels`` (one image)                      ``observation.image``
  ``pixels.<cam>`` / ``pixels/<cam>``         ``observation.images.<cam>``
  any other image key ``<name>``              ``observation.images.<name>``
  ``agent_pos``, ``state``                    ``observation.state``
  ``environment_state``                       ``observation.environment_state``
  any other key ``<name>``                    ``observation.<name>``
  an array (Box) observation: an image        ``observation.image``
  an array (Box) observation: anything else   ``observation.state`` (MuJoCo, MetaWorld)
  ==========================================  ==========================================

  Images (``uint8`` ``HxWxC`` with C in 1, 3, 4, or ``CxHxW``) cross host -> device as ``uint8``
  (a quarter of the bytes of float32) and become ``float32`` ``[B, C, H, W]`` in ``[0, 1]`` on the
  policy device, written into buffers allocated once. Other entries become ``float32``; entries
  that already are ``float32`` are passed as they are (no copy).

``rename`` (``--rename key=new``) is applied last, in either format: ``key`` may be the mapped
name or the env's raw key (``observation`` stands for an array observation in ``raw`` format).
Renaming in ``raw`` format turns the policy input into a TensorDict.

The adapter is a step of :class:`fasteval.robot.policies.runner.RobotPolicyRunner`: it runs right
before the policy, after :class:`~fasteval.core.transfer.HostToDevice` copied the raw buffers.

"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import gymnasium as gym
import torch

from fasteval.types.errors import UserInputError

RAW, LEROBOT = "raw", "lerobot"
ARRAY_KEY = "observation"
"""The name of an array (non-Dict) observation in ``raw`` format (TorchRL's convention)."""
STATE_KEYS = {"agent_pos": "observation.state", "state": "observation.state",
              "environment_state": "observation.environment_state"}
PIXEL_PREFIXES = ("pixels.", "pixels/")


@dataclass(frozen=True)
class KeyPlan:
    """One policy input entry: where it comes from and what happens to it on the device."""

    source: str | None
    """The env's Dict key, or ``None`` for an array observation."""
    target: str
    """The key the policy reads."""
    kind: str
    """``image_hwc`` / ``image_chw`` (uint8 -> float CHW in [0, 1]), ``float`` (cast to float32),
    or ``same`` (passed as it is)."""


def image_layout(space: gym.Space) -> str | None:
    """``"hwc"`` / ``"chw"`` for a uint8 image Box, else ``None``."""
    if not isinstance(space, gym.spaces.Box) or space.dtype != "uint8" or len(space.shape) != 3:
        return None
    if space.shape[-1] in (1, 3, 4):
        return "hwc"
    if space.shape[0] in (1, 3, 4):
        return "chw"
    return None


def _lerobot_name(key: str, space: gym.Space, n_images: int) -> str:
    if image_layout(space) is not None:
        if key == "pixels" and n_images == 1:
            return "observation.image"
        for prefix in PIXEL_PREFIXES:
            if key.startswith(prefix):
                return f"observation.images.{key[len(prefix):]}"
        return f"observation.images.{key}"
    if key in STATE_KEYS:
        return STATE_KEYS[key]
    return key if key.startswith("observation.") else f"observation.{key}"


def plan_keys(space: gym.Space, observation_format: str, rename: Mapping[str, str]) -> list[KeyPlan]:
    """The policy input entries for ``space``. Raises :class:`UserInputError` for unknown or clashing keys."""
    if observation_format not in (RAW, LEROBOT):
        raise UserInputError(f"observation_format: expected {RAW!r} or {LEROBOT!r}, got {observation_format!r}.")
    if isinstance(space, gym.spaces.Dict):
        subspaces = dict(space.spaces)
    else:
        subspaces = {None: space}
    n_images = sum(image_layout(s) is not None for s in subspaces.values())
    plans: list[KeyPlan] = []
    for key, sub in subspaces.items():
        layout = image_layout(sub)
        if observation_format == RAW:
            target, kind = (ARRAY_KEY if key is None else key), "same"
        else:
            if key is None:
                target = "observation.image" if layout else "observation.state"
            else:
                target = _lerobot_name(key, sub, n_images)
            if layout:
                kind = f"image_{layout}"
            else:
                kind = "same" if getattr(sub, "dtype", None) == "float32" else "float"
        plans.append(KeyPlan(key, target, kind))
    plans = _apply_rename(plans, rename)
    targets = [p.target for p in plans]
    clashes = sorted({t for t in targets if targets.count(t) > 1})
    if clashes:
        described = "; ".join(f"{t!r} <- " + ", ".join(repr(p.source) for p in plans if p.target == t) for t in clashes)
        raise UserInputError(f"observation keys clash after mapping/renaming: {described}. Use --rename to give them distinct names.")
    return plans


def _apply_rename(plans: list[KeyPlan], rename: Mapping[str, str]) -> list[KeyPlan]:
    if not rename:
        return plans
    by_target = {p.target: i for i, p in enumerate(plans)}
    by_source = {(ARRAY_KEY if p.source is None else p.source): i for i, p in enumerate(plans)}
    out = list(plans)
    for old, new in rename.items():
        index = by_target.get(old, by_source.get(old))
        if index is None:
            known = sorted({*by_target, *by_source})
            raise UserInputError(f"rename {old!r}={new!r}: no observation key {old!r}; the keys are {known}.")
        out[index] = KeyPlan(out[index].source, new, out[index].kind)
    return out


class ObservationAdapter:
    """Maps one raw policy input (a Tensor, or a TensorDict of the env's keys) to the policy's keys.

    :meth:`build` is called once per observation buffer (the engine reuses its buffers): it
    allocates the output TensorDict and returns it with the in-place steps that refresh it.
    The output is the same object every step, so wrappers that cache by identity (the
    TensorDictModule adapter) wrap it once.
    """

    def __init__(self, plans: list[KeyPlan], device: torch.device):
        self.plans = plans
        self.device = device

    def build(self, obs: Any) -> tuple[Any, list[Callable[[], Any]]]:
        from tensordict import TensorDict

        entries: dict[str, torch.Tensor] = {}
        steps: list[Callable[[], Any]] = []
        for plan in self.plans:
            src = obs if plan.source is None else obs[plan.source]
            if plan.kind == "same":
                entries[plan.target] = src
                continue
            view = src.permute(0, 3, 1, 2) if plan.kind == "image_hwc" else src
            out = torch.empty(view.shape, dtype=torch.float32, device=self.device)
            entries[plan.target] = out
            steps.append(_image_step(view, out) if plan.kind.startswith("image") else _cast_step(view, out))
        batch = obs.shape[0] if isinstance(obs, torch.Tensor) else obs.batch_size[0]
        return TensorDict(entries, batch_size=[batch], device=self.device), steps


def _image_step(src: torch.Tensor, out: torch.Tensor) -> Callable[[], Any]:
    return lambda: torch.div(src, 255.0, out=out)


def _cast_step(src: torch.Tensor, out: torch.Tensor) -> Callable[[], Any]:
    return lambda: out.copy_(src)


def build_observation_adapter(space: gym.Space, observation_format: str, rename: Mapping[str, str],
                              device: torch.device) -> ObservationAdapter | None:
    """The adapter for a spec, or ``None`` when the policy reads the raw buffers (``raw``, no renames)."""
    if observation_format == RAW and not rename:
        return None
    return ObservationAdapter(plan_keys(space, observation_format, rename), device)
