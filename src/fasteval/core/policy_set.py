"""Many policies, one engine: :class:`PolicySet`, the runner of a many-policy run.

A many-policy run (``--policy A --policy B ...``; ``EvalSpec(policy=(a, b, ...))``) shares the engine's env
slots between K policies. The ledger holds one row per (policy, episode) pair, interleaved by episode
index (:func:`fasteval.core.ledger.interleaved_rows`), so each slot runs, at any time, one episode of one
policy, and every policy's prefix of episode indices grows at the same pace. Each policy keeps its own
:class:`~fasteval.core.policy.PolicyRunner` (its loader's, with its own observation mapping,
normalization, action-chunk queues and per-slot state), built as in a one-policy run of it.

**One call per policy with active slots.** Every runner is built for, and called on, the group's whole
static batch (the same rows, the same shapes, the same buffers as in a one-policy run), and the
actions of each slot are taken from the runner of the policy whose episode it runs. A runner's per-slot
state is indexed by slot, as in its own run: a slot that starts an episode is reset in every runner
(:meth:`PolicySet.reset_slots`), so whatever another policy's episode left in that slot's state is gone
before its own next episode there. Rows of other policies' slots are computed and discarded; for a
policy whose rows are independent of each other (every policy fasteval's batch-invariance holds for),
a policy's own rows are therefore the ones of its own run at the same batch size, bit for bit, and each
policy's per-episode results are those of its own run.

The call path of each group is bound once per run (:meth:`PolicySet.group_call`); per step it only
reuses its *plan* (which runners to call, and the flat gather index that picks each slot's action),
rebuilt when a slot started an episode (a reset) or the group's active slots changed.

**Stacked weights** (``stack_weights``; :class:`StackedCall`): checkpoints of one architecture run as one
call, ``torch.func.stack_module_state`` plus ``vmap(functional_call)``, each policy on a block of the
whole batch (a static shape: one CUDA graph covers every policy). Decided once, after the dry runs
(:func:`stack_decision`); a policy that is not functional (per-slot state, its own generator, chunk
queues, normalization or task stages, a different class or parameter shapes) keeps the separate calls,
and the reason is in the run's meta (``policy_calls``). Results equal the separate calls within the
rounding of batched matmuls (``tests/test_many_policies.py`` states the tolerance).

**Stacking where it pays.** The stacked call computes every policy's block on the whole batch, so on a CPU
with small policies it is slower than the separate calls (2.4-3.2x slower at ``-b 16`` on CartPole MLPs:
vmap's overhead is paid per call, and the separate path skips policies with no active slot;
``benchmarks/bench_many_policies.py``). So the path is chosen once, by a fixed rule that gives the same path
(and so the same bits) on every run of a spec: the stacked call where the policies run on CUDA, the
separate calls on a CPU (:func:`stacking_choice_for`); ``policy_calls`` (the meta and the console) says
which and why. ``FASTEVAL_STACK_WEIGHTS=stacked`` or ``=separate`` forces a path; ``=measure`` times both
on the dry run's input (:func:`time_paths`, interleaved medians) and keeps the faster, at the price of a
path (and rounding) that can change from run to run, which ``policy_calls`` then says; any other value is
refused with one line. Either path gives exactly the results it gives when forced: the choice picks a path,
it never changes one.
"""

from __future__ import annotations

import copy
import os
import statistics
from time import perf_counter
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import nn

from fasteval.core.capabilities import NO_RESET, PER_ENV, WAVE, Capabilities
from fasteval.core.policy import PolicyRunner
from fasteval.kernels import IDLE
from fasteval.types.errors import UserInputError

SEPARATE, STACKED = "separate", "stacked"
MEASURE, BY_DEVICE = "measure", "device"
STACK_ENV = "FASTEVAL_STACK_WEIGHTS"
"""Environment variable that sets ``--stack-weights``' choice: ``device`` (the default: stacked on CUDA, separate
on a CPU), ``stacked``, ``separate`` or ``measure`` (time both once, keep the faster)."""
TIMED_CALLS = 15
"""Timed calls of each path in :func:`time_paths` (after 3 warm-up calls each)."""


