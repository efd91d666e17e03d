"""The pipelined hot loop (``--pipeline``): two groups of slots, double-buffered.

The slots split into group A (the first half) and group B. While A's envs step in their
async workers, the policy runs on B's observations, and the other way round: the
double-buffering of Sample Factory and EnvPool. It pays when an env step and a policy
call cost about the same; it needs async envs (sync envs step in this process, so there is
nothing to overlap with).

Per-episode results are identical to the plain loop: each episode still runs in one slot
from its own seed, the policy sees the same observation rows, and the ledger hands out
episodes in the same index order. Rules:

* the policy must be stateless (no ``reset``): it is called with alternating half batches,
  so per-slot state could not be kept apart;
* continuous batching only (no wave mode);
* a crashed async worker rebuilds all workers (see ``AsyncSlotEnvs.rebuild``): every
  in-flight episode of both groups restarts from its seed.
"""

from __future__ import annotations

from time import perf_counter
from typing import Callable

import numpy as np

from fasteval.core.envs import AsyncSlotEnvs
from fasteval.core.faults import Faults
from fasteval.core.ledger import Ledger
from fasteval.core.loop import NULL_OBSERVER, StepObserver
from fasteval.core.policy import NO_RESET, PolicyRunner
from fasteval.core.timing import StageTimers
from fasteval.core.transfer import DeviceToHost, HostToDevice
from fasteval.errors import UserInputError
from fasteval.kernels import IDLE


def check_pipelinable(envs: object, runner: PolicyRunner, n_slots: int) -> None:
    """Raise a clear error when ``--pipeline`` cannot work for this setup."""
    if not isinstance(envs, AsyncSlotEnvs):
        raise UserInputError("--pipeline needs --vectorization async: sync envs step in this process, so there is "
                             "nothing to overlap the policy with.")
    if n_slots < 2:
        raise UserInputError(f"--pipeline needs at least 2 env slots (two groups); got batch size {n_slots}.")
    if runner.reset_kind != NO_RESET:
        raise UserInputError(
            f"--pipeline needs a stateless policy (no reset method); {type(runner.policy).__name__} has reset(), and its "
            f"per-slot state cannot be kept apart when it is called with alternating half batches. Drop --pipeline."
        )


class _Group:
    """One half of the slots, with views of every buffer the kernel and the policy touch."""

    def __init__(self, rows: slice, envs: AsyncSlotEnvs, ledger: Ledger, h2d: HostToDevice, d2h: DeviceToHost):
        self.rows, self.offset = rows, rows.start
        self.policy_input, self.copy_obs = h2d.group(rows)
        self.copy_actions = d2h.group(rows)
        L = ledger
        self.kernel_views = (
            envs.rewards[rows], envs.terminated[rows], envs.truncated[rows], envs.success[rows], L.slot_episode[rows],
            L.acc_sum[rows], L.acc_max[rows], L.acc_len[rows], L.acc_success[rows], L.acc_nan[rows],
        )
        self.results = (L.sum_reward, L.max_reward, L.length, L.success, L.nan_rewards)
        size = rows.stop - rows.start
        self.finished = np.zeros(size, dtype=np.int64)
        self.resets = np.zeros(size, dtype=np.int64)
        self.slot_episode = L.slot_episode[rows]
        self.sent: list[int] = []
        self.actions: np.ndarray | None = None

    def active(self) -> list[int]:
        return (np.flatnonzero(self.slot_episode != IDLE) + self.offset).tolist()


def run_episodes_pipelined(
    envs: AsyncSlotEnvs,
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
    """Run the ledger to the end with two double-buffered slot groups (first wave already started).

    Loop: launch A, launch B; then for each group in turn, *land* it (receive its step, fold it
    into the ledger, refill and reset its freed slots) and *launch* it again (policy on its
    rows, send its actions) while the other group's envs are stepping.
    """
    observer = observer or NULL_OBSERVER
    L = ledger
    half = (L.n_slots + 1) // 2
    groups = [_Group(slice(0, half), envs, L, h2d, d2h), _Group(slice(half, L.n_slots), envs, L, h2d, d2h)]
    parked: dict[int, int] = {}
    add = timers.add

    def recover() -> set[int]:
        """Handle env failures; returns the slots whose episodes restarted (their rows are stale)."""
        faults.handle_env_failures(parked)
        restarted = set(parked)
        for group in groups:  # an async rebuild restarts the other group's in-flight episodes too
            group.sent = [s for s in group.sent if s not in restarted]
        faults.unpark(parked)
        return restarted

    if envs.failures:
        recover()
    observer.on_start(L.active_slots())

    def launch(group: _Group) -> None:
        t = perf_counter()
        active = group.active()
        if not active:
            group.sent = []
            return
        group.copy_obs()
        t = add("h2d", t)
        actions = runner(group.policy_input)
        t = add("policy", t)
        host = group.copy_actions(actions)
        bad = check_actions(host, active)
        if bad:
            faults.handle_bad_actions(bad, parked)
            faults.unpark(parked)
            active = [s for s in group.active() if s not in bad]
        t = add("d2h", t)
        group.actions = host
        group.sent = envs.step_send(active, host)
        add("env_step", t)

    def land(group: _Group) -> None:
        t = perf_counter()
        envs.step_recv(group.sent)
        folded, group.sent = group.sent, []
        if envs.failures:
            restarted = recover()
            folded = [s for s in folded if s not in restarted]
        t = add("env_step", t)
        active = group.active()
        # Slots that did not step this time (restarted after a fault, or re-seated after a bad
        # action) are held idle while the kernel folds the step in, then put back.
        held = {}
        if len(folded) != len(active):
            folded_set = set(folded)
            held = {s: int(L.slot_episode[s]) for s in active if s not in folded_set}
            for s in held:
                L.slot_episode[s] = IDLE
        observer.on_step(folded, group.actions, {})
        n_finished, n_reset, L.next_episode = step_bookkeeping(
            *group.kernel_views, max_steps, *group.results, L.next_episode, L.limit, True, group.finished, group.resets,
        )
        for s, row in held.items():
            L.slot_episode[s] = row
        if n_finished:
            done = group.finished[:n_finished]
            L.finished[done] = True
            on_finished(done)
            if n_reset:
                slots = (group.resets[:n_reset] + group.offset).tolist()
                t = add("bookkeeping", t)
                envs.reset_slots(slots, L.seeds_of(L.slot_episode[slots]))
                if envs.failures:
                    recover()
                t = add("env_step", t)
                observer.on_start(slots)
        add("bookkeeping", t)

    for group in groups:
        launch(group)
    while any(group.sent for group in groups):
        for group in groups:
            if group.sent:
                land(group)
                launch(group)
            elif group.active():
                launch(group)
