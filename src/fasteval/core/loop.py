"""The hot loop: one step sequence for the plain and the pipelined run.

The slots are split into contiguous :class:`StepGroup` s: one group normally, two with
``--pipeline`` (see :mod:`fasteval.core.pipeline`). Each group goes through the same two halves
of a step, and the plain loop is the pipelined loop with one group:

*launch* (:func:`launch`)
  1. copy the group's observations to the policy device (``h2d``);
  2. run the policy on the group's rows, a static batch (``policy``);
  3. copy the actions to the host and check them; non-finite ones never reach an env (``d2h``);
  4. send the actions of the slots that run an episode to their envs (``env_step``); when the run skips
     unread observations (:mod:`fasteval.core.unread`), with the runner's per-slot reads.

*land* (:func:`land`)
  5. receive the envs' step; env failures restart their episodes from their seeds (``env_step``);
  6. fold the step into the ledger with the bookkeeping kernel; in continuous mode freed slots take
     their next episode at once; report the finished episodes (``bookkeeping``);
  7. reset the refilled slots' envs with their seeds, and the policy's slots (``env_step``).

:func:`run_episodes` launches every group, then lands and relaunches them in turn, so that one
group's envs step while the policy runs for the other. When every slot is idle (wave mode), the
next wave starts, or the run ends when the ledger is exhausted.

Every decision that is constant for a run is made when the :class:`StepContext` and the groups
are built; the loop body only calls what was bound there:

* ``group.copy_obs`` (step 1): the group's copy, preceded by the CUDA timers' stream mark when they
  mark one (``timers.marks_h2d``), and asking the runner first when some calls do not read the
  observation (``capabilities.skips_observation``, without an observer);
* ``group.call_policy(active)`` (step 2): the runner's call, told the active slots first when it
  wants them (``capabilities.wants_active``), armed with the watchdog under ``--policy-timeout``;
* ``group.copy_actions`` (step 3): the actions' copy to the host (disarming that watchdog);
* ``group.fold_step`` (step 6): the kernel, the observer's ``on_step`` first when one is attached;
* ``ctx.started`` (step 7, after the env resets of refilled slots): the policy's resets, the observer's
  ``on_start`` after them when one is attached.
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
    skip_unread: bool = False
    """Unread observations' work is skipped this run (:func:`fasteval.core.unread.skip_decision`, made once):
    each send passes the runner's per-slot reads (``runner.observation_reads()``, after its call)."""

    def __post_init__(self) -> None:
        self.send: Callable[[list[int], np.ndarray], list[int]] = self.envs.step_send
        if self.skip_unread:
            reads, send_reading = self.runner.observation_reads, self.envs.step_send_reading

            def send(slots: list[int], actions: np.ndarray) -> list[int]:
                return send_reading(slots, actions, reads())

            self.send = send
        self.receive: Callable[[list[int]], None] = self.envs.step_recv
        self.capabilities = caps = self.runner.capabilities
        """The runner's declared :class:`~fasteval.core.capabilities.Capabilities` (after its dry run)."""
        self.refill = bool(caps.continuous)
        self.started = _episodes_started(self)
        """``started(slots, seeds)``: after refilled slots' env resets, the policy's (then the observer's)."""

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
    """One contiguous block of slots, with views of every buffer the kernel and the policy touch, and
    the group's step functions, bound once (see the module docstring)."""

    def __init__(self, rows: slice, ctx: StepContext):
        L = ctx.ledger
        self.rows, self.offset = rows, rows.start
        # All slots give the engine's own buffers (the plain loop); a half gives views, built once per engine.
        self.policy_input, copy = ctx.h2d.group(rows)
        self.copy_obs = _observation_copy(copy, ctx, rows)
        """Step 1: the group's observation copy (see :func:`_observation_copy`)."""
        self.call_policy = _policy_call(ctx, self.policy_input, rows)
        """Step 2: ``call_policy(active) -> actions`` on the policy device: one policy's runner, or a
        many-policy run's group call (see :func:`_policy_call`)."""
        self.copy_actions = _actions_copy(ctx, ctx.d2h.group(rows))
        """Step 3: ``copy_actions(actions) -> host actions`` (see :func:`_actions_copy`)."""
        envs = ctx.envs
        self.kernel_views = (
            envs.rewards[rows], envs.terminated[rows], envs.truncated[rows], envs.success[rows], L.slot_episode[rows],
            L.acc_sum[rows], L.acc_max[rows], L.acc_len[rows], L.acc_success[rows], L.acc_nan[rows],
        )
        self.results = (L.sum_reward, L.max_reward, L.length, L.success, L.nan_rewards)
        size = rows.stop - rows.start
        self.finished, self.resets = kernel_outputs(size)
        self.fold_step = _step_fold(ctx, self)
        """Step 6: ``fold_step(folded, held) -> (n_finished, n_reset)`` (see :func:`_step_fold`)."""
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


# -- the step functions a group binds (each variant chosen once, when the group is built) ------------

