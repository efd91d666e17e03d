"""The hot loop: one step sequence for the plain and the pipelined run.

The slots are split into contiguous :class:`StepGroup` s: one group normally, two with
``--pipeline`` (see :mod:`fasteval.core.pipeline`). Each group goes through the same two halves
of a step, and the plain loop is the pipelined loop with one group:

*launch* (:func:`launch`)
  1. copy the group's observations to the policy device (``h2d``);
  2. run the policy on the group's rows, a static batch (``policy``);
  3. copy the actions to the host and check them; non-finite ones never reach an env (``d2h``);
  4. send the actions of the slots that run an episode to their envs (``env_step``).

*land* (:func:`land`)
  5. receive the envs' step; env failures restart their episodes from their seeds (``env_step``);
  6. fold the step into the ledger with the bookkeeping kernel; in continuous mode freed slots take
     their next episode at once; report the finished episodes (``bookkeeping``);
  7. reset the refilled slots' envs with their seeds, and the policy's slots (``env_step``).

:func:`run_episodes` launches every group, then lands and relaunches them in turn, so that one
group's envs step while the policy runs for the other. When every slot is idle (wave mode), the
next wave starts, or the run ends when the ledger is exhausted.

Every decision that is constant for a run is made when the :class:`StepContext` and the groups
are built; the loop body only calls what was bound there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from time import perf_counter
from typing import Any, Callable

import numpy as np

from fasteval.core.envs import SlotEnvs
from fasteval.core.faults import Faults
from fasteval.core.ledger import Ledger
from fasteval.core.policy import PolicyRunner
from fasteval.core.policy_set import PolicySet
from fasteval.core.protocols import StepObserver
from fasteval.core.timing import StageTimers
from fasteval.core.watchdog import Watchdog
from fasteval.core.transfer import DeviceToHost, HostToDevice
from fasteval.kernels import IDLE


@dataclass(eq=False)
class StepContext:
    """Everything one run's step sequence touches, built once by the engine per run."""

    envs: SlotEnvs
    runner: PolicyRunner
    h2d: HostToDevice
    d2h: DeviceToHost
    ledger: Ledger
    faults: Faults
    timers: StageTimers
    step_bookkeeping: Callable[..., tuple[int, int, int]]
    """The bookkeeping kernel (:func:`fasteval.kernels.reference.step_bookkeeping`), backend chosen once."""
    max_steps: int
    """Step cap per episode (0: none)."""
    check_actions: Callable[[np.ndarray, list[int]], list[int]]
    on_finished: Callable[[np.ndarray], None]
    """Called with the ledger rows that just finished (their numbers are final)."""
    observer: StepObserver | None = None
    watchdog: Watchdog = field(default_factory=Watchdog)
    """Armed around each policy call with ``policy_guard`` (see :mod:`fasteval.core.watchdog`)."""
    policy_guard: tuple[float, str, str] | None = None
    parked: dict[int, int] = field(default_factory=dict)
    """Scratch for fault handling: slot -> ledger row of episodes (re)seated mid-step."""
    groups: list["StepGroup"] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.send: Callable[[list[int], np.ndarray], list[int]] = self.envs.step_send
        self.receive: Callable[[list[int]], None] = self.envs.step_recv
        self.refill = bool(self.runner.continuous)
        self.marks_h2d = bool(getattr(self.timers, "marks_h2d", False))
        """Whether the timers mark the device's stream before the observation copy (CUDA timers only)."""
        self.note_active = getattr(self.runner, "note_active", None)
        """The runner's ``note_active`` (told each call's active slots), or None (the usual case)."""

    def recover(self) -> set[int]:
        """Handle ``envs.failures``: restart (or give up) their episodes. Returns the restarted slots.

        A restart can take other slots with it (an async worker rebuild), in any group: their
        rows in flight are dropped from what those groups sent, and the groups' active lists
        are recomputed.
        """
        parked = self.parked
        self.faults.handle_env_failures(parked)
        # Every re-seated slot, given-up ones included: a slot given up with no episode left is idle,
        # and left in a group's step it made ``land`` think every active slot had stepped (issue 20).
        restarted = self.faults.unpark(parked)
        for group in self.groups:
            if group.sent:
                group.sent = [s for s in group.sent if s not in restarted]
            group.stale = True
        return restarted


def kernel_outputs(size: int) -> tuple[np.ndarray, np.ndarray]:
    """The bookkeeping kernel's two outputs for ``size`` slots: ledger rows that finished, slots to reset (int64)."""
    return np.zeros(size, dtype=np.int64), np.zeros(size, dtype=np.int64)


