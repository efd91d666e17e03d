"""Cross-session batching for fasteval's protocol (``fasteval serve --batch-sessions MAX_WAIT_MS``): one
policy call for the ``step`` requests of several sessions (several client engines, or Ray env workers).

What is merged. A session's group (one :class:`~fasteval.doors.serve_policy.ServedRunner`) is *mergeable*
when its whole step is ``postprocess(module(prepare(obs)))`` with no per-slot state
(:meth:`~fasteval.core.policy.PolicyRunner.functional_step`: an ``nn.Module`` called as it is, no reset,
no chunk queue, no task descriptions, no normalization stats), called on blocks of R rows
(``policy_call`` ``blocks of R rows``), run eager (no CUDA graph, no torch.compile, no autocast), and
drawing nothing from torch's global RNG (declared ``run_meta()["policy_rng"] == "global"``, or seen
moving the RNG on a probe call). Groups with the same key (policy weights digest, runner options,
spaces) share one call: each request's active rows are prepared by its own session's input stages,
concatenated, run once through the canonical call (:func:`~fasteval.core.policy_blocks.blocked` with R
rows), split back, and post-processed per session. A row's output depends on its own input only (the
property ``tests/test_policy_blocks.py`` checks), so each session gets the bits its own call gives.

What falls back. Every other group (chunking, per-slot ``reset``, per-episode noise, tasks, a CUDA
graph...) is stepped per session exactly as without batching; its ``checked`` reply says why
(``batch_sessions`` fact, in the client's meta as ``server_policy_batch_sessions``).

When a batch closes: as soon as every live session of the key (attached, and with the key after its dry run, or
opened with the key's options and spaces and waiting for its dry run) has a request waiting, or ``max_wait_ms``
after the batch's first request (Triton's ``max_queue_delay``). Replies carry
``server_timing`` ``merged_sessions`` and ``merged_rows``; :attr:`SessionMerger.stats` counts the calls.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any, Awaitable, Callable

import torch

from fasteval.core.capabilities import run_meta_of
from fasteval.core.policy_blocks import blocked
from fasteval.doors.serve_policy import ServedRunner

MERGED = "merged across sessions"


@dataclass
class MergePlan:
    """How one served group is called when batching is on: ``key`` None means per session (``reason``)."""

    key: tuple | None
    fact: str
    prepare: Callable[[Any], Any] | None = None
    module: Any = None
    post: Callable[[torch.Tensor], torch.Tensor] | None = None
    rows: int = 0


def plan_for(served: ServedRunner, digest: str, observation_space: Any, action_space: Any) -> MergePlan:
    """The plan of a served group, after its dry run (``served.checked``); decided once per session."""
    runner, options = served.runner, served.options
    functional = runner.functional_step()
    if functional is None:
        return MergePlan(None, "per-session call (the policy keeps per-slot state or is not a plain nn.Module call: "
                               "resets, chunk queues, task descriptions or normalization stats)")
    if not runner.policy_call.startswith("blocks of"):
        return MergePlan(None, f"per-session call (the policy runs on the {runner.policy_call})")
    if not served.eager or options.compile or options.amp != "none":
        return MergePlan(None, "per-session call (an accelerated step: CUDA graph, torch.compile or autocast)")
    if run_meta_of(served.policy).get("policy_rng") == "global":
        return MergePlan(None, "per-session call (the policy draws from torch's global RNG)")
    prepare, module, post = functional
    if _moves_global_rng(served, prepare, module):
        return MergePlan(None, "per-session call (the policy's forward drew from torch's global RNG)")
    rows = options.policy_block
    key = (digest, repr(options), repr(observation_space), repr(action_space), str(served.device))  # [1:4]: prospect
    return MergePlan(key, f"{MERGED} (blocks of {rows} rows)", prepare, module, post, rows)


def _moves_global_rng(served: ServedRunner, prepare: Callable[[Any], Any], module: Any) -> bool:
    """One probe call of the network on the current input: whether it changed torch's global RNG state."""
    devices = [served.device] if served.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices), torch.inference_mode():
        before = torch.get_rng_state()
        cuda_before = torch.cuda.get_rng_state(served.device) if devices else None
        served.h2d.copy()
        module(prepare(served.h2d.policy_input))
        moved = not torch.equal(before, torch.get_rng_state())
        if devices:
            moved = moved or not torch.equal(cuda_before, torch.cuda.get_rng_state(served.device))
    return moved


def select_rows(batch: Any, index: torch.Tensor | None) -> Any:
    """``batch[index]`` for a Tensor, a TensorDict or a dict of them (``index`` None: all rows)."""
    if index is None:
        return batch
    if isinstance(batch, dict):
        return {key: select_rows(value, index) for key, value in batch.items()}
    return batch[index.to(batch.device)]


def concat_rows(parts: list[Any]) -> Any:
    first = parts[0]
    if isinstance(first, dict):
        return {key: concat_rows([p[key] for p in parts]) for key in first}
    return torch.cat(parts)


