"""TorchRL / tensordict interop: a ``tensordict.nn.TensorDictModule`` used directly as a policy.

Keys the module **reads**:

* array observations (``Box``, ``Discrete``, ...): the observation batch ``[B, ...]`` under
  ``"observation"`` (TorchRL's convention), so the module's ``in_keys`` must be ``["observation"]``;
* ``Dict`` observations: the env's own keys (``"pixels"``, ``"agent_pos"``, ...), each ``[B, ...]``;
  ``in_keys`` may be any subset of them.

Key the module **writes** (and fasteval takes as the action batch): ``"action"`` if it is among
the module's ``out_keys``; otherwise the *last* of its ``out_keys``. The value must follow the
usual action rules (see :mod:`fasteval.core.policy`), e.g. ``[B]`` integers or ``[B, n]`` logits
for ``Discrete``.

fasteval does not change tensordict's interaction type: probabilistic modules act as they
would under ``tensordict.nn.set_interaction_type`` at the call site (tensordict's default is
deterministic).

The adapter is chosen once (in ``PolicyRunner.__init__``). It builds the input TensorDict once
per observation buffer (the engine reuses one buffer for the whole run, two with ``pipeline``)
and then only calls the module, so a step costs the module's own call. For ``Dict`` observations it works on a
shallow copy of the engine's TensorDict, so keys the module writes never leak into it.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

import torch

from fasteval.types.errors import UserInputError

OBSERVATION_KEY = "observation"
ACTION_KEY = "action"
MAX_CACHED_INPUTS = 4
"""Input buffers whose TensorDict wrapper is kept (the engine has one, or two with ``pipeline``)."""


def is_tensordict_module(policy: Any) -> bool:
    """True if ``policy`` is a ``tensordict.nn.TensorDictModuleBase``.

    Does not import tensordict (about a second of start-up): if ``tensordict.nn`` was never
    imported, the policy cannot be one of its modules.
    """
    tdnn = sys.modules.get("tensordict.nn")
    return tdnn is not None and isinstance(policy, tdnn.TensorDictModuleBase)


def action_key_of(module: Any) -> Any:
    """``"action"`` if the module writes it, else its last out_key (see the module docstring)."""
    out_keys = list(module.out_keys or [])
    if not out_keys:
        raise UserInputError(
            f"TensorDictModule policy {type(module).__name__} has no out_keys; fasteval reads the action from "
            f"its {ACTION_KEY!r} out_key (or its last out_key). Give the module out_keys=[{ACTION_KEY!r}]."
        )
    normalized = [k[0] if isinstance(k, tuple) and len(k) == 1 else k for k in out_keys]
    return ACTION_KEY if ACTION_KEY in normalized else out_keys[-1]


class TensorDictPolicyAdapter:
    """Calls a TensorDictModule with the observation batch and returns its action entry."""

    def __init__(self, module: Any):
        self.module = module
        self.in_keys = list(module.in_keys or [])
        self.action_key = action_key_of(module)
        self._wrapped: dict[int, tuple[Any, Any]] = {}  # id(obs) -> (obs, its TensorDict); obs kept alive
        self._run: Callable[[Any], torch.Tensor] = self._actions

    def use_blocks(self, rows: int) -> None:
        """Run the module on blocks of ``rows`` rows of the wrapped TensorDict (:mod:`fasteval.core.policy_blocks`)."""
        from fasteval.core.policy_blocks import blocked

        self._run = blocked(self._actions, rows)

    def _actions(self, td: Any) -> torch.Tensor:
        return self.module(td).get(self.action_key)

    def __call__(self, obs: Any) -> torch.Tensor:
        entry = self._wrapped.get(id(obs))
        if entry is None:
            if len(self._wrapped) >= MAX_CACHED_INPUTS:  # not the engine's static buffers: do not grow
                self._wrapped.clear()
            entry = self._wrapped[id(obs)] = (obs, self._wrap(obs))
        return self._run(entry[1])

    def _wrap(self, obs: Any) -> Any:
        from tensordict import TensorDictBase, TensorDict

        if isinstance(obs, TensorDictBase):
            td = obs.copy()  # shallow: shares the engine's (reused) observation tensors
            provided = list(td.keys())
            where = "the env's Dict observation keys"
        elif isinstance(obs, torch.Tensor):
            td = TensorDict({OBSERVATION_KEY: obs}, batch_size=[obs.shape[0]], device=obs.device)
            provided = [OBSERVATION_KEY]
            where = f"{OBSERVATION_KEY!r} (array observations)"
        else:
            raise UserInputError(f"TensorDictModule policy got a {type(obs).__name__} observation; expected a Tensor or a TensorDict.")
        missing = [k for k in self.in_keys if k not in td.keys(include_nested=True)]
        if missing:
            raise UserInputError(
                f"TensorDictModule policy {type(self.module).__name__} reads in_keys {self.in_keys}, but fasteval provides "
                f"{where}: {provided}; missing {missing}. Set the module's in_keys to those keys "
                f"(for array observations: in_keys=[{OBSERVATION_KEY!r}])."
            )
        return td
