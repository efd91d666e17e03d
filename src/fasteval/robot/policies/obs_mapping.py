"""Observation conventions: the env's raw observations -> the keys a (LeRobot-style) policy reads.

Chosen once per engine (``EvalSpec.observation_format`` and ``EvalSpec.rename``):

* ``raw`` (the default, no renames): no adapter at all; the policy gets the observation buffer
  itself (a Tensor, or a TensorDict of the env's Dict keys).
* ``lerobot``: the policy gets a TensorDict ``[B]`` with the keys of LeRobot's own
  ``preprocess_observation`` (``lerobot.envs.utils``, LeRobot 0.6), computed on the policy device:

  ==========================================  ==========================================
  env observation (a Dict)                    policy key
  ==========================================  ==========================================
  ``pixels`` (one image)                      ``observation.image`` (float CHW in [0, 1])
  ``pixels/<cam>`` (a nested ``pixels`` Dict) ``observation.images.<cam>`` (float CHW in [0, 1])
  ``agent_pos``                               ``observation.state`` (float32)
  ``environment_state``                       ``observation.environment_state`` (float32)
  ``robot_state/<...>`` (a nested Dict)       ``observation.robot_state/<...>`` (as they are)
  ``policy``, ``camera_obs`` (IsaacLab)       ``observation.policy``, ``observation.camera_obs`` (as they are)
  any other key ``<name>``                    ``observation.<name>`` (float32, any layout: an image
                                              under another name stays ``HxWxC`` in [0, 255]),
                                              unless a rule above made that key already (then dropped)
  ==========================================  ==========================================

  Where LeRobot is installed, the rules are LeRobot's function itself: it is run once on a probe
  observation of the env's space, and what it made of each key is read back
  (:func:`fasteval.robot.lerobot.observations.traced_plan`). Where it is not, :func:`lerobot_rules`
  re-implements them, held to LeRobot's function by a property test over random observation Dicts
  in the LeRobot test environment (``tests/lerobot/test_observations.py``).

  fasteval's extensions, where LeRobot's function refuses the input (it asserts): ``pixels`` images
  in ``CxHxW`` layout, and array (Box) observations: an image -> ``observation.image``, anything else ->
  ``observation.state`` (MuJoCo, MetaWorld).

  Images (``uint8``) cross host -> device as ``uint8`` (a quarter of the bytes of float32) and become
  ``float32`` ``[B, C, H, W]`` in ``[0, 1]`` on the policy device, written into buffers allocated once.
  Other entries become ``float32``; entries that already are ``float32`` are passed as they are (no copy).

``rename`` (``--rename key=new``) is applied last, in either format: ``key`` may be the mapped
name or the env's raw key (``observation`` stands for an array observation in ``raw`` format).
Renaming in ``raw`` format turns the policy input into a TensorDict. A LeRobot checkpoint's policy
renames inside LeRobot's own processors instead (``rename_map``, as ``lerobot-eval`` does), so for
it the adapter renames nothing.

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
OBS = "observation."
PIXELS, NESTED = "pixels", "/"
"""fasteval's buffers are flat: a nested Dict ``{"pixels": {cam: ...}}`` arrives as ``pixels/<cam>`` keys
(:data:`fasteval.robot.lerobot.observations.NESTED`)."""
SPECIAL_KEYS = {"agent_pos": ("observation.state", "float"),
                "environment_state": ("observation.environment_state", "float"),
                "policy": ("observation.policy", "same"), "camera_obs": ("observation.camera_obs", "same")}
"""LeRobot's special cases besides ``pixels`` and ``robot_state`` (``preprocess_observation``, LeRobot 0.6)."""
ROBOT_STATE = "robot_state"
LEROBOT_ORDER = ("pixels", "environment_state", "agent_pos", "robot_state", "policy", "camera_obs")
"""The order in which LeRobot's function handles its special keys; every other key comes after them."""


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


def image_layout(space: gym.Space, channel_first: bool = True) -> str | None:
    """``"hwc"`` (channels last, fewer than height and width, as LeRobot asserts) / ``"chw"`` (fasteval's
    extension, when ``channel_first``) for a uint8 image Box, else ``None``."""
    if not isinstance(space, gym.spaces.Box) or space.dtype != "uint8" or len(space.shape) != 3:
        return None
    h, w, c = space.shape
    if c < h and c < w:
        return "hwc"
    if channel_first and space.shape[0] < min(space.shape[1:]):
        return "chw"
    return None


