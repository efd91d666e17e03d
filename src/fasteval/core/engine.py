"""The engine: built once from an :class:`~fasteval.types.spec.EvalSpec`, run many times.

Building resolves and validates everything (env, spaces, policy, device, buffers,
kernel backend); :meth:`CoreEngine.run_segment` then runs a ledger of episodes through the hot
loop and hands up a :class:`~fasteval.core.outcome.Segment` (the ledger's final rows, the faults, the
stop rule, the facts only the engine knows), from which the run layer builds the one record of the
run (:mod:`fasteval.run.record`). Every door (CLI, library API, bench, sweeps) goes through this
class, as :class:`fasteval.run.engine.Engine`, which plugs in the policy loaders, the robot steps and
the recorders (:class:`~fasteval.core.protocols.EngineParts`) and builds the record: core itself
imports none of them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
from time import perf_counter
from typing import Any, Callable, Iterator, Sequence

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from fasteval import kernels
from fasteval.core import accel
from fasteval.core.accel import dry_run_and_accelerate
from fasteval.core.policy_blocks import (CUBLAS_WORKSPACE, WHOLE_BATCH, PolicyCall, deterministic_kernels, fixed_shape,
                                         guarantee)
from fasteval.core.capabilities import Capabilities, run_meta_of
from fasteval.core.envs import SlotEnvs, build_slot_envs, make_factory
from fasteval.core.faults import Faults, make_action_check
from fasteval.core.watchdog import POLICY, Watchdog
from fasteval.core.ledger import Ledger, check_fits_in_memory, interleaved_rows
from fasteval.core.loop import StepContext, run_episodes, start_wave
from fasteval.core.outcome import Segment, SegmentAborted
from fasteval.core.stopping import StopRuleError, StopWhen
from fasteval.core.pipeline import check_pipelinable, group_rows, policy_batch
from fasteval.core.policy_set import PolicySet
from fasteval.core.racing import RaceStop
from fasteval.core.protocols import OBSERVER_FACTS, EngineParts, StepObserver, reads_observations
from fasteval.core.timing import make_stage_timers
from fasteval.core.transfer import DeviceToHost, HostToDevice, pins_host
from fasteval.core.unread import ON as UNREAD_ON, skip_decision
from fasteval.types.errors import UserInputError
from fasteval.types.results import EarlierSegments
from fasteval.types.spec import EvalSpec

logger = logging.getLogger(__name__)


def resolve_device(requested: str, policy: Any = None) -> torch.device:
    """``auto`` -> the live module's device, else cuda when available, else cpu."""
    if requested == "auto":
        if isinstance(policy, nn.Module):
            param = next(policy.parameters(), None)
            if param is not None:
                return param.device
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(requested)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserInputError(f"device {requested!r}: CUDA is not available on this machine. Use --device cpu or --device auto.")
    return device


def pairs_of(episodes: Sequence[Any]) -> list[tuple[int, int]] | None:
    """``episodes`` of a many-policy run as ``(policy, episode)`` pairs, or None when they are plain indices."""
    items = list(episodes)
    if not items or not isinstance(items[0], (tuple, list)):
        return None
    return [(int(p), int(i)) for p, i in items]


def many_policy_ledger(spec: EvalSpec, n_slots: int, n: int, seed: int, episodes: Sequence[int] | None,
                       pairs: list[tuple[int, int]] | None, stop: Any) -> Ledger:
    """The ledger of a many-policy run: every policy's episodes (``episodes``: those indices for every
    policy, ``None``: ``0..n-1``; ``pairs``: these ``(policy, episode)`` pairs), interleaved by episode index,
    less what a race primed with earlier segments no longer runs. A Ray run's driver builds the same one
    (:mod:`fasteval.run.ray_engine`)."""
    K = spec.n_policies
    if pairs is None:
        ixs = range(n) if episodes is None else episodes
        pairs = [(p, i) for i in ixs for p in range(K)]
    if isinstance(stop, RaceStop):
        pairs = stop.keep(pairs)
    ep, pol = interleaved_rows(0, K, pairs)
    ledger = Ledger(len(ep), n_slots, seed, ep, pol, K, spec.names)
    if isinstance(stop, RaceStop):
        ledger.dropped[[e.policy for e in stop.race.eliminations]] = True
    return ledger


