"""Library entry points: :func:`evaluate` (one shot) and :class:`Evaluator` (build once, call many times).

Both are thin doors over :class:`~fasteval.run.engine.Engine`; the only things they add
are what a training loop needs around it:

* **mode**: an ``nn.Module`` policy is put in ``eval()`` for the evaluation and every
  submodule gets its own ``training`` flag back afterwards;
* **weights**: :meth:`Evaluator.update_weights` copies a state dict into the existing
  parameters in place (same storage, same ``data_ptr``), so nothing is rebuilt;
* **background**: :meth:`Evaluator.evaluate_async` evaluates a snapshot of the weights in a
  worker process while training goes on.

The engine itself restores the global torch, NumPy and ``random`` RNG states after a run and
runs the policy under ``torch.inference_mode()`` (no gradients, ``requires_grad`` untouched).
"""

from __future__ import annotations

import atexit
import io
import multiprocessing
import pickle
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

import torch
from torch import nn

from fasteval.core.engine import resolve_device
from fasteval.run.engine import Engine
from fasteval.types.errors import PolicyLoadError, UserInputError
from fasteval.types.results import EvalResult
from fasteval.types.spec import EvalSpec

ASYNC_START_METHOD = "spawn"
"""Start method of the :meth:`Evaluator.evaluate_async` worker (safe with threads and CUDA)."""

ASYNC_TORCH_THREADS = 1
"""Intra-op threads of torch in the async worker, so that it does not fight training for cores."""


def evaluate(spec: EvalSpec | None = None, **kwargs: Any) -> EvalResult:
    """Run one evaluation. Pass an :class:`EvalSpec`, or its fields as keyword arguments.

    Builds an engine, runs it once, closes it. To evaluate the same policy again (as in a
    training loop), use :class:`Evaluator`, which keeps the envs and buffers.

    >>> evaluate(env="CartPole-v1", policy="zero", n_episodes=10).overall()["avg_sum_reward"]  # doctest: +SKIP
    """
    kwargs = _policy_kwargs(kwargs)
    if spec is None:
        spec = EvalSpec(**kwargs)
    elif kwargs:
        spec = spec.replace(**kwargs)
    with Engine(spec) as engine, policy_eval_mode(engine.policy):
        return engine.run()


