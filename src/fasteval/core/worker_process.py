"""One env worker process: build the envs of a block of slots, then answer the pool's commands.

Commands ``(kind, seq, payload)`` and replies ``(seq, failures, values)``:

* ``step``  payload ``(slots, watched)``: step each slot with its row of the shared actions;
* ``reset`` payload ``(slots, seeds, watched)``;
* ``call``  payload ``(slots, name)``: ``values`` is the list of ``env.<name>()`` results;
* ``has``   payload ``name``: ``values`` is ``has_wrapper_attr(name)`` of the block's first env;
* ``restart`` payload ``slots``: rebuild those envs;
* ``unread`` payload ``unread_step``: skip the work of unread observations (the shared ``reads`` flags say which,
  :mod:`fasteval.core.unread`) from now on with the env kind's ``unread_step``, or stop (``None``); ``values``
  is whether skipping is on;
* ``close``.

``failures`` lists the :class:`~fasteval.core.slots.EnvFailure` of envs that raised; each such
env was already rebuilt. What is done to each env is :class:`~fasteval.core.slot_block.SlotBlock`'s. ``watched`` maps a name to the slots whose value is sent back after the step
or reset, in ``values`` (``{name: {slot: value}}``). Before each slot, the worker writes
``(seq, slot, stage)`` into its progress row of the shared memory, so that the parent can name
the slot it was on if it dies.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

import gymnasium as gym

from fasteval.core.slot_block import SlotBlock
from fasteval.core.slots import EnvFailure, ReportsRenderer, _failure
from fasteval.core.shared_buffers import Layout, SharedBuffers, SharedFd
from fasteval.types.errors import FastevalError

SUCCESS_SIGNAL = "__is_success_seen__"
"""Key a worker adds to one step reply's values the first time an env's info carries ``is_success``."""

STAGE_STEP, STAGE_RESET, STAGE_CALL = 0, 1, 2
"""Stage codes of the progress row."""


class _Broken:
    """Stands in for an env whose rebuild failed: every use raises with the rebuild's error."""

    def __init__(self, error: str):
        self.error = error

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"the env could not be rebuilt after a failure: {self.error}")


def worker_main(index: int, conn: Any, factory: Callable[[], gym.Env], shared: SharedFd, layout: Layout, block: range,
                environ: dict[str, str], unread_step: Callable[[Any], Any] | None = None) -> None:
    """Worker ``index``: build the envs of ``block``, then answer commands until ``close``.

    ``environ`` is the parent's environment when the worker was started: a forkserver child would
    otherwise keep the server's (variables such as ``MUJOCO_GL`` set later would not reach it). ``unread_step``:
    skipping is on in the pool, with the env kind's unread step (a replacement worker starts with it, as the
    ``unread`` command would set it).
    """
    _adopt_environ(environ)
    try:
        envs = _build_envs(conn, factory, block)
    except PARENT_GONE:  # the parent ended (killed, Ctrl-C) while this worker was starting: nothing to tell
        return
    if envs is None:
        return
    try:
        worker = _Worker(index, conn, factory, SharedBuffers.attach(layout, shared), block, envs)
        if unread_step is not None:
            worker.unread(0, unread_step)
        worker.serve()
    except PARENT_GONE:  # the parent ended mid-command: end quietly (no traceback on the terminal)
        pass
    finally:
        for env in envs.values():
            try:
                env.close()
            except Exception:
                pass


PARENT_GONE = (BrokenPipeError, ConnectionResetError, EOFError, KeyboardInterrupt)
"""What a worker sees when its parent has ended (a closed pipe) or the terminal's Ctrl-C reached it too: the
parent decides what a run does on SIGINT, and a worker ends without a traceback."""


def _adopt_environ(environ: dict[str, str]) -> None:
    if os.environ != environ:  # a forkserver child starts with the server's environment, not the parent's
        os.environ.clear()
        os.environ.update(environ)


def _build_envs(conn: Any, factory: Callable[[], gym.Env], block: range) -> dict[int, Any] | None:
    """The envs of ``block``, after telling the parent they are ready (with this process's GL renderer, where the
    env kinds report one); ``None`` after reporting a failure."""
    envs: dict[int, Any] = {}
    try:
        for slot in block:
            envs[slot] = factory()
    except BaseException as exc:  # reported to the parent, which raises it (fasteval's own errors as they are)
        own = exc if isinstance(exc, FastevalError) and _picklable(exc) else None
        conn.send((0, [_failure(block.start, "start", exc)], own))
        for env in envs.values():
            try:
                env.close()
            except Exception:
                pass
        return None
    conn.send((0, None, None, factory.renderer() if isinstance(factory, ReportsRenderer) else None))
    return envs