class StepGroup:
    """One contiguous block of slots, with views of every buffer the kernel and the policy touch."""

    def __init__(self, rows: slice, ctx: StepContext):
        L = ctx.ledger
        self.rows, self.offset = rows, rows.start
        # All slots give the engine's own buffers (the plain loop); a half gives views, built once per engine.
        self.policy_input, copy = ctx.h2d.group(rows)
        self.copy_obs = _copy_when_read(copy, ctx.runner.reads_observation, rows) \
            if ctx.runner.reads_observation is not None and ctx.observer is None else copy
        """The group's observation copy; skipped for a call that will not read it (a chunk served from a
        queue), unless an observer is attached (recorders read the device buffer)."""
        self.call_policy = _policy_call(ctx, rows, self.policy_input)
        """Step 2: ``call_policy(active) -> actions`` (one policy's runner, or a many-policy run's group call)."""
        self.copy_actions = ctx.d2h.group(rows)
        envs = ctx.envs
        self.kernel_views = (
            envs.rewards[rows], envs.terminated[rows], envs.truncated[rows], envs.success[rows], L.slot_episode[rows],
            L.acc_sum[rows], L.acc_max[rows], L.acc_len[rows], L.acc_success[rows], L.acc_nan[rows],
        )
        self.results = (L.sum_reward, L.max_reward, L.length, L.success, L.nan_rewards)
        size = rows.stop - rows.start
        self.finished, self.resets = kernel_outputs(size)
        self.slot_episode = L.slot_episode[rows]
        self.sent: list[int] = []
        """Slots whose actions were sent and whose step has not been folded in yet."""
        self.actions: np.ndarray | None = None
        self.stale = True
        self._active: list[int] = []

    def active(self) -> list[int]:
        """Slots of this group that run an episode (recomputed only after something changed)."""
        if self.stale:
            self._active = (np.flatnonzero(self.slot_episode != IDLE) + self.offset).tolist()
            self.stale = False
        return self._active


def _policy_call(ctx: StepContext, rows: slice, policy_input: Any) -> Callable[[list[int]], Any]:
    """The group's policy call, bound once: the runner on the group's input, or, for a many-policy run
    (:class:`~fasteval.core.policy_set.PolicySet`), its call path for the group (each slot's action from
    its policy's runner)."""
    runner = ctx.runner
    if isinstance(runner, PolicySet):
        return runner.group_call(ctx.ledger, rows, policy_input)
    return lambda active: runner(policy_input)


def _copy_when_read(copy: Callable[[], None], reads: Callable[[slice], bool], rows: slice) -> Callable[[], None]:
    def copy_if_read() -> None:
        if reads(rows):
            copy()

    return copy_if_read


def launch(ctx: StepContext, group: StepGroup) -> None:
    """Steps 1-4 for ``group``: policy on its rows, actions to its envs (``group.sent``)."""
    t = perf_counter()
    active = group.active()
    if not active:
        group.sent = []
        return
    add = ctx.timers.add
    if ctx.marks_h2d:  # CUDA timers mark the stream here: the copy's GPU time counts as h2d
        ctx.timers.start_h2d()
    group.copy_obs()
    t = add("h2d", t)
    if ctx.note_active is not None:
        ctx.note_active(active)
    guard = ctx.policy_guard  # None without --policy-timeout (the default): nothing to arm
    if guard is not None:
        ctx.watchdog.arm(guard)
    actions = group.call_policy(active)
    t = add("policy", t)
    host = group.copy_actions(actions)  # on a GPU, where an asynchronous policy call is waited for
    if guard is not None:
        ctx.watchdog.disarm()
    bad = ctx.check_actions(host, active)
    if bad:  # those slots get their next episode now (or a raise, with --on-nan-action error)
        ctx.faults.handle_bad_actions(bad, ctx.parked)
        skip = ctx.faults.unpark(ctx.parked)  # the bad slots, re-seated
        if ctx.envs.failures:  # a next episode's reset failed: recover before sending (a replaced pool worker
            skip |= ctx.recover()  # took its whole block with it: those envs are fresh, none may step now)
        group.stale = True
        active = [s for s in active if s not in skip]
    t = add("d2h", t)
    group.actions = host
    group.sent = ctx.send(active, host) if active else []
    add("env_step", t)