def _policy_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``policy=`` as the spec takes it: a list or tuple of policies (globs of checkpoint folders expanded), a
    dict naming them, one policy (see :mod:`fasteval.run.policy_refs`)."""
    if "policy" not in kwargs:
        return kwargs
    from fasteval.run.policy_refs import library_policy

    policy, names = library_policy(kwargs["policy"], kwargs.get("policy_names"))
    return {**kwargs, "policy": policy, **({"policy_names": names} if names is not None else {})}


@contextmanager
def policy_eval_mode(policy: Any) -> Iterator[None]:
    """``policy.eval()`` inside the block; afterwards every submodule's own ``training`` flag is back.

    A no-op for policies that are not ``nn.Module``. Flags are restored by assignment, module
    by module, so a model that was half in train mode (say, a frozen encoder kept in eval
    mode) comes back exactly as it was, even when the block raises. A tuple of policies (a
    many-policy run): every module among them.
    """
    if isinstance(policy, tuple):
        modules = [p for p in policy if isinstance(p, nn.Module)]
        policy = nn.ModuleList(modules) if modules else None
    if not isinstance(policy, nn.Module):
        yield
        return
    modes = [(module, module.training) for module in policy.modules()]
    policy.eval()
    try:
        yield
    finally:
        for module, mode in modes:
            module.training = mode


def copy_weights_(module: nn.Module, state_dict: Mapping[str, Any] | nn.Module, strict: bool = True) -> None:
    """Copy ``state_dict`` into ``module``'s parameters and buffers in place (``tensor.copy_`` under no_grad).

    Storage is reused: every ``data_ptr`` stays the same, so buffers and captured graphs that
    point at the weights stay valid. Values are cast to each target's dtype and device.
    Everything is checked before anything is copied: a mismatch raises
    :class:`~fasteval.types.errors.PolicyLoadError` naming the missing keys, the unexpected keys
    and the shape mismatches, and leaves the module untouched. ``strict=False`` allows
    missing and unexpected keys (shapes must still match).
    """
    if isinstance(state_dict, nn.Module):
        state_dict = state_dict.state_dict()
    if not isinstance(state_dict, Mapping):
        raise UserInputError(f"update_weights: expected a state dict (a mapping of names to tensors) or an nn.Module, "
                             f"got {type(state_dict).__name__}.")
    targets = {k: v for k, v in module.state_dict(keep_vars=True).items() if isinstance(v, torch.Tensor)}
    missing = sorted(set(targets) - set(state_dict)) if strict else []
    unexpected = sorted(k for k in state_dict if k not in targets) if strict else []
    not_tensors = sorted(k for k in state_dict if k in targets and not isinstance(state_dict[k], torch.Tensor))
    shapes = [
        f"{k}: got {tuple(state_dict[k].shape)}, the policy has {tuple(targets[k].shape)}"
        for k in state_dict
        if k in targets and k not in not_tensors and tuple(state_dict[k].shape) != tuple(targets[k].shape)
    ]
    if missing or unexpected or not_tensors or shapes:
        problems = []
        if missing:
            problems.append(f"missing keys {missing}")
        if unexpected:
            problems.append(f"unexpected keys {unexpected}")
        if not_tensors:
            problems.append(f"values that are not tensors for {not_tensors}")
        if shapes:
            problems.append("shape mismatches: " + "; ".join(shapes))
        raise PolicyLoadError(
            f"update_weights: the state dict does not fit the policy {type(module).__name__}: " + ", ".join(problems)
            + ". Pass the state_dict() of a module of the same architecture (strict=False ignores missing/unexpected keys)."
        )
    with torch.no_grad():
        for key, value in state_dict.items():
            if key in targets:
                targets[key].copy_(value)


def snapshot_state(module: nn.Module) -> dict[str, torch.Tensor]:
    """A private CPU copy of ``module``'s state dict (later training steps cannot change it)."""
    with torch.no_grad():
        return {
            k: (v.detach().clone() if v.device.type == "cpu" else v.detach().to("cpu"))
            for k, v in module.state_dict().items()
            if isinstance(v, torch.Tensor)
        }


