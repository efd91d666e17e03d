"""The engine: built once from an :class:`~fasteval.spec.EvalSpec`, run many times.

Building resolves and validates everything (env, spaces, policy, device, buffers,
kernel backend); :meth:`Engine.run` then runs a ledger of episodes through the hot
loop and returns an :class:`~fasteval.results.EvalResult`. Every door (CLI, library
API, bench, sweeps) goes through this class.
"""

from __future__ import annotations

import logging
import random
from time import perf_counter
from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np
import torch
from torch import nn

import fasteval
from fasteval import kernels
from fasteval.core.envs import SlotEnvs, build_slot_envs, make_factory
from fasteval.core.faults import Faults, make_action_check
from fasteval.core.ledger import Ledger
from fasteval.core.loop import StepObserver, run_episodes, start_wave
from fasteval.core.accel import accelerate
from fasteval.core.pipeline import check_pipelinable, run_episodes_pipelined
from fasteval.core.policy import NO_RESET
from fasteval.core.timing import StageTimers
from fasteval.core.transfer import DeviceToHost, HostToDevice
from fasteval.errors import EvaluationAborted, UserInputError
from fasteval.policies.chunking import build_policy_runner
from fasteval.policies.loaders import load_policy
from fasteval.recording import attach_recorders, finish_recorders
from fasteval.results import EvalResult
from fasteval.spec import EvalSpec

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


def action_host_dtype(space: gym.Space) -> np.dtype:
    return np.dtype(np.int64) if isinstance(space, gym.spaces.Discrete) else np.dtype(space.dtype)