def _observation_copy(copy: Callable[[], None], ctx: StepContext, rows: slice) -> Callable[[], None]:
    """Step 1 for the group ``rows``: ``copy``, asking ``runner.reads_observation(rows)`` first when some
    calls do not read it (a chunk served from a queue; never with an observer: recorders read the device
    buffer), after the CUDA timers' stream mark when they make one (the copy's GPU time counts as h2d)."""
    if ctx.capabilities.skips_observation and ctx.observer is None:
        reads, plain = ctx.runner.reads_observation, copy

        def copy_when_read() -> None:
            if reads(rows):
                plain()

        copy = copy_when_read
    if ctx.timers.marks_h2d:
        mark, unmarked = ctx.timers.start_h2d, copy

        def marked_copy() -> None:
            mark()
            unmarked()

        copy = marked_copy
    return copy


def _policy_call(ctx: StepContext, policy_input: Any, rows: slice | None = None) -> Callable[[list[int]], Any]:
    """Step 2: ``call(active)`` runs the policy on ``policy_input`` (a many-policy run,
    :class:`~fasteval.core.policy_set.PolicySet`: its call path for the group ``rows``, each slot's action
    from its policy's runner); the runner is told ``active`` first when it wants it
    (``capabilities.wants_active``), and the watchdog is armed with ``ctx.policy_guard`` when there is one
    (``--policy-timeout``; disarmed by :func:`_actions_copy`, after the actions' copy)."""
    runner, guard, arm = ctx.runner, ctx.policy_guard, ctx.watchdog.arm
    if isinstance(runner, PolicySet):
        call = runner.group_call(ctx.ledger, rows, policy_input)
    else:
        def call(active: list[int]) -> Any:
            return runner(policy_input)
    note = runner.note_active if ctx.capabilities.wants_active else None
    if note is None and guard is None:
        return call
    if guard is None:
        def noted(active: list[int]) -> Any:
            note(active)
            return call(active)

        return noted

    def guarded(active: list[int]) -> Any:
        if note is not None:
            note(active)
        arm(guard)
        return call(active)

    return guarded


def _actions_copy(ctx: StepContext, copy: Callable[[Any], np.ndarray]) -> Callable[[Any], np.ndarray]:
    """Step 3: the actions' copy to the host (on a GPU, where an asynchronous policy call is waited for),
    then the watchdog disarmed when :func:`_policy_call` armed it."""
    if ctx.policy_guard is None:
        return copy
    disarm = ctx.watchdog.disarm

    def copy_then_disarm(actions: Any) -> np.ndarray:
        host = copy(actions)
        disarm()
        return host

    return copy_then_disarm


def _step_fold(ctx: StepContext, group: "StepGroup") -> Callable[[list[int], dict[int, int]], tuple[int, int]]:
    """Step 6: ``fold(folded, held)`` folds the group's step into the ledger with the kernel (``L.next_episode``
    updated) and returns ``(n_finished, n_reset)``; an attached observer's ``on_step`` sees it first."""
    L, kernel, max_steps, refill = ctx.ledger, ctx.step_bookkeeping, ctx.max_steps, ctx.refill
    views, results, finished, resets = group.kernel_views, group.results, group.finished, group.resets

    def fold(folded: list[int], held: dict[int, int]) -> tuple[int, int]:
        n_finished, n_reset, L.next_episode = kernel(
            *views, max_steps, *results, L.next_episode, L.limit, refill, finished, resets)
        return n_finished, n_reset

    if ctx.observer is None:
        return fold
    on_step = ctx.observer.on_step

    def observed_fold(folded: list[int], held: dict[int, int]) -> tuple[int, int]:
        on_step(folded, group.actions, held)
        return fold(folded, held)

    return observed_fold


def _episodes_started(ctx: StepContext) -> Callable[[list[int], Any], None]:
    """Step 7, after the env resets of slots that took a new episode: ``started(slots, seeds)`` resets the
    policy's slots, recovers from failed resets, then tells an attached observer (``on_start``: the first
    observations are in the host buffer, restarted ones included)."""
    reset_policy, envs, recover = ctx.runner.reset_slots, ctx.envs, ctx.recover
    if ctx.observer is None:
        def started(slots: list[int], seeds: Any) -> None:
            reset_policy(slots, seeds)
            if envs.failures:
                recover()

        return started
    on_start = ctx.observer.on_start

    def observed(slots: list[int], seeds: Any) -> None:
        reset_policy(slots, seeds)
        if envs.failures:
            recover()
        on_start(slots)

    return observed


def launch(ctx: StepContext, group: StepGroup) -> None:
    """Steps 1-4 for ``group``: policy on its rows, actions to its envs (``group.sent``)."""
    t = perf_counter()
    active = group.active()
    if not active:
        group.sent = []
        return
    add = ctx.timers.add
    group.copy_obs()
    t = add("h2d", t)
    actions = group.call_policy(active)
    t = add("policy", t)
    host = group.copy_actions(actions)
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
    n_finished, n_reset = group.fold_step(folded, held)
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
            ctx.started(slots, seeds)
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
    if observer is not None:  # a bookkeeping span, as in land: recorders take their own time out of it
        t = perf_counter()
        observer.on_start(L.active_slots())
        ctx.timers.add("bookkeeping", t)
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
                t = perf_counter()
                observer.on_start(started)
                ctx.timers.add("bookkeeping", t)
        if not any(group.active() for group in groups):
            return
        for group in groups:
            launch(ctx, group)
