"""What the engine does when an env or the policy misbehaves mid-run (the rare path).

Nothing here runs on a normal step: the hot loop calls in only when an env reported a
failure or an action was not finite.

* An env raises, hangs (async ``step_timeout``) or its worker dies: the error is recorded
  (episode, seed, step, message, traceback, exit code), the env is rebuilt, and the episode
  is retried from its seed up to ``retries`` times; after that it is recorded as failed and
  the slot moves on to the next episode. Episodes whose env state was lost with the rebuild
  (with a worker pool: the other slots of a worker that died or hung and was replaced; an env
  that raised is rebuilt alone, inside its worker) restart from their seeds without counting
  an attempt.
* A non-finite action (NaN/inf) is never sent to the env. ``on_nan_action="error"`` stops the
  run with an error naming the episodes; ``"skip-episode"`` records them as failed and goes on.

Slots re-seated here are *parked* (marked idle) until the step's bookkeeping is done, because
their rows in this step's buffers are meaningless.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np

from fasteval.core.envs import EnvFailure, SlotEnvs
from fasteval.core.ledger import Ledger
from fasteval.core.policy import PolicyRunner
from fasteval.types.errors import PolicyError
from fasteval.kernels import IDLE
from fasteval.types.spec import ON_NAN_ACTIONS  # noqa: F401  (defined once, in types)


class Faults:
    """Error records plus the recovery actions. One per run."""

    def __init__(self, envs: SlotEnvs, runner: PolicyRunner, ledger: Ledger, retries: int, on_nan_action: str,
                 on_error: Callable[[dict[str, Any]], None] | None = None):
        self.envs, self.runner, self.ledger = envs, runner, ledger
        self.retries = retries
        self.on_nan_action = on_nan_action
        self.errors: list[dict[str, Any]] = []
        self.reseated: set[int] = set()
        """Slots seated here since the last :meth:`unpark`: restarted, or given up (idle, or on their next
        episode). None of them stepped with the step in flight, whether or not they are parked now."""
        self.on_error = on_error or (lambda record: None)

    # -- recording ----------------------------------------------------------------------
    def _record(self, row: int, slot: int, stage: str, error: str, traceback: str = "", exit_code: int | None = None,
                final: bool = False) -> None:
        L = self.ledger
        episode = int(L.episode_ids[row])
        record = {
            "episode_ix": episode,
            "seed": L.seed + episode,
            "stage": stage,
            # 1-based: the step that failed (an env step, or the step a non-finite action was for); 0: reset
            "step": int(L.acc_len[slot]) + (0 if stage == "reset" else 1),
            "attempt": int(L.attempts[row]),
            "final": bool(final),
            "error": error,
            "traceback": traceback,
            "exit_code": exit_code,
        }
        if L.policy_names is not None:  # a many-policy run: whose episode it was
            record["policy"] = L.policy_names[int(L.policy_ids[row])]
        self.errors.append(record)
        self.on_error(record)

    # -- seating ------------------------------------------------------------------------
    def _seat(self, slot: int, row: int, parked: dict[int, int]) -> None:
        """Start ``row`` in ``slot`` from its seed (env and policy reset); park the slot."""
        L = self.ledger
        self.reseated.add(slot)
        L.clear_slot(slot)
        L.slot_episode[slot] = IDLE
        if row == IDLE:
            parked.pop(slot, None)
            return
        parked[slot] = row
        seeds = L.seeds_of([row])
        self.envs.reset_slots([slot], seeds)
        self.runner.reset_slots([slot], seeds)

    def _give_up(self, slot: int, row: int, parked: dict[int, int]) -> None:
        self.ledger.fail(row)
        self._seat(slot, self.ledger.take_next(), parked)

    # -- env failures -------------------------------------------------------------------
    def handle_env_failures(self, parked: dict[int, int]) -> dict[int, int]:
        """Recover from ``envs.failures`` (cleared here). Returns the parked slots -> rows."""
        L, envs = self.ledger, self.envs
        while envs.failures:
            failure: EnvFailure = envs.failures.pop(0)
            slot = failure.slot
            row = parked.get(slot, int(L.slot_episode[slot]))
            if row == IDLE:
                continue
            L.attempts[row] += 1
            final = L.attempts[row] > self.retries
            self._record(row, slot, failure.stage, failure.error, failure.traceback, failure.exit_code, final)
            lost = envs.rebuild(slot)
            envs.failures = [f for f in envs.failures if f.slot not in lost]
            for other in lost:
                if other == slot:
                    continue
                other_row = parked.get(other, int(L.slot_episode[other]))
                if other_row != IDLE:
                    self._seat(other, other_row, parked)  # restart from its seed, no attempt counted
            if final:
                self._give_up(slot, row, parked)
            else:
                self._seat(slot, row, parked)
        return parked

    # -- bad actions --------------------------------------------------------------------
    def handle_bad_actions(self, bad_slots: list[int], parked: dict[int, int]) -> dict[int, int]:
        L = self.ledger
        rows = [int(L.slot_episode[s]) for s in bad_slots]
        if self.on_nan_action == "error":
            described = ", ".join(f"episode {int(L.episode_ids[r])} (seed {L.seeds_of([r])[0]}, step {int(L.acc_len[s]) + 1})"
                                  for s, r in zip(bad_slots, rows))
            raise PolicyError(
                f"the policy returned non-finite (NaN or inf) actions for {described}; they were not sent to the env. "
                f"Finished episodes are kept. Use --on-nan-action skip-episode to record such episodes as failed and go on."
            )
        for slot, row in zip(bad_slots, rows):
            self._record(row, slot, "policy", "non-finite action (NaN or inf); not sent to the env", final=True)
            self._give_up(slot, row, parked)
        return parked

    def unpark(self, parked: dict[int, int]) -> set[int]:
        """Put the parked slots back to their rows. Returns every slot re-seated since the last call
        (parked or not: a slot given up with no episode left is idle, not parked)."""
        for slot, row in parked.items():
            self.ledger.slot_episode[slot] = row
        parked.clear()
        reseated, self.reseated = self.reseated, set()
        return reseated


class ActionCheck:
    """``check(actions, active) -> slots with non-finite actions``; bound once per engine (see
    :func:`make_action_check`). With the action space's bounds it also counts, in
    :attr:`out_of_range`, the active slots' actions outside the space: they are sent to the env as they
    are (many envs clip), with one warning per run (:meth:`new_run`) and the count in the run's meta.

    One whole-array test per step on the fast path: ``isfinite`` for unbounded float actions, and
    for bounded ones ``low <= min`` and ``max <= high`` (a NaN fails both, so it takes the slow path).
    """

    def __init__(self, action_dtype: np.dtype, space: Any = None):
        self.floating = bool(np.issubdtype(action_dtype, np.floating))
        self.low, self.high = _bounds(space)
        self.space = space
        self.out_of_range = 0
        """Active slot-steps whose action was outside the action space, in this run."""
        self.warned = False
        self._scratch: np.ndarray | None = None

    def new_run(self) -> None:
        self.out_of_range, self.warned = 0, False

    def __call__(self, actions: np.ndarray, active: list[int]) -> list[int]:
        if self.low is not None and actions.size and self.low <= actions.min() and actions.max() <= self.high:
            return []  # every value in range (and so finite)
        if self.low is None:
            if not self.floating:
                return []  # integer actions: nothing to check (free)
            if self._scratch is None or self._scratch.shape != actions.shape:
                self._scratch = np.empty(actions.shape, dtype=bool)
            if np.isfinite(actions, out=self._scratch).all():
                return []
        flat = actions.reshape(actions.shape[0], -1)
        bad = [slot for slot in active if self.floating and not np.isfinite(flat[slot]).all()]
        if self.low is not None:
            self._count_out_of_range(flat, [slot for slot in active if slot not in bad])
        return bad

    def _count_out_of_range(self, flat: np.ndarray, slots: list[int]) -> None:
        outside = [slot for slot in slots if not (self.low <= flat[slot].min() and flat[slot].max() <= self.high)]
        if not outside:
            return
        self.out_of_range += len(outside)
        if not self.warned:
            self.warned = True
            warnings.warn(
                f"the policy returned actions outside the action space {self.space} (slot {outside[0]}: "
                f"{flat[outside[0]].tolist()}); they are sent to the env as they are. Warned once per run; the run's "
                f"meta counts them (n_out_of_range_actions).", RuntimeWarning, stacklevel=2)


def _bounds(space: Any) -> tuple[Any, Any]:
    """``(low, high)`` scalars every value of a float ``Box`` action must lie within, or ``(None, None)``:
    no finite bounds, bounds that differ per entry (the whole-array test cannot use them), or integer
    actions (an env refuses a Discrete action it does not have: that is an env failure, recorded; and the
    integer check stays free)."""
    import gymnasium as gym

    if isinstance(space, gym.spaces.Box) and np.issubdtype(space.dtype, np.floating):
        low, high = np.unique(space.low), np.unique(space.high)
        if low.size == 1 and high.size == 1 and np.isfinite(low[0]) and np.isfinite(high[0]):
            return low[0].item(), high[0].item()
    return None, None


def make_action_check(action_dtype: np.dtype, space: Any = None) -> ActionCheck:
    """The engine's action check for actions of ``action_dtype`` from ``space`` (optional: without it,
    only non-finite values are checked, and integer actions never)."""
    return ActionCheck(np.dtype(action_dtype), space)
