"""The protocols core defines and the layers above implement.

Core never imports a loader, a recorder or a door. The layer above (see :mod:`fasteval.run.engine`)
composes the concrete pieces and hands them to :class:`fasteval.core.engine.CoreEngine` as one
:class:`EngineParts` object.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from fasteval.core.envs import EnvKinds, SlotEnvs
    from fasteval.core.ledger import Ledger
    from fasteval.core.policy import PolicyRunner
    from fasteval.core.transfer import HostToDevice


OBSERVER_FACTS = "facts"
"""The key of what the observers' ``finish`` returns that holds facts for the run's metadata (``{"videos": ...}``)."""


class StepObserver:
    """Extension point for per-step consumers (video frames, episode recording).

    ``on_start(slots)``: those slots just reset into new episodes (``ledger.slot_episode``
    says which); their first observations are in the env host buffer.
    ``on_step(active, actions, parked)``: the slots in ``active`` just stepped with ``actions``
    (host ``[B, ...]``, rows indexed by slot); rewards, flags and observations are in the env
    host buffers and the ledger's accumulators do not include this step yet. Slots in
    ``parked`` (a dict slot -> ledger row) did not step: their episode restarted from its seed
    (an env fault) or they were given a new episode (a bad action); their first observation is
    in the host buffer.

    An engine run without an observer makes no observer calls at all.

    ``reads_observations`` (declared by the class, True unless it says otherwise): whether the observer looks at the
    observations in the env host buffer. While one does, every observation is computed (no unread-observation
    skipping: :func:`fasteval.core.unread.skip_decision`); an observer that records only actions and outcomes (the
    video recorder when it replays its episodes after they end) declares False.
    """

    reads_observations: bool = True

    def on_start(self, slots: list[int]) -> None:
        pass

    def on_step(self, active: list[int], actions: np.ndarray, parked: dict[int, int]) -> None:
        pass


def reads_observations(observer: Any) -> bool:
    """Whether ``observer`` (a :class:`StepObserver`, any object with its methods, or ``None``) looks at the
    observations: its declared ``reads_observations``; an object that is not a :class:`StepObserver` is assumed to."""
    if observer is None:
        return False
    return observer.reads_observations if isinstance(observer, StepObserver) else True


class EngineParts(Protocol):
    """What the layer above core plugs into the engine: the env kinds, the policy side and the observers.

    * ``env_kinds``: what is done before an env is built (:class:`~fasteval.core.envs.EnvKinds`: plugin
      imports, rendering set-up, refusals);
    * ``load_policy(spec, envs, n_slots)``: the policy object (a live module, a loaded checkpoint, ...);
    * ``build_runner(policy, spec, envs, h2d, policy_batch)``: the :class:`PolicyRunner` that calls it
      (observation mapping, normalization, chunk queues, task descriptions are the runner's business);
    * ``attach_observers(engine, ledger, observer)``: the observer of one run (recorders the spec asks
      for, plus the caller's ``observer``), or ``None`` for none;
    * ``finish_observers(observer)``: close them and return what they made (``video_paths``,
      ``episode_data``, and under :data:`OBSERVER_FACTS` facts for the run's metadata), which the run's record is
      built with;
    * ``env_meta(spec)``: facts about the env for the run's metadata (``env_note``: which implementation of
      an env ran; ``{}`` for none).
    """

    env_kinds: "EnvKinds"

    def load_policy(self, spec: Any, envs: "SlotEnvs", n_slots: int) -> Any: ...

    def build_runner(self, policy: Any, spec: Any, envs: "SlotEnvs", h2d: "HostToDevice",
                     policy_batch: int) -> "PolicyRunner": ...

    def attach_observers(self, engine: Any, ledger: "Ledger", observer: StepObserver | None) -> StepObserver | None: ...

    def finish_observers(self, observer: StepObserver | None) -> dict[str, Any]: ...

    def env_meta(self, spec: Any) -> dict[str, Any]: ...