class Evaluator:
    """Build the envs, buffers and policy adapter once; evaluate many times.

    ``Evaluator(env, policy, **fields)`` takes :class:`EvalSpec` fields (``env``, ``policy``,
    ``batch_size``, ``device``, ``env_kwargs``, ``vectorization``, ``max_steps``,
    ``reset_mode``, ``n_episodes``, ``seed``, ...); ``Evaluator(spec)`` takes a whole spec.
    The engine (envs, buffers, policy adapter) is built on the first :meth:`evaluate` call and
    reused by every later one: it holds ``batch_size`` env slots, whatever ``n_episodes``.

    ``policy`` may be the live module that training updates: every evaluation then uses
    its weights as they are at call time. Alternatively, load a reference once and push new
    weights with :meth:`update_weights`.

    Not thread-safe: call :meth:`evaluate` from one thread at a time. For evaluation in the
    background, use :meth:`evaluate_async`. Use as a context manager, or call :meth:`close`.
    """

    def __init__(self, env: str | EvalSpec, policy: Any = None, **spec_fields: Any):
        if policy is not None:
            spec_fields = _policy_kwargs({**spec_fields, "policy": policy})
        if isinstance(env, EvalSpec):
            self.spec = env.replace(**spec_fields) if spec_fields else env
        else:
            self.spec = EvalSpec(env=env, **{"policy": "zero", **spec_fields})
        self._engine: Engine | None = None
        self._executor: ProcessPoolExecutor | None = None
        self._template_sent = False

    @property
    def engine(self) -> Engine:
        """The engine, built on first use."""
        if self._engine is None:
            self._engine = Engine(self.spec, n_slots=self.spec.batch_size)
        return self._engine

    @property
    def policy(self) -> Any:
        """The policy object the engine calls (the live module itself if one was passed)."""
        if self.spec.n_policies > 1:
            return self.engine.policy  # the tuple of the run's policies
        return self.spec.policy if not isinstance(self.spec.policy, str) else self.engine.policy

    # -- synchronous -----------------------------------------------------------------------------
    def evaluate(self, n_episodes: int | None = None, seed: int | None = None) -> EvalResult:
        """Run ``n_episodes`` (default: the spec's) with seeds ``seed + i`` (default seed: the spec's).

        Same numbers as :func:`evaluate` with the same spec. No side effects on training:
        global RNG states are restored, the module's modes are restored, gradients are off
        inside and ``requires_grad`` flags are left alone.
        """
        engine = self.engine
        with policy_eval_mode(engine.policy):
            return engine.run(n_episodes, seed)

    def update_weights(self, state_dict: Mapping[str, Any] | nn.Module, strict: bool = True) -> None:
        """Copy ``state_dict`` into the policy's existing parameters and buffers, in place.

        No new module, no reallocation: ``data_ptr``s stay the same and the envs, buffers
        (and captured graphs) are kept. Raises :class:`~fasteval.types.errors.PolicyLoadError`
        naming missing/unexpected keys and shape mismatches (see :func:`copy_weights_`).
        If the policy is a live module you passed in, this writes into that module.
        Builds the engine first if a policy reference has not been loaded yet.
        """
        policy = self.policy
        if not isinstance(policy, nn.Module):
            raise UserInputError(
                f"update_weights needs an nn.Module policy; this Evaluator's policy is a {type(policy).__name__}. "
                f"Pass an nn.Module (or a checkpoint folder) as the policy."
            )
        copy_weights_(policy, state_dict, strict)

    # -- background ------------------------------------------------------------------------------
    def evaluate_async(self, n_episodes: int | None = None, seed: int | None = None) -> "Future[EvalResult]":
        """Start an evaluation of the weights as they are *now*, in a worker process; return its Future.

        The snapshot (a CPU copy of the module's state dict) is taken before this returns, so
        training may keep changing the live module: the result equals :meth:`evaluate` on the
        snapshot weights. Calls queue up and run one at a time, in order, in one worker process
        owned by this Evaluator (started on the first call, stopped by :meth:`close`).

        Why a process and not a thread: the engine seeds torch (``fork_rng`` +
        ``manual_seed``) and saves/restores the NumPy and ``random`` states, and all of these
        are process-global; from a background thread they would rewind or clobber the
        training thread's RNG streams, and a policy calling ``torch.rand`` would draw from
        training's generator. A thread would also share the GIL with training, and the
        evaluation loop is mostly Python. A separate process isolates RNG, GIL and train/eval
        mode completely, and gives the same numbers as :meth:`evaluate`.

        What it costs: the first call starts a ``spawn`` process (imports torch: seconds) and
        builds the envs there once; later calls reuse both. Each call copies the weights to the
        host (one device-to-host copy in the caller) and pickles them to the worker. The worker
        runs torch with ``ASYNC_TORCH_THREADS`` (1) intra-op thread and, on CUDA, holds its own
        CUDA context. The policy must be picklable: an ``nn.Module`` whose class is importable
        (defined at module level, not inside a function) — it is sent once, then only its
        weights; other live policy objects are pickled whole at every call and the worker
        builds a fresh engine for each; references (``zero``, a checkpoint folder,
        ``module:callable``) are loaded in the worker. The env must be constructible there too
        (an id registered on import, or ``module:callable``). Attributes of a live module that
        are not in its state dict are taken as they were at the first call.
        """
        if self.spec.n_policies > 1:
            raise UserInputError(f"evaluate_async evaluates one policy's weights as they are now; this Evaluator has "
                                 f"{self.spec.n_policies} policies. Use evaluate() for a many-policy run.")
        job = self._snapshot_job(n_episodes, seed)
        try:
            future = self._pool().submit(_run_job, job)
        except BrokenProcessPool:  # the worker died (a crash, an OOM kill): start a fresh one
            self._shutdown_pool(wait=False)
            job = self._snapshot_job(n_episodes, seed)
            future = self._pool().submit(_run_job, job)
        if job.template is not None:
            self._template_sent = True
        return future

    def _snapshot_job(self, n_episodes: int | None, seed: int | None) -> "_AsyncJob":
        policy = self.spec.policy
        if isinstance(policy, str):
            built = self._engine.policy if self._engine is not None else None
            state = snapshot_state(built) if isinstance(built, nn.Module) else None
            return _AsyncJob(self.spec, "ref", None, state, n_episodes, seed)
        spec = self.spec.replace(policy=None)
        if isinstance(policy, nn.Module):
            device = str(resolve_device(self.spec.device, policy))
            template = None
            if not self._template_sent or self._executor is None:
                template = _dumps(policy, torch_save=True)
            return _AsyncJob(spec.replace(device=device), "module", template, snapshot_state(policy), n_episodes, seed)
        return _AsyncJob(spec, "object", _dumps(policy, torch_save=False), None, n_episodes, seed)

    def _pool(self) -> ProcessPoolExecutor:
        if self._executor is None:
            self._template_sent = False
            self._executor = ProcessPoolExecutor(
                max_workers=1, mp_context=multiprocessing.get_context(ASYNC_START_METHOD), initializer=_worker_init,
            )
        return self._executor

    def _shutdown_pool(self, wait: bool) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=wait, cancel_futures=not wait)
            self._executor = None
            self._template_sent = False

    # -- lifetime --------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the envs and stop the async worker (waiting for evaluations already submitted)."""
        self._shutdown_pool(wait=True)
        if self._engine is not None:
            self._engine.close()
            self._engine = None

    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# -- the async worker's side ---------------------------------------------------------------------
