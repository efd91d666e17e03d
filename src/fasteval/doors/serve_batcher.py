"""Dynamic batching of openpi requests: many clients, one policy call per batch.

openpi's protocol sends one observation per request and expects that request's ``actions``. The
batcher collects requests from every connection: a batch closes when it holds ``max_batch``
requests, or ``max_wait_s`` after its first request arrived (Triton's ``max_queue_delay``),
whichever comes first; or at once when it holds as many requests as there are openpi connections
(one request in flight per client, as openpi clients send them: no other request can come). It then runs on the server's compute thread, on a padded static batch:
the smallest bucket (1, 2, 4, ... up to ``max_batch``) that holds it, one
:class:`~fasteval.doors.serve_policy.ServedRunner` per bucket, built on first use. On a GPU each
bucket's step is captured once as a CUDA graph (static shapes); rows past the batch keep whatever
they held and their answers are dropped. On a CPU the same padding runs eagerly.

Each request's reply is openpi's: ``actions`` of shape ``[H, *action_shape]`` (the chunk a fasteval
chunk queue would play, ``H = n_action_steps``; ``H = 1`` for a policy with one action per call)
plus ``server_timing`` (``infer_ms``, ``queue_ms``, ``batch_size``, ``padded_to``). The protocol has no
episodes, so a policy with per-slot state (``reset``) has its rows reset before every call: each
answer is that of an episode's first step.
"""

from __future__ import annotations

import asyncio
from time import perf_counter
from typing import Any, Callable

import gymnasium as gym
import numpy as np
import torch

from fasteval.core.policy import NO_RESET
from fasteval.doors.serve_policy import ServedRunner, write_rows
from fasteval.types.wire import WireError

OBSERVATION_KEY = "observation"
"""The request key of an array (non-Dict) observation; a Dict observation's keys are the request's."""
TASK_KEYS = ("prompt", "task")


def buckets(max_batch: int) -> list[int]:
    """The padded batch sizes: powers of two below ``max_batch``, then ``max_batch``."""
    sizes, size = [], 1
    while size < max_batch:
        sizes.append(size)
        size *= 2
    return sizes + [max_batch]


def request_rows(request: dict, space: gym.Space) -> Any:
    """One openpi request -> the observation of one row (validated against the space, no batch dim)."""
    keys = list(space.spaces) if isinstance(space, gym.spaces.Dict) else [OBSERVATION_KEY]
    missing = [k for k in keys if k not in request]
    if missing:
        raise WireError(f"openpi request: missing observation keys {missing}; this server expects {keys} "
                        f"(plus optional {' or '.join(TASK_KEYS)})")
    subs = space.spaces if isinstance(space, gym.spaces.Dict) else {OBSERVATION_KEY: space}
    out = {}
    for key, sub in subs.items():
        value = request[key]
        value = np.asarray(value) if isinstance(value, (int, float, list, np.generic)) else value
        shape = () if isinstance(sub, gym.spaces.Discrete) else tuple(sub.shape)
        if not isinstance(value, np.ndarray) or value.shape != shape or value.dtype.kind not in "biuf":
            got = f"{value.dtype} {value.shape}" if isinstance(value, np.ndarray) else type(value).__name__
            raise WireError(f"openpi request: observation {key!r} must be a numeric array of shape {shape}, got {got}")
        out[key] = value
    return out if isinstance(space, gym.spaces.Dict) else out[OBSERVATION_KEY]


class DynamicBatcher:
    """``await batcher.infer(request)`` -> openpi reply; see the module docstring."""

    def __init__(self, make_runner: Callable[[int], ServedRunner], observation_space: gym.Space, max_batch: int,
                 max_wait_s: float, run_on_compute: Callable[..., Any]):
        self.make_runner, self.space = make_runner, observation_space
        self.max_batch, self.max_wait_s = max_batch, max_wait_s
        self.sizes = buckets(max_batch)
        self.runners: dict[int, ServedRunner] = {}
        self.run_on_compute = run_on_compute
        self.queue: asyncio.Queue = asyncio.Queue()
        self.batches = 0
        self.connections = 0
        """Open openpi connections: a batch that holds a request from each closes without waiting."""
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._collect())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def infer(self, request: dict) -> dict:
        """Queue one request (validated here, before it can join a batch) and wait for its reply."""
        row = request_rows(request, self.space)
        task = next((request[k] for k in TASK_KEYS if isinstance(request.get(k), str)), "")
        future = asyncio.get_running_loop().create_future()
        await self.queue.put((row, task, perf_counter(), future))
        return await future

    async def _collect(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self.queue.get()]
            deadline = loop.time() + self.max_wait_s
            while len(batch) < self.max_batch:
                if not self.queue.empty():  # no task or timer per request when one is waiting already
                    batch.append(self.queue.get_nowait())
                    continue
                if len(batch) >= self.connections:
                    break  # every connected client is in this batch already: waiting cannot add a request
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(self.queue.get(), left))
                except asyncio.TimeoutError:
                    break
            try:
                first = next((s for s in self.sizes if s >= len(batch)), self.max_batch) not in self.runners
                replies = await self.run_on_compute(self._run_batch, batch, slow=first)
            except Exception as exc:  # the policy (or its loading) raised: every request of the batch hears it
                for *_rest, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (*_rest, future), reply in zip(batch, replies):
                if not future.done():
                    future.set_result(reply)

    # -- on the compute thread --------------------------------------------------------------
    def _runner(self, size: int) -> ServedRunner:
        runner = self.runners.get(size)
        if runner is None:
            runner = self.runners[size] = self.make_runner(size)
        return runner

    def _run_batch(self, batch: list[tuple[Any, str, float, Any]]) -> list[dict]:
        started = perf_counter()
        n = len(batch)
        size = next(s for s in self.sizes if s >= n)
        runner = self._runner(size)
        rows = [item[0] for item in batch]
        stacked = ({k: np.stack([r[k] for r in rows]) for k in rows[0]} if isinstance(rows[0], dict)
                   else np.stack(rows))
        write_rows(runner.slots.obs, slice(0, n), stacked, runner.slots.observation_space)
        for i, item in enumerate(batch):
            runner.slots.tasks[i] = item[1]
        with runner.rng():
            if not runner.checked:
                runner.check(chunks=True)
            caps = runner.runner.capabilities
            if caps.policy_reset_kind != NO_RESET or caps.tasks:
                runner.runner.start_slots(list(range(size)), [0] * size)  # no episodes in openpi: each call starts one
            actions = runner.step()
            host = actions[:n].detach().to("cpu")
        if host.dtype == torch.bfloat16:
            host = host.float()
        host_np = host.numpy()
        if runner.runner.chunks is None:
            host_np = host_np[:, None]  # one action per call: a chunk of one, openpi's [H, *action] shape
        infer_ms = 1000.0 * (perf_counter() - started)
        self.batches += 1
        return [{"actions": np.ascontiguousarray(host_np[i]),
                 "server_timing": {"infer_ms": infer_ms, "queue_ms": 1000.0 * (started - item[2]),
                                   "batch_size": n, "padded_to": size}}
                for i, item in enumerate(batch)]
