"""Built-in policies, fasteval's small architectures, and policy loaders."""

from fasteval.robot.policies.builtin import RandomPolicy, ZeroPolicy
from fasteval.robot.policies.checkpoint import load_checkpoint, save_checkpoint
from fasteval.robot.policies.loaders import load_policy
from fasteval.robot.policies.mlp import MLPPolicy

__all__ = ["MLPPolicy", "RandomPolicy", "ZeroPolicy", "load_checkpoint", "load_policy", "save_checkpoint"]