class PolicySet:
    """The runner of a many-policy run: K runners over the same slots (see the module docstring).

    ``runners[k]`` runs policy k (named ``names[k]``). The engine dry-runs each one (its output mapping,
    its accelerators), then asks :meth:`stack` whether one stacked call may replace the separate ones.
    """

    def __init__(self, runners: Sequence[PolicyRunner], names: Sequence[str]):
        if len(runners) < 2 or len(runners) != len(names):
            raise ValueError(f"PolicySet: expected two or more runners with one name each, got {len(runners)} "
                             f"runners and {len(names)} names.")
        self.runners = list(runners)
        self.names = tuple(names)
        self.n_policies = len(self.runners)
        self.n_slots = self.runners[0].n_slots
        self.epoch = 0
        """Incremented by every reset: a slot may now run another policy's episode (the plans are rebuilt)."""
        self.stacked: StackedCall | None = None
        self.policy_calls = f"{SEPARATE} ({self.n_policies} calls per step at most, one per policy with active slots)"
        """What the run's meta says of the calls (``policy_calls``)."""

    @property
    def capabilities(self) -> Capabilities:
        """What the set can do, from its runners' declared values as they stand (a runner's change on its dry
        run, chunks found, is seen): the most demanding reset kind (``per-env`` if any runner keeps per-slot
        state), continuous batching only if every runner allows it (one wave policy makes the whole run
        waves), the watchdog left to the runners only if every one enforces the timeout itself. The set's
        call reads every observation and is told no active slots (each runner is called on the whole batch)."""
        caps = [r.capabilities for r in self.runners]
        kinds = {c.reset_kind for c in caps}
        kind = PER_ENV if PER_ENV in kinds else WAVE if WAVE in kinds else NO_RESET
        return Capabilities(reset_kind=kind, policy_reset_kind=kind, continuous=all(c.continuous for c in caps),
                            chunks=any(c.chunks for c in caps), tasks=any(c.tasks for c in caps),
                            enforces_policy_timeout=all(c.enforces_policy_timeout for c in caps))

    @property
    def policy(self) -> tuple[Any, ...]:
        return tuple(r.policy for r in self.runners)

    # -- resets: every runner, so that no state of another policy's episode stays in a slot -----------
    def reset_slots(self, slots: Sequence[int], seeds: Sequence[int]) -> None:
        self.epoch += 1
        for runner in self.runners:
            runner.reset_slots(slots, seeds)

    def start_slots(self, slots: Sequence[int], seeds: Sequence[int]) -> None:
        self.epoch += 1
        for runner in self.runners:
            runner.start_slots(slots, seeds)

    def __call__(self, obs: Any) -> torch.Tensor:
        raise RuntimeError("a PolicySet is called through the call path of a slot group (group_call), which "
                           "knows each slot's policy")

    # -- stacked weights -------------------------------------------------------------------------------------
    def stack(self, wanted: bool, accelerate: Callable[[Callable[[Any], torch.Tensor]], Callable[[Any], torch.Tensor]],
              example: Any) -> None:
        """After the runners' dry runs: use one stacked call when ``wanted`` and possible (``accelerate``
        wraps it as the engine wraps a policy step; ``example``: a policy input to check it on)."""
        if not wanted:
            return
        call, reason = stack_decision(self.runners)
        if call is None:
            self.policy_calls = f"{SEPARATE} (stacking refused: {reason})"
            return
        call.check(example, self.runners)
        call.step = accelerate(call.plain_step)
        mode = stack_mode()
        what = f"one vmap call over {self.n_policies} checkpoints of {type(call.modules[0]).__name__}"
        if mode == MEASURE:
            separate_s, stacked_s = time_paths([r.__call__ for r in self.runners], call.step, example, call.device)
            use = stacking_choice(separate_s, stacked_s)
            timed = (f"measured {1e6 * stacked_s:.0f} us per step stacked against {1e6 * separate_s:.0f} us for the "
                     f"{self.n_policies} separate calls, {STACK_ENV}={MEASURE}: the path can differ from run to run")
        elif mode == BY_DEVICE:
            use = stacking_choice_for(call.device)
            timed = ("chosen by device: CUDA" if use else "chosen by device: on a CPU the separate calls, where "
                     "stacking measured 2.4-3.2x slower (bench_many_policies)") + f"; {STACK_ENV}=stacked|separate|measure"
        else:
            use, timed = mode == STACKED, f"forced by {STACK_ENV}={mode}"
        if use:
            self.stacked = call
            self.policy_calls = f"{STACKED} ({what}, a block of the whole batch each; {timed})"
        else:
            self.policy_calls = (f"{SEPARATE} (stacking not chosen: {timed}; {self.n_policies} calls per step at "
                                 f"most, one per policy with active slots)")

    def refresh(self) -> None:
        """At the start of a run: the stacked weights copied again from the policies (in place)."""
        if self.stacked is not None:
            self.stacked.refresh()

    # -- the call path of one group, bound once per run ---------------------------------------------------------
    def group_call(self, ledger: Any, rows: slice, policy_input: Any) -> Callable[[list[int]], torch.Tensor]:
        """``call(active) -> actions`` for the slots ``rows`` (their input ``policy_input``): each slot's
        action from its policy's runner (or the stacked call). ``active``: the group's active slots, the
        same list object until they change."""
        size = rows.stop - rows.start
        policy_ids, slot_episode = ledger.policy_ids, ledger.slot_episode[rows]
        arange = np.arange(size, dtype=np.int64)
        runners = [r.__call__ for r in self.runners]
        stacked = self.stacked
        cache: list[Any] = [None, -1, None]  # active list, epoch, plan

        def plan_for(active: list[int]) -> tuple[list[Callable[[Any], torch.Tensor]], Any]:
            running = slot_episode != IDLE
            owner = np.where(running, policy_ids[np.where(running, slot_episode, 0)], -1)
            if stacked is not None:
                flat = np.where(running, owner, 0) * size + arange
                return [stacked.step], torch.from_numpy(flat).to(stacked.device)
            present = np.unique(owner[running])
            if present.size <= 1:
                k = int(present[0]) if present.size else 0
                return [runners[k]], None
            pos = np.zeros(self.n_policies, dtype=np.int64)
            pos[present] = np.arange(present.size)
            flat = np.where(running, pos[np.where(running, owner, present[0])], 0) * size + arange
            return [runners[int(k)] for k in present], torch.from_numpy(flat)

        def call(active: list[int]) -> torch.Tensor:
            if cache[0] is not active or cache[1] != self.epoch:
                cache[0], cache[1], cache[2] = active, self.epoch, plan_for(active)
            calls, flat = cache[2]
            if flat is None:
                return calls[0](policy_input)
            if stacked is not None:
                out = calls[0](policy_input)
                return out.reshape(-1, *out.shape[2:]).index_select(0, flat)
            outs = [c(policy_input) for c in calls]
            return torch.cat(outs).index_select(0, flat.to(outs[0].device))

        return call


