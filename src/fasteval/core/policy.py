"""The policy protocol and its adapter.

A policy is any object with ``select_action(obs) -> Tensor[B, ...]`` or a callable
``nn.Module`` (``forward(obs)``). It may also have ``reset``:

* ``reset(env_ids)`` or ``reset(env_ids, seeds)``: per-env reset; ``env_ids`` is an int64
  tensor of the slots that start a new episode, ``seeds`` their episodes' seeds.
  fasteval then uses continuous batching and resets only those slots.
* ``reset()`` with no arguments: the policy can only reset the whole batch, so
  fasteval runs it in **wave mode**: all slots start their episodes together, and a
  new wave starts when every slot of the last one has finished. Results are the
  same as in continuous mode for any policy whose rows are independent.

A policy may also have ``run_meta() -> dict``: facts about itself that the engine copies into
every run's ``meta`` (for example where a stochastic policy's noise comes from).

A policy that serves some steps from its own queue (action chunks) may have
``reads_observation(rows: slice) -> bool``: whether its next call for the slots ``rows`` reads
the observation. The loop then skips the observation copy to the device for a call that will
not read it (unless an observer is attached: recorders read the device buffer).

A policy that knows it per slot may have ``observation_reads() -> bool[B]``: after a call, whether its next
call reads each slot's observation (the one the coming env step returns). Envs whose kind can skip the
work of an unread observation (a frame's render) then skip it (:mod:`fasteval.core.unread`); the rows of
unread observations are overwritten with a marker, so a policy that read one anyway would see it.

Each optional method is a :class:`typing.Protocol` of :mod:`fasteval.core.capabilities`, checked once
here; what the runner makes of them is its :class:`~fasteval.core.capabilities.Capabilities`
(``runner.capabilities``), the one value core reads.

A ``tensordict.nn.TensorDictModule`` is accepted too: it reads ``"observation"`` (array
observations) or the env's Dict keys, and writes ``"action"`` (else its last out_key); see
:mod:`fasteval.core.tensordict_policy`.

``obs`` is a Tensor ``[B, ...]`` on the policy's device for array observations, or a
TensorDict ``[B]`` for Dict observations. The policy must not keep references to it
across steps (the buffer is reused); copy what it needs.

Actions, checked once on a dry run before the evaluation starts:

* ``Discrete``: ``[B]`` integers, ``[B, 1]`` integers, or ``[B, n]`` logits (argmax is taken);
* ``Box`` / ``MultiDiscrete`` / ``MultiBinary``: ``[B, *action_space.shape]``.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np
import torch
from fasteval.core.capabilities import (NO_RESET, PER_ENV, WAVE, CallsOneRowAtATime, Capabilities, ReadsObservation,
                                         Resettable, SelectsActions, TakesTasks, TellsObservationReads, UsesPolicyBlocks)
from fasteval.types.errors import ActionSpaceMismatchError, PolicyDryRunError, UserInputError
from fasteval.core.tensordict_policy import TensorDictPolicyAdapter, is_tensordict_module
from fasteval.core.policy_blocks import WHOLE_BATCH, blocked

__all__ = ["NO_RESET", "PER_ENV", "WAVE", "Capabilities", "PolicyRunner"]


def _reset_signature(policy: Any) -> tuple[str, bool]:
    if not isinstance(policy, Resettable):
        return NO_RESET, False
    reset = policy.reset
    try:
        params = [p for p in inspect.signature(reset).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
        names = inspect.signature(reset).parameters
    except (TypeError, ValueError):
        return WAVE, False
    if not params:
        return WAVE, False
    return PER_ENV, "seeds" in names


class PolicyRunner:
    """Calls a policy the same way every step; resets it per slot or per wave.

    Built once per engine. ``reset_kind`` is decided here, from the policy's ``reset``
    signature and the spec's ``reset_mode``: ``per-env``, ``wave`` or ``none``. What the runner can
    do is declared in :attr:`capabilities` (a subclass declares more, or replaces it on its dry run).
    """

    capabilities: Capabilities
    """What this runner can do: the one value core reads (:mod:`fasteval.core.capabilities`)."""

    def __init__(self, policy: Any, action_space: gym.Space, n_slots: int, reset_mode: str = "auto",
                 policy_block: int = WHOLE_BATCH):
        self.policy = policy
        self.action_space = action_space
        self.n_slots = n_slots
        if is_tensordict_module(policy):  # reads "observation" / the Dict keys, writes "action"
            self._call: Callable[[Any], Any] = TensorDictPolicyAdapter(policy)
        elif isinstance(policy, SelectsActions):
            self._call = policy.select_action
        elif callable(policy):
            self._call = policy
        else:
            raise UserInputError(f"policy of type {type(policy).__name__}: expected an nn.Module or an object with select_action(obs).")
        self._raw_call = self._call
        """The policy's own call as chosen here (the module itself, ``select_action``, an adapter)."""
        kind, self._reset_wants_seeds = _reset_signature(policy)
        self.policy_call = self._use_blocks(policy_block, kind)
        """How the network is called (:mod:`fasteval.core.policy_blocks`): ``blocks of R rows``, ``one row per
        call``, or ``whole batch (reason)``; decided here, once."""
        if reset_mode == "per-env" and kind == WAVE:
            raise UserInputError(
                f"reset_mode 'per-env' needs a policy whose reset takes env ids (reset(env_ids)); "
                f"{type(policy).__name__}.reset() takes none. Use reset_mode 'wave' or 'auto'."
            )
        self._postprocess: Callable[[torch.Tensor], torch.Tensor] = lambda a: a
        self._step: Callable[[Any], torch.Tensor] = self._call
        reads = isinstance(policy, ReadsObservation)
        if reads:
            self.reads_observation = policy.reads_observation
        tells = isinstance(policy, TellsObservationReads)
        if tells:
            self.observation_reads = policy.observation_reads
        self.capabilities = Capabilities(
            reset_kind=kind, policy_reset_kind=kind, continuous=kind != WAVE and reset_mode != "wave",
            tasks=isinstance(policy, TakesTasks), skips_observation=reads, reads_per_slot=tells)

    def _use_blocks(self, rows: int, reset_kind: str) -> str:
        """Put the policy's own call on blocks of ``rows`` rows where its rows are independent (see
        :mod:`fasteval.core.policy_blocks`); returns what was done, for the run's ``policy_call`` fact."""
        policy = self.policy
        if isinstance(policy, CallsOneRowAtATime) and policy.calls_one_row_at_a_time:
            return "one row per call (per-episode noise)"
        if rows == WHOLE_BATCH:
            return "whole batch (--policy-block 0)"
        if isinstance(policy, UsesPolicyBlocks):  # it blocks its own network call (LeRobot's chunk prediction)
            return policy.use_policy_blocks(rows)
        if reset_kind != NO_RESET:
            return (f"whole batch (the policy keeps per-slot state: {type(policy).__name__}.reset takes the "
                    f"batch's rows)")
        if isinstance(self._call, TensorDictPolicyAdapter):
            self._call.use_blocks(rows)
        else:
            self._call = blocked(self._call, rows)
        return f"blocks of {rows} rows"

    def reads_observation(self, rows: slice) -> bool:
        """Whether the next call for slots ``rows`` reads its observation (asked only when
        ``capabilities.skips_observation``; see the module docstring)."""
        return True

    def observation_reads(self) -> np.ndarray:
        """Per slot (host ``bool[n_slots]``), after a call: whether the next call reads the observation the coming
        env step returns (asked only when ``capabilities.reads_per_slot``; the base runner reads every one)."""
        return np.ones(self.n_slots, dtype=bool)

    def note_active(self, active: list[int]) -> None:
        """Told, before each call, the slots of that call that run an episode (ascending), when
        ``capabilities.wants_active`` (a served policy sends only their observations)."""

    # -- resets -------------------------------------------------------------------------
    def reset_slots(self, slots: Sequence[int], seeds: Sequence[int]) -> None:
        """Reset the given slots (per-env policies); a no-op for the other kinds."""
        if self.capabilities.policy_reset_kind != PER_ENV:
            return
        env_ids = torch.as_tensor(list(slots), dtype=torch.long)
        if self._reset_wants_seeds:
            self.policy.reset(env_ids, seeds=list(seeds))
        else:
            self.policy.reset(env_ids)

    def start_slots(self, slots: Sequence[int], seeds: Sequence[int]) -> None:
        """Start of a wave (or of the run): reset the started slots, or the whole batch for wave policies."""
        if self.capabilities.policy_reset_kind == WAVE:
            self.policy.reset()
        else:
            self.reset_slots(slots, seeds)

    # -- acting -------------------------------------------------------------------------
    def dry_run(self, obs: Any) -> None:
        """Call the policy once and fix how its output maps to actions. Raises on a mismatch."""
        try:
            with torch.inference_mode():
                raw = self._call(obs)
        except Exception as exc:
            raise PolicyDryRunError(f"the policy raised on its first call (dry run, before any episode counted): "
                              f"{type(exc).__name__}: {exc}") from exc
        post = self._postprocess = self._choose_postprocess(raw)
        call = self._call
        self.plain_step = lambda obs: post(call(obs))
        self._step = self.plain_step

    def functional_step(self) -> tuple[Callable[[Any], Any], Any, Callable[[torch.Tensor], torch.Tensor]] | None:
        """``(prepare, module, postprocess)`` when the runner's whole step is ``postprocess(module(prepare(obs)))``
        with an ``nn.Module`` called as it is (its ``forward``) and no per-slot state: what stacked weights
        may batch over policies (:mod:`fasteval.core.policy_set`); ``None`` otherwise. After the dry run."""
        from torch import nn

        if not isinstance(self.policy, nn.Module) or self._raw_call is not self.policy or self.capabilities.reset_kind != NO_RESET:
            return None
        return (lambda obs: obs), self.policy, self._postprocess

    def use_step(self, step: Callable[[Any], torch.Tensor]) -> None:
        """Replace the per-step call (an accelerated version of :attr:`plain_step`)."""
        self._step = step

    def __call__(self, obs: Any) -> torch.Tensor:
        return self._step(obs)

    def _choose_postprocess(self, raw: Any) -> Callable[[torch.Tensor], torch.Tensor]:
        space, batch = self.action_space, self.n_slots
        if not isinstance(raw, torch.Tensor):
            raise ActionSpaceMismatchError(
                f"the policy returned {type(raw).__name__}; expected a torch.Tensor of actions with batch dimension {batch}."
            )
        got = tuple(raw.shape)
        if isinstance(space, gym.spaces.Discrete):
            integer = not raw.is_floating_point()
            if got == (batch,) and integer:
                return lambda a: a
            if got == (batch, 1) and integer:
                return lambda a: a.squeeze(-1)
            if got == (batch, int(space.n)) and raw.is_floating_point():
                return lambda a: a.argmax(dim=-1)
            raise ActionSpaceMismatchError(
                f"action shape mismatch: the env's action space is {space}, so fasteval expected integer actions of shape "
                f"({batch},) or ({batch}, 1), or float logits of shape ({batch}, {int(space.n)}); the policy returned "
                f"{raw.dtype} of shape {got}. Check the policy's output layer against the env."
            )
        expected = (batch, *space.shape)
        if got != expected:
            raise ActionSpaceMismatchError(
                f"action shape mismatch: the env's action space is {space}, so fasteval expected actions of shape "
                f"{expected} (batch {batch} x action shape {tuple(space.shape)}); the policy returned shape {got}. "
                f"Check the policy's output size against the env."
            )
        return lambda a: a
