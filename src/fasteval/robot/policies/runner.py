"""The robot-policy runner: observation mapping, normalization, task descriptions, action chunks.

:class:`RobotPolicyRunner` is the engine's :class:`~fasteval.core.policy.PolicyRunner`. Everything
is decided when it is built or on the dry run; a plain policy (raw observations, no stats, one
action per call) costs exactly what it costs with the base runner (``__call__`` is inherited).

One policy call, in order:

1. observation mapping (:mod:`fasteval.robot.policies.obs_mapping`), when ``observation_format`` is
   ``lerobot`` or keys are renamed: LeRobot keys, images uint8 -> float CHW in [0, 1] on the device;
2. input normalization (:mod:`fasteval.robot.policies.normalization`), when the checkpoint folder has
   ``normalization.safetensors``;
3. the policy;
4. action unnormalization (same file, ``action.*`` stats);
5. the action-chunk queue, when the policy returns chunks (decided on the dry run).

**Action chunks** (ACT / Diffusion style). A policy whose output is ``[B, chunk, *action_shape]``
(for ``Discrete`` actions: integers ``[B, chunk]`` with ``chunk >= 2``, or logits
``[B, chunk, n]``) is recognised on the dry run. Each slot then has its own queue: a slot whose
queue is empty takes the next ``n_action_steps`` actions of a fresh chunk (the policy's
``n_action_steps`` attribute if it has one, else the whole chunk), and a slot that starts a new
episode drops its queue. The policy is called only on steps where at least one slot needs a new
chunk (it still sees the whole batch; rows of slots that do not need one are discarded). The runner tells
the envs which slots' next observation it reads (``observation_reads``: the slots whose queue ran out), so an
env that can skip an unread observation's work does (:mod:`fasteval.core.unread`); the rows it discards
then hold the unread marker. A slot's
chunk therefore depends only on its own observation at the step its queue ran out, so results do
not depend on the batch size or on the other slots (for a policy whose rows are independent).

**Task descriptions** follow LeRobot's rollout (``lerobot_eval.rollout``): the env's ``task_description``
attribute, else its ``task``, else ``""`` (through its wrappers: ``env.get_wrapper_attr``), read before
every policy call for every slot that has started an episode (async envs send the value back with each
step: no extra round trip). The policy gets it:

* through ``policy.set_task(env_ids, descriptions)`` if it has that method (``env_ids`` an int64
  tensor of slots, ``descriptions`` a list of strings), for the slots that start an episode (after the
  policy's own reset) and for those whose task changed since the last call;
* with ``observation_format="lerobot"``, as the ``"task"`` entry of the observation TensorDict
  (a list of B strings, LeRobot's ``batch["task"]``; ``""`` for envs with neither attribute).

The env's reset ``info["task"]`` is not read (the engine does not keep reset infos).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

import gymnasium as gym
import torch

from fasteval.core.capabilities import TakesTasks
from fasteval.core.policy import NO_RESET, PER_ENV, WAVE, PolicyRunner
from fasteval.types.errors import UserInputError
from fasteval.robot.buffers.chunk_queue import ChunkQueue, chunk_length
from fasteval.robot.policies.normalization import NORMALIZATION_NAME, Normalizer, load_stats
from fasteval.robot.policies.obs_mapping import LEROBOT, build_observation_adapter
from fasteval.robot.policies.remote import RemotePolicy
from fasteval.robot.policies.task_descriptions import TaskDescriptions, task_attribute


@runtime_checkable
class RenamesObservations(Protocol):
    """A policy that renames observation keys in its own processors (LeRobot's ``rename_map``): when
    ``renames_observations`` is True, fasteval's observation adapter renames nothing."""

    renames_observations: bool


@runtime_checkable
class ExecutesChunkPrefix(Protocol):
    """A chunking policy that executes the first ``n_action_steps`` actions of each chunk (LeRobot's name)."""

    n_action_steps: int


class RunnerSpec(Protocol):
    """The fields of a spec the runner reads (an :class:`~fasteval.types.spec.EvalSpec`, or ``fasteval serve``'s
    ``RunnerOptions``)."""

    policy: Any
    observation_format: str
    rename: Any
    obs_dtype: str
    reset_mode: str
    pipeline: bool
    policy_block: int


class InputPipeline:
    """``pipeline(obs) -> policy input``: the mapping and normalization stages, built once per
    engine observation buffer (cached by identity) and refreshed in place every step."""

    def __init__(self, stages: list[Any], tasks: TaskDescriptions | None):
        self.stages = stages
        self.tasks = tasks
        self._built: dict[int, tuple[Any, Any, list[Callable[[], Any]]]] = {}

    def prepare(self, obs: Any) -> Any:
        """Build (once) the buffers for input ``obs``; returns the policy input object."""
        entry = self._built.get(id(obs))
        if entry is None:
            x, steps = obs, []
            for stage in self.stages:
                x, more = stage.build(x)
                steps += more
            if self.tasks is not None:
                self.tasks.attach(x)
            entry = self._built[id(obs)] = (obs, x, steps)  # obs kept alive: its id stays unique
        return entry[1]

    def __call__(self, obs: Any) -> Any:
        entry = self._built.get(id(obs))
        if entry is None:
            self.prepare(obs)
            entry = self._built[id(obs)]
        for step in entry[2]:
            step()
        return entry[1]


class RobotPolicyRunner(PolicyRunner):
    """A :class:`PolicyRunner` with the robot-learning steps (see the module docstring)."""

    def __init__(self, policy: Any, action_space: gym.Space, n_slots: int, reset_mode: str = "auto", *,
                 inputs: InputPipeline | None = None, unnormalize: Callable[[torch.Tensor], torch.Tensor] | None = None,
                 tasks: TaskDescriptions | None = None, pipelined: bool = False, policy_block: int = 0):
        super().__init__(policy, action_space, n_slots, reset_mode, policy_block)
        self.pipelined = pipelined
        call = self._call
        self.unnormalize = unnormalize
        if unnormalize is not None:
            call = _then(call, unnormalize)
        if inputs is not None and inputs.stages:
            call = _before(call, inputs)
        if tasks is not None and tasks.attribute is not None:
            call = _after_refresh(call, tasks.refresh)
        self._call = call
        self.inputs, self.tasks = inputs, tasks
        self.chunks: ChunkQueue | None = None
        """The action-chunk queue, once the dry run found that the policy returns chunks."""
        if tasks is not None:
            self.capabilities = replace(self.capabilities, tasks=True)

    @property
    def policy_reset_kind(self) -> str:
        """How the policy itself resets (``reset_kind`` becomes ``per-env`` once chunk queues exist)."""
        return self.capabilities.policy_reset_kind

    # -- the dry run decides about chunks -------------------------------------------------
    def _choose_postprocess(self, raw: Any) -> Callable[[torch.Tensor], torch.Tensor]:
        length = chunk_length(raw, self.action_space, self.n_slots)
        if length is None:
            return super()._choose_postprocess(raw)
        n_exec = self.policy.n_action_steps if isinstance(self.policy, ExecutesChunkPrefix) else None
        if n_exec is None:
            n_exec = length
        if not isinstance(n_exec, int) or isinstance(n_exec, bool) or not 1 <= n_exec <= length:
            raise UserInputError(f"the policy returns action chunks of length {length}, but its n_action_steps is "
                                 f"{n_exec!r}; expected an integer from 1 to {length}.")
        if self.pipelined:
            raise UserInputError(
                f"the policy returns action chunks ({tuple(raw.shape)}), which fasteval queues per slot; --pipeline "
                f"calls the policy with alternating half batches, so the queues cannot be kept apart. Drop --pipeline."
            )
        self.chunks = ChunkQueue(self._call, raw, n_exec)
        self._call = self.chunks
        self.observation_reads = self.chunks.needed  # a slot's next observation is read when its queue ran out
        # the queues are per-slot state (no CUDA-graph capture of the step, per-slot drops)
        self.capabilities = replace(self.capabilities, chunks=True, reads_per_slot=True,
                                    reset_kind=PER_ENV if self.capabilities.reset_kind == NO_RESET
                                    else self.capabilities.reset_kind)
        return super()._choose_postprocess(raw[:, 0])

    def functional_step(self) -> Any:
        """The base runner's answer (:meth:`PolicyRunner.functional_step`), with the input stages as its
        ``prepare`` when they are only the observation mapping and dtype cast (which the spec and the
        architecture decide); ``None`` with chunk queues, task descriptions, or normalization stats (a
        checkpoint's own numbers)."""
        base = super().functional_step()
        if base is None or self.chunks is not None or self.tasks is not None or self.unnormalize is not None:
            return None
        stages = self.inputs.stages if self.inputs is not None else []
        if any(isinstance(stage, Normalizer) for stage in stages):
            return None
        return (self.inputs if stages else base[0]), base[1], base[2]

    def chunk_step(self, obs: Any) -> torch.Tensor:
        """The whole chunk every row would queue, ``[B, n_action_steps, *action]`` after the action mapping,
        without the queues (what ``fasteval serve`` answers an openpi request with). Only after a dry run
        that found chunks (:attr:`chunks`)."""
        chunks = self.chunks
        raw = chunks.call(obs)[:, : chunks.n_exec]
        rows, steps = raw.shape[:2]
        out = self._postprocess(raw.reshape(rows * steps, *raw.shape[2:]))
        return out.reshape(rows, steps, *out.shape[1:])

    # -- resets -----------------------------------------------------------------------------
    def reset_slots(self, slots: Sequence[int], seeds: Sequence[int]) -> None:
        if self.policy_reset_kind == PER_ENV:
            super().reset_slots(slots, seeds)
        self._new_episodes(slots)

    def start_slots(self, slots: Sequence[int], seeds: Sequence[int]) -> None:
        if self.policy_reset_kind == WAVE:
            self.policy.reset()
            self._new_episodes(slots)
        else:
            self.reset_slots(slots, seeds)

    def _new_episodes(self, slots: Sequence[int]) -> None:
        if self.chunks is not None:
            self.chunks.drop(slots)
        if self.tasks is not None:
            self.tasks.update(slots)


def _before(call: Callable[[Any], Any], prepare: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda obs: call(prepare(obs))


def _after_refresh(call: Callable[[Any], Any], refresh: Callable[[], None]) -> Callable[[Any], Any]:
    def refreshed(obs: Any) -> Any:
        refresh()
        return call(obs)

    return refreshed


def _then(call: Callable[[Any], Any], finish: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda obs: finish(call(obs))


def build_policy_runner(policy: Any, spec: RunnerSpec, envs: Any, h2d: Any, n_slots: int) -> PolicyRunner:
    """The engine's runner for ``spec`` (the one hook in ``Engine._build_policy_side``).

    Everything that can be wrong (unknown rename keys, stats that do not fit) raises a
    :class:`UserInputError` here, before any episode runs.
    """
    from fasteval.robot.policies.loaders import policy_folder

    if isinstance(policy, RemotePolicy):  # a served policy: its runner talks to the server
        from fasteval.robot.policies.remote_runner import build_remote_runner

        return build_remote_runner(policy, spec, envs, h2d, n_slots)
    device = h2d.device
    stages: list[Any] = []
    example = h2d.policy_input
    # A policy that renames inside its own processors (LeRobot's rename_map) gets the keys before renaming.
    rename = {} if isinstance(policy, RenamesObservations) and policy.renames_observations else spec.rename
    adapter = build_observation_adapter(envs.observation_space, spec.observation_format, rename, device)
    if adapter is not None:
        stages.append(adapter)
        example = adapter.build(example)[0]
    unnormalize = None
    folder = policy_folder(spec.policy)
    stats = load_stats(folder) if folder is not None else None
    if stats:
        action_shape = None if isinstance(envs.action_space, gym.spaces.Discrete) else tuple(envs.action_space.shape)
        normalizer = Normalizer(stats, example, device, action_shape, where=str(folder / NORMALIZATION_NAME))
        if normalizer.has_input_stats:
            stages.append(normalizer)
        if normalizer.has_action_stats:
            unnormalize = normalizer.actions
    from fasteval.robot.policies.obs_dtype import build_obs_cast  # float observations -> the policy's dtype (--obs-dtype)
    cast = build_obs_cast(spec.obs_dtype, policy, example, after_stages=bool(stages))
    if cast is not None:
        stages.append(cast)
    tasks = None
    pipelined = bool(spec.pipeline)
    in_observation = spec.observation_format == LEROBOT and not pipelined  # group views: no per-row task lists
    wants_task = isinstance(policy, TakesTasks) or in_observation
    attribute = task_attribute(envs) if wants_task else None
    if attribute is not None or in_observation:
        if pipelined and attribute is not None:  # set_task keeps a task per env row; half batches mix the groups' rows
            raise UserInputError(
                f"--pipeline calls the policy with alternating half batches, so the per-env task descriptions that "
                f"{type(policy).__name__}.set_task receives cannot be kept apart between the two groups. Drop --pipeline."
            )
        tasks = TaskDescriptions(envs, policy, envs.n_slots, in_observation, attribute)
    inputs = InputPipeline(stages, tasks)
    if stages and not pipelined:
        inputs.prepare(h2d.policy_input)  # the engine's buffer: allocated now, not on the first step
    return RobotPolicyRunner(policy, envs.action_space, n_slots, spec.reset_mode,
                             inputs=inputs, unnormalize=unnormalize, tasks=tasks, pipelined=pipelined,
                             policy_block=spec.policy_block)
