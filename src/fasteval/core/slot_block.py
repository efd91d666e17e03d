"""The one per-slot env code: step, reset, rebuild, call and ``has_attr`` over the envs of some slots.

A :class:`SlotBlock` holds the envs of a set of slots and writes their results into host buffers
indexed by slot. :class:`fasteval.core.envs.SyncSlotEnvs` drives one block of every slot in this
process; each env worker (:mod:`fasteval.core.worker_process`) drives one block of its slots, with
the buffers in shared memory. What differs between the two (when a failed env is rebuilt, how a
failure crosses a process) is theirs; what is done to an env is written here once.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import numpy as np

from fasteval.core.env_lock import ENV_CALLS
from fasteval.core.slots import EnvFailure, _failure, _obs_writer, call_env
from fasteval.core.unread import marker_writer
from fasteval.types.errors import EnvStepError


class CallError:
    """The value of a call that raised, kept in place of the value (it crosses a process as its message)."""

    def __init__(self, message: str, exc: BaseException | None = None):
        self.message, self.exc = message, exc

    def __reduce__(self):
        return (CallError, (self.message,))


def raise_call_errors(name: str, slots: Sequence[int], values: Sequence[Any], where: str = "") -> None:
    """Raise :class:`EnvStepError` naming every slot whose ``env.<name>`` raised (a :class:`CallError`)."""
    errors = [(s, v) for s, v in zip(slots, values) if isinstance(v, CallError)]
    if errors:
        text = "; ".join(f"slot {s}: {v.message}" for s, v in errors)
        raise EnvStepError(f"env.{name} failed{where}: {text}") from errors[0][1].exc


def _one_env_call_at_a_time(method: Callable) -> Callable:
    """``method`` holds :data:`~fasteval.core.env_lock.ENV_CALLS` (one lock taken per batch call, not per slot)."""

    @functools.wraps(method)
    def serialized(*args: Any, **kwargs: Any) -> Any:
        with ENV_CALLS:
            return method(*args, **kwargs)

    return serialized


class SlotBlock:
    """The envs of some slots, stepped and reset per slot into host buffers indexed by slot.

    ``envs`` is indexed by slot (a list of every slot, or a dict of a worker's block); ``first``
    is the slot whose env answers :meth:`has_attr`. ``progress`` receives the slot being worked on
    (``progress[1]``) before each env call: a worker passes its row of the shared memory, so the
    parent can name the culprit if the worker dies.
    """

    def __init__(self, factory: Callable[[], Any], envs: Any, first: int, obs: Any, rewards: np.ndarray,
                 terminated: np.ndarray, truncated: np.ndarray, success: np.ndarray, progress: Any = None):
        self.factory, self.envs, self.first = factory, envs, first
        self.use_obs_buffer(obs)
        self.rewards, self.terminated, self.truncated, self.success = rewards, terminated, truncated, success
        self.progress = [-1, -1, -1] if progress is None else progress
        self.has_success_signal = False
        """True once any env step's ``info`` carried ``is_success`` (even False)."""
        self.unread: dict[int, Callable[[Any], tuple]] | None = None
        """Each slot's step without its observation's work (the env kind's ``unread_step``) while skipping is on."""
        self._unread_step: Callable[[Any], Any] | None = None

    def use_obs_buffer(self, obs: Any) -> None:
        """Write observations into ``obs`` (an array, or a dict of arrays) from now on."""
        self.write_obs = _obs_writer(obs)
        self.mark_unread = marker_writer(obs)

    def skip_unread(self, unread_step: Callable[[Any], Any] | None) -> bool:
        """Skip the work of unread observations from now on (``unread_step(env)``: the env kind's unread step of a
        built env, or ``None`` when it has none), or stop (``unread_step=None``). True when every env of the block
        has one (skipping is then on); otherwise skipping stays off."""
        self.unread, self._unread_step = None, None
        if unread_step is None:
            return False
        envs = self.envs
        steps = {slot: unread_step(envs[slot]) for slot in (envs if isinstance(envs, dict) else range(len(envs)))}
        if any(step is None for step in steps.values()):
            return False
        self.unread, self._unread_step = steps, unread_step
        return True

    @_one_env_call_at_a_time
    def step_reading(self, slots: Sequence[int], actions: np.ndarray, reads: np.ndarray,
                     failures: list[EnvFailure]) -> None:
        """:meth:`step`, where a slot whose observation is not read (``reads[slot]`` False) steps without its
        observation's work and gets the unread marker in its row (:mod:`fasteval.core.unread`)."""
        envs, unread, write, mark, rewards, terminated, truncated, success, progress = (
            self.envs, self.unread, self.write_obs, self.mark_unread, self.rewards, self.terminated, self.truncated,
            self.success, self.progress)
        seen = None
        for slot in slots:
            progress[1] = slot
            try:
                if reads[slot]:
                    obs, reward, term, trunc, info = envs[slot].step(actions[slot])
                    write(slot, obs)
                else:
                    _obs, reward, term, trunc, info = unread[slot](actions[slot])
                    mark(slot)
            except Exception as exc:
                failures.append(_failure(slot, "step", exc))
                continue
            rewards[slot] = reward
            terminated[slot] = term
            truncated[slot] = trunc
            flag = info.get("is_success")
            if flag is None:
                success[slot] = False
            else:
                success[slot] = seen = flag
        if seen is not None:
            self.has_success_signal = True

    @_one_env_call_at_a_time
    def step(self, slots: Sequence[int], actions: np.ndarray, failures: list[EnvFailure]) -> None:
        """Step ``slots`` with their rows of ``actions``; a slot whose env raises goes to ``failures``.

        The hottest Python loop in fasteval for cheap envs: one ``info`` lookup per step both stores
        ``is_success`` and notices that the env reports it (``has_success_signal``).
        """
        envs, write, rewards, terminated, truncated, success, progress = (
            self.envs, self.write_obs, self.rewards, self.terminated, self.truncated, self.success, self.progress)
        seen = None  # not None once any info carried is_success (even False)
        for slot in slots:
            progress[1] = slot
            try:  # free when nothing is raised (Python >= 3.11)
                obs, reward, term, trunc, info = envs[slot].step(actions[slot])
                write(slot, obs)  # an observation that does not fit is this episode's failure too
            except Exception as exc:  # recorded; the owner rebuilds the env and the engine retries the episode
                failures.append(_failure(slot, "step", exc))
                continue
            rewards[slot] = reward
            terminated[slot] = term
            truncated[slot] = trunc
            flag = info.get("is_success")
            if flag is None:
                success[slot] = False
            else:
                success[slot] = seen = flag
        if seen is not None:
            self.has_success_signal = True

    @_one_env_call_at_a_time
    def reset(self, slots: Sequence[int], seeds: Sequence[int], failures: list[EnvFailure]) -> None:
        """Reset each slot with its seed; a slot whose env raises goes to ``failures``."""
        envs, write, progress = self.envs, self.write_obs, self.progress
        for slot, seed in zip(slots, seeds):
            progress[1] = slot
            try:
                obs, _info = envs[slot].reset(seed=int(seed))
                write(slot, obs)
            except Exception as exc:  # recorded; the owner rebuilds the env and the engine retries the episode
                failures.append(_failure(slot, "reset", exc))

    @_one_env_call_at_a_time
    def rebuild(self, slot: int) -> None:
        """Close the env of ``slot`` (errors ignored) and build a new one (its errors raise)."""
        try:
            self.envs[slot].close()
        except Exception:
            pass
        self.envs[slot] = env = self.factory()
        if self.unread is not None:
            step = self._unread_step(env)
            if step is None:  # the same factory: cannot happen, but a rebuilt env that cannot skip must not
                raise RuntimeError("the rebuilt env has no unread step, unlike the env it replaces")
            self.unread[slot] = step

    @_one_env_call_at_a_time
    def call(self, slots: Sequence[int], name: str) -> list[Any]:
        """``[env.<name>() or env.<name> for each slot]`` through the wrappers; a :class:`CallError`
        in place of each value whose call raised."""
        envs, progress, out = self.envs, self.progress, []
        for slot in slots:
            progress[1] = slot
            try:
                out.append(call_env(envs[slot], name))
            except Exception as exc:
                out.append(CallError(f"{type(exc).__name__}: {exc}", exc))
        return out

    def has_attr(self, name: str) -> bool:
        """Whether the first slot's env (through its wrappers) has attribute ``name``."""
        return bool(self.envs[self.first].has_wrapper_attr(name))

    @_one_env_call_at_a_time
    def close(self) -> None:
        """Close every env (errors ignored)."""
        for env in (self.envs.values() if isinstance(self.envs, dict) else self.envs):
            try:
                env.close()
            except Exception:
                pass