@dataclass(frozen=True)
class _AsyncJob:
    """What crosses to the worker: the spec, the policy (once, or per call), a weight snapshot."""

    spec: EvalSpec
    kind: str  # "ref": spec.policy is a reference; "module": template + state; "object": pickled object
    template: bytes | None
    state: dict[str, torch.Tensor] | None
    n_episodes: int | None
    seed: int | None


def _dumps(policy: Any, torch_save: bool) -> bytes:
    buffer = io.BytesIO()
    try:
        if torch_save:
            torch.save(policy, buffer)
        else:
            pickle.dump(policy, buffer, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # pickling errors come as PicklingError, AttributeError, TypeError...
        raise UserInputError(
            f"evaluate_async sends the policy to a worker process, but {type(policy).__name__} cannot be pickled "
            f"({type(exc).__name__}: {exc}). Define its class at module level (importable by name), "
            f"or use evaluate() in this process."
        ) from exc
    return buffer.getvalue()


_WORKER_EVALUATOR: Evaluator | None = None
_WORKER_TEMPLATE: bytes | None = None


def _worker_init() -> None:
    torch.set_num_threads(ASYNC_TORCH_THREADS)
    atexit.register(_worker_close)


def _worker_close() -> None:
    global _WORKER_EVALUATOR
    if _WORKER_EVALUATOR is not None:
        _WORKER_EVALUATOR.close()
        _WORKER_EVALUATOR = None


def _run_job(job: _AsyncJob) -> EvalResult:
    """Runs in the worker: the same Evaluator path as a synchronous call, on the job's weights."""
    global _WORKER_EVALUATOR, _WORKER_TEMPLATE
    if job.kind == "object":
        policy = pickle.loads(job.template)
        with Evaluator(job.spec, policy=policy) as fresh:
            return fresh.evaluate(job.n_episodes, job.seed)
    if job.template is not None:
        _WORKER_TEMPLATE = job.template
    if _WORKER_EVALUATOR is None:
        if job.kind == "module":
            if _WORKER_TEMPLATE is None:
                raise RuntimeError("evaluate_async worker: no policy template received (the worker was replaced); call again.")
            module = torch.load(io.BytesIO(_WORKER_TEMPLATE), map_location=job.spec.device, weights_only=False)
            _WORKER_EVALUATOR = Evaluator(job.spec, policy=module)
        else:
            _WORKER_EVALUATOR = Evaluator(job.spec)
    if job.state is not None:
        _WORKER_EVALUATOR.update_weights(job.state)
    return _WORKER_EVALUATOR.evaluate(job.n_episodes, job.seed)