def build_stop_rule(spec: EvalSpec, cap: int, earlier: EarlierSegments | None, min_feed: int,
                    announce: Callable[[str], None] | None = None) -> StopWhen | RaceStop | None:
    """The spec's ``stop_when`` as a run's :class:`StopWhen`, or a race's :class:`RaceStop` (a many-policy
    run), fed the earlier segments' episodes; ``None`` without a rule. ``min_feed``: rows the prefix gate
    gathers before it feeds the rule (it changes no decision, only how often the rule is read)."""
    if spec.stop_when is None:
        return None
    if spec.n_policies > 1:
        rule = spec.race_rule
        bounds, source = spec.metric_bounds(rule.metric)
        race = RaceStop(rule, spec.names, spec.confidence, bounds, cap=cap, min_feed=min_feed, announce=announce,
                        bounds_source=source)
        if earlier is not None:
            race.prime(earlier.records, earlier.n_cancelled)
        return race
    stop = StopWhen(spec.stop_when, spec.confidence, spec.return_bounds, cap=cap, min_feed=min_feed,
                    design=spec.design)
    if earlier is not None:
        stop.prime(earlier.records, earlier.n_cancelled)
    return stop


def action_host_dtype(space: gym.Space) -> np.dtype:
    return np.dtype(np.int64) if isinstance(space, gym.spaces.Discrete) else np.dtype(space.dtype)