@dataclass
class MergeItem:
    """One waiting ``step`` request: its session, message and the future its reply goes to."""

    session: Any
    message: dict
    future: "asyncio.Future[dict]"


@dataclass
class _Pending:
    items: list[MergeItem] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None


class SessionMerger:
    """Gathers the ``step`` requests of mergeable groups and runs them as one call per key.

    ``on_compute``: the server's serialiser (:meth:`PolicyServer.on_compute`); ``live``: the server's
    sessions (a callable returning them). Used on the event loop's thread only; the call itself runs
    under ``on_compute``."""

    def __init__(self, max_wait_ms: float, on_compute: Callable[..., Awaitable[Any]],
                 live: Callable[[], list[Any]]):
        self.max_wait_s = max_wait_ms / 1000.0
        self.on_compute = on_compute
        self.live = live
        self.pending: dict[tuple, _Pending] = {}
        self.stats = {"calls": 0, "merged_calls": 0, "rows": 0, "merged_rows": 0, "max_sessions": 0}
        """``calls``: policy calls made here; ``merged_calls``: those with rows of two or more sessions;
        ``rows``/``merged_rows``: rows they ran; ``max_sessions``: the most sessions in one call."""

    async def submit(self, session: Any, key: tuple, message: dict) -> dict:
        loop = asyncio.get_running_loop()
        pending = self.pending.setdefault(key, _Pending())
        group = message.get("group")
        if any(item.session is session and item.message.get("group") == group for item in pending.items):
            self._close(key)  # the same group twice (a retry): the first goes in the earlier call
            pending = self.pending.setdefault(key, _Pending())
        item = MergeItem(session, message, loop.create_future())
        pending.items.append(item)
        members = {id(s) for s in self.live() if s.waits_for(key)}
        waiting = {id(i.session) for i in pending.items}
        if members <= waiting:
            self._close(key)
        elif pending.timer is None:
            pending.timer = loop.call_later(self.max_wait_s, self._close, key)
        return await item.future

    def _close(self, key: tuple) -> None:
        pending = self.pending.pop(key, None)
        if pending is None:
            return
        if pending.timer is not None:
            pending.timer.cancel()
        asyncio.get_running_loop().create_task(self._run(pending.items))

    async def _run(self, items: list[MergeItem]) -> None:
        """Run :meth:`compute` under the server's serialiser, then answer every request here, on the loop's
        thread (the compute may run on the compute thread: ``threaded_compute``)."""
        outcomes: dict[int, Any] = {}
        try:
            await self.on_compute(self.compute, items, outcomes)
        except BaseException as exc:  # noqa: BLE001 -- every request not yet answered hears it
            for i in range(len(items)):
                outcomes.setdefault(i, exc)
        for i, item in enumerate(items):
            outcome = outcomes.get(i, RuntimeError("fasteval serve: a merged step got no answer"))
            if item.future.done():
                continue
            if isinstance(outcome, BaseException):
                item.future.set_exception(outcome)
            else:
                item.future.set_result(outcome)

    def compute(self, items: list[MergeItem], outcomes: dict[int, Any]) -> None:
        """One call for ``items`` (on the compute side): each request's own checks, events and input stages,
        then the network once; ``outcomes[i]``: item ``i``'s reply, or its own exception."""
        started = perf_counter()
        parts = []
        for i, item in enumerate(items):
            try:
                prepared = item.session.prepare_merged(item.message)
            except Exception as exc:  # this request's own error (a bad message)
                outcomes[i] = exc
                continue
            if isinstance(prepared, dict):  # a retried request: its cached reply
                outcomes[i] = prepared
                continue
            parts.append((i, item, prepared))
        if not parts:
            return
        with torch.inference_mode():
            inputs, counts, wanted = [], [], []
            for _i, item, (served, plan, index, _group, _seq) in parts:
                served.h2d.copy()
                n = len(index) if index is not None else served.n_rows
                if n == 0:  # no active row: row 0 is computed (its answer dropped), so the output has its shape
                    index = torch.zeros(1, dtype=torch.long)
                inputs.append(select_rows(plan.prepare(served.h2d.policy_input), index))
                counts.append(max(n, 1))
                wanted.append(n)
            plan = parts[0][2][1]
            out = blocked(plan.module, plan.rows)(concat_rows(inputs) if len(inputs) > 1 else inputs[0])
            total = sum(counts)
            sessions = len({id(item.session) for _i, item, _ in parts})
            self.stats["calls"] += 1
            self.stats["rows"] += total
            self.stats["max_sessions"] = max(self.stats["max_sessions"], sessions)
            if sessions > 1:
                self.stats["merged_calls"] += 1
                self.stats["merged_rows"] += total
            start = 0
            timing = {"infer_ms": 1000.0 * (perf_counter() - started), "merged_sessions": sessions,
                      "merged_rows": total}
            for (i, item, (_served, each, _index, group, seq)), n, k in zip(parts, counts, wanted):
                actions = each.post(out[start:start + n])[:k].detach().to("cpu")
                start += n
                outcomes[i] = item.session.merged_reply(group, seq, actions, timing)
