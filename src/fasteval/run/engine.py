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
  single or batched);

and builds the one record of each run from what the core engine hands up (:mod:`fasteval.run.record`).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from fasteval.core.engine import CoreEngine
from fasteval.core.ledger import Ledger
from fasteval.core.outcome import SegmentAborted
from fasteval.core.protocols import StepObserver
from fasteval.robot.env_kinds import ENV_KINDS
from fasteval.robot.lerobot.envs import ENV_REF as LEROBOT_ENV_REF
from fasteval.robot.reproducible import physics_rounding
from fasteval.robot.fast_envs import env_note
from fasteval.robot.policies.loaders import load_policy
from fasteval.robot.policies.runner import build_policy_runner
from fasteval.robot.recording import attach_recorders, finish_recorders
from fasteval.run.record import Label
from fasteval.run.record_many import build_run_record
from fasteval.types.errors import EvaluationAborted
from fasteval.types.results import EarlierSegments, EvalResult
from fasteval.types.spec import EvalSpec


class FastevalParts:
    """fasteval's :class:`~fasteval.core.protocols.EngineParts`."""

    env_kinds = ENV_KINDS
    """Plugin namespaces, MuJoCo's headless rendering, render-mode refusals (:mod:`fasteval.robot.env_kinds`)."""

    def load_policy(self, spec: EvalSpec, envs: Any, n_slots: int) -> Any:
        return load_policy(spec.policy, envs.observation_space, envs.action_space, n_slots, spec.trust_remote_code,
                           device=spec.device, env=spec.env, env_kwargs=dict(spec.env_kwargs),
                           cuda_graph=spec.cuda_graph, rename=dict(spec.rename),
                           noise=spec.noise, exploration=spec.exploration,
                           policy_overrides=dict(spec.policy_overrides))

    def build_runner(self, policy: Any, spec: EvalSpec, envs: Any, h2d: Any, policy_batch: int) -> Any:
        return build_policy_runner(policy, spec, envs, h2d, policy_batch)

    def attach_observers(self, engine: Any, ledger: Any, observer: StepObserver | None) -> StepObserver | None:
        return attach_recorders(engine, ledger, observer)

    def finish_observers(self, observer: StepObserver | None) -> dict[str, Any]:
        return finish_recorders(observer)

    def env_meta(self, spec: EvalSpec) -> dict[str, Any]:
        note = env_note(spec.env) if isinstance(spec.env, str) else None
        facts: dict[str, Any] = {"env_note": note} if note else {}
        rounding = physics_rounding(spec.env, spec.env_kwargs)  # an env not bit-reproducible by itself
        if rounding:
            facts["env_rounding"] = rounding
        if spec.env == LEROBOT_ENV_REF:  # LeRobot's env types: LIBERO's protocol card (meta["protocol"])
            from fasteval.robot.env_kinds.model_reuse import reuse_decision
            from fasteval.robot.lerobot.libero import is_libero_type
            from fasteval.robot.lerobot.libero_protocol import env_meta

            facts.update(env_meta(spec.env, dict(spec.env_kwargs), spec.max_steps))
            reuse = reuse_decision(is_libero_type(dict(spec.env_kwargs).get("type")))
            if reuse is not None:  # LIBERO's hard reset: the compiled model reused, or why not
                facts["reset_reuse"] = reuse
        return facts


PARTS = FastevalParts()


class Engine(CoreEngine):
    """:class:`CoreEngine` with fasteval's own parts: ``Engine(spec)``, then :meth:`run` (see there)."""

    def __init__(self, spec: EvalSpec, n_slots: int | None = None, pin_memory: bool = True,
                 parts: Any = PARTS):
        super().__init__(spec, parts, n_slots=n_slots, pin_memory=pin_memory)

    def _env_facts(self) -> dict[str, Any]:
        """The parts' env facts; an env's protocol card (LIBERO's) also gets the GL renderer of every process that
        hosts the run's envs (``gl_renderers``: the main process, or each env worker of a pool), and the warning of a
        software renderer on a machine with a GPU where one of them has it and the card's own probe did not."""
        facts = super()._env_facts()
        card = facts.get("protocol")
        if isinstance(card, dict) and self.envs.renderers:
            from fasteval.robot.lerobot.libero_protocol import with_renderers

            facts["protocol"] = with_renderers(card, self.envs.renderers)
        return facts

    def identity_facts(self) -> dict[str, Any]:
        """What a run folder's manifest holds besides the spec and a resume must match: the policy's weight
        digest and the step cap the env resolved to; and, where the env has one, its protocol card (LIBERO's:
        :mod:`fasteval.robot.lerobot.libero_protocol`), recorded, not compared (a resume on another machine may
        render with another GL renderer). A Ray run's driver asks a worker for these
        (:class:`fasteval.run.ray_engine.RayEngine`)."""
        from fasteval.run.rundir import policy_digest

        spec = self.spec
        digests = {}
        if isinstance(spec.policy, tuple):  # a many-policy run: each policy's own digest too, by its name
            digests = {"policy_digests": {name: policy_digest(one, ref)
                                          for name, one, ref in zip(spec.names, self.policy, spec.policy)}}
        return {"policy_digest": policy_digest(self.policy, spec.policy), **digests, "max_steps": self.max_steps,
                **{k: v for k, v in self._env_facts().items() if k == "protocol"}}

    def run(
        self,
        n_episodes: int | None = None,
        seed: int | None = None,
        on_finished: Callable[[Ledger, np.ndarray], None] | None = None,
        episodes: Sequence[int] | None = None,
        on_error: Callable[[dict[str, Any]], None] | None = None,
        observer: StepObserver | None = None,
        earlier: EarlierSegments | None = None,
        task: Label | None = None,
    ) -> EvalResult:
        """Run episodes ``0..n-1`` with seeds ``seed + i`` (see :meth:`CoreEngine.run_segment` for the
        arguments) and return the run's record (:func:`fasteval.run.record_many.build_run_record`; ``task``: the
        label its records carry, a suite's task). A run that stops early raises
        :class:`~fasteval.types.errors.EvaluationAborted`, whose ``partial`` is the record of every episode
        that finished before the stop."""
        try:
            segment = self.run_segment(n_episodes, seed, on_finished, episodes, on_error, observer, earlier)
        except SegmentAborted as exc:
            segment = exc.segment
        record = build_run_record(self.spec, segment, earlier=earlier, task=task)
        if segment.error is not None:
            raise EvaluationAborted(
                f"evaluation stopped early after {len(record.per_episode)} finished episodes: "
                f"{type(segment.error).__name__}: {segment.error}", record) from segment.error
        return record
