"""A LeRobot policy behind fasteval's per-env policy protocol.

:class:`LeRobotPolicy` (continuous batching; wave mode with ``--reset-mode wave``):

* ``reset(env_ids, seeds)``: those slots start an episode: their action queues empty, their
  observation history restarts, and (stochastic policies) their noise generator is seeded with
  the episode's seed;
* ``set_task(env_ids, descriptions)``: the env's ``task_description`` (LeRobot's ``batch["task"]``,
  ``""`` when the env has none, as in LeRobot's rollout);
* ``select_action(obs) -> action [B, action_dim]`` (on the CPU, as LeRobot's postprocessor leaves it).

One call, in LeRobot's order (``lerobot_eval.rollout``):

1. the observation becomes LeRobot's batch: raw env observations (``observation_format="raw"``)
   are mapped on the device by the rules of LeRobot's own ``preprocess_observation``, read from it once
   (:class:`fasteval.robot.lerobot.observations.LeRobotBatch`: no host round trip); observations fasteval
   already mapped to LeRobot's keys (``observation_format="lerobot"``, the same rules) are taken as they
   are: the two give the same tensors;
2. ``batch["task"]`` (LeRobot's rollout: ``task_description``, else ``task``, else ``""``, read every
   step by :mod:`fasteval.robot.policies.task_descriptions`), then the env preprocessor and the policy
   preprocessor (LeRobot's rename step with ``rename_map``, batch dim, device, normalization);
3. ``n_obs_steps > 1`` (Diffusion): each slot's history gets the new observation; the first one of
   an episode fills the whole history (LeRobot's ``populate_queues``);
4. slots whose queue is empty get a fresh chunk from ``policy.predict_action_chunk`` (its offline
   branch: the policy's own queues stay empty), keeping the first ``n_action_steps``; the queues are
   fasteval's one :class:`~fasteval.robot.buffers.chunk_queue.ChunkQueue` (positions on the host, mirrored on the
   device: no upload of positions or indices on steps without a refill);
5. each slot pops its next action; the postprocessor (unnormalize, to CPU) and the env
   postprocessor run on the popped batch, as LeRobot runs them on ``select_action``'s output.

Two shortcuts give the same numbers with less work: when the preprocessing is stateless
(:data:`STATELESS_STEPS`, and no env preprocessor but :data:`STATELESS_ENV_STEPS`: LIBERO's) and there is no observation history, steps 1-4 run
only on steps where some slot needs a chunk; when the postprocessing is elementwise
(:data:`ELEMENTWISE_STEPS`, no env postprocessor), it runs once on each new chunk instead of on
every popped action. Pipelines with other steps (relative actions, which cache the state for the
postprocessor) run in full on every step, as in LeRobot.

In wave mode all slots start together, so every slot needs a chunk on the same steps and the
policy sees exactly the batches LeRobot's ``select_action`` sees: the same numbers, per seed.

**Noise.** Diffusion's ``predict_action_chunk`` takes the initial ``noise``; each row's is drawn
from its slot's generator (on the policy's device, seeded with the episode seed at reset), so an
episode's noise does not depend on the batch or on the other slots. DDPM also draws noise in every
denoising step from the global RNG: :class:`LeRobotPolicy` passes the slots' generators to the
scheduler's ``step`` (as a per-row list, which diffusers' schedulers accept) for the duration of the
call (:class:`fasteval.robot.lerobot.internals.scheduler_generators`, the one patch, with every other
LeRobot internal named in :mod:`fasteval.robot.lerobot.internals`). Policies without a ``noise``
argument keep LeRobot's global-RNG draws; :attr:`batch_invariant` says which case holds.
``noise="global"`` asks for LeRobot's global-RNG draws on purpose, seeded as ``lerobot-eval`` seeds them.

**CUDA graphs.** On a CUDA device, the full-batch chunk prediction (``predict_action_chunk`` on all
``n_slots`` rows: a static shape) runs in a CUDA graph, through fasteval's capture machinery
(:class:`fasteval.core.accel.CudaGraphCall`: side stream, memory pool, capture lock, RNG restore, and
eager fallback with a warning when the capture fails; the one decision is :func:`fasteval.core.accel.graph_decision`).
The graph wrapper owns its static inputs (``copy_inputs``): the preprocessed tensors are copied into
them before each replay; non-tensor entries (``task``) are those of the first call, which
ACT and Diffusion do not read (:data:`GRAPH_TYPES`). Calls on fewer rows (``chunk_rows = "needed"``)
run eagerly. Diffusion with per-episode generators is never graphed: a replay would reuse the noise
of capture time. ``run_meta()["lerobot_chunk_cuda_graph"]`` says what happened: ``captured``,
``eager (reason)`` or ``off`` (not on CUDA, or :attr:`LeRobotPolicy.cuda_graph` is ``False``).

:class:`LeRobotWavePolicy` runs any other policy exactly as LeRobot's rollout does:
``reset()`` on the whole batch, ``select_action`` on the whole batch (wave mode only).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import nn

from fasteval.core import accel
from fasteval.core.capabilities import GLOBAL_RNG, POLICY_RNG
from fasteval.core.policy_blocks import block_indices
from fasteval.robot.lerobot import internals
from fasteval.robot.lerobot.internals import ELEMENTWISE_STEPS, STATELESS_ENV_STEPS, STATELESS_STEPS
from fasteval.robot.lerobot.observations import LeRobotBatch
from fasteval.robot.buffers.chunk_queue import ChunkQueue, StagedUpload
from fasteval.types.errors import UserInputError

ACTION = "action"
OBS_PREFIX = "observation."


class _Pipelines:
    """LeRobot's four processor pipelines, rebuilt when the policy moves to another device."""

    def __init__(self, build: Callable[[torch.device], tuple[Any, Any, Any, Any]], device: torch.device):
        self.build = build
        self.device = device
        self._set(build(device))

    def _set(self, pipelines: tuple[Any, Any, Any, Any]) -> None:
        self.pre, self.post, self.env_pre, self.env_post = pipelines
        steps = [type(step).__name__ for step in self.pre.steps]  # LeRobot's processor pipelines list their steps
        env_steps = {type(step).__name__ for step in self.env_pre.steps}
        self.stateless_inputs = env_steps <= STATELESS_ENV_STEPS and set(steps) <= STATELESS_STEPS
        """Preprocessing keeps no state between calls, so steps that need no chunk may skip it."""
        post = [type(step).__name__ for step in self.post.steps]
        self.elementwise_outputs = not self.env_post.steps and set(post) <= ELEMENTWISE_STEPS
        """Postprocessing acts on each action value alone, so a whole chunk may go through it at once."""

    def move(self, device: torch.device) -> None:
        if device != self.device:
            self.device = device
            self._set(self.build(device))