class CoreEngine:
    """Envs, policy, buffers and kernel for one spec. Use :meth:`run`; call :meth:`close` at the end.

    ``parts`` supplies the policy side and the observers (see :class:`EngineParts`); the doors use
    :class:`fasteval.run.engine.Engine`, which passes fasteval's own.
    """

    def __init__(self, spec: EvalSpec, parts: EngineParts, n_slots: int | None = None, pin_memory: bool = True):
        built = perf_counter()
        self.spec = spec
        self.parts = parts
        self.pin_memory = pin_memory
        self.n_slots = n_slots or spec.n_slots
        check_fits_in_memory(spec.n_episodes)  # before any env is built: exit 2 with the figures
        self.watchdog = Watchdog()
        """Deadlines for the policy (``policy_timeout_s``) and sync envs (``step_timeout``); a door may set
        ``watchdog.on_expire`` (the durable run flushes its records and marks its folder ``failed``)."""
        factory, probe, cap = make_factory(spec.env, spec.env_kwargs, spec.max_steps, spec.trust_remote_code,
                                           kinds=parts.env_kinds)
        self.factory = factory
        self.max_steps = cap
        self.envs: SlotEnvs = build_slot_envs(spec.vectorization, factory, self.n_slots, probe, spec.step_timeout,
                                              workers=spec.workers,
                                              watchdog=self.watchdog)
        self.n_slots = self.envs.n_slots  # a batched env may have fewer workers than slots asked for
        try:
            self._build_policy_side(spec)
        except BaseException:
            self.envs.close()
            raise
        self.timers = make_stage_timers(self.device)
        self.setup_s = perf_counter() - built
        """Seconds this engine took to build its envs (env workers started), load the policy and build its runner;
        not in ``eval_s``. The first run's facts report it (``meta["setup_s"]``), later runs of the engine 0."""
        self._checked = False
        self.dry_run_s = 0.0
        """Seconds the dry run took in the current run (only the first run has one); not in ``eval_s``."""
        self.capture_s = 0.0
        """Seconds the current run spent capturing CUDA graphs (warm-ups included) and in torch.compile's
        first calls (:data:`fasteval.core.accel.capture_clock`); not in ``eval_s`` nor in the ``policy`` stage."""
        self.runs = 0
        self.unread_observations = "off (not run yet)"
        """Whether the run in progress (or the last one) skips unread observations' work: ``on`` or ``off (why)``
        (:func:`fasteval.core.unread.skip_decision`; ``meta["unread_observations"]``)."""
        self.ledger: Ledger | None = None
        """The ledger of the run in progress (or the last one)."""
        self.stop_rule: StopWhen | RaceStop | None = None
        """The stop rule (or race) of the run in progress (or the last one)."""
        self.announce: Callable[[str], None] | None = None
        """Where a race tells its eliminations and its end as they happen (the CLI sets it to stderr)."""

    def _build_policy_side(self, spec: EvalSpec) -> None:
        envs = self.envs
        if str(spec.device).startswith("cuda") and spec.policy_block != WHOLE_BATCH:
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)  # before the first cuBLAS handle
        specs = [spec.for_policy(k) for k in range(spec.n_policies)]
        loaded = [self.parts.load_policy(one, envs, self.n_slots) for one in specs]
        self.device = resolve_device(spec.device, loaded[0])
        for k, one in enumerate(specs):
            if isinstance(one.policy, str) and isinstance(loaded[k], nn.Module):
                loaded[k] = loaded[k].to(self.device).eval()
        self.policies = loaded
        """The run's policies, in the spec's order (one for a one-policy run)."""
        self.policy = loaded[0] if len(loaded) == 1 else tuple(loaded)
        """The policy (a one-policy run), or the tuple of them (a many-policy run)."""
        self.group_rows = group_rows(envs, spec.pipeline)
        """The slot groups of the step sequence: one, or two with ``pipeline``."""
        self.policy_batch = policy_batch(self.group_rows)
        """Rows per policy call: all slots, or the larger group's with ``pipeline``."""
        if pins_host(self.device, self.pin_memory):  # only now: pinning creates a CUDA context
            envs.pin_host_buffers()
        # The copy path follows what the owner of the host buffers knows (never tensor.is_pinned()).
        self.h2d = HostToDevice(envs.obs, self.device, self.pin_memory, host_pinned=envs.pinned)
        # A PolicyRunner plus the robot steps (obs mapping, normalization stats, task descriptions, action chunks).
        runners = [self.parts.build_runner(p, one, envs, self.h2d, self.policy_batch) for p, one in zip(loaded, specs)]
        self.runner = runners[0] if len(runners) == 1 else PolicySet(runners, spec.names)
        self.d2h = DeviceToHost(self.n_slots, tuple(envs.action_space.shape or ()), action_host_dtype(envs.action_space),
                                self.device, self.pin_memory)
        self.check_actions = make_action_check(action_host_dtype(envs.action_space), envs.action_space)
        if spec.pipeline:
            check_pipelinable(envs, self.runner, self.n_slots, spec.batch_size)
        self.accel_facts: dict[str, Any] = {}
        self.policy_accel_facts: list[dict[str, Any]] = []
        self.stacked_accel_facts: dict[str, Any] = {}

    @property
    def observation_space(self) -> gym.Space:
        return self.envs.observation_space

    @property
    def action_space(self) -> gym.Space:
        return self.envs.action_space

    def _dry_run(self) -> None:
        """Check the policy once on the first observations (before the first run's episodes), choose
        its output mapping and accelerators. Its duration is kept out of ``eval_s`` (``meta["dry_run_s"]``)."""
        started = perf_counter()
        self._check_policy()
        self.dry_run_s = perf_counter() - started

    def _policy_deadline(self) -> float | None:
        """The watchdog's deadline for a policy call: ``policy_timeout_s``, unless the runner applies it itself."""
        return None if self.runner.capabilities.enforces_policy_timeout else self.spec.policy_timeout_s

    def _check_policy(self) -> None:
        policy_input, copy = self.h2d.group(slice(0, self.policy_batch))
        copy()
        guard = self.watchdog.guard(self._policy_deadline(), POLICY, "the policy's dry run")
        spec = self.spec
        runners = self.runner.runners if isinstance(self.runner, PolicySet) else [self.runner]
        facts = []
        for runner, policy in zip(runners, self.policies):
            step, accel_facts = dry_run_and_accelerate(
                runner, policy, policy_input, self.device, amp=spec.amp, compile=spec.compile,
                cuda_graph=spec.cuda_graph, guard=lambda: self.watchdog.armed(guard))
            runner.use_step(step)
            facts.append(accel_facts)
        self.accel_facts = facts[0]
        self.policy_accel_facts = facts
        """Each policy's accelerator facts (a many-policy run's per-policy records carry their own)."""
        if isinstance(self.runner, PolicySet):
            self.runner.stack(spec.stack_weights, self._accelerate_stacked, policy_input)
        self._checked = True

    def _accelerate_stacked(self, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """A stacked-weights call wrapped as a policy step is (autocast, compile, CUDA graph). The capture
        decision is the one function's, for a call with no per-slot state (only functional policies are
        stacked: :func:`fasteval.core.policy_set.stack_decision`), on the first checkpoint's module."""
        decision = accel.capture_decision(Capabilities(), self.policies[0], self.spec.cuda_graph, self.device)
        step, facts = accel.accelerate(fn, device=self.device, amp=self.spec.amp, compile=self.spec.compile,
                                       decision=decision)
        self.stacked_accel_facts = facts
        return step

    def run_segment(
        self,
        n_episodes: int | None = None,
        seed: int | None = None,
        on_finished: Callable[[Ledger, np.ndarray], None] | None = None,
        episodes: Sequence[int] | None = None,
        on_error: Callable[[dict[str, Any]], None] | None = None,
        observer: StepObserver | None = None,
        earlier: EarlierSegments | None = None,
    ) -> Segment:
        """Run episodes ``0..n-1`` with seeds ``seed + i``; hand up what the run made (a :class:`Segment`).

        ``episodes`` restricts the run to those episode indices (a resumed run passes the
        missing ones); they get the same numbers they would have in a full run. ``on_finished(ledger,
        rows)`` is called as episodes finish, with ledger rows (``ledger.episode_ids[rows]`` are the episode
        indices); rows are final. Global torch/numpy/python RNG states are restored afterwards; torch is
        seeded with ``seed`` inside the run so stochastic policies are reproducible. ``earlier`` (a resumed
        run): the records of its earlier segments, which the stop rule is fed first.

        Raises :class:`SegmentAborted` (its ``segment`` holds every episode finished before the stop) when
        the run stops early, :class:`UserInputError` when the input is bad before any episode finished (the
        dry run failed: nothing was evaluated). The
        record of the run is built above core, from the segment (:mod:`fasteval.run.record`).
        """
        cap = self.spec.n_episodes if episodes is not None else n_episodes
        pairs = pairs_of(episodes) if self.spec.n_policies > 1 and episodes is not None else None
        if pairs is not None:
            episodes = sorted({i for _, i in pairs})
        n, seed, episodes = self._plan(n_episodes, seed, episodes)
        cap = n if cap is None else int(cap)
        stop = self._stop_rule(cap, earlier)
        self.stop_rule = stop
        if self.spec.n_policies > 1:
            ledger = self._many_policy_ledger(n, seed, episodes, pairs, stop)
        else:
            if stop is not None and stop.fired:
                n, episodes = 0, []  # the rule held on the earlier segments: the run stays stopped
            ledger = Ledger(n, self.n_slots, seed, episodes)
        n = ledger.n_episodes
        self.ledger = ledger
        if isinstance(self.runner, PolicySet):
            self.runner.refresh()
        if n == 0:
            return self._segment(ledger, [], 0.0, cap, stop=stop)
        observer = self.parts.attach_observers(self, ledger, observer)  # videos / episode data when the spec asks
        callback = self._finished_callback(ledger, on_finished, stop)
        faults = Faults(self.envs, self.runner, ledger, self.spec.retries, self.spec.on_nan_action, on_error)
        self.check_actions.new_run()
        self.timers.reset()
        self.dry_run_s = self.capture_s = 0.0
        self.envs.start_run(seed)  # a batched env seeds itself once per run (envs.seeding)
        start, captured = perf_counter(), accel.capture_clock.seconds
        try:
            with self._seeded(seed):
                self._step_episodes(ledger, faults, callback, observer)
        except UserInputError as exc:
            if not ledger.finished.any() and not faults.errors:
                raise  # the dry run (or the first steps): nothing was evaluated, nothing is lost
            self.watchdog.disarm()  # bad input met mid-run (frames a video cannot take): keep what finished
            partial = self._segment(ledger, faults.errors, self._eval_seconds(start, captured), cap, stop, exc,
                                    observer)
            raise SegmentAborted(partial) from exc
        except BaseException as exc:
            self.watchdog.disarm()  # a call that raised left its deadline armed
            partial = self._segment(ledger, faults.errors, self._eval_seconds(start, captured), cap, stop, exc,
                                    observer)
            raise SegmentAborted(partial) from exc
        finally:
            self.watchdog.disarm()
        self.runs += 1
        return self._segment(ledger, faults.errors, self._eval_seconds(start, captured), cap, stop, None, observer)

    def _many_policy_ledger(self, n: int, seed: int, episodes: list[int] | None,
                            pairs: list[tuple[int, int]] | None, stop: Any) -> Ledger:
        return many_policy_ledger(self.spec, self.n_slots, n, seed, episodes, pairs, stop)

    def _stop_rule(self, cap: int, earlier: EarlierSegments | None) -> StopWhen | RaceStop | None:
        # the prefix reaches the rule a quarter batch at a time: k is the same, the cost per step is bounded
        return build_stop_rule(self.spec, cap, earlier, max(1, self.n_slots // 4), self.announce)

    def _finished_callback(self, ledger: Ledger, on_finished: Callable[[Ledger, np.ndarray], None] | None,
                           stop: StopWhen | None) -> Callable[[np.ndarray], None]:
        """The loop's ``on_finished``: the caller's (the run log first: nothing computed is lost), then the rule's.
        The rows go up with the envs' success signal as it stands (``ledger.success_signal``): what a
        record of them says."""
        envs = self.envs
        if on_finished is None and stop is None:
            return lambda done: None

        def finished(done: np.ndarray) -> None:
            ledger.success_signal = envs.has_success_signal
            if on_finished is not None:
                on_finished(ledger, done)
            if stop is not None:
                stop.on_finished(ledger, done)
        return finished

    def _eval_seconds(self, start: float, captured: float) -> float:
        """Seconds since ``start`` less what is timed apart: the dry run (``dry_run_s``), and graph capture
        and compilation (``capture_s``: the :data:`~fasteval.core.accel.capture_clock` since it read
        ``captured``), which also leave the ``policy`` stage they happened in."""
        self.capture_s = accel.capture_clock.seconds - captured
        self.timers.take_out("policy", self.capture_s)
        return perf_counter() - start - self.dry_run_s - self.capture_s

    def _plan(self, n_episodes: int | None, seed: int | None,
              episodes: Sequence[int] | None) -> tuple[int, int, list[int] | None]:
        """``(n, seed, episodes)`` of a run, from its arguments and the spec; bad values raise :class:`UserInputError`."""
        n = self.spec.n_episodes if n_episodes is None else int(n_episodes)
        seed = self.spec.seed if seed is None else int(seed)
        if episodes is not None:
            episodes = sorted({int(e) for e in episodes})
            if any(e < 0 for e in episodes):
                raise UserInputError(f"episodes: expected indices >= 0, got {episodes[:5]}...")
            n = len(episodes)
        if seed < 0 or (n < 1 and episodes is None):
            raise UserInputError(f"n_episodes must be >= 1 and seed >= 0; got n_episodes={n}, seed={seed}.")
        return n, seed, episodes

    @contextlib.contextmanager
    def _seeded(self, seed: int) -> Iterator[None]:
        """The run's RNG and threads: torch seeded with ``seed`` inside a fork (restored after), numpy's and
        Python's global states restored, the spec's CPU threads for a CPU policy; inference mode."""
        np_state, py_state = np.random.get_state(), random.getstate()
        devices = [self.device] if self.device.type == "cuda" else []
        threads = torch.get_num_threads()
        if self.device.type == "cpu" and self.spec.cpu_threads is not None:
            torch.set_num_threads(self.spec.cpu_threads)
        try:
            with torch.random.fork_rng(devices=devices), torch.inference_mode(), \
                    deterministic_kernels(self.device, self.spec.policy_block != WHOLE_BATCH):
                # Seed only what fork_rng restores: torch.manual_seed would also reseed every CUDA device.
                torch.default_generator.manual_seed(seed)
                if self.device.type == "cuda":
                    with torch.cuda.device(self.device):
                        torch.cuda.manual_seed(seed)
                yield
        finally:
            np.random.set_state(np_state)
            random.setstate(py_state)
            torch.set_num_threads(threads)

    def _step_episodes(self, ledger: Ledger, faults: Faults, callback: Callable[[np.ndarray], None],
                       observer: StepObserver | None) -> None:
        """The first wave of resets (with the dry run on the engine's first run), then the step sequence."""
        start_wave(self.envs, self.runner, ledger, self.timers,
                   before_policy_reset=None if self._checked else self._dry_run)
        reader = observer if reads_observations(observer) else None  # videos replayed later read no observation
        self.unread_observations = skip_decision(self.runner.capabilities, reader, self.envs)
        ctx = StepContext(
            envs=self.envs, runner=self.runner, h2d=self.h2d, d2h=self.d2h, ledger=ledger, faults=faults,
            timers=self.timers, step_bookkeeping=kernels.step_bookkeeping, max_steps=self.max_steps or 0,
            check_actions=self.check_actions, on_finished=callback, observer=observer,
            watchdog=self.watchdog, policy_guard=self.watchdog.guard(self._policy_deadline(), POLICY, "the policy"),
            skip_unread=self.unread_observations == UNREAD_ON,
        )
        run_episodes(ctx, self.group_rows)

    def stop_starting(self) -> None:
        """Graceful stop: in-flight episodes finish, no new ones start (safe in a signal handler)."""
        if self.ledger is not None:
            self.ledger.stop_starting()

    def _segment(self, ledger: Ledger, errors: Sequence[dict[str, Any]], eval_s: float, cap: int,
                 stop: StopWhen | None = None, error: BaseException | None = None,
                 observer: StepObserver | None = None) -> Segment:
        """The run handed up: the ledger (its finished rows final), the faults, the stop rule finished, the
        recorders closed, and the facts only the engine knows."""
        if stop is not None:
            try:
                stop.finish(ledger)
            except StopRuleError as exc:  # a return outside --return-bounds: the run's error
                error = error or exc
        outputs = self.parts.finish_observers(observer) if observer is not None else None
        eval_s += self.timers.seconds["encode"]  # the wait for the videos' encoder after the last episode: engine time too
        facts = {**self._facts(ledger), **((outputs or {}).get(OBSERVER_FACTS) or {})}
        return Segment(ledger=ledger, errors=tuple(errors), eval_s=eval_s, timings=self.timers.as_dict(),
                       facts=facts, success_signal=self._success_signal(), stop=stop, cap=cap,
                       error=error, outputs=outputs or {})

    def _success_signal(self) -> bool:
        """Whether the envs have reported ``info["is_success"]`` so far (the env layer's ``has_success_signal``)."""
        return bool(self.envs.has_success_signal)

    def _facts(self, ledger: Ledger) -> dict[str, Any]:
        """What the engine alone knows of a run (the spec's own facts are the run layer's to add)."""
        cpu = self.device.type == "cpu" and self.spec.cpu_threads is not None
        return {
            "seed": ledger.seed,
            "seeding": self.envs.seeding,
            "batch_size": self.n_slots,
            "device": str(self.device),
            "max_steps": self.max_steps,
            "batching": "continuous" if self.runner.capabilities.continuous else "wave",
            "kernel_backend": kernels.BACKEND,
            "setup_s": self.setup_s if self.runs <= 1 else 0.0,
            "dry_run_s": self.dry_run_s,
            "capture_s": self.capture_s,
            "unread_observations": self.unread_observations,
            **({"gl_renderers": dict(self.envs.renderers)} if self.envs.renderers else {}),
            **{f"policy_{k}": v for k, v in self.accel_facts.items()},
            **self._policy_facts(),
            **self._many_policy_facts(),
            **self._env_facts(),
            **self._policy_call_facts(),
            "has_success_signal": self._success_signal(),
            "n_out_of_range_actions": self.check_actions.out_of_range,
            # the intra-op threads the run used (run() sets them for CPU policies, then restores them)
            "torch_threads": int(self.spec.cpu_threads) if cpu else torch.get_num_threads(),
        }

    def _policy_call_facts(self) -> dict[str, Any]:
        """How the policy was called and what that guarantees (:mod:`fasteval.core.policy_blocks`):
        ``policy_block`` (R, 0 for the whole batch), ``policy_call`` and ``guarantee``."""
        return self.policy_call().facts()

    def policy_call(self) -> PolicyCall:
        """The one record of how this engine calls its policies: every runner's call (a many-policy run states the
        first that is not of a fixed shape, else their common one), the threads, the device, and the guarantee."""
        runners = self.runner.runners if isinstance(self.runner, PolicySet) else [self.runner]
        calls = [r.policy_call for r in runners]
        status = next((c for c in calls if not fixed_shape(c)), calls[0])
        cpu = self.device.type == "cpu" and self.spec.cpu_threads is not None
        threads = int(self.spec.cpu_threads) if cpu else torch.get_num_threads()
        global_rng = any(run_meta_of(p).get("policy_rng") == "global" for p in self.policies)
        stacked = isinstance(self.runner, PolicySet) and self.runner.stacked is not None
        text = guarantee(status, device=self.device, threads=threads, amp=self.spec.amp, compile=self.spec.compile,
                         global_rng=global_rng, stacked=stacked, env_rounding=self._env_facts().get("env_rounding"))
        return PolicyCall(block=self.spec.policy_block, status=status + ("; stacked weights (vmap)" if stacked else ""),
                          guarantee=text, threads=threads, device=str(self.device))

    def _many_policy_facts(self) -> dict[str, Any]:
        """A many-policy run: how the policies were called (``policy_calls``: separate calls, or one stacked
        call, and why), and each policy's own facts (``per_policy``: its accelerators, its ``run_meta``)."""
        if not isinstance(self.runner, PolicySet):
            return {}
        per_policy = []
        for k, policy in enumerate(self.policies):
            accel_facts = self.policy_accel_facts[k] if k < len(self.policy_accel_facts) else {}
            per_policy.append({**{f"policy_{key}": v for key, v in accel_facts.items()}, **run_meta_of(policy)})
        facts: dict[str, Any] = {"n_policies": len(self.policies), "policy_calls": self.runner.policy_calls,
                                 "per_policy": per_policy}
        if self.runner.stacked is not None:
            facts.update({f"policy_{key}": v for key, v in self.stacked_accel_facts.items()})
        return facts

    def _env_facts(self) -> dict[str, Any]:
        """Facts the parts report about the env (``env_meta(spec) -> dict``): which implementation ran."""
        return dict(self.parts.env_meta(self.spec))

    def _policy_facts(self) -> dict[str, Any]:
        """Facts the policy reports about itself (``run_meta() -> dict``, optional: :class:`ReportsRunMeta`): for
        example where a stochastic policy's noise comes from, and so whether its results depend on the batch size."""
        return run_meta_of(self.policy)

    def close(self) -> None:
        self.watchdog.close()
        self.envs.close()

    def __enter__(self) -> "CoreEngine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
