"""A pool of env worker processes, each stepping a contiguous block of slots (``--vectorization async``).

``W`` workers (``--workers``, default ``min(batch, usable cores)``) split the ``B`` slots into
contiguous blocks (``numpy.array_split`` sizes: the first ``B % W`` blocks have one slot more).
Each worker (:mod:`fasteval.core.worker_process`) builds the envs of its block once and steps
the active ones in a plain loop. This module is the parent's side: pure scheduling.

**Shared memory.** The step buffers (observations, every Dict key; actions; rewards; terminated;
truncated; success) live in one shared mapping allocated once (an anonymous ``memfd``, or an
unlinked temp file where there is none), owned by one :class:`~fasteval.core.shared_buffers.SharedBuffers`.
``pool.obs`` *is* that memory: the engine's host
observation buffer reads what the workers wrote, without a copy. A replaced worker maps the same
memory, so the views the engine holds stay valid for the whole life of the pool. For a GPU policy
the engine asks the pool to page-lock the mapping once the policy device is known
(:meth:`WorkerPoolEnvs.pin_host_buffers`: no CUDA context for a CPU policy); :meth:`WorkerPoolEnvs.close`
undoes it (:meth:`~fasteval.core.shared_buffers.SharedBuffers.close`).

**Messages.** Per step and per worker with active slots: one command (``step`` with the block's
active slots) and one reply. Nothing travels per slot except the failure records and the values
of *watched* calls (below), inside that reply. A step on which episodes end adds one ``reset``
command (slots and seeds) and reply per worker involved: the new episodes' first observations
are needed before the next policy call, so resets cannot ride on the next step command.

**Watched calls.** ``call(slots, name)`` (``env.<name>()`` or the attribute, e.g. ``render``
or a task description) goes to the workers the first time. The pool then *watches* those slots:
the workers compute ``name`` right after each step or reset of them and send it in the reply,
so the next ``call`` is answered without another round trip (video frames cost no extra message).
A watched value that nobody asks for before the slot's next step ends its watch.

**Isolation.**

* an env that raises in ``step``/``reset`` is restarted inside its worker; the failure is
  reported for that slot only (``rebuild`` then returns just that slot);
* a worker that dies, or does not answer within ``step_timeout`` seconds (it is killed), is
  replaced (the replacement builds its envs meanwhile; it is awaited at its first command, so a run that ends
  first does not wait for it, and :meth:`WorkerPoolEnvs.close` kills it); the failure is reported for the slot it was working on (it writes its progress into
  shared memory), and ``rebuild`` returns its whole block: those episodes restart from their
  seeds, the other blocks go on.

**Start method.** ``forkserver`` where available (fork is unsafe once torch has started threads),
preloading this module and gymnasium so a worker starts in milliseconds, else ``spawn``. Workers
import the env's plugin namespace (``gym_pusht/...`` imports ``gym_pusht``) through the
picklable factory (:class:`~fasteval.core.envs.EnvFactory`). Scripts that build a pool need the usual
``if __name__ == "__main__":`` guard (spawn/forkserver import the main module), and an env must be
named by an id or ``module:callable`` string: a Python object of the parent (a suite's env
callable) does not exist in a worker (the suite's own error says so). Linux and macOS.

**Ordering.** Commands to one worker are answered in order. Two groups of slots (the pipelined
loop) may each have a step in flight on the same worker; replies are matched by sequence number
and kept until claimed, so ``step_recv`` must be called for each ``step_send``, in any order.
For full overlap make the groups whole blocks (:meth:`WorkerPoolEnvs.groups`).
"""

from __future__ import annotations

import bisect
import multiprocessing
import os
import time
from collections import deque
from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np

from fasteval.core.reset_deadline import ResetDeadline
from fasteval.core.shared_buffers import Layout, SharedBuffers
from fasteval.core.slot_block import raise_call_errors
from fasteval.core.slots import EnvFailure, SlotEnvs, even_ranges
from fasteval.core.worker_process import SUCCESS_SIGNAL, worker_main
from fasteval.types.errors import EnvBuildError, EnvStepError, UserInputError

DIED, TIMED_OUT = "died", "timed out"  # what _receive returns instead of a reply
CLOSE_GRACE_S = 2.0
"""Seconds :meth:`WorkerPoolEnvs.close` gives all workers together to end on their own before it kills them."""


