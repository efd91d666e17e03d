"""The hot loop. Every decision is made before it starts; the body reads like its docstring."""

from __future__ import annotations

from time import perf_counter
from typing import Callable

import numpy as np

from fasteval.core.envs import SlotEnvs
from fasteval.core.ledger import Ledger
from fasteval.core.policy import PolicyRunner
from fasteval.core.timing import StageTimers
from fasteval.core.transfer import DeviceToHost, HostToDevice


def start_wave(
    envs: SlotEnvs, runner: PolicyRunner, ledger: Ledger, timers: StageTimers,
    before_policy_reset: Callable[[], None] | None = None,
) -> list[int]:
    """Give every idle slot the next ledger episode, reset those envs with the episodes' seeds,
    and reset the policy (the whole batch for wave policies). Returns the slots started.

    ``before_policy_reset`` runs between the env resets and the policy reset (the engine's
    dry run uses it, so that the dry run cannot leak state into the first episodes).
    """
    t = perf_counter()
    slots = ledger.start_wave()
    seeds = ledger.seeds_of(ledger.slot_episode[slots])
    envs.reset_slots(slots, seeds)
    t = timers.add("env_step", t)
    if before_policy_reset is not None:
        before_policy_reset()
    runner.start_slots(slots, seeds)
    timers.add("bookkeeping", t)
    return slots


def run_episodes(
    envs: SlotEnvs,
    runner: PolicyRunner,
    h2d: HostToDevice,
    d2h: DeviceToHost,
    ledger: Ledger,
    step_bookkeeping: Callable,
    timers: StageTimers,
    max_steps: int,
    refill: bool,
    on_finished: Callable[[np.ndarray], None],
) -> None:
    """Run the ledger to the end. The first wave must already be started (:func:`start_wave`).

    Each step:
      1. copy observations to the policy device (``h2d``);
      2. run the policy on all slots, a static batch (``policy``);
      3. copy actions to the host (``d2h``);
      4. step the slots that run an episode (``env_step``);
      5. fold the step into the ledger; hand freed slots their next episode if ``refill``
         (continuous batching), report finished episodes (``bookkeeping``);
      6. reset the refilled slots' envs with their seeds (``env_step``) and the policy's slots;
      7. when every slot is idle: start the next wave, or stop when the ledger is exhausted.
    """
    active = ledger.active_slots()
    policy_input = h2d.policy_input
    copy_obs, copy_actions = h2d.copy, d2h.copy
    rewards, terminated, truncated, success = envs.rewards, envs.terminated, envs.truncated, envs.success
    L = ledger
    finished_scratch, reset_scratch = L.finished_scratch, L.reset_scratch
    add = timers.add
    while active:
        t = perf_counter()
        copy_obs()
        t = add("h2d", t)
        actions = runner(policy_input)
        t = add("policy", t)
        host_actions = copy_actions(actions)
        t = add("d2h", t)
        envs.step(active, host_actions)
        t = add("env_step", t)
        n_finished, n_reset, L.next_episode = step_bookkeeping(
            rewards, terminated, truncated, success, L.slot_episode,
            L.acc_sum, L.acc_max, L.acc_len, L.acc_success, L.acc_nan, max_steps,
            L.sum_reward, L.max_reward, L.length, L.success, L.nan_rewards,
            L.next_episode, L.n_episodes, refill, finished_scratch, reset_scratch,
        )
        if n_finished:
            done = finished_scratch[:n_finished]
            L.finished[done] = True
            on_finished(done)
            t = add("bookkeeping", t)
            if n_reset:
                slots = reset_scratch[:n_reset].tolist()
                seeds = L.seeds_of(L.slot_episode[slots])
                envs.reset_slots(slots, seeds)
                t = add("env_step", t)
                runner.reset_slots(slots, seeds)
            if n_reset < n_finished:
                active = L.active_slots()
                if not active and not L.exhausted:
                    active = start_wave(envs, runner, L, timers)
        add("bookkeeping", t)
