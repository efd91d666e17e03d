"""Checkpoint folders: ``config.json`` plus ``model.safetensors``.

Loading is safe by construction: weights come only from safetensors (no pickle),
keys must match the architecture exactly, and every failure is a
:class:`~fasteval.types.errors.PolicyLoadError` that names the file and the problem.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from fasteval.types.errors import PolicyLoadError
from fasteval.robot.policies.mlp import ARCHITECTURES

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"


def is_checkpoint_dir(path: str | Path) -> bool:
    path = Path(path)
    return path.is_dir() and (path / CONFIG_NAME).is_file()


def save_checkpoint(module: nn.Module, folder: str | Path, config: dict[str, Any] | None = None) -> Path:
    """Write ``module``'s config and weights into ``folder`` (created if needed)."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = dict(config if config is not None else getattr(module, "config"))
    (folder / CONFIG_NAME).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    state = {k: v.detach().cpu().contiguous() for k, v in module.state_dict().items()}
    save_file(state, str(folder / WEIGHTS_NAME))
    return folder


def load_checkpoint(folder: str | Path) -> nn.Module:
    """Build the architecture named in ``config.json`` and load ``model.safetensors`` strictly.

    The config is first built on the ``meta`` device (no memory) and checked against the
    weights file's keys and shapes; the real module is only allocated once it is known to
    match the file, so a hostile config (huge or negative sizes) cannot exhaust memory.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    folder = Path(folder)
    config_path, weights_path = folder / CONFIG_NAME, folder / WEIGHTS_NAME
    try:
        config = json.loads(config_path.read_text())
    except (OSError, ValueError, RecursionError) as exc:  # ValueError covers JSONDecodeError, UnicodeDecodeError, huge ints
        raise PolicyLoadError(f"checkpoint {folder}: could not read {CONFIG_NAME} as JSON ({exc}). "
                              f"Expected a JSON object with an 'architecture' key.") from None
    if not isinstance(config, dict):
        raise PolicyLoadError(f"checkpoint {folder}: {CONFIG_NAME} must hold a JSON object, got {type(config).__name__}.")
    arch = config.get("architecture")
    if not isinstance(arch, str) or arch not in ARCHITECTURES:
        raise PolicyLoadError(
            f"checkpoint {folder}: unknown architecture {arch!r} in {CONFIG_NAME}; expected one of "
            f"{sorted(ARCHITECTURES)}. For your own architecture, pass --policy module:callable instead."
        )
    build_errors = (KeyError, TypeError, ValueError, OverflowError, RuntimeError)
    try:
        with torch.device("meta"):
            skeleton = ARCHITECTURES[arch].from_config(config)
    except build_errors as exc:
        raise PolicyLoadError(f"checkpoint {folder}: {CONFIG_NAME} does not describe a valid {arch}: {exc!r}.") from None
    if not weights_path.is_file():
        raise PolicyLoadError(f"checkpoint {folder}: missing {WEIGHTS_NAME} (only safetensors weights are loaded).")
    try:
        state = load_file(str(weights_path))
    except (SafetensorError, OSError, ValueError, RuntimeError, TypeError, KeyError) as exc:
        raise PolicyLoadError(f"checkpoint {folder}: {WEIGHTS_NAME} is corrupt or truncated ({exc}).") from None
    expected = skeleton.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise PolicyLoadError(
            f"checkpoint {folder}: weights do not match the {arch} in {CONFIG_NAME}; "
            f"missing keys: {missing or 'none'}; unexpected keys: {unexpected or 'none'}."
        )
    wrong = [f"{k}: expected {tuple(expected[k].shape)}, got {tuple(state[k].shape)}"
             for k in expected if tuple(expected[k].shape) != tuple(state[k].shape)]
    if wrong:
        raise PolicyLoadError(f"checkpoint {folder}: tensor shapes do not match {CONFIG_NAME}: " + "; ".join(wrong))
    complex_keys = sorted(k for k, v in state.items() if v.is_complex())
    if complex_keys:
        raise PolicyLoadError(f"checkpoint {folder}: {WEIGHTS_NAME} holds complex tensors {complex_keys}; expected real weights.")
    try:
        module = ARCHITECTURES[arch].from_config(config)
        module.load_state_dict(state, strict=True)
    except build_errors as exc:
        raise PolicyLoadError(f"checkpoint {folder}: could not load {WEIGHTS_NAME} into the {arch}: {exc!r}.") from None
    module.eval()
    return module


def check_observation_fit(module: nn.Module, folder: str | Path, observation_space: Any) -> nn.Module:
    """Refuse a checkpoint whose ``obs_dim`` (from its ``config.json``) does not fit the env's
    flat observations, naming both sides; returns ``module`` when it fits.

    Checked for 1-D ``Box`` observations only (what fasteval's MLP takes as ``[B, obs_dim]``);
    other spaces are left to the dry run.
    """
    import gymnasium as gym

    architectures = tuple(ARCHITECTURES.values())  # each keeps its config.json as ``config`` (a dict)
    obs_dim = module.config.get("obs_dim") if isinstance(module, architectures) else None
    shape = observation_space.shape if isinstance(observation_space, gym.spaces.Space) else None
    if obs_dim is None or not isinstance(observation_space, gym.spaces.Box) or shape is None or len(shape) != 1:
        return module
    if int(shape[0]) != int(obs_dim):
        raise PolicyLoadError(
            f"checkpoint {folder}: {CONFIG_NAME} has obs_dim={obs_dim}, but the env's observations have shape "
            f"{tuple(int(d) for d in shape)} ({int(shape[0])} values). Evaluate it on the env it was trained on, "
            f"or use a checkpoint made for this env."
        )
    return module


def perturbed_checkpoints(base: str | Path, folder: str | Path, n: int, scale: float = 0.15, seed: int = 0,
                          layout: str = "checkpoints/{step:06d}/pretrained_model", step: int = 1000) -> list[Path]:
    """Write ``n`` checkpoints of ``base``'s architecture into ``folder``, each ``base``'s weights plus Gaussian
    noise of standard deviation ``scale`` (generator seeded with ``seed + k``): checkpoints of one architecture
    with different numbers, for tests and benchmarks of many-policy runs. ``layout`` names checkpoint k's
    folder (LeRobot's training layout by default, ``step`` apart). Returns the folders, in order."""
    config = json.loads((Path(base) / CONFIG_NAME).read_text())
    out = []
    for k in range(int(n)):
        generator = torch.Generator().manual_seed(int(seed) + k)
        module = load_checkpoint(base)
        with torch.no_grad():
            for param in module.parameters():
                param.add_(float(scale) * torch.randn(param.shape, generator=generator, dtype=param.dtype))
        out.append(save_checkpoint(module, Path(folder) / layout.format(step=(k + 1) * int(step), k=k), config))
    return out