# -- stacked weights ------------------------------------------------------------------------------------------
def stack_mode() -> str:
    """``FASTEVAL_STACK_WEIGHTS`` (``device`` when unset): how ``--stack-weights`` chooses (module docstring)."""
    mode = os.environ.get(STACK_ENV, BY_DEVICE).strip().lower() or BY_DEVICE
    if mode not in (BY_DEVICE, MEASURE, STACKED, SEPARATE):
        raise UserInputError(f"{STACK_ENV}: expected device, stacked, separate or measure, got {mode!r}; unset it "
                             f"for the rule by device (stacked on CUDA, separate calls on a CPU).")
    return mode


def stacking_choice_for(device: torch.device) -> bool:
    """The default rule: the stacked call on CUDA (one launch, or one graph, for K policies), the separate calls
    on a CPU (where stacking measured slower at every batch size of ``bench_many_policies``)."""
    return device.type == "cuda"


def stacking_choice(separate_s: float, stacked_s: float) -> bool:
    """Whether the stacked call is kept: only where it measured faster than the separate calls (seconds per
    step, medians); a tie keeps the separate calls (their results are each policy's own run's, bit for bit)."""
    return stacked_s < separate_s


def time_paths(separate: Sequence[Callable[[Any], Any]], stacked: Callable[[Any], Any], example: Any,
               device: torch.device, calls: int = TIMED_CALLS) -> tuple[float, float]:
    """Median seconds of one step's policy calls on ``example``: every separate call (a step with every policy
    active), and the one stacked call; interleaved, after 3 warm-up calls each (a CUDA device is synchronized
    around each timing). Returns ``(separate_s, stacked_s)``."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def timed(fn: Callable[[], Any]) -> float:
        sync()
        t0 = perf_counter()
        fn()
        sync()
        return perf_counter() - t0

    def run_separate() -> None:
        for call in separate:
            call(example)

    times: dict[str, list[float]] = {SEPARATE: [], STACKED: []}
    with torch.inference_mode():
        for _ in range(3):
            run_separate()
            stacked(example)
        for _ in range(calls):
            times[SEPARATE].append(timed(run_separate))
            times[STACKED].append(timed(lambda: stacked(example)))
    return statistics.median(times[SEPARATE]), statistics.median(times[STACKED])


class StackedCall:
    """K modules of one architecture as one call: ``vmap(functional_call)`` over their stacked state.

    ``plain_step(obs)``: the first runner's input stages (observation mapping, dtype cast: the same for
    every runner, since they depend on the spec and the architecture only), then every module on the
    whole batch, then the runners' output mapping: actions ``[K, B, ...]``.
    """

    def __init__(self, modules: Sequence[nn.Module], prepare: Callable[[Any], Any],
                 postprocess: Callable[[torch.Tensor], torch.Tensor]):
        from torch.func import functional_call, stack_module_state, vmap

        self.modules = list(modules)
        self.params, self.buffers = stack_module_state(self.modules)
        self.device = next(iter(self.params.values())).device if self.params else torch.device("cpu")
        base = copy.deepcopy(self.modules[0]).to("meta")

        def one(params: dict[str, torch.Tensor], buffers: dict[str, torch.Tensor], x: Any) -> torch.Tensor:
            return functional_call(base, (params, buffers), (x,))

        batched = vmap(one, in_dims=(0, 0, None))
        params, buffers = self.params, self.buffers

        def plain_step(obs: Any) -> torch.Tensor:
            return postprocess(batched(params, buffers, prepare(obs)))

        self.plain_step = plain_step
        self.step: Callable[[Any], torch.Tensor] = plain_step

    def refresh(self) -> None:
        """Copy every module's current weights into the stacked tensors, in place (their storage, and any
        graph that reads them, stays)."""
        with torch.no_grad():
            for name, stacked in (*self.params.items(), *self.buffers.items()):
                for k, module in enumerate(self.modules):
                    stacked[k].copy_(_state_of(module)[name])

    def check(self, example: Any, runners: Sequence[PolicyRunner]) -> None:
        """The stacked call's actions on ``example`` have the separate calls' shape (a mismatch is a bug here)."""
        with torch.inference_mode():
            out = self.plain_step(example)
            one = runners[0].plain_step(example)
        if tuple(out.shape) != (len(self.modules), *one.shape):
            raise RuntimeError(f"stacked weights: the stacked call returned {tuple(out.shape)}, expected "
                               f"{(len(self.modules), *one.shape)}")


def _state_of(module: nn.Module) -> dict[str, torch.Tensor]:
    return {**dict(module.named_parameters()), **dict(module.named_buffers())}


def stack_decision(runners: Sequence[PolicyRunner]) -> tuple[StackedCall | None, str]:
    """One :class:`StackedCall` for ``runners``, or ``(None, why not)``: every runner must be functional
    (:meth:`~fasteval.core.policy.PolicyRunner.functional_step`: an ``nn.Module`` called as it is, no
    per-slot state, no chunk queue, no normalization or task stage), and every module of the same class,
    with the same parameter and buffer names, shapes, dtypes and devices, the same plain Python attributes
    (its config), and no ``torch.Generator`` of its own."""
    from fasteval.core.accel import own_generator, python_state

    steps = []
    for k, runner in enumerate(runners):
        step = runner.functional_step()
        if step is None:
            return None, (f"policy {k} ({type(runner.policy).__name__}) is not functional: per-slot state, action "
                          f"chunks, normalization or task stages, or not an nn.Module called as it is")
        steps.append(step)
    modules = [m for _, m, _ in steps]
    first = modules[0]
    for k, module in enumerate(modules):
        if type(module) is not type(first):
            return None, f"policy {k} is a {type(module).__name__}, policy 0 a {type(first).__name__}"
        gen = own_generator(module)
        if gen is not None:
            return None, f"policy {k} holds its own torch.Generator ({gen})"
        a, b = _layout(first), _layout(module)
        if a != b:
            return None, f"policy {k}'s parameters and buffers differ from policy 0's (names, shapes, dtypes or devices)"
        if python_state(module) != python_state(first):
            return None, f"policy {k}'s configuration (its plain Python attributes) differs from policy 0's"
    if not dict(first.named_parameters()):
        return None, "the policies have no parameters"
    prepare, _, post = steps[0]
    return StackedCall(modules, prepare, post), ""


def _layout(module: nn.Module) -> list[tuple[str, tuple[int, ...], torch.dtype, str]]:
    return [(name, tuple(t.shape), t.dtype, str(t.device)) for name, t in sorted(_state_of(module).items())]
