"""LeRobot's observation rules, read from LeRobot's own ``preprocess_observation``, applied on the device.

LeRobot's rollout turns each env observation (NumPy, on the host) into its batch with
``lerobot.envs.utils.preprocess_observation``. fasteval's observations are already on the policy
device, so calling the function on them would cost a host round trip per key (``.cpu().numpy()``)
on every step that needs a chunk. Instead :func:`traced_plan` calls LeRobot's function once, on a
probe observation of the env's space (random values, a batch of two), and reads back what it made
of each key: which output key each input became, and how (``same``: as it is; ``float``: cast to
float32; ``image_hwc``: ``HxWxC`` uint8 -> float ``CxHxW`` in ``[0, 1]``). Each output is
identified by value, so a rule LeRobot adds or changes is followed as long as it is one of these
three; anything else is an error that names the key. The plan is then applied on the device
(:func:`build_entries`, also the builder of fasteval's ``lerobot`` format,
:class:`fasteval.robot.policies.obs_mapping.ObservationAdapter`), with the same float operations as
LeRobot's (a uint8 -> float32 cast and a division by 255), so the tensors are the same bit for bit.

fasteval's buffers are flat (``pixels/<cam>``, ``robot_state/<...>``): the probe nests them again, as the
env gave them to LeRobot (:func:`nest`).
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable

import gymnasium as gym
import numpy as np
import torch

from fasteval.types.errors import UserInputError

NESTED = "/"
"""fasteval's buffers are flat: a nested Dict ``{"pixels": {cam: ...}}`` arrives as ``pixels/<cam>`` keys."""

Entry = tuple  # (source key or None, target key, kind): one entry of a plan

KINDS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "same": lambda x: x,
    "float": lambda x: x.float(),
    "image_hwc": lambda x: x.permute(0, 3, 1, 2).float() / 255,
}
"""What LeRobot may do to one key, as fasteval's adapter does it on the device."""


def _preprocess() -> Callable[[dict[str, Any]], dict[str, Any]] | None:
    if sys.version_info < (3, 12):
        return None
    try:
        from lerobot.envs.utils import preprocess_observation
    except ImportError:
        return None
    return preprocess_observation


def nest(flat: dict[str, Any]) -> dict[str, Any]:
    """``{"pixels/top": a, "agent_pos": b}`` -> ``{"pixels": {"top": a}, "agent_pos": b}`` (any depth)."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        parts = key.split(NESTED)
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """The inverse of :func:`nest`: nested dicts -> ``a/b`` keys."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + NESTED))
        else:
            out[name] = value
    return out


