"""What a policy runner can do, declared once: :class:`Capabilities`, and the policy protocol's optional hooks.

A runner (:class:`fasteval.core.policy.PolicyRunner` and the layers' runners above it) declares its
capabilities in one frozen :class:`Capabilities` value, ``runner.capabilities``. Core reads that value,
never an attribute of a runner by name: the engine (the watchdog's deadline), the loop (which launch it
binds), the pipeline check, the accelerators and the capture decision
(:func:`fasteval.core.accel.capture_decision`) all read it. A runner whose capabilities change on
its dry run (action chunks found) replaces the value there (``dataclasses.replace``); nothing reads it
before the dry run but the pipeline check, which reads what cannot change.

A user's policy tells what it can do by the methods it has (the policy protocol,
:mod:`fasteval.core.policy`). Each optional method is a :class:`typing.Protocol` here, checked once,
when the runner is built (``isinstance(policy, Resettable)``), so that the checker sees the contract and
a renamed hook fails in one place:

* :class:`SelectsActions`: ``select_action(obs)`` (else the policy is called: ``policy(obs)``);
* :class:`Resettable`: ``reset(env_ids[, seeds])`` or ``reset()`` (per-env or wave reset);
* :class:`ReadsObservation`: ``reads_observation(rows) -> bool`` (a step served from the policy's own queue);
* :class:`TellsObservationReads`: ``observation_reads() -> bool[B]`` (per slot: whether the next call reads the
  observation the coming env step returns; the envs then skip the work of the unread ones, :mod:`fasteval.core.unread`);
* :class:`TakesTasks`: ``set_task(env_ids, descriptions)`` (task descriptions);
* :class:`ReportsRunMeta`: ``run_meta() -> dict`` (facts for the run's metadata).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

PER_ENV, WAVE, NO_RESET = "per-env", "wave", "none"
RESET_KINDS = (PER_ENV, WAVE, NO_RESET)


@dataclass(frozen=True)
class Capabilities:
    """What a policy runner can do. Declared by the runner; read by core (see the module docstring)."""

    reset_kind: str = NO_RESET
    """How the runner's slots reset: ``per-env``, ``wave`` or ``none`` (no per-slot state). The runner's own
    action-chunk queues are per-slot state too, so a runner with chunks is ``per-env``."""
    policy_reset_kind: str = NO_RESET
    """How the policy itself resets (without the runner's chunk queues): what a step that returns whole
    chunks (``fasteval serve``'s openpi answer) carries."""
    continuous: bool = True
    """Continuous batching (a freed slot takes its next episode at once); False: wave mode."""
    chunks: bool = False
    """The runner queues the action chunks the policy returns (found on the dry run)."""
    tasks: bool = False
    """The policy gets per-episode task descriptions (``set_task``, or a ``"task"`` input): strings a CUDA
    graph would freeze."""
    skips_observation: bool = False
    """Some calls do not read the observation (``runner.reads_observation(rows)`` says which): the loop
    binds a copy that asks first."""
    reads_per_slot: bool = False
    """After each call, the runner says per slot whether its next call reads the observation the coming env step
    returns (``runner.observation_reads()``, a host ``bool[B]``): envs whose kind can skip that work (an unread
    frame's render) skip it (:mod:`fasteval.core.unread`). False: every observation is read (a runner that cannot
    tell, as ACT with temporal ensembling or a served policy, says nothing)."""
    wants_active: bool = False
    """The runner is told each call's active slots first (``runner.note_active(slots)``): a served policy
    sends only theirs."""
    accelerated_elsewhere: bool = False
    """The policy step runs elsewhere and is accelerated there (a served policy: the server applies
    ``--amp``, ``--compile`` and ``--cuda-graph``); the engine wraps nothing on this side."""
    enforces_policy_timeout: bool = False
    """The runner applies ``policy_timeout_s`` itself (a served policy's requests time out); the engine's
    watchdog then leaves its calls be."""

    def __post_init__(self) -> None:
        for name, kind in (("reset_kind", self.reset_kind), ("policy_reset_kind", self.policy_reset_kind)):
            if kind not in RESET_KINDS:
                raise ValueError(f"Capabilities.{name}: expected one of {RESET_KINDS}, got {kind!r}.")

    @property
    def per_slot_state(self) -> bool:
        """The runner keeps state per slot (a policy ``reset``, or chunk queues): no pipelining, no graph."""
        return self.reset_kind != NO_RESET


@runtime_checkable
class UsesPolicyBlocks(Protocol):
    """A policy that runs its own network call on blocks of ``rows`` rows (:mod:`fasteval.core.policy_blocks`)
    when told to (LeRobot's per-slot queues over ``predict_action_chunk``); returns what it did, e.g.
    ``"blocks of 16 rows"``, or ``"whole batch (reason)"``."""

    def use_policy_blocks(self, rows: int) -> str: ...


@runtime_checkable
class CallsOneRowAtATime(Protocol):
    """A policy that calls its network one row at a time (``calls_one_row_at_a_time = True``: per-episode noise
    generators, drawn row by row): every call has one fixed shape already."""

    calls_one_row_at_a_time: bool


@runtime_checkable
class SelectsActions(Protocol):
    """A policy object with ``select_action(obs) -> actions`` (else the policy itself is called)."""

    def select_action(self, obs: Any) -> Any: ...


@runtime_checkable
class Resettable(Protocol):
    """A policy with ``reset``: ``reset(env_ids)``, ``reset(env_ids, seeds)`` (per env) or ``reset()`` (wave)."""

    def reset(self, *args: Any, **kwargs: Any) -> Any: ...


@runtime_checkable
class ReadsObservation(Protocol):
    """A policy that serves some steps from its own queue: whether its next call for ``rows`` reads the observation."""

    def reads_observation(self, rows: slice) -> bool: ...


@runtime_checkable
class TellsObservationReads(Protocol):
    """A policy that knows, after each call, which slots' next observation its next call reads: ``observation_reads()``
    returns a host ``bool[B]`` (True: read). It must answer for every slot; a slot it is unsure of is True."""

    def observation_reads(self) -> Any: ...


@runtime_checkable
class TakesTasks(Protocol):
    """A policy that takes task descriptions: ``set_task(env_ids, descriptions)``."""

    def set_task(self, env_ids: Any, descriptions: list[str]) -> Any: ...


POLICY_RNG = "policy_rng"
"""The ``run_meta()`` key by which a policy declares where its random draws come from: :data:`GLOBAL_RNG`
(torch's global generator, in the order of the run's calls: its episodes depend on everything drawn
before them, so a resume, which seeds that generator anew, cannot continue them exactly). Absent: the
policy is deterministic, or its draws are its own per episode."""
GLOBAL_RNG = "global"


@runtime_checkable
class ReportsRunMeta(Protocol):
    """A policy that reports facts about itself for the run's metadata (see :data:`POLICY_RNG`)."""

    def run_meta(self) -> dict[str, Any]: ...


def run_meta_of(policy: Any) -> dict[str, Any]:
    """``policy.run_meta()`` as a dict, or ``{}`` for a policy without the hook."""
    return dict(policy.run_meta()) if isinstance(policy, ReportsRunMeta) else {}