NOISE_MODES = ("episode", "global")
EPISODE_NOISE, GLOBAL_NOISE = NOISE_MODES
"""``episode``: each slot's generator, seeded with its episode's seed (batch-invariant); ``global``: LeRobot's own
draws from the global RNG, seeded as ``lerobot-eval`` seeds it (wave mode then matches ``lerobot-eval``)."""


def check_noise_mode(noise: str) -> str:
    if noise not in NOISE_MODES:
        raise UserInputError(f"noise: expected one of {', '.join(NOISE_MODES)}, got {noise!r}.")
    return noise


def lerobot_batch(obs: Any) -> dict[str, Any]:
    """fasteval's policy input -> LeRobot's observation batch (one-off; the wrappers keep a
    :class:`~fasteval.robot.lerobot.observations.LeRobotBatch`, whose buffers live across steps)."""
    return LeRobotBatch()(obs)


def _take_rows(batch: dict[str, Any], upload: StagedUpload, index: np.ndarray, n: int) -> dict[str, Any]:
    """The rows ``index`` of each per-slot entry (the index crosses to the device once, pinned)."""
    out: dict[str, Any] = {}
    on: dict[torch.device, torch.Tensor] = {}
    for key, value in batch.items():
        if isinstance(value, torch.Tensor) and value.ndim >= 1 and value.shape[0] == n:
            if value.device not in on:
                on[value.device] = upload(index).to(value.device)
            out[key] = value.index_select(0, on[value.device])
        elif isinstance(value, (list, tuple)) and len(value) == n:
            out[key] = [value[i] for i in index]
        else:
            out[key] = value
    return out