def probe_observation(keys: tuple[tuple[str, tuple[int, ...], str], ...], batch: int = 4,
                      seed: int = 0) -> dict[str, np.ndarray]:
    """Random values for ``(key, shape, dtype)`` entries, ``[batch, *shape]``; distinct keys get distinct values."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for key, shape, name in keys:
        dtype, full = np.dtype(name), (batch, *shape)
        if dtype == np.bool_:
            out[key] = rng.integers(0, 2, full).astype(bool)
        elif np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            out[key] = rng.integers(max(info.min, -1000), min(info.max, 1000) + 1, full, dtype=dtype)
        else:
            out[key] = rng.normal(size=full).astype(dtype)
    return out


def space_keys(space: gym.spaces.Dict) -> tuple[tuple[str, tuple[int, ...], str], ...]:
    """``(key, shape, dtype)`` of each entry of a flat Dict space (hashable: the plan's cache key)."""
    return tuple((k, tuple(s.shape or ()), str(np.dtype(s.dtype))) for k, s in space.spaces.items())


def traced_plan(space: gym.Space) -> list[Entry] | None:
    """The ``lerobot`` format's entries for ``space`` as LeRobot's own function makes them; ``None`` where
    LeRobot is not importable, or refuses the probe (fasteval's own rules then apply: their extensions)."""
    preprocess = _preprocess()
    if preprocess is None or not isinstance(space, gym.spaces.Dict):
        return None
    plans = _traced(preprocess, space_keys(space))
    return None if plans is None else list(plans)


@functools.lru_cache(maxsize=64)
def _traced(preprocess: Callable, keys: tuple) -> tuple[Entry, ...] | None:
    probe = probe_observation(keys)
    try:
        made = flatten(preprocess(nest(probe)))
    except (AssertionError, ValueError, TypeError, AttributeError):
        return None  # LeRobot's function refuses this observation (e.g. a CxHxW image under "pixels")
    return tuple(_identify(target, value, probe) for target, value in made.items())


def _identify(target: str, value: Any, probe: dict[str, np.ndarray]) -> Entry:
    """Which probe key, and which of :data:`KINDS`, gives LeRobot's ``value`` for ``target``."""
    got = torch.as_tensor(value)
    for source, array in probe.items():
        tensor = torch.from_numpy(array)
        for kind, apply in KINDS.items():
            if kind == "image_hwc" and (tensor.ndim != 4 or tensor.dtype != torch.uint8):
                continue
            want = apply(tensor)
            if want.shape == got.shape and want.dtype == got.dtype and torch.equal(want, got):
                return (source, target, kind)
    raise UserInputError(f"LeRobot's preprocess_observation makes {target!r} ({got.dtype}, {tuple(got.shape)}) in a way "
                         f"fasteval does not reproduce on the device (not a key as it is, cast to float32, or a uint8 "
                         f"HxWxC image scaled to [0, 1]). Use a LeRobot version fasteval supports (docs/lerobot.md).")


OBS_PREFIX = "observation."


def build_entries(plan: Any, obs: Any, device: torch.device) -> tuple[dict[str, torch.Tensor], list[Callable[[], Any]]]:
    """The mapped entries of ``obs`` for ``plan`` (``(source, target, kind)`` entries; source ``None``: ``obs``
    itself), with the in-place steps that refresh them: ``same`` entries are the source tensors, the others
    buffers allocated once on ``device`` (float32), refreshed with LeRobot's float operations."""
    entries: dict[str, torch.Tensor] = {}
    steps: list[Callable[[], Any]] = []
    for source, target, kind in plan:
        src = obs if source is None else obs[source]
        if kind == "same":
            entries[target] = src
            continue
        view = src.permute(0, 3, 1, 2) if kind == "image_hwc" else src
        out = torch.empty(view.shape, dtype=torch.float32, device=device)
        entries[target] = out
        steps.append(_image_step(view, out) if kind.startswith("image") else _cast_step(view, out))
    return entries, steps


def _image_step(src: torch.Tensor, out: torch.Tensor) -> Callable[[], Any]:
    return lambda: torch.div(src, 255.0, out=out)


def _cast_step(src: torch.Tensor, out: torch.Tensor) -> Callable[[], Any]:
    return lambda: out.copy_(src)


class LeRobotBatch:
    """fasteval's policy input -> LeRobot's observation batch, on the policy device (step 1 of
    :mod:`fasteval.robot.lerobot.policy`).

    * observations fasteval already mapped (``--obs-format lerobot``: every key starts with
      ``observation.``) are taken as they are;
    * raw env observations go through the plan of :func:`traced_plan` (LeRobot's own rules), applied
      on the device by fasteval's adapter into buffers allocated once per input buffer: no host
      round trip.

    Nested entries (``observation.robot_state/eef/pos``) become nested dicts again, as LeRobot's
    function returns them.
    """

    MAX_INPUTS = 4
    """Input buffers remembered (the engine passes the same one every step)."""

    def __init__(self) -> None:
        self._built: dict[int, tuple[Any, Any, list[Callable[[], Any]]]] = {}

    def __call__(self, obs: Any) -> dict[str, Any]:
        if isinstance(obs, torch.Tensor):
            raise UserInputError(
                "a LeRobot policy needs Dict observations (pixels / agent_pos / ...), as LeRobot's envs give; this env "
                f"gives one array of shape {tuple(obs.shape)}. Use a LeRobot env (--env.type) or a Dict-observation env."
            )
        keys = [k for k in obs.keys() if k != "task"]
        if keys and all(k.startswith(OBS_PREFIX) for k in keys):
            return nest({k: obs.get(k) for k in keys})
        entry = self._built.get(id(obs))
        if entry is None:
            entry = self._build(obs, keys)
        for step in entry[2]:
            step()
        return nest(dict(entry[1]))

    def _build(self, obs: Any, keys: list[str]) -> tuple[Any, Any, list[Callable[[], Any]]]:
        tensors = {k: obs.get(k) for k in keys}
        space = gym.spaces.Dict({k: gym.spaces.Box(0, 1, tuple(v.shape[1:]), _numpy_dtype(v.dtype))
                                 for k, v in tensors.items()})
        plan = traced_plan(space)
        if plan is None:
            raise UserInputError(f"LeRobot's preprocess_observation refuses these observations "
                                 f"({ {k: (tuple(v.shape[1:]), str(v.dtype)) for k, v in tensors.items()} }): "
                                 f"LeRobot reads pixels as uint8 HxWxC images. Try --obs-format lerobot.")
        mapped, steps = build_entries(plan, obs, next(iter(tensors.values())).device)
        if len(self._built) >= self.MAX_INPUTS:
            self._built.pop(next(iter(self._built)))
        entry = self._built[id(obs)] = (obs, mapped, steps)  # obs kept alive: its id stays unique
        return entry


def _numpy_dtype(dtype: torch.dtype) -> np.dtype:
    return torch.empty(0, dtype=dtype).numpy().dtype
