"""fasteval's small MLP architecture, loadable from a checkpoint folder.

Config keys (``config.json``): ``architecture`` ("mlp"), ``obs_dim``, ``action_dim``,
``hidden_sizes`` (list of ints), ``activation`` ("tanh" or "relu"), ``action_head``:

* ``argmax``: discrete actions; output ``[B]`` int64, the argmax of ``action_dim`` logits;
* ``tanh``: continuous actions in [-1, 1]; output ``[B, action_dim]``;
* ``linear``: continuous, unbounded; output ``[B, action_dim]``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}
ACTION_HEADS = ("argmax", "tanh", "linear")


class MLPPolicy(nn.Module):
    """Input ``[B, obs_dim]`` float32 observations; output per ``action_head`` (see module doc)."""

    def __init__(self, obs_dim: int, action_dim: int, hidden_sizes=(64, 64), activation: str = "tanh", action_head: str = "argmax"):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation: expected one of {sorted(ACTIVATIONS)}, got {activation!r}")
        if action_head not in ACTION_HEADS:
            raise ValueError(f"action_head: expected one of {ACTION_HEADS}, got {action_head!r}")
        layers: list[nn.Module] = []
        width = int(obs_dim)
        for hidden in hidden_sizes:
            layers += [nn.Linear(width, int(hidden)), ACTIVATIONS[activation]()]
            width = int(hidden)
        layers.append(nn.Linear(width, int(action_dim)))
        self.net = nn.Sequential(*layers)
        self.config = {
            "architecture": "mlp",
            "obs_dim": int(obs_dim),
            "action_dim": int(action_dim),
            "hidden_sizes": [int(h) for h in hidden_sizes],
            "activation": activation,
            "action_head": action_head,
        }

    def logits(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs.flatten(1).float())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        out = self.logits(obs)
        head = self.config["action_head"]
        if head == "argmax":
            return out.argmax(dim=-1)
        if head == "tanh":
            return torch.tanh(out)
        return out

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "MLPPolicy":
        return cls(
            obs_dim=config["obs_dim"],
            action_dim=config["action_dim"],
            hidden_sizes=config.get("hidden_sizes", (64, 64)),
            activation=config.get("activation", "tanh"),
            action_head=config.get("action_head", "argmax"),
        )


ARCHITECTURES = {"mlp": MLPPolicy}