def land(ctx: StepContext, group: StepGroup) -> None:
    """Steps 5-7 for ``group``: receive its step, fold it into the ledger, refill and reset."""
    t = perf_counter()
    add, L = ctx.timers.add, ctx.ledger
    ctx.receive(group.sent)
    folded, group.sent = group.sent, []
    if ctx.envs.failures:
        restarted = ctx.recover()
        folded = [s for s in folded if s not in restarted]
    t = add("env_step", t)
    active = group.active()
    # Slots that did not step (restarted after a fault, or given a new episode after a bad
    # action) are held idle while the kernel folds the step in, then put back.
    held: dict[int, int] = {}
    if len(folded) != len(active):
        folded_set = set(folded)
        held = {s: int(L.slot_episode[s]) for s in active if s not in folded_set}
        for s in held:
            L.slot_episode[s] = IDLE
    if ctx.observer is not None:
        ctx.observer.on_step(folded, group.actions, held)
    n_finished, n_reset, L.next_episode = ctx.step_bookkeeping(
        *group.kernel_views, ctx.max_steps, *group.results, L.next_episode, L.limit, ctx.refill,
        group.finished, group.resets,
    )
    for s, row in held.items():
        L.slot_episode[s] = row
    if n_finished:
        done = group.finished[:n_finished]
        L.finished[done] = True
        ctx.on_finished(done)
        if n_reset < n_finished:
            group.stale = True  # some slots went idle
        if n_reset:
            slots = (group.resets[:n_reset] + group.offset).tolist()
            t = add("bookkeeping", t)
            seeds = L.seeds_of(L.slot_episode[slots])
            ctx.envs.reset_slots(slots, seeds)
            t = add("env_step", t)
            ctx.runner.reset_slots(slots, seeds)
            if ctx.envs.failures:
                ctx.recover()
            if ctx.observer is not None:
                ctx.observer.on_start(slots)
    add("bookkeeping", t)


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
        t = perf_counter()  # the engine's dry run is a check before any episode, timed apart from the stages
    runner.start_slots(slots, seeds)
    timers.add("bookkeeping", t)
    return slots


def cancel_in_flight(ctx: StepContext, groups: list[StepGroup]) -> None:
    """A ``--stop-when`` rule held: receive the steps still in flight (so every env is idle and in
    sync), handle their faults, then abandon every episode in a slot. All of them have indices past
    the stop (the rule waits for every earlier index to finish); the next run resets every slot."""
    for group in groups:
        if group.sent:
            ctx.receive(group.sent)
            group.sent = []
    if ctx.envs.failures:
        ctx.recover()
    ctx.ledger.cancel_in_flight()
    for group in groups:
        group.stale = True


def at_stop_request(ctx: StepContext, groups: list[StepGroup]) -> bool:
    """The ledger asked for something at this step boundary (``ledger.stop_requested``). A stop rule held
    (``ledger.halting``): cancel what is in flight and end the run (True). A race dropped policies
    (:meth:`~fasteval.core.ledger.Ledger.drop_policies`): abandon their episodes in the slots of every group
    with no step in flight, give those slots their next episodes at once, and keep the request up until
    the groups still in flight have landed and been cleared too (False: the run goes on)."""
    if ctx.ledger.halting:
        cancel_in_flight(ctx, groups)
        return True
    L, pending = ctx.ledger, False
    for group in groups:
        slots = L.dropped_slots(group.active())
        if not slots:
            continue
        if group.sent:
            pending = True
            continue
        abandon_and_refill(ctx, slots)
        group.stale = True
    L.stop_requested = pending
    return False


def abandon_and_refill(ctx: StepContext, slots: list[int]) -> None:
    """Drop the episodes in ``slots`` (their rows stay unfinished, counted in ``ledger.n_cancelled``) and,
    with continuous batching, give the slots the ledger's next episodes (env and policy resets)."""
    t = perf_counter()
    L = ctx.ledger
    for slot in slots:
        L.slot_episode[slot] = IDLE
        L.clear_slot(slot)
    L.n_cancelled += len(slots)
    refilled = []
    if ctx.refill:
        for slot in slots:
            row = L.take_next()
            if row == IDLE:
                break
            L.slot_episode[slot] = row
            refilled.append(slot)
    if refilled:
        seeds = L.seeds_of(L.slot_episode[refilled])
        ctx.envs.reset_slots(refilled, seeds)
        ctx.runner.reset_slots(refilled, seeds)
        if ctx.envs.failures:
            ctx.recover()
        if ctx.observer is not None:
            ctx.observer.on_start(refilled)
    ctx.timers.add("bookkeeping", t)


def run_episodes(ctx: StepContext, group_rows: list[slice]) -> None:
    """Run the ledger to the end over groups of slots ``group_rows``. The first wave must already
    be started (:func:`start_wave`)."""
    L, envs, observer = ctx.ledger, ctx.envs, ctx.observer
    groups = ctx.groups = [StepGroup(rows, ctx) for rows in group_rows]
    if envs.failures:
        ctx.recover()
    if observer is not None:
        observer.on_start(L.active_slots())
    for group in groups:
        launch(ctx, group)
    while True:
        for group in groups:
            if group.sent:
                land(ctx, group)
            if L.stop_requested and at_stop_request(ctx, groups):
                return
            launch(ctx, group)
        if any(group.sent for group in groups):
            continue
        # Nothing in flight: every slot is idle (wave mode, or the end of the ledger).
        while not L.exhausted and not any(group.active() for group in groups):
            started = start_wave(envs, ctx.runner, L, ctx.timers)
            if envs.failures:
                ctx.recover()
            for group in groups:
                group.stale = True
            if observer is not None:
                observer.on_start(started)
        if not any(group.active() for group in groups):
            return
        for group in groups:
            launch(ctx, group)
