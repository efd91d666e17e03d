"""The engine every door uses: the core engine with fasteval's own policy side and observers.

:class:`fasteval.core.engine.CoreEngine` runs envs, ledger, transfers and the step sequence; it
does not know how policies are loaded or what a video is. This module composes the pieces of
the layer above core and hands them to it:

* policy loading (:func:`fasteval.robot.policies.loaders.load_policy`: built-ins, checkpoints, the Hub,
  ``module:callable`` refs, live modules);
* the policy runner with the robot steps (:func:`fasteval.robot.policies.runner.build_policy_runner`:
  observation mapping, normalization, chunk queues, task descriptions);
* the recorders (:mod:`fasteval.robot.recording`: videos, episode data);
* the env kinds (:mod:`fasteval.robot.env_kinds`: plugin namespaces, headless rendering, and envs beyond
  gymnasium through :func:`fasteval.robot.torchrl.envs.adapt_env`: TorchRL envs, live or by constructor,
  single or batched).
"""

from __future__ import annotations

from typing import Any

from fasteval.core.engine import CoreEngine
from fasteval.core.protocols import StepObserver
from fasteval.robot.env_kinds import ENV_KINDS
from fasteval.robot.env_names import task_names
from fasteval.robot.fast_envs import env_note
from fasteval.robot.policies.loaders import load_policy
from fasteval.robot.policies.runner import build_policy_runner
from fasteval.robot.recording import attach_recorders, finish_recorders
from fasteval.types.spec import EvalSpec, env_label


class FastevalParts:
    """fasteval's :class:`~fasteval.core.protocols.EngineParts`."""

    env_kinds = ENV_KINDS
    """Plugin namespaces, MuJoCo's headless rendering, render-mode refusals (:mod:`fasteval.robot.env_kinds`)."""

    def load_policy(self, spec: EvalSpec, envs: Any, n_slots: int) -> Any:
        return load_policy(spec.policy, envs.observation_space, envs.action_space, n_slots, spec.trust_remote_code,
                           device=spec.device, env=spec.env, env_kwargs=dict(spec.env_kwargs),
                           cuda_graph=spec.cuda_graph, rename=dict(spec.rename),
                           noise=spec.noise, exploration=spec.exploration)

    def build_runner(self, policy: Any, spec: EvalSpec, envs: Any, h2d: Any, policy_batch: int) -> Any:
        return build_policy_runner(policy, spec, envs, h2d, policy_batch)

    def attach_observers(self, engine: Any, ledger: Any, observer: StepObserver | None) -> StepObserver | None:
        return attach_recorders(engine, ledger, observer)

    def finish_observers(self, observer: StepObserver | None, result: Any) -> None:
        finish_recorders(observer, result)

    def task_names(self, spec: EvalSpec) -> tuple[str, str]:
        if not isinstance(spec.env, str):  # a live env object or factory
            return env_label(spec.env), env_label(spec.env)
        return task_names(spec.env, spec.env_kwargs)

    def env_meta(self, spec: EvalSpec) -> dict[str, Any]:
        note = env_note(spec.env) if isinstance(spec.env, str) else None
        return {"env_note": note} if note else {}


PARTS = FastevalParts()


class Engine(CoreEngine):
    """:class:`CoreEngine` with fasteval's own parts: ``Engine(spec)``, then :meth:`run` (see there)."""

    def __init__(self, spec: EvalSpec, n_slots: int | None = None, pin_memory: bool = True,
                 parts: Any = PARTS):
        super().__init__(spec, parts, n_slots=n_slots, pin_memory=pin_memory)