class _FollowsDevice(nn.Module):
    """``.to(device)`` moves the LeRobot policy and rebuilds the processors for the new device."""

    policy: nn.Module
    pipelines: _Pipelines
    renames_observations = True
    """``--rename`` / ``rename_map`` is LeRobot's own rename step in the preprocessor (as in ``lerobot-eval``),
    so fasteval's observation adapter renames nothing for these policies."""

    def _apply(self, fn: Any, recurse: bool = True) -> "_FollowsDevice":
        super()._apply(fn, recurse)
        param = next(self.policy.parameters(), None)
        if param is not None and self.pipelines is not None:
            self.policy.config.device = str(param.device)
            self.pipelines.move(param.device)
            self._moved_to(param.device)
        return self

    def _moved_to(self, device: torch.device) -> None:
        """Per-device state of a subclass follows the policy."""


class LeRobotPolicy(_FollowsDevice):
    """Per-slot action queues (and observation histories) over a LeRobot policy; see the module docstring."""

    def __init__(self, policy: nn.Module, pipelines: _Pipelines, n_slots: int, noise_shape: tuple[int, ...] | None,
                 scheduler_generators: bool, cuda_graph: bool | None = None, noise: str = "episode"):
        super().__init__()
        self.cuda_graph = cuda_graph
        """Graph the full-batch chunk prediction: ``None`` (default) where the device is CUDA, ``False`` never,
        ``True`` asked for (off CUDA it is reported as ``eager (no CUDA device)``)."""
        self._graph: accel.CudaGraphCall | None = None
        config = policy.config
        self.policy = policy
        self.pipelines = pipelines
        self.n_slots = int(n_slots)
        self.policy_type = str(config.type)
        self.n_action_steps = int(config.n_action_steps)
        self.n_obs_steps = int(config.n_obs_steps or 1)  # a field of every LeRobot policy config
        self.noise = check_noise_mode(noise)
        self.noise_shape = noise_shape if noise == EPISODE_NOISE else None
        self.scheduler_generators = scheduler_generators and noise == EPISODE_NOISE
        self.batch_invariant = self.noise_shape is not None or not _is_stochastic(config)
        """True when an episode's actions depend only on its own observations and seed."""
        self._global_seeded = False
        self.tasks: list[str] = [""] * self.n_slots
        self._batch = LeRobotBatch()
        self.queue = ChunkQueue(None, None, self.n_action_steps, n_slots=self.n_slots)
        """The per-slot action queues (:class:`fasteval.robot.buffers.chunk_queue.ChunkQueue`, shared with
        fasteval's own chunking policies), filled here on the rows that need a chunk."""
        self.fresh = np.ones(self.n_slots, dtype=bool)
        """Slots whose next observation is their episode's first (it fills the history)."""
        self._chunks_post_processed = False
        self.history: dict[str, torch.Tensor] = {}
        self._device: torch.device | None = None
        """The device of the per-device state below (None until :meth:`_moved_to` makes it)."""
        self.block_rows = 0
        """Rows per ``predict_action_chunk`` call (``policy_block``; :mod:`fasteval.core.policy_blocks`): the rows
        that get a chunk are cut into blocks of exactly this many, the last padded with copies of its last row
        (which draw from the scratch generator); 0: one call on all of them."""
        self._moved_to(_device_of(policy))
        self.chunk_rows = "all"
        """``"all"`` (default): when some slot needs a chunk, the policy runs on every row (a static
        batch of ``n_slots``; the rows that need none are discarded, and their noise generators are not
        advanced: they draw from a scratch generator). ``"needed"``: only on the rows that need one
        (less work when slots are out of step, but the policy's batch size varies, and float rounding
        can differ with it)."""
        if hasattr(policy, "reset"):
            policy.reset()  # empty internal queues: predict_action_chunk then reads the batch it is given

    def _moved_to(self, device: torch.device) -> None:
        """Per-device state: one noise generator per slot (and a scratch one) on the policy's device, so noise
        is drawn where it is used (on CPU the same numbers as before; re-seeded from the episode seed at each
        reset), and the staging buffers of the small per-step uploads."""
        if self._device == device:
            return
        self._device = device
        self.generators = [torch.Generator(device=device) for _ in range(self.n_slots)]
        self._scratch = torch.Generator(device=device)
        self._fresh_mask = StagedUpload(self.n_slots, torch.bool, device)
        self._row_index = StagedUpload(max(self.n_slots, self.block_rows), torch.int64, device)

    def use_policy_blocks(self, rows: int) -> str:
        """Run ``predict_action_chunk`` on blocks of ``rows`` rows (:class:`fasteval.core.capabilities.UsesPolicyBlocks`)."""
        self.block_rows = int(rows)
        if self._device is not None:
            self._row_index = StagedUpload(max(self.n_slots, self.block_rows), torch.int64, self._device)
        return f"blocks of {rows} rows"

    def run_meta(self) -> dict[str, Any]:
        """Facts for a run's metadata (``lerobot_*`` keys): type, queues, where the noise comes from."""
        meta = _run_meta(self, "per-slot queues")
        meta["lerobot_chunk_cuda_graph"] = self.chunk_graph_status()
        return meta

    def chunk_graph_status(self) -> str:
        """``captured``, ``eager (reason)`` or ``off``: the chunk prediction's CUDA graph (module docstring)."""
        if self._graph is not None:
            return str(self._graph.facts["cuda_graph"])
        refused = self._graph_refusal(_device_of(self.policy))
        return refused if refused is not None else accel.eager("not called yet")

    def _graph_refusal(self, device: torch.device) -> str | None:
        """Why the chunk prediction on ``device`` is not graphed (a status), or ``None`` when it may be."""
        blockers = []
        if self.noise_shape is not None or self.scheduler_generators:
            blockers.append("per-episode noise generators: a graph would replay the noise of capture time")
        elif self.noise == GLOBAL_NOISE and _is_stochastic(self.policy.config):
            blockers.append("global-RNG noise: a graph would not draw it as LeRobot's eager calls do")
        if self.policy_type not in GRAPH_TYPES:
            blockers.append(f"{self.policy_type}: its chunk prediction may read non-tensor inputs")
        return accel.graph_decision(self.cuda_graph, device, blockers[:1]).status

    def _predict(self, batch: dict[str, Any]) -> torch.Tensor:
        """``predict_action_chunk`` on the full batch: replayed from a CUDA graph where it may be."""
        device = _device_of(self.policy)
        if self._graph is None or self._graph.device != device:
            self._graph = accel.CudaGraphCall(self.policy.predict_action_chunk, device, copy_inputs=True,
                                              name="the chunk prediction", refused=self._graph_refusal(device))
        return self._graph(batch)

    # -- protocol ---------------------------------------------------------------------------------
    def reset(self, env_ids: torch.Tensor, seeds: Sequence[int] | None = None) -> None:
        ids = np.asarray(torch.as_tensor(env_ids).cpu(), dtype=np.int64)
        # global noise (wave mode): every slot's queue restarts with the wave, idle ones too (a half-full last
        # wave), so the whole batch needs its chunks on LeRobot's steps and draws LeRobot's noise in its order
        self.queue.drop(np.arange(self.n_slots) if self.noise == GLOBAL_NOISE else ids)
        self.fresh[ids] = True
        if seeds is None:
            return
        if self.noise == GLOBAL_NOISE:
            self._seed_global_rng(seeds)
            return
        for slot, seed in zip(ids.tolist(), seeds):
            self.generators[slot].manual_seed(int(seed))

    def _seed_global_rng(self, seeds: Sequence[int]) -> None:
        """``noise="global"``: at the first reset with seeds, put the global RNG where ``lerobot-eval``'s is when
        its rollout starts: LeRobot's ``set_seed(seed)``, then the draws of one policy construction
        (``make_policy`` builds the policy after ``set_seed``, before ``from_pretrained`` loads the weights)."""
        if self._global_seeded or len(seeds) == 0:
            return
        self._global_seeded = True
        internals.seed_global_rng(min(int(s) for s in seeds))
        type(self.policy)(self.policy.config)  # a throwaway: only its RNG draws matter

    def set_task(self, env_ids: torch.Tensor, descriptions: Sequence[str]) -> None:
        for slot, text in zip(torch.as_tensor(env_ids).tolist(), descriptions):
            self.tasks[slot] = str(text)

    @torch.no_grad()
    def select_action(self, obs: Any) -> torch.Tensor:
        need = self.queue.needed()
        pipes = self.pipelines
        if need.any() or self.n_obs_steps > 1 or not pipes.stateless_inputs:
            self._refill_from(obs, need)
        action = self.queue.pop()
        if self._chunks_post_processed:
            return action
        action = pipes.post(action)
        return pipes.env_post({ACTION: action})[ACTION]

    def observation_reads(self) -> np.ndarray:
        """Per slot, after a call: whether the next call reads the observation the coming env step returns (the
        slots whose queue ran out; every slot with an observation history or preprocessing that keeps state,
        which read every observation). The envs skip the others' work (:mod:`fasteval.core.unread`)."""
        if self.n_obs_steps > 1 or not self.pipelines.stateless_inputs:
            return np.ones(self.n_slots, dtype=bool)
        return self.queue.needed()

    # -- internals --------------------------------------------------------------------------------
    def _refill_from(self, obs: Any, need: np.ndarray) -> None:
        """Steps 1-4 of the module docstring (skipped on steps where no slot needs a chunk, when the
        preprocessing is stateless and there is no observation history)."""
        n = self.n_slots
        batch = self._batch(obs)
        first = next(v for v in batch.values() if isinstance(v, torch.Tensor))
        if first.shape[0] != n:
            raise UserInputError(f"LeRobot policy: expected a batch of {n} observations (one per env slot), got "
                                 f"{first.shape[0]}. --pipeline (half batches) is not supported for LeRobot policies.")
        batch["task"] = list(self.tasks)
        pipes = self.pipelines
        batch = pipes.pre(pipes.env_pre(batch))
        if self.n_obs_steps > 1:
            batch = self._with_history(batch)
        if need.any():
            self._refill(batch, need)

    def _with_history(self, batch: dict[str, Any]) -> dict[str, Any]:
        fresh = self.fresh.copy()  # slots that just reset: known on the host
        out = dict(batch)
        masks: dict[torch.device, torch.Tensor] = {}
        for key, value in batch.items():
            if not (key.startswith(OBS_PREFIX) and isinstance(value, torch.Tensor)):
                continue
            step = value.unsqueeze(1)
            full = step.expand(-1, self.n_obs_steps, *value.shape[1:])
            old = self.history.get(key)
            if old is None or old.shape[2:] != value.shape[1:]:
                hist = full.clone()
            else:
                hist = torch.cat([old[:, 1:], step], dim=1)
                if fresh.any():  # a fresh slot's history is its first observation, n_obs_steps times
                    if value.device not in masks:  # the mask crosses once per call, pinned
                        masks[value.device] = self._fresh_mask(fresh).to(value.device)
                    hist = torch.where(masks[value.device].view(-1, *([1] * (hist.ndim - 1))), full, hist)
            self.history[key] = hist
            out[key] = hist
        self.fresh[:] = False
        return out

    def _refill(self, batch: dict[str, Any], need: np.ndarray) -> None:
        n = self.n_slots
        rows = np.flatnonzero(need) if self.chunk_rows == "needed" else np.arange(n)
        size = self.block_rows
        if size == 0 or size == rows.size:
            chunk = self._chunks_for(batch, rows, need, rows.size)
        else:  # blocks of exactly `size` rows, the last padded with copies of its last row
            parts = []
            for positions in block_indices(rows.size, rows.size, size):  # the one padding rule (policy_blocks)
                real = min(size, rows.size - positions[0])
                parts.append(self._chunks_for(batch, rows[positions], need, real)[:real])
            chunk = torch.cat(parts)
        chunk = chunk[:, : self.n_action_steps]
        if chunk.shape[1] != self.n_action_steps:
            raise UserInputError(f"LeRobot {self.policy_type}: predict_action_chunk returned {chunk.shape[1]} actions; "
                                 f"n_action_steps is {self.n_action_steps}. Lower n_action_steps in config.json.")
        self._chunks_post_processed = self.pipelines.elementwise_outputs
        if self._chunks_post_processed:  # unnormalize + to CPU once per chunk instead of once per step
            flat = self.pipelines.post(chunk.reshape(-1, *chunk.shape[2:]))
            chunk = flat.reshape(*chunk.shape[:2], *flat.shape[1:])
        self.queue.fill(chunk, need)

    def _chunks_for(self, batch: dict[str, Any], index: np.ndarray, need: np.ndarray, real: int) -> torch.Tensor:
        """``predict_action_chunk`` on the rows ``index`` of ``batch`` (the first ``real`` of them are real; the
        rest pad a block and draw from the scratch generator, as do rows that need no chunk)."""
        n = self.n_slots
        whole = index.size == n and real == n and bool((index == np.arange(n)).all())
        sub = batch if whole else _take_rows(batch, self._row_index, index, n)
        kwargs: dict[str, Any] = {}
        # Rows that need no chunk draw from a scratch generator: their slots' generators stay untouched.
        gens = [self.generators[i] if need[i] and j < real else self._scratch for j, i in enumerate(index.tolist())]
        if self.noise_shape is not None:
            param = next(self.policy.parameters())
            noise = torch.stack([torch.randn(self.noise_shape, generator=g, device=g.device) for g in gens])
            kwargs["noise"] = noise.to(device=param.device, dtype=param.dtype)
        if self.scheduler_generators:
            with internals.scheduler_generators(self.policy, gens):
                return self.policy.predict_action_chunk(sub, **kwargs)
        if not kwargs and (whole or index.size == self.block_rows):  # a static shape: a CUDA graph where one may run
            chunk = self._predict(sub)  # one graph for every block: each has R rows
            return chunk if whole else chunk.clone()  # the next block's replay overwrites the graph's output
        return self.policy.predict_action_chunk(sub, **kwargs)