def _picklable(obj: Any) -> bool:
    import pickle

    try:
        pickle.loads(pickle.dumps(obj))
    except Exception:
        return False
    return True


class _Worker:
    """The command loop of one worker: its block's envs (a :class:`SlotBlock` over the shared buffers)."""

    def __init__(self, index: int, conn: Any, factory: Callable[[], gym.Env], buffers: SharedBuffers, block: range,
                 envs: dict[int, Any]):
        self.conn, self.buffers = conn, buffers
        self.progress = buffers.progress[index]
        self.block = SlotBlock(factory, envs, block.start, buffers.obs, buffers.rewards, buffers.terminated,
                               buffers.truncated, buffers.success, progress=self.progress)
        self.announced_success = False  # is_success seen in an info: told to the parent once
        self.handlers = {"step": self.step, "reset": self.reset, "call": self.call, "has": self.has,
                         "restart": self.restart_slots, "unread": self.unread}
        self._step_block = self._step_all

    def serve(self) -> None:
        """Answer commands until ``close`` or until the parent's end of the pipe goes away."""
        conn, handlers = self.conn, self.handlers
        while True:
            try:
                kind, seq, payload = conn.recv()
            except (EOFError, OSError, KeyboardInterrupt):
                return
            if kind == "close":
                return
            handler = handlers.get(kind)
            if handler is not None:
                conn.send(handler(seq, payload))

    def restart(self, slot: int) -> None:
        """Rebuild the env of ``slot`` now (the parent's ``rebuild`` then needs no round trip)."""
        try:
            self.block.rebuild(slot)
        except Exception as exc:  # the next use raises, and is reported again
            self.block.envs[slot] = _Broken(f"{type(exc).__name__}: {exc}")

    def settle(self, slots: Sequence[int], failures: list[EnvFailure]) -> list[int]:
        """Rebuild the envs that failed; the slots that did not."""
        if not failures:
            return list(slots)
        for failure in failures:
            self.restart(failure.slot)
        failed = {f.slot for f in failures}
        return [s for s in slots if s not in failed]

    def watch_values(self, watched: dict | None, done: Sequence[int]) -> dict | None:
        if not watched:
            return None
        out = {}
        for name, wslots in watched.items():
            hit = [s for s in done if s in wslots]
            out[name] = dict(zip(hit, self.block.call(hit, name)))
        return out

    def _step_all(self, slots: Sequence[int], failures: list[EnvFailure]) -> None:
        self.block.step(slots, self.buffers.actions, failures)

    def _step_reading(self, slots: Sequence[int], failures: list[EnvFailure]) -> None:
        self.block.step_reading(slots, self.buffers.actions, self.buffers.reads, failures)

    def unread(self, seq: int, unread_step: Callable[[Any], Any] | None) -> tuple:
        """Skip unread observations' work from now on with ``unread_step``, or stop (``None``); replies whether
        skipping is on."""
        done = self.block.skip_unread(unread_step)
        self._step_block = self._step_reading if done else self._step_all
        return seq, None, done

    def step(self, seq: int, payload: tuple) -> tuple:
        slots, watched = payload
        self.progress[0], self.progress[2] = seq, STAGE_STEP
        failures: list[EnvFailure] = []
        self._step_block(slots, failures)
        values = self.watch_values(watched, self.settle(slots, failures))
        if self.block.has_success_signal and not self.announced_success:
            values, self.announced_success = {**(values or {}), SUCCESS_SIGNAL: True}, True
        return seq, failures or None, values

    def reset(self, seq: int, payload: tuple) -> tuple:
        slots, seeds, watched = payload
        self.progress[0], self.progress[2] = seq, STAGE_RESET
        failures: list[EnvFailure] = []
        self.block.reset(slots, seeds, failures)
        return seq, failures or None, self.watch_values(watched, self.settle(slots, failures))

    def call(self, seq: int, payload: tuple) -> tuple:
        slots, name = payload
        self.progress[0], self.progress[2] = seq, STAGE_CALL
        return seq, None, self.block.call(slots, name)

    def has(self, seq: int, name: str) -> tuple:
        try:
            value = self.block.has_attr(name)
        except Exception:
            value = False
        return seq, None, value

    def restart_slots(self, seq: int, slots: Sequence[int]) -> tuple:
        for slot in slots:
            self.restart(slot)
        return seq, None, None