def _root(key: str) -> str:
    return key.split(NESTED, 1)[0]


def lerobot_rules(space: gym.spaces.Dict) -> list[KeyPlan]:
    """LeRobot's ``preprocess_observation`` rules for a Dict space (see the module docstring), re-implemented."""
    keys = list(space.spaces)
    plans: list[KeyPlan] = []
    made: set[str] = set()
    order = {name: i for i, name in enumerate(LEROBOT_ORDER)}
    special = sorted((k for k in keys if _root(k) in order), key=lambda k: order[_root(k)])  # stable: keeps the env's order
    for key in special + [k for k in keys if _root(k) not in order]:
        sub, root = space.spaces[key], _root(key)
        if root == PIXELS and (key == PIXELS or key.startswith(PIXELS + NESTED)):
            layout = image_layout(sub, channel_first=True)
            if layout is None:
                raise UserInputError(f"observation key {key!r}: LeRobot reads it as a uint8 image (HxWxC), but its "
                                     f"space is {sub}. Use --obs-format raw, or give the image another key.")
            target = "observation.image" if key == PIXELS else f"observation.images.{key[len(PIXELS) + 1:]}"
            plans.append(KeyPlan(key, target, f"image_{layout}"))
        elif root == ROBOT_STATE and key != root:
            plans.append(KeyPlan(key, OBS + key, "same"))
        elif key in SPECIAL_KEYS:
            target, kind = SPECIAL_KEYS[key]
            plans.append(KeyPlan(key, target, _float_kind(sub) if kind == "float" else "same"))
        elif OBS + key not in made:
            plans.append(KeyPlan(key, OBS + key, _float_kind(sub)))
        else:
            continue  # LeRobot keeps the first key that makes a name
        made.add(plans[-1].target)
    return plans


def _float_kind(space: gym.Space) -> str:
    return "same" if space.dtype == "float32" else "float"


def _array_plan(space: gym.Space) -> KeyPlan:
    """fasteval's extension for an array (Box) observation: an image or the state."""
    layout = image_layout(space, channel_first=True)
    if layout:
        return KeyPlan(None, "observation.image", f"image_{layout}")
    return KeyPlan(None, "observation.state", _float_kind(space))


def lerobot_plan(space: gym.Space) -> list[KeyPlan]:
    """The ``lerobot`` format's entries: LeRobot's own function where it is installed, else :func:`lerobot_rules`."""
    if not isinstance(space, gym.spaces.Dict):
        return [_array_plan(space)]
    from fasteval.robot.lerobot.observations import traced_plan

    traced = traced_plan(space)
    return [KeyPlan(*entry) for entry in traced] if traced is not None else lerobot_rules(space)


def plan_keys(space: gym.Space, observation_format: str, rename: Mapping[str, str]) -> list[KeyPlan]:
    """The policy input entries for ``space``. Raises :class:`UserInputError` for unknown or clashing keys."""
    if observation_format not in (RAW, LEROBOT):
        raise UserInputError(f"observation_format: expected {RAW!r} or {LEROBOT!r}, got {observation_format!r}.")
    if isinstance(space, gym.spaces.Dict):
        subspaces = dict(space.spaces)
    else:
        subspaces = {None: space}
    if observation_format == RAW:
        plans = [KeyPlan(key, ARRAY_KEY if key is None else key, "same") for key in subspaces]
    else:
        plans = lerobot_plan(space)
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

        from fasteval.robot.lerobot.observations import build_entries

        entries, steps = build_entries([(p.source, p.target, p.kind) for p in self.plans], obs, self.device)
        batch = obs.shape[0] if isinstance(obs, torch.Tensor) else obs.batch_size[0]
        return TensorDict(entries, batch_size=[batch], device=self.device), steps


def build_observation_adapter(space: gym.Space, observation_format: str, rename: Mapping[str, str],
                              device: torch.device) -> ObservationAdapter | None:
    """The adapter for a spec, or ``None`` when the policy reads the raw buffers (``raw``, no renames)."""
    if observation_format == RAW and not rename:
        return None
    return ObservationAdapter(plan_keys(space, observation_format, rename), device)
