"""The hot loop. Every decision is made before it starts; the body reads like its docstring."""

from __future__ import annotations

from time import perf_counter
from typing import Callable

import numpy as np

from fasteval.core.envs import SlotEnvs
from fasteval.core.faults import Faults
from fasteval.core.ledger import Ledger
from fasteval.core.policy import PolicyRunner
from fasteval.core.timing import StageTimers
from fasteval.core.transfer import DeviceToHost, HostToDevice


class StepObserver:
    """Extension point for per-step consumers (video frames, episode recording).

    ``on_start(slots)``: those slots just reset into new episodes (``ledger.slot_episode``
    says which); their first observations are in the env host buffer.
    ``on_step(active, actions, parked)``: the active slots just stepped with ``actions``
    (host ``[B, ...]``); rewards, flags and observations are in the env host buffers and
    the ledger's accumulators do not include this step yet. Slots in ``parked`` (a dict)
    failed this step and restarted; ignore their rows.
    """

    def on_start(self, slots: list[int]) -> None:
        pass

    def on_step(self, active: list[int], actions: np.ndarray, parked: dict[int, int]) -> None:
        pass


NULL_OBSERVER = StepObserver()


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
    on_finished: Callable[[np.ndarray], None],
    faults: Faults,
    check_actions: Callable[[np.ndarray, list[int]], list[int]],
    observer: StepObserver | None = None,
) -> None:
    """Run the ledger to the end. The first wave must already be started (:func:`start_wave`).

    Each step:
      1. copy observations to the policy device (``h2d``);
      2. run the policy on all slots, a static batch (``policy``);
      3. copy actions to the host (``d2h``) and check them (non-finite ones never reach an env);
      4. step the slots that run an episode (``env_step``); env failures go to ``faults``;
      5. fold the step into the ledger; hand freed slots their next episode in continuous mode
         (``runner.continuous``), report finished episodes (``bookkeeping``);
      6. reset the refilled slots' envs with their seeds (``env_step``) and the policy's slots;
      7. when every slot is idle: start the next wave, or stop when the ledger is exhausted.

    ``observer`` (videos, episode recording) sees each step after the envs stepped and before
    the bookkeeping, and each slot start; without one, the loop pays nothing for it.
    """
    observer = observer or NULL_OBSERVER
    on_step, on_start = observer.on_step, observer.on_start
    L = ledger
    on_start(L.active_slots())
    parked: dict[int, int] = {}
    if envs.failures:
        faults.handle_env_failures(parked)
        faults.unpark(parked)
    active = L.active_slots()
    refill = runner.continuous
    policy_input = h2d.policy_input
    copy_obs, copy_actions = h2d.copy, d2h.copy
    rewards, terminated, truncated, success = envs.rewards, envs.terminated, envs.truncated, envs.success
    finished_scratch, reset_scratch = L.finished_scratch, L.reset_scratch
    add = timers.add
    while active:
        t = perf_counter()
        copy_obs()
        t = add("h2d", t)
        actions = runner(policy_input)
        t = add("policy", t)
        host_actions = copy_actions(actions)
        bad = check_actions(host_actions, active)
        t = add("d2h", t)
        if bad:
            faults.handle_bad_actions(bad, parked)
            envs.step([s for s in active if s not in parked], host_actions)
        else:
            envs.step(active, host_actions)
        if envs.failures:
            faults.handle_env_failures(parked)
        t = add("env_step", t)
        on_step(active, host_actions, parked)
        n_finished, n_reset, L.next_episode = step_bookkeeping(
            rewards, terminated, truncated, success, L.slot_episode,
            L.acc_sum, L.acc_max, L.acc_len, L.acc_success, L.acc_nan, max_steps,
            L.sum_reward, L.max_reward, L.length, L.success, L.nan_rewards,
            L.next_episode, L.limit, refill, finished_scratch, reset_scratch,
        )
        changed = bool(parked)
        if changed:
            faults.unpark(parked)
        if n_finished:
            done = finished_scratch[:n_finished]
            L.finished[done] = True
            on_finished(done)
            t = add("bookkeeping", t)
            changed = changed or n_reset < n_finished
            if n_reset:
                slots = reset_scratch[:n_reset].tolist()
                seeds = L.seeds_of(L.slot_episode[slots])
                envs.reset_slots(slots, seeds)
                t = add("env_step", t)
                runner.reset_slots(slots, seeds)
                if envs.failures:
                    faults.handle_env_failures(parked)
                    faults.unpark(parked)
                    changed = True
                on_start(slots)
        if changed:
            active = L.active_slots()
            while not active and not L.exhausted:
                started = start_wave(envs, runner, L, timers)
                if envs.failures:
                    faults.handle_env_failures(parked)
                    faults.unpark(parked)
                active = L.active_slots()
                on_start(started)
        add("bookkeeping", t)
