"""Normalization stats carried by a checkpoint folder: observations in, actions out, on the device.

A checkpoint folder (or an ``hf://`` snapshot) may hold ``normalization.safetensors`` next to
``config.json``. Its tensors are named ``<key>.<stat>``:

* ``<key>`` is a key of the policy input (``observation.state``, ``observation.image`` with the
  ``lerobot`` format; the env's Dict keys in ``raw`` format; ``observation`` for an array
  observation in ``raw`` format), or ``action``;
* ``<stat>`` is ``mean`` and ``std`` (mode ``mean_std``) or ``min`` and ``max`` (mode ``min_max``).
  If a key has all four, the file's metadata (``{"<key>": "min_max"}``) picks; the default is ``mean_std``.

Each stat must broadcast to one row of its entry (``[C, 1, 1]`` for a ``[C, H, W]`` image).
The formulas are LeRobot's (``eps = 1e-8``):

* ``mean_std``: ``x' = (x - mean) / (std + eps)``; actions ``a = a' * std + mean``;
* ``min_max``: ``x' = (x - min) / (max - min + eps) * 2 - 1``; actions ``a = (a' + 1) / 2 * (max - min) + min``.

Normalized observations are written into float32 buffers allocated once (the engine's
observation buffers are never modified); entries without stats are passed as they are.
Actions are unnormalized once per policy output (before an action chunk is queued).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from fasteval.types.errors import PolicyLoadError, UserInputError

NORMALIZATION_NAME = "normalization.safetensors"
EPS = 1e-8
MODES = {"mean_std": ("mean", "std"), "min_max": ("min", "max")}
ACTION_KEY = "action"


@dataclass(frozen=True)
class FeatureStats:
    mode: str
    """``mean_std`` or ``min_max``."""
    a: torch.Tensor
    """mean or min."""
    b: torch.Tensor
    """std or max."""

    def to(self, device: torch.device) -> "FeatureStats":
        return FeatureStats(self.mode, self.a.to(device, torch.float32), self.b.to(device, torch.float32))


def parse_stats(flat: Mapping[str, torch.Tensor], modes: Mapping[str, str] | None = None,
                where: str = "normalization stats") -> dict[str, FeatureStats]:
    """``{"<key>.<stat>": tensor}`` -> ``{key: FeatureStats}``. Raises :class:`PolicyLoadError` on a bad layout."""
    modes = dict(modes or {})
    grouped: dict[str, dict[str, torch.Tensor]] = {}
    for name, value in flat.items():
        key, dot, stat = name.rpartition(".")
        if not dot or stat not in ("mean", "std", "min", "max") or not key:
            raise PolicyLoadError(f"{where}: tensor {name!r} is not named <key>.<stat> with stat mean, std, min or max.")
        if not isinstance(value, torch.Tensor) or not value.is_floating_point():
            raise PolicyLoadError(f"{where}: {name!r} must be a floating-point tensor.")
        grouped.setdefault(key, {})[stat] = value
    out = {}
    for key, stats in grouped.items():
        mode = modes.get(key) or ("mean_std" if {"mean", "std"} <= stats.keys() else "min_max")
        if mode not in MODES:
            raise PolicyLoadError(f"{where}: mode {mode!r} for {key!r}; expected mean_std or min_max.")
        first, second = MODES[mode]
        if first not in stats or second not in stats:
            raise PolicyLoadError(f"{where}: {key!r} has {sorted(stats)}; mode {mode} needs {first} and {second}.")
        a, b = stats[first], stats[second]
        if not torch.isfinite(a).all() or not torch.isfinite(b).all():
            raise PolicyLoadError(f"{where}: {key!r} has non-finite {first}/{second} values.")
        out[key] = FeatureStats(mode, a.float(), b.float())
    return out


def load_stats(folder: str | Path) -> dict[str, FeatureStats] | None:
    """Stats from ``folder/normalization.safetensors``; ``None`` if the folder has no such file."""
    path = Path(folder) / NORMALIZATION_NAME
    if not path.is_file():
        return None
    from safetensors import SafetensorError, safe_open

    try:
        flat = {}
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
            for name in f.keys():
                flat[name] = f.get_tensor(name)
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise PolicyLoadError(f"{path}: not a readable safetensors file ({exc}).") from None
    modes = {k: v for k, v in metadata.items() if v in MODES}
    return parse_stats(flat, modes, where=str(path))


def save_stats(folder: str | Path, stats: Mapping[str, Mapping[str, torch.Tensor]],
               modes: Mapping[str, str] | None = None) -> Path:
    """Write ``{key: {"mean": t, "std": t}}`` (or min/max) as ``folder/normalization.safetensors``."""
    from safetensors.torch import save_file

    flat = {f"{key}.{stat}": torch.as_tensor(value, dtype=torch.float32).contiguous()
            for key, entry in stats.items() for stat, value in entry.items()}
    parse_stats(flat, modes)  # validate before writing
    path = Path(folder) / NORMALIZATION_NAME
    save_file(flat, str(path), metadata=dict(modes or {}))
    return path


def _normalize_step(src: torch.Tensor, out: torch.Tensor, stats: FeatureStats) -> Callable[[], Any]:
    a, b = stats.a, stats.b
    if stats.mode == "mean_std":
        denom = b + EPS

        def mean_std() -> None:
            torch.sub(src, a, out=out)
            out.div_(denom)

        return mean_std
    span = b - a + EPS

    def min_max() -> None:
        torch.sub(src, a, out=out)
        out.div_(span).mul_(2.0).sub_(1.0)

    return min_max


def _check_broadcast(key: str, stats: FeatureStats, row_shape: tuple, where: str) -> None:
    for t in (stats.a, stats.b):
        try:
            ok = torch.broadcast_shapes(tuple(t.shape), row_shape) == torch.Size(row_shape)
        except RuntimeError:
            ok = False
        if not ok:
            raise UserInputError(f"{where}: stats of {key!r} have shape {tuple(t.shape)}, which does not broadcast "
                                 f"to one row of that entry, shape {row_shape}.")


class Normalizer:
    """Observation normalization into own buffers, and action unnormalization.

    :meth:`build` is called once per policy-input buffer and returns the normalized structure
    (Tensor or TensorDict, allocated once) with the in-place steps that refresh it; entries
    without stats are shared, not copied. ``actions(a)`` returns unnormalized actions (a new
    tensor). Keys and shapes are checked against ``example`` (the engine's policy input) here.
    """

    def __init__(self, stats: Mapping[str, FeatureStats], example: Any, device: torch.device,
                 action_shape: tuple | None, where: str = NORMALIZATION_NAME):
        stats = {k: v.to(device) for k, v in stats.items()}
        action_stats = stats.pop(ACTION_KEY, None)
        self.device = device
        if isinstance(example, torch.Tensor):
            available, rows = ["observation"], {"observation": tuple(example.shape[1:])}
        else:
            available = [k for k in example.keys() if isinstance(k, str) and isinstance(example.get(k), torch.Tensor)]
            rows = {k: tuple(example.get(k).shape[1:]) for k in available}
        unknown = sorted(set(stats) - set(available))
        if unknown:
            raise UserInputError(
                f"{where} has stats for {unknown}, but the policy input has keys {available} (and 'action'). "
                f"Check observation_format / --rename against the keys the checkpoint was trained with."
            )
        for key, entry in stats.items():
            _check_broadcast(key, entry, rows[key], where)
        self.stats = stats
        self.has_input_stats = bool(stats)
        self.actions: Callable[[torch.Tensor], torch.Tensor] = lambda a: a
        self.has_action_stats = action_stats is not None
        if action_stats is not None:
            if action_shape is None:
                raise UserInputError(f"{where} has action stats, but the env's action space is discrete; "
                                     f"only continuous (Box) actions can be unnormalized.")
            _check_broadcast(ACTION_KEY, action_stats, tuple(action_shape), where)
            self.actions = _unnormalizer(action_stats)

    def build(self, obs: Any) -> tuple[Any, list[Callable[[], Any]]]:
        stats, device = self.stats, self.device
        if isinstance(obs, torch.Tensor):
            if "observation" not in stats:
                return obs, []
            out = torch.empty(obs.shape, dtype=torch.float32, device=device)
            return out, [_normalize_step(obs, out, stats["observation"])]
        from tensordict import TensorDict

        entries, steps = {}, []
        for key in obs.keys():
            src = obs.get(key)
            if key in stats and isinstance(src, torch.Tensor):
                out = torch.empty(src.shape, dtype=torch.float32, device=device)
                steps.append(_normalize_step(src, out, stats[key]))
                entries[key] = out
            elif isinstance(src, torch.Tensor):
                entries[key] = src
        return TensorDict(entries, batch_size=obs.batch_size, device=device), steps


def _unnormalizer(stats: FeatureStats) -> Callable[[torch.Tensor], torch.Tensor]:
    a, b = stats.a, stats.b
    if stats.mode == "mean_std":
        return lambda x: torch.addcmul(a, x.float(), b)
    span = b - a
    return lambda x: torch.addcmul(a, (x.float() + 1.0) / 2.0, span)
