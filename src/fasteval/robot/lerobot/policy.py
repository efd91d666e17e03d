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
   go through LeRobot's own ``preprocess_observation``; observations fasteval already mapped to
   LeRobot's keys (``observation_format="lerobot"``: ``observation.image`` float CHW in [0, 1],
   ``observation.state`` float32, renamed with ``--rename``) are taken as they are: the two give the
   same tensors for ``pixels`` / ``agent_pos`` / ``environment_state``;
2. ``batch["task"]``, then the env preprocessor and the policy preprocessor (rename, batch dim,
   device, normalization);
3. ``n_obs_steps > 1`` (Diffusion): each slot's history gets the new observation; the first one of
   an episode fills the whole history (LeRobot's ``populate_queues``);
4. slots whose queue is empty get a fresh chunk from ``policy.predict_action_chunk`` run on those
   rows only (all rows when all need one, as in a wave), keeping the first ``n_action_steps``;
5. each slot pops its next action; the postprocessor (unnormalize, to CPU) and the env
   postprocessor run on the popped batch, as LeRobot runs them on ``select_action``'s output.

Two shortcuts give the same numbers with less work: when the preprocessing is stateless
(:data:`STATELESS_STEPS`, no env preprocessor) and there is no observation history, steps 1-4 run
only on steps where some slot needs a chunk; when the postprocessing is elementwise
(:data:`ELEMENTWISE_STEPS`, no env postprocessor), it runs once on each new chunk instead of on
every popped action. Pipelines with other steps (relative actions, which cache the state for the
postprocessor) run in full on every step, as in LeRobot.

In wave mode all slots start together, so every slot needs a chunk on the same steps and the
policy sees exactly the batches LeRobot's ``select_action`` sees: the same numbers, per seed.

**Noise.** Diffusion's ``predict_action_chunk`` takes the initial ``noise``; each row's is drawn
from its slot's generator (seeded with the episode seed at reset), so an episode's noise does not
depend on the batch or on the other slots. DDPM also draws noise in every denoising step from the
global RNG: :class:`LeRobotPolicy` passes the slots' generators to the scheduler's ``step`` (as a
per-row list, which diffusers' schedulers accept) for the duration of the call. Policies without
a ``noise`` argument keep LeRobot's global-RNG draws; :attr:`batch_invariant` says which case holds.

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

import inspect
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import nn

from fasteval.core import accel
from fasteval.types.errors import UserInputError

ACTION = "action"
OBS_PREFIX = "observation."
PIXEL_SEP = "/"


class _Pipelines:
    """LeRobot's four processor pipelines, rebuilt when the policy moves to another device."""

    def __init__(self, build: Callable[[torch.device], tuple[Any, Any, Any, Any]], device: torch.device):
        self.build = build
        self.device = device
        self._set(build(device))

    def _set(self, pipelines: tuple[Any, Any, Any, Any]) -> None:
        self.pre, self.post, self.env_pre, self.env_post = pipelines
        steps = [type(step).__name__ for step in getattr(self.pre, "steps", [None])]
        self.stateless_inputs = not getattr(self.env_pre, "steps", [None]) and set(steps) <= STATELESS_STEPS
        """Preprocessing keeps no state between calls, so steps that need no chunk may skip it."""
        post = [type(step).__name__ for step in getattr(self.post, "steps", [None])]
        self.elementwise_outputs = not getattr(self.env_post, "steps", [None]) and set(post) <= ELEMENTWISE_STEPS
        """Postprocessing acts on each action value alone, so a whole chunk may go through it at once."""

    def move(self, device: torch.device) -> None:
        if device != self.device:
            self.device = device
            self._set(self.build(device))


ELEMENTWISE_STEPS = {"UnnormalizerProcessorStep", "DeviceProcessorStep"}
"""Postprocessor steps that map each action value on its own (an affine map per action dimension, a copy):
running them on a chunk ``[B * n, action_dim]`` gives bit for bit what running them on each action gives."""

STATELESS_STEPS = {"RenameObservationsProcessorStep", "AddBatchDimensionProcessorStep", "DeviceProcessorStep",
                   "NormalizerProcessorStep", "TokenizerProcessorStep"}
"""Policy preprocessor steps that are pure functions of their input (LeRobot 0.6). A pipeline with any
other step (relative actions cache the state for the postprocessor) runs on every step, as in LeRobot."""


def lerobot_batch(obs: Any) -> dict[str, Any]:
    """fasteval's policy input -> LeRobot's observation batch (see step 1 of the module docstring)."""
    if isinstance(obs, torch.Tensor):
        raise UserInputError(
            "a LeRobot policy needs Dict observations (pixels / agent_pos / ...), as LeRobot's envs give; this env "
            f"gives one array of shape {tuple(obs.shape)}. Use a LeRobot env (--env.type) or a Dict-observation env."
        )
    keys = [k for k in obs.keys() if k != "task"]
    if keys and all(k.startswith(OBS_PREFIX) for k in keys):
        return {k: obs.get(k) for k in keys}
    from lerobot.envs.utils import preprocess_observation

    arrays: dict[str, Any] = {}
    for key in keys:
        value = obs.get(key).cpu().numpy()
        head, sep, cam = key.partition(PIXEL_SEP)
        if sep and head == "pixels":  # fasteval keeps Dict spaces flat: "pixels/<cam>" -> {"pixels": {cam: ...}}
            arrays.setdefault("pixels", {})[cam] = value
        else:
            arrays[key] = value
    return preprocess_observation(arrays)


def _take_rows(batch: dict[str, Any], rows: torch.Tensor, index: np.ndarray, n: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in batch.items():
        if isinstance(value, torch.Tensor) and value.ndim >= 1 and value.shape[0] == n:
            out[key] = value.index_select(0, rows.to(value.device))
        elif isinstance(value, (list, tuple)) and len(value) == n:
            out[key] = [value[i] for i in index]
        else:
            out[key] = value
    return out


class _FollowsDevice(nn.Module):
    """``.to(device)`` moves the LeRobot policy and rebuilds the processors for the new device."""

    policy: nn.Module
    pipelines: _Pipelines

    def _apply(self, fn: Any, recurse: bool = True) -> "_FollowsDevice":
        super()._apply(fn, recurse)
        param = next(self.policy.parameters(), None)
        if param is not None and self.pipelines is not None:
            self.policy.config.device = str(param.device)
            self.pipelines.move(param.device)
        return self


class LeRobotPolicy(_FollowsDevice):
    """Per-slot action queues (and observation histories) over a LeRobot policy; see the module docstring."""

    def __init__(self, policy: nn.Module, pipelines: _Pipelines, n_slots: int, noise_shape: tuple[int, ...] | None,
                 scheduler_generators: bool, cuda_graph: bool | None = None):
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
        self.n_obs_steps = int(getattr(config, "n_obs_steps", 1) or 1)
        self.noise_shape = noise_shape
        self.scheduler_generators = scheduler_generators
        self.batch_invariant = noise_shape is not None or not _is_stochastic(config)
        """True when an episode's actions depend only on its own observations and seed."""
        self.tasks: list[str] = [""] * self.n_slots
        self.pos = np.full(self.n_slots, self.n_action_steps, dtype=np.int64)
        """Next queue position per slot; ``n_action_steps`` means empty."""
        self.fresh = np.ones(self.n_slots, dtype=bool)
        """Slots whose next observation is their episode's first (it fills the history)."""
        self.chunks: torch.Tensor | None = None
        self._chunks_post_processed = False
        self.history: dict[str, torch.Tensor] = {}
        self.generators = [torch.Generator() for _ in range(self.n_slots)]
        self._scratch = torch.Generator()
        self._rows = torch.arange(self.n_slots)
        self.chunk_rows = "all"
        """``"all"`` (default): when some slot needs a chunk, the policy runs on every row (a static
        batch of ``n_slots``; the rows that need none are discarded, and their noise generators are not
        advanced: they draw from a scratch generator). ``"needed"``: only on the rows that need one
        (less work when slots are out of step, but the policy's batch size varies, and float rounding
        can differ with it)."""
        if hasattr(policy, "reset"):
            policy.reset()  # empty internal queues: predict_action_chunk then reads the batch it is given

    def run_meta(self) -> dict[str, Any]:
        """Facts for a run's metadata (``lerobot_*`` keys): type, queues, where the noise comes from."""
        meta = _run_meta(self, "per-slot queues")
        meta["lerobot_chunk_cuda_graph"] = self.chunk_graph_status()
        return meta

    def chunk_graph_status(self) -> str:
        """``captured``, ``eager (reason)`` or ``off``: the chunk prediction's CUDA graph (module docstring)."""
        if self._graph is not None:
            return str(self._graph.facts["cuda_graph"])
        param = next(self.policy.parameters(), None)
        refused = self._graph_refusal(param.device if param is not None else torch.device("cpu"))
        return refused if refused is not None else accel.eager("not called yet")

    def _graph_refusal(self, device: torch.device) -> str | None:
        """Why the chunk prediction on ``device`` is not graphed (a status), or ``None`` when it may be."""
        blockers = []
        if self.noise_shape is not None or self.scheduler_generators:
            blockers.append("per-episode noise generators: a graph would replay the noise of capture time")
        if self.policy_type not in GRAPH_TYPES:
            blockers.append(f"{self.policy_type}: its chunk prediction may read non-tensor inputs")
        return accel.graph_decision(self.cuda_graph, device, blockers[:1]).status

    def _predict(self, batch: dict[str, Any]) -> torch.Tensor:
        """``predict_action_chunk`` on the full batch: replayed from a CUDA graph where it may be."""
        param = next(self.policy.parameters())
        if self._graph is None or self._graph.device != param.device:
            self._graph = accel.CudaGraphCall(self.policy.predict_action_chunk, param.device, copy_inputs=True,
                                              name="the chunk prediction", refused=self._graph_refusal(param.device))
        return self._graph(batch)

    # -- protocol ---------------------------------------------------------------------------------
    def reset(self, env_ids: torch.Tensor, seeds: Sequence[int] | None = None) -> None:
        ids = np.asarray(torch.as_tensor(env_ids).cpu(), dtype=np.int64)
        self.pos[ids] = self.n_action_steps
        self.fresh[ids] = True
        if seeds is not None:
            for slot, seed in zip(ids.tolist(), seeds):
                self.generators[slot].manual_seed(int(seed))

    def set_task(self, env_ids: torch.Tensor, descriptions: Sequence[str]) -> None:
        for slot, text in zip(torch.as_tensor(env_ids).tolist(), descriptions):
            self.tasks[slot] = str(text)

    @torch.no_grad()
    def select_action(self, obs: Any) -> torch.Tensor:
        need = np.flatnonzero(self.pos >= self.n_action_steps)
        pipes = self.pipelines
        if need.size or self.n_obs_steps > 1 or not pipes.stateless_inputs:
            self._refill_from(obs, need)
        assert self.chunks is not None
        take = torch.from_numpy(self.pos).to(self.chunks.device)
        action = self.chunks[self._rows.to(self.chunks.device), take]
        self.pos += 1
        if self._chunks_post_processed:
            return action
        action = pipes.post(action)
        return pipes.env_post({ACTION: action})[ACTION]

    # -- internals --------------------------------------------------------------------------------
    def _refill_from(self, obs: Any, need: np.ndarray) -> None:
        """Steps 1-4 of the module docstring (skipped on steps where no slot needs a chunk, when the
        preprocessing is stateless and there is no observation history)."""
        n = self.n_slots
        batch = lerobot_batch(obs)
        first = next(v for v in batch.values() if isinstance(v, torch.Tensor))
        if first.shape[0] != n:
            raise UserInputError(f"LeRobot policy: expected a batch of {n} observations (one per env slot), got "
                                 f"{first.shape[0]}. --pipeline (half batches) is not supported for LeRobot policies.")
        batch["task"] = list(self.tasks)
        pipes = self.pipelines
        batch = pipes.pre(pipes.env_pre(batch))
        if self.n_obs_steps > 1:
            batch = self._with_history(batch)
        if need.size:
            self._refill(batch, need)

    def _with_history(self, batch: dict[str, Any]) -> dict[str, Any]:
        fresh = np.flatnonzero(self.fresh)  # slots that just reset: found on the host, once per call
        index = torch.from_numpy(fresh) if fresh.size else None
        out = dict(batch)
        for key, value in batch.items():
            if not (key.startswith(OBS_PREFIX) and isinstance(value, torch.Tensor)):
                continue
            step = value.unsqueeze(1)
            old = self.history.get(key)
            if old is None or old.shape[2:] != value.shape[1:]:
                hist = step.expand(-1, self.n_obs_steps, *value.shape[1:]).clone()
            else:
                hist = torch.cat([old[:, 1:], step], dim=1)
                if index is not None:
                    rows = index.to(value.device)
                    hist[rows] = step[rows].expand(-1, self.n_obs_steps, *value.shape[1:])
            self.history[key] = hist
            out[key] = hist
        self.fresh[:] = False
        return out

    def _refill(self, batch: dict[str, Any], need: np.ndarray) -> None:
        n = self.n_slots
        rows = need if self.chunk_rows == "needed" else np.arange(n)
        sub = batch if rows.size == n else _take_rows(batch, torch.from_numpy(rows), rows, n)
        kwargs: dict[str, Any] = {}
        needed = np.zeros(n, dtype=bool)
        needed[need] = True
        # Rows that need no chunk draw from a scratch generator: their slots' generators stay untouched.
        gens = [self.generators[i] if needed[i] else self._scratch for i in rows.tolist()]
        if self.noise_shape is not None:
            param = next(self.policy.parameters())
            noise = torch.stack([torch.randn(self.noise_shape, generator=g) for g in gens])
            kwargs["noise"] = noise.to(device=param.device, dtype=param.dtype)
        if self.scheduler_generators:
            with _scheduler_generators(self.policy, gens):
                chunk = self.policy.predict_action_chunk(sub, **kwargs)
        elif rows.size == n and not kwargs:  # the static shape: a CUDA graph where one may run
            chunk = self._predict(sub)
        else:
            chunk = self.policy.predict_action_chunk(sub, **kwargs)
        chunk = chunk[:, : self.n_action_steps]
        if chunk.shape[1] != self.n_action_steps:
            raise UserInputError(f"LeRobot {self.policy_type}: predict_action_chunk returned {chunk.shape[1]} actions; "
                                 f"n_action_steps is {self.n_action_steps}. Lower n_action_steps in config.json.")
        self._chunks_post_processed = self.pipelines.elementwise_outputs
        if self._chunks_post_processed:  # unnormalize + to CPU once per chunk instead of once per step
            flat = self.pipelines.post(chunk.reshape(-1, *chunk.shape[2:]))
            chunk = flat.reshape(*chunk.shape[:2], *flat.shape[1:])
        if self.chunks is None or self.chunks.shape[2:] != chunk.shape[2:] or self.chunks.device != chunk.device:
            self.chunks = chunk.new_zeros((n, *chunk.shape[1:]))
        if rows.size == n:
            chunk = chunk if need.size == n else chunk[torch.from_numpy(need).to(chunk.device)]
        if need.size == n:
            self.chunks.copy_(chunk)
        else:
            self.chunks[torch.from_numpy(need).to(chunk.device)] = chunk.to(self.chunks.dtype)
        self.pos[need] = 0


GRAPH_TYPES = {"act", "diffusion"}
"""Types whose ``predict_action_chunk`` reads only the batch's tensors (not ``task``), checked against LeRobot 0.6."""


class _scheduler_generators:
    """Within the block, the diffusion scheduler's ``step`` draws its noise from per-row generators."""

    def __init__(self, policy: nn.Module, gens: list[torch.Generator]):
        self.scheduler = policy.diffusion.noise_scheduler
        self.gens = gens if len(gens) > 1 else gens[0]

    def __enter__(self) -> None:
        original = type(self.scheduler).step.__get__(self.scheduler)
        gens = self.gens

        def step(*args: Any, generator: Any = None, **kwargs: Any) -> Any:
            return original(*args, generator=gens if generator is None else generator, **kwargs)

        self.scheduler.step = step

    def __exit__(self, *exc: Any) -> None:
        del self.scheduler.step


class LeRobotWavePolicy(_FollowsDevice):
    """LeRobot's own ``reset()`` / ``select_action`` on the whole batch (wave mode only); see the module docstring."""

    def __init__(self, policy: nn.Module, pipelines: _Pipelines, n_slots: int):
        super().__init__()
        self.policy = policy
        self.pipelines = pipelines
        self.n_slots = int(n_slots)
        self.tasks: list[str] = [""] * self.n_slots
        self.batch_invariant = not _is_stochastic(policy.config)
        """Deterministic types only: LeRobot's own select_action draws noise from the global RNG."""

    def run_meta(self) -> dict[str, Any]:
        return _run_meta(self, "whole batch (LeRobot's select_action; wave mode)")

    def reset(self) -> None:
        self.policy.reset()

    def set_task(self, env_ids: torch.Tensor, descriptions: Sequence[str]) -> None:
        LeRobotPolicy.set_task(self, env_ids, descriptions)  # type: ignore[arg-type]

    @torch.no_grad()
    def select_action(self, obs: Any) -> torch.Tensor:
        batch = lerobot_batch(obs)
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
    return {"lerobot_version": getattr(lerobot, "__version__", "unknown"), "lerobot_policy_type": str(config.type),
            "lerobot_queues": queues, "lerobot_noise": noise, "lerobot_batch_invariant": bool(wrapper.batch_invariant)}


def _is_stochastic(config: Any) -> bool:
    return str(config.type) not in DETERMINISTIC_TYPES


DETERMINISTIC_TYPES = {"act", "vqbet", "tdmpc"}
"""Policy types whose inference draws no random numbers (eval mode)."""


def predict_takes_noise(policy: nn.Module) -> bool:
    try:
        return "noise" in inspect.signature(policy.predict_action_chunk).parameters
    except (AttributeError, TypeError, ValueError):
        return False