def _device_of(policy: nn.Module) -> torch.device:
    param = next(policy.parameters(), None)
    return param.device if param is not None else torch.device("cpu")


GRAPH_TYPES = {"act", "diffusion"}
"""Types whose ``predict_action_chunk`` reads only the batch's tensors (not ``task``), checked against LeRobot 0.6."""


class LeRobotWavePolicy(_FollowsDevice):
    """LeRobot's own ``reset()`` / ``select_action`` on the whole batch (wave mode only); see the module docstring."""

    def __init__(self, policy: nn.Module, pipelines: _Pipelines, n_slots: int):
        super().__init__()
        self.policy = policy
        self.pipelines = pipelines
        self.n_slots = int(n_slots)
        self.tasks: list[str] = [""] * self.n_slots
        self._batch = LeRobotBatch()
        self.batch_invariant = not _is_stochastic(policy.config)
        """Deterministic types only: LeRobot's own select_action draws noise from the global RNG."""

    def use_policy_blocks(self, rows: int) -> str:
        """LeRobot's own ``select_action`` keeps its queues per batch row: it runs on the whole batch, as in
        ``lerobot-eval`` (:class:`fasteval.core.capabilities.UsesPolicyBlocks`)."""
        return "whole batch (LeRobot's own select_action keeps its queues per batch row, as in lerobot-eval)"

    def run_meta(self) -> dict[str, Any]:
        return _run_meta(self, "whole batch (LeRobot's select_action; wave mode)")

    def reset(self) -> None:
        self.policy.reset()

    def set_task(self, env_ids: torch.Tensor, descriptions: Sequence[str]) -> None:
        LeRobotPolicy.set_task(self, env_ids, descriptions)  # type: ignore[arg-type]

    @torch.no_grad()
    def select_action(self, obs: Any) -> torch.Tensor:
        # LeRobot's own select_action may keep the batch's tensors (Diffusion's observation queues), and fasteval's
        # buffers are reused every step: it gets copies, as it gets fresh arrays from its envs.
        batch = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in self._batch(obs).items()}
        batch["task"] = list(self.tasks)
        pipes = self.pipelines
        action = self.policy.select_action(pipes.pre(pipes.env_pre(batch)))
        return pipes.env_post({ACTION: pipes.post(action)})[ACTION]


def _run_meta(wrapper: Any, queues: str) -> dict[str, Any]:
    import lerobot

    config = wrapper.policy.config
    if not _is_stochastic(config):
        noise = "none (deterministic policy)"
    elif wrapper.batch_invariant:
        noise = "per-episode torch.Generator seeded with the episode seed (batch-invariant)"
    else:
        noise = "LeRobot's global torch RNG (seeded per run): results depend on the batch size"
    meta = {"lerobot_version": getattr(lerobot, "__version__", "unknown"), "lerobot_policy_type": str(config.type),
            "lerobot_queues": queues, "lerobot_noise": noise, "lerobot_batch_invariant": bool(wrapper.batch_invariant)}
    if not wrapper.batch_invariant:  # a stochastic policy on LeRobot's global RNG (--noise global, or no noise argument)
        meta[POLICY_RNG] = GLOBAL_RNG
    return meta


def _is_stochastic(config: Any) -> bool:
    return str(config.type) not in DETERMINISTIC_TYPES


DETERMINISTIC_TYPES = {"act", "vqbet", "tdmpc"}
"""Policy types whose inference draws no random numbers (eval mode)."""
