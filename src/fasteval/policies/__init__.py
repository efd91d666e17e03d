"""Built-in policies, fasteval's small architectures, and policy loaders."""

from fasteval.policies.builtin import RandomPolicy, ZeroPolicy
from fasteval.policies.checkpoint import load_checkpoint, save_checkpoint
from fasteval.policies.loaders import load_policy
from fasteval.policies.mlp import MLPPolicy

__all__ = ["MLPPolicy", "RandomPolicy", "ZeroPolicy", "load_checkpoint", "load_policy", "save_checkpoint"]
