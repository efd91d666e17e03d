"""Policies used by CLI tests through module:callable references (tests.helpers:NAME)."""

import torch
from torch import nn


def three_logits():
    return nn.Linear(3, 3)


class _Raising:
    def select_action(self, obs):
        raise RuntimeError("boom")


def raising_policy():
    return _Raising()