def usable_cores() -> int:
    """CPU cores this process may run on (``os.sched_getaffinity``), else ``os.cpu_count()``."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def default_workers(n_slots: int) -> int:
    """``min(n_slots, usable cores)``: the ``--workers`` default."""
    return max(1, min(int(n_slots), usable_cores()))


def split_blocks(n_slots: int, n_workers: int) -> list[range]:
    """Contiguous slot blocks, ``numpy.array_split`` sizes. ``n_workers`` is capped at ``n_slots``."""
    return even_ranges(n_slots, max(1, min(n_workers, n_slots)))


# -- the parent side --------------------------------------------------------------------------
def default_context() -> multiprocessing.context.BaseContext:
    """``forkserver`` (preloading this module and gymnasium) where available, else ``spawn``."""
    methods = multiprocessing.get_all_start_methods()
    if "forkserver" in methods:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["fasteval.core.workers", "gymnasium"])
        return ctx
    return multiprocessing.get_context("spawn")


class _Worker:
    """Parent-side handle of one worker: its process, pipe, and the commands it has not answered."""

    def __init__(self, index: int, block: range):
        self.index, self.block = index, block
        self.process: Any = None
        self.conn: Any = None
        self.seq = 0
        self.pending: deque[tuple[int, str, tuple]] = deque()  # (seq, kind, slots) in send order
        self.stash: dict[int, tuple] = {}  # replies received before they were claimed
        self.starting = False  # a replacement whose ready message is awaited at its first command (or never)


class WorkerPoolEnvs(SlotEnvs):
    """``n_slots`` envs in ``n_workers`` processes, one contiguous block of slots each.

    Buffers (``obs``, ``rewards``, ``terminated``, ``truncated``, ``success``) are views of the
    shared memory the workers write into; they stay valid until the pool is garbage (also after
    ``close`` and worker replacements).
    """

    overlaps = True
    """``step_send`` returns before the envs have stepped (the loop may run the policy meanwhile)."""

    def __init__(self, factory: Callable[[], gym.Env], n_slots: int, observation_space: gym.Space, action_space: gym.Space,
                 n_workers: int | None = None, step_timeout: float | None = None, context: Any = None,
                 metadata: dict | None = None, unread_step: Callable[[Any], Any] | None = None):
        super().__init__(n_slots, observation_space, action_space)
        self.factory, self.step_timeout = factory, step_timeout
        self.resets = ResetDeadline(step_timeout)
        """The reset limit: a first reset's, then scaled from the first wave's measured resets
        (:mod:`fasteval.core.reset_deadline`)."""
        self.unread_step = unread_step
        """The env kind's unread step (:mod:`fasteval.core.unread`), or ``None``: what :meth:`skip_unread` turns on."""
        self._skipping = False
        self.metadata = dict(metadata or {})
        if isinstance(context, str) or context is None:
            context = default_context() if context is None else multiprocessing.get_context(context)
        self.context = context
        n_workers = default_workers(n_slots) if n_workers is None else int(n_workers)
        if n_workers < 1:
            raise UserInputError(f"workers: expected an integer >= 1, got {n_workers}.")
        self.blocks = split_blocks(n_slots, n_workers)
        self.n_workers = len(self.blocks)
        self.owner = np.concatenate([np.full(len(b), w, dtype=np.int64) for w, b in enumerate(self.blocks)])
        self._owner: list[int] = self.owner.tolist()
        discrete = isinstance(action_space, gym.spaces.Discrete)
        if not discrete and action_space.shape is None:
            raise UserInputError(f"action space {action_space} has no fixed shape; the worker pool needs Box, Discrete, "
                                 f"MultiDiscrete or MultiBinary actions.")
        action_shape = () if discrete else tuple(action_space.shape)
        action_dtype = np.dtype(np.int64) if discrete else np.dtype(action_space.dtype)
        self.layout = Layout.plan(observation_space, action_shape, action_dtype, n_slots, self.n_workers)
        self.buffers = SharedBuffers.allocate(self.layout)
        """The one owner of the shared mapping (its descriptor, the views below, CUDA registration)."""
        self.obs, self.actions = self.buffers.obs, self.buffers.actions
        self.rewards, self.terminated, self.truncated, self.success = (
            self.buffers.rewards, self.buffers.terminated, self.buffers.truncated, self.buffers.success)
        self._progress = self.buffers.progress
        self.reads = self.buffers.reads
        self._workers = [_Worker(w, block) for w, block in enumerate(self.blocks)]
        self._lost: dict[int, list[int]] = {}  # culprit slot -> slots lost with its worker
        self._restarted: set[int] = set()  # slots whose env the worker already rebuilt
        self.renderers: dict[str, str] = {}
        """Each worker's GL renderer, from its ready message (``{"worker 0": ...}``; see :attr:`SlotEnvs.renderers`)."""
        self._watch: dict[str, set[int]] = {}  # name -> slots whose value comes back with each step/reset
        self._cache: dict[str, dict[int, Any]] = {}  # name -> slot -> value after the slot's last step/reset
        self._closed = False
        try:
            for worker in self._workers:
                self._spawn(worker)
            for worker in self._workers:
                self._await_ready(worker)
        except BaseException:
            self.close()
            raise

    # -- groups -----------------------------------------------------------------------------
    def groups(self, n: int) -> list[slice]:
        """``n`` contiguous slot groups made of whole worker blocks (as even as the blocks allow),
        so one group's ``step_send`` never queues behind another group's step. With fewer
        blocks than ``n``, falls back to even slot halves (correct, with less overlap)."""
        if self.n_workers < n:
            return super().groups(n)
        return [slice(self.blocks[g.start].start, self.blocks[g.stop - 1].stop) for g in even_ranges(self.n_workers, n)]

    # -- processes --------------------------------------------------------------------------
    def _spawn(self, worker: _Worker) -> None:
        parent, child = self.context.Pipe(duplex=True)
        process = self.context.Process(
            target=worker_main, name=f"fasteval-env-worker-{worker.index}",
            args=(worker.index, child, self.factory, self.buffers.shared_fd(), self.layout, worker.block, dict(os.environ),
                  self.unread_step if self._skipping else None),
            daemon=True,
        )
        process.start()
        child.close()
        worker.process, worker.conn = process, parent
        worker.seq = 0
        worker.pending = deque([(0, "start", tuple(worker.block))])
        worker.stash = {}

    def _await_ready(self, worker: _Worker) -> None:
        timeout = None if self.step_timeout is None else max(self.step_timeout, 60.0) * len(worker.block)
        reply = self._receive(worker, 0, timeout)
        if reply is TIMED_OUT:
            worker.process.kill()
        if not isinstance(reply, str) and reply[2] is not None:  # a FastevalError (bad input): the user's to fix
            raise reply[2]
        if isinstance(reply, str) or reply[1]:  # one line, exit 2: nothing ran (the traceback is the error's note)
            detail = "" if isinstance(reply, str) else f": {' | '.join(reply[1][0].error.splitlines())}"
            how = f" ({reply}; {self._exit_text(worker)})" if isinstance(reply, str) else ""
            error = EnvBuildError(f"env worker {worker.index} (slots {worker.block.start}..{worker.block.stop - 1}) "
                                  f"failed to build its envs{how}{detail}. Nothing ran; check that the env builds in a "
                                  f"fresh process (--vectorization sync shows its error in this one).")
            if not isinstance(reply, str) and reply[1][0].traceback:
                error.add_note(f"the worker's traceback:\n{reply[1][0].traceback}")
            raise error
        if len(reply) > 3 and reply[3]:
            self.renderers[f"worker {worker.index}"] = reply[3]

    def _exit_text(self, worker: _Worker) -> str:
        worker.process.join(timeout=1.0)
        code = worker.process.exitcode
        return f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"

    def _receive(self, worker: _Worker, seq: int, timeout: float | None) -> Any:
        """The reply to command ``seq`` of ``worker`` (replies to other commands are stashed until
        claimed), ``DIED`` if the worker died, or ``TIMED_OUT``. Claiming ends the command's pending entry."""
        reply = worker.stash.pop(seq, None)
        deadline = None if timeout is None else time.monotonic() + timeout
        while reply is None:
            try:
                if deadline is not None and not worker.conn.poll(max(0.0, deadline - time.monotonic())):
                    return TIMED_OUT
                got = worker.conn.recv()
            except (EOFError, ConnectionResetError, BrokenPipeError, OSError):
                return DIED
            if got[0] == seq:
                reply = got
            else:
                worker.stash[got[0]] = got
        _drop_pending(worker, seq)
        return reply

    def _send(self, worker: _Worker, kind: str, payload: Any, slots: tuple) -> int | None:
        if worker.starting:  # a replacement: its envs must be built before it is given work
            worker.starting = False
            self._await_ready(worker)
        worker.seq += 1
        try:
            worker.conn.send((kind, worker.seq, payload))
        except (BrokenPipeError, ConnectionResetError, OSError):
            return None
        worker.pending.append((worker.seq, kind, slots))
        return worker.seq

    def _replace(self, worker: _Worker, stage: str, slots: Sequence[int], timed_out: bool) -> None:
        """Kill and replace ``worker``; report one failure (the slot it was working on)."""
        seq, slot, _stage = (int(v) for v in self._progress[worker.index])
        culprit = slot if slot in worker.block and (seq in {p[0] for p in worker.pending} or not slots) else (
            slots[0] if slots else worker.block.start)
        if timed_out:
            worker.process.kill()
            limit = self._limit(stage, len(slots))
            waited = (f"{self.resets.what(len(slots))} within {limit:g} s" if stage == "reset" else
                      f"its {stage} of {len(slots)} env(s) within {limit:g} s (--step-timeout {self.step_timeout:g} s "
                      f"per env call)")
            error = (f"env worker {worker.index} timed out: no answer to {waited}: worker killed and replaced, its "
                     f"episodes restart. If the env is only slow rather than hung (a first LIBERO reset under load), "
                     f"raise --step-timeout")
        else:
            error = None
        worker.process.join(timeout=5.0)
        code = worker.process.exitcode
        if error is None:
            how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
            error = f"env worker {worker.index} died ({how}) while on slot {culprit}"
        try:
            worker.conn.close()
        except OSError:
            pass
        for name in self._cache:
            for s in worker.block:
                self._cache[name].pop(s, None)
        self._progress[worker.index] = -1
        self._spawn(worker)
        worker.starting = True  # awaited at its first command: a run that ends first does not wait for its envs
        lost = list(worker.block)
        self._lost[culprit] = lost
        self._restarted.difference_update(lost)
        self.failures.append(EnvFailure(culprit, stage, error, exit_code=None if timed_out else code))

    def _limit(self, stage: str, n: int) -> float | None:
        """A command's deadline: :attr:`resets`' per env reset (a worker resets its slots in turn), else ``step_timeout``."""
        if stage == "reset":
            return self.resets.limit(n)
        return self.step_timeout

    def _claim(self, worker: _Worker, seq: int, stage: str, slots: Sequence[int]) -> tuple | None:
        reply = self._receive(worker, seq, self._limit(stage, len(slots)))
        if isinstance(reply, str):
            self._replace(worker, stage, slots, timed_out=reply is TIMED_OUT)
            return None
        failures = reply[1]
        if failures:
            for failure in failures:
                self.failures.append(failure)
                self._restarted.add(failure.slot)
                for cache in self._cache.values():
                    cache.pop(failure.slot, None)
        return reply

    # -- watched calls ----------------------------------------------------------------------
    def _watched_for(self, slots: Sequence[int]) -> dict[str, frozenset]:
        """The watched names with the slots among ``slots``; values not read since their last refresh end their watch."""
        if not self._watch:
            return {}
        out = {}
        for name, wslots in list(self._watch.items()):
            cache = self._cache[name]
            stale = [s for s in slots if s in cache]  # computed, never asked for: stop watching
            for s in stale:
                del cache[s]
                wslots.discard(s)
            hit = wslots.intersection(slots)
            if hit:
                out[name] = frozenset(hit)
        return out

    def _store(self, values: dict | None) -> None:
        if values:
            for name, got in values.items():
                self._cache.setdefault(name, {}).update(got)

    def call(self, slots: Sequence[int], name: str) -> list[Any]:
        """``[env.<name>() or env.<name> for each slot]`` (through wrappers), computed in the workers.

        Values of watched slots come from the last step/reset reply; the others take one round
        trip to their workers (in parallel). Those slots are watched from then on. Raises
        :class:`EnvStepError` if an env raised (or its worker died) for any slot.
        """
        slots = [int(s) for s in slots]
        cache = self._cache.setdefault(name, {})
        out: dict[int, Any] = {s: cache.pop(s) for s in slots if s in cache}
        missing = [s for s in slots if s not in out]
        if missing:
            sent = []
            for w, wslots in self._split(sorted(missing)):
                worker = self._workers[w]
                seq = self._send(worker, "call", (wslots, name), tuple(wslots))
                sent.append((worker, seq, wslots))
            for worker, seq, wslots in sent:
                reply = None if seq is None else self._claim(worker, seq, "call", wslots)
                if reply is None:
                    if seq is None:
                        self._replace(worker, "call", wslots, timed_out=False)
                    raise EnvStepError(f"env.{name}: env worker {worker.index} died or timed out; "
                                       f"slots {worker.block.start}..{worker.block.stop - 1} were restarted.")
                out.update(zip(wslots, reply[2]))
        self._watch.setdefault(name, set()).update(slots)
        values = [out[s] for s in slots]
        raise_call_errors(name, slots, values, where=" in env workers")
        return values

    def has_attr(self, name: str) -> bool:
        """Whether slot 0's env (through its wrappers) has attribute ``name``."""
        worker = self._workers[0]
        seq = self._send(worker, "has", name, ())
        reply = DIED if seq is None else self._receive(worker, seq, self.step_timeout)
        if isinstance(reply, str):
            raise EnvStepError(f"env worker 0 died or timed out while asked whether its env has {name!r}.")
        return bool(reply[2])

    # -- the SlotEnvs interface -------------------------------------------------------------
    def reset_slots(self, slots: Sequence[int], seeds: Sequence[int]) -> None:
        """Reset ``slots`` with ``seeds`` (one command per worker involved, in parallel)."""
        if len(slots) == 0:
            return
        slots = [int(s) for s in slots]
        seed_of = dict(zip(slots, (int(s) for s in seeds)))
        sent = []
        for w, wslots in self._split(sorted(slots)):
            worker = self._workers[w]
            seq = self._send(worker, "reset", (wslots, [seed_of[s] for s in wslots], self._watched_for(wslots)), tuple(wslots))
            if seq is None:
                self._replace(worker, "reset", wslots, timed_out=False)
                continue
            sent.append((worker, seq, wslots))
        started, waves = time.monotonic(), []
        for worker, seq, wslots in sent:
            reply = self._claim(worker, seq, "reset", wslots)
            if reply is not None:
                self._store(reply[2])
                waves.append((time.monotonic() - started, len(wslots)))  # workers reset in parallel: from the send
        self.resets.note(waves)

    def step_send(self, slots: Sequence[int], actions: np.ndarray) -> list[int]:
        """Copy the action rows of ``slots`` into the shared actions and send one command per worker
        involved. Returns the slots sent, ascending (pass them to :meth:`step_recv`)."""
        if len(slots) == 0:
            return []
        slots = sorted(slots)
        lo, hi = slots[0], slots[-1] + 1
        if hi - lo == len(slots):  # a contiguous run of slots (the usual case): one slice copy
            self.actions[lo:hi] = actions[lo:hi]
        else:  # only these rows: another group's rows may be in flight
            index = np.asarray(slots, dtype=np.int64)
            self.actions[index] = actions[index]
        sent: list[int] = []
        for w, wslots in self._split(slots):
            worker = self._workers[w]
            seq = self._send(worker, "step", (wslots, self._watched_for(wslots) if self._watch else None), tuple(wslots))
            if seq is None:
                self._replace(worker, "step", wslots, timed_out=False)
                continue
            sent.extend(wslots)
        return sent

    def skip_unread(self, on: bool) -> bool:
        """Tell every worker to skip unread observations' work (or to stop); on only if every worker's envs can
        (otherwise it is turned off again everywhere). A replaced worker starts in the same mode."""
        step = self.unread_step if on else None
        if (on and step is None) or (not on and not self._skipping):
            return False  # nothing to turn on, or every worker is off already (no message: a replacement may be starting)
        answers = []
        for worker in self._workers:
            seq = self._send(worker, "unread", step, ())
            reply = DIED if seq is None else self._receive(worker, seq, self.step_timeout)
            if isinstance(reply, str):
                raise EnvStepError(f"env worker {worker.index} died or timed out while told to skip unread observations "
                                   f"({reply}).")
            answers.append(bool(reply[2]))
        self._skipping = bool(answers) and all(answers)
        if on and not self._skipping:
            return self.skip_unread(False)
        return self._skipping

    def step_send_reading(self, slots: Sequence[int], actions: np.ndarray, reads: np.ndarray) -> list[int]:
        """:meth:`step_send`, with the read flags of ``slots`` copied into the shared memory first."""
        if len(slots):
            lo, hi = min(slots), max(slots) + 1
            self.reads[lo:hi] = reads[lo:hi]  # rows of other slots in range are not stepped now: harmless
        return self.step_send(slots, actions)

    def step_recv(self, sent: Sequence[int]) -> None:
        """Wait for the step of ``sent`` (slots, as returned by :meth:`step_send`, possibly with
        restarted slots removed). Results are already in the shared buffers; failures are recorded."""
        if len(sent) == 0:
            return
        owner = self._owner
        wanted: set[int] | None = None
        for w in range(owner[min(sent)], owner[max(sent)] + 1):
            worker = self._workers[w]
            steps = [p for p in worker.pending if p[1] == "step"]
            if len(steps) > 1:  # two groups in flight on this worker: the one that holds these slots
                wanted = wanted or set(sent)
                steps = [p for p in steps if wanted.intersection(p[2])]
            if not steps:
                continue  # lost with a replaced worker (its slots restart anyway), or nothing sent there
            seq, _kind, wslots = steps[0]
            reply = self._claim(worker, seq, "step", wslots)
            if reply is not None:
                values = reply[2]
                if values and SUCCESS_SIGNAL in values:
                    self.has_success_signal = True
                    values = {k: v for k, v in values.items() if k != SUCCESS_SIGNAL}
                self._store(values)

    def _split(self, slots: list[int]) -> list[tuple[int, list[int]]]:
        """``[(worker, its slots)]`` for ascending ``slots`` (a bisection per worker involved)."""
        out, i, n, owner, blocks = [], 0, len(slots), self._owner, self.blocks
        while i < n:
            w = owner[slots[i]]
            stop = bisect.bisect_left(slots, blocks[w].stop, i)
            out.append((w, slots[i:stop]))
            i = stop
        return out

    def step(self, slots: Sequence[int], actions: np.ndarray) -> None:
        self.step_recv(self.step_send(slots, actions))

    def rebuild(self, slot: int) -> list[int]:
        """Slots whose env state was lost with the failure of ``slot``: its worker's whole block
        if the worker was replaced, else just ``slot`` (its worker rebuilt the env already, or
        does now)."""
        if slot in self._lost:
            return self._lost.pop(slot)
        if slot in self._restarted:
            self._restarted.discard(slot)
            return [slot]
        worker = self._workers[int(self.owner[slot])]
        seq = self._send(worker, "restart", [slot], (slot,))
        reply = DIED if seq is None else self._receive(worker, seq, self.step_timeout)
        if isinstance(reply, str):
            self._replace(worker, "reset", [slot], timed_out=reply is TIMED_OUT)
            self.failures = [f for f in self.failures if f.slot != slot]
            return self._lost.pop(slot, list(worker.block))
        for cache in self._cache.values():
            cache.pop(slot, None)
        return [slot]

    @property
    def pinned(self) -> bool:  # type: ignore[override]
        """Whether the shared buffers are page-locked for CUDA now, as their owner knows it (registered
        by :meth:`pin_host_buffers`, undone by :meth:`close`): host -> device copies of ``obs`` then go
        straight from the workers' memory."""
        return self.buffers.pinned

    def pin_host_buffers(self) -> bool:
        """Register the shared buffers with CUDA (``cudaHostRegister``); see :meth:`SlotEnvs.pin_host_buffers`."""
        return self.buffers.register_pinned()

    def close(self) -> None:
        """Stop the workers (a dead or hung one is killed), and unregister the buffers from CUDA. The
        buffers stay readable (no longer pinned)."""
        if self._closed:
            return
        self._closed = True
        for worker in self._workers:
            if worker.conn is None:
                continue
            try:
                worker.conn.send(("close", 0, None))
            except (BrokenPipeError, ConnectionResetError, OSError):
                pass
        deadline = time.monotonic() + CLOSE_GRACE_S  # one grace for all: a hung or still starting worker is killed
        for worker in self._workers:
            if worker.process is None:
                continue
            worker.process.join(timeout=max(0.0, deadline - time.monotonic()))
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join(timeout=2.0)
            try:
                worker.conn.close()
            except OSError:
                pass
        self.buffers.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _drop_pending(worker: _Worker, seq: int) -> None:
    for i, entry in enumerate(worker.pending):
        if entry[0] == seq:
            del worker.pending[i]
            return