class Engine:
    """Envs, policy, buffers and kernel for one spec. Use :meth:`run`; call :meth:`close` at the end."""

    def __init__(self, spec: EvalSpec, n_slots: int | None = None, pin_memory: bool = True):
        self.spec = spec
        self.pin_memory = pin_memory
        self.n_slots = n_slots or spec.n_slots
        factory, probe, cap = make_factory(spec.env, spec.env_kwargs, spec.max_steps)
        self.factory = factory
        self.max_steps = cap
        self.envs: SlotEnvs = build_slot_envs(spec.vectorization, factory, self.n_slots, probe, spec.step_timeout)
        try:
            self._build_policy_side(spec)
        except BaseException:
            self.envs.close()
            raise
        self.timers = StageTimers()
        self._checked = False
        self.runs = 0
        self.ledger: Ledger | None = None
        """The ledger of the run in progress (or the last one)."""

    def _build_policy_side(self, spec: EvalSpec) -> None:
        envs = self.envs
        loaded_here = isinstance(spec.policy, str)
        policy = load_policy(spec.policy, envs.observation_space, envs.action_space, self.n_slots, spec.trust_remote_code)
        self.device = resolve_device(spec.device, policy)
        if loaded_here and isinstance(policy, nn.Module):
            policy = policy.to(self.device).eval()
        self.policy = policy
        self.policy_batch = (self.n_slots + 1) // 2 if spec.pipeline else self.n_slots
        """Rows per policy call: all slots, or one group's with ``pipeline``."""
        self.h2d = HostToDevice(envs.obs, self.device, self.pin_memory)
        # A PolicyRunner plus the robot steps (obs mapping, normalization stats, task descriptions, action chunks).
        self.runner = build_policy_runner(policy, spec, envs, self.h2d, self.policy_batch)
        self.d2h = DeviceToHost(self.n_slots, tuple(envs.action_space.shape or ()), action_host_dtype(envs.action_space), self.device)
        self.check_actions = make_action_check(action_host_dtype(envs.action_space))
        if spec.pipeline:
            check_pipelinable(envs, self.runner, self.n_slots)
        self.accel_facts: dict[str, Any] = {}

    @property
    def observation_space(self) -> gym.Space:
        return self.envs.observation_space

    @property
    def action_space(self) -> gym.Space:
        return self.envs.action_space

    def _dry_run(self) -> None:
        policy_input, copy = self.h2d.group(slice(0, self.policy_batch))
        copy()
        # Own RNG fork: the dry run must not consume the run's torch draws, or a stochastic
        # policy's first run (which has the dry run) would differ from later runs with the same seed.
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            self.runner.dry_run(policy_input)
        step, self.accel_facts = accelerate(
            self.runner.plain_step, device=self.device, amp=self.spec.amp, compile=self.spec.compile,
            cuda_graph=self.spec.cuda_graph, stateful=self.runner.reset_kind != NO_RESET,
        )
        self.runner.use_step(step)
        self._checked = True

    def run(
        self,
        n_episodes: int | None = None,
        seed: int | None = None,
        on_finished: Callable[[Ledger, np.ndarray], None] | None = None,
        episodes: Sequence[int] | None = None,
        on_error: Callable[[dict[str, Any]], None] | None = None,
        observer: StepObserver | None = None,
    ) -> EvalResult:
        """Run episodes ``0..n-1`` with seeds ``seed + i``; return their exact results.

        ``episodes`` restricts the run to those episode indices (a resumed run passes the
        missing ones); results then cover exactly those, with the same numbers they would
        have in a full run. ``on_finished(ledger, rows)`` is called as episodes finish, with
        ledger rows (``ledger.episode_ids[rows]`` are the episode indices); rows are final.
        Global torch/numpy/python RNG states are restored afterwards; torch is seeded with
        ``seed`` inside the run so stochastic policies are reproducible.
        """
        n = self.spec.n_episodes if n_episodes is None else int(n_episodes)
        seed = self.spec.seed if seed is None else int(seed)
        if episodes is not None:
            episodes = sorted({int(e) for e in episodes})
            if any(e < 0 for e in episodes):
                raise UserInputError(f"episodes: expected indices >= 0, got {episodes[:5]}...")
            n = len(episodes)
        if seed < 0 or (n < 1 and episodes is None):
            raise UserInputError(f"n_episodes must be >= 1 and seed >= 0; got n_episodes={n}, seed={seed}.")
        ledger = Ledger(n, self.n_slots, seed, episodes)
        self.ledger = ledger
        if n == 0:
            return EvalResult([], 0.0, self.timers.as_dict(), self._meta(0, seed))
        observer = attach_recorders(self, ledger, observer)  # videos / episode data when the spec asks for them
        callback = (lambda done: on_finished(ledger, done)) if on_finished is not None else (lambda done: None)
        faults = Faults(self.envs, self.runner, ledger, self.spec.retries, self.spec.on_nan_action, on_error)
        self.timers.reset()
        np_state, py_state = np.random.get_state(), random.getstate()
        devices = [self.device] if self.device.type == "cuda" else []
        threads = torch.get_num_threads()
        if self.device.type == "cpu" and self.spec.cpu_threads is not None:
            torch.set_num_threads(self.spec.cpu_threads)
        start = perf_counter()
        try:
            with torch.random.fork_rng(devices=devices), torch.inference_mode():
                # Seed only what fork_rng restores: torch.manual_seed would also reseed every CUDA device.
                torch.default_generator.manual_seed(seed)
                if self.device.type == "cuda":
                    with torch.cuda.device(self.device):
                        torch.cuda.manual_seed(seed)
                start_wave(self.envs, self.runner, ledger, self.timers,
                           before_policy_reset=None if self._checked else self._dry_run)
                loop = run_episodes_pipelined if self.spec.pipeline else run_episodes
                loop(
                    self.envs, self.runner, self.h2d, self.d2h, ledger, kernels.step_bookkeeping, self.timers,
                    self.max_steps or 0, callback, faults, self.check_actions, observer,
                )
        except UserInputError:
            raise  # the dry run: nothing was evaluated
        except BaseException as exc:
            partial = self._result(ledger, faults, perf_counter() - start, seed)
            partial.meta["status"] = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
            finish_recorders(observer, partial)
            raise EvaluationAborted(
                f"evaluation stopped early after {len(partial.per_episode)} finished episodes: "
                f"{type(exc).__name__}: {exc}", partial) from exc
        finally:
            np.random.set_state(np_state)
            random.setstate(py_state)
            torch.set_num_threads(threads)
        self.runs += 1
        result = self._result(ledger, faults, perf_counter() - start, seed)
        result.meta["status"] = "interrupted" if ledger.limit < ledger.n_episodes else "complete"
        finish_recorders(observer, result)
        return result

    def stop_starting(self) -> None:
        """Graceful stop: in-flight episodes finish, no new ones start (safe in a signal handler)."""
        if self.ledger is not None:
            self.ledger.stop_starting()

    def _result(self, ledger: Ledger, faults: Faults, eval_s: float, seed: int) -> EvalResult:
        result = EvalResult(self._records(ledger), eval_s, self.timers.as_dict(), self._meta(ledger.n_episodes, seed))
        result.errors = list(faults.errors)
        result.n_failed = int(ledger.failed.sum())
        return result

    def _records(self, ledger: Ledger) -> list[dict[str, Any]]:
        return [self.record(ledger, row) for row in range(ledger.n_episodes) if ledger.finished[row]]

    def record(self, ledger: Ledger, row: int) -> dict[str, Any]:
        """The per-episode record of ledger row ``row`` (final once the row is finished)."""
        episode = int(ledger.episode_ids[row])
        task = self.spec.env
        return {
            "episode_ix": episode,
            "seed": ledger.seed + episode,
            "sum_reward": float(ledger.sum_reward[row]),
            "max_reward": float(ledger.max_reward[row]),
            "length": int(ledger.length[row]),
            "success": bool(ledger.success[row]),
            "nan_rewards": int(ledger.nan_rewards[row]),
            "task_group": task,
            "task_id": 0,
            "task": task,
        }

    def _meta(self, n: int, seed: int) -> dict[str, Any]:
        return {
            "fasteval_version": fasteval.__version__,
            "env": self.spec.env,
            "env_kwargs": self.spec.env_kwargs,
            "policy": self.spec.to_dict()["policy"],
            "n_episodes": n,
            "seed": seed,
            "batch_size": self.n_slots,
            "vectorization": self.spec.vectorization,
            "device": str(self.device),
            "max_steps": self.max_steps,
            "batching": "continuous" if self.runner.continuous else "wave",
            "kernel_backend": kernels.BACKEND,
            "pipeline": self.spec.pipeline,
            **{f"policy_{k}": v for k, v in self.accel_facts.items()},
        }

    def close(self) -> None:
        self.envs.close()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
