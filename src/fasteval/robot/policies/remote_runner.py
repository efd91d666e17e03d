"""The engine's policy runners for a served policy (see :mod:`fasteval.robot.policies.remote`).

Both plug into the step sequence as any :class:`~fasteval.core.policy.PolicyRunner` does: the loop
calls ``runner(policy_input)`` once per step per slot group (one group, two with ``--pipeline``, so
that one group's request is answered while the other group's async envs step), and
``reset_slots`` / ``start_slots`` when slots start episodes. A runner tells its groups apart by the
policy-input object of each (the engine's :meth:`~fasteval.core.transfer.HostToDevice.group` views,
built once). The client keeps no per-slot state of the policy (``reset_kind`` is ``none``): that is the
server's, kept apart per group, so ``--pipeline`` works with stateful and chunking policies too.

:class:`RemoteRunner` (fasteval's protocol, :mod:`fasteval.doors.serve_sessions` on the server): the
engine is mirrored on the server, one served runner per group, and every request carries the observations
of that group's active slots (the loop tells the runner which: ``note_active``; idle slots send nothing)
and the resets (slots, seeds, task descriptions) since its last request. Results are the in-process ones,
per seed.

:class:`OpenpiRunner` (openpi's protocol): each slot plays the chunk of its last answer; the slots whose
chunk ran out (or that start an episode) send their observation (active slots only), all requests at once on the one
connection, and each answer's ``actions`` (``[H, *action]``, or one action) becomes that slot's chunk.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

import gymnasium as gym
import numpy as np
import torch

from fasteval.core.capabilities import Capabilities
from fasteval.core.pipeline import group_rows
from fasteval.core.policy import NO_RESET, PolicyRunner
from fasteval.robot.policies.remote import DEFAULT_TIMEOUT_S, LOAD_TIMEOUT_S, PolicyServerLost, RemotePolicy, RemotePolicyError
from fasteval.robot.policies.task_descriptions import TASK_ATTR
from fasteval.types.errors import ActionSpaceMismatchError, PolicyDryRunError, PolicyLoadError, UserInputError
from fasteval.types.wire import KIND, SERVER_KINDS, WireError, message_kind, pack, space_to_wire, unpack

SPEC_FIELDS = ("observation_format", "rename", "obs_dtype", "reset_mode", "env", "env_kwargs", "amp", "compile",
               "cuda_graph", "policy_block")


def build_remote_runner(remote: RemotePolicy, spec: Any, envs: Any, h2d: Any, n_slots: int) -> PolicyRunner:
    """The engine's runner for a served policy (the hook of :func:`~fasteval.robot.policies.runner.build_policy_runner`)."""
    if str(spec.device).startswith("cuda"):
        raise UserInputError(f"--device {spec.device}: the policy runs on the server ({remote.ref}); give the device "
                             f"to fasteval serve (--device), and leave the client's --device auto or cpu.")
    timeout = spec.policy_timeout_s
    remote.connection.timeout_s = float(timeout) if timeout is not None else DEFAULT_TIMEOUT_S
    cls = RemoteRunner if remote.protocol == "fasteval" else OpenpiRunner
    return cls(remote, spec, envs, h2d, n_slots)


def _host_rows(obs: Any, rows: slice | np.ndarray) -> Any:
    return {k: v[rows] for k, v in obs.items()} if isinstance(obs, dict) else obs[rows]


class _RemoteBase(PolicyRunner):
    """What both runners share: the groups, the pass-through step, the per-group output tensors."""

    def __init__(self, remote: RemotePolicy, spec: Any, envs: Any, h2d: Any, n_slots: int):
        super().__init__(remote, envs.action_space, n_slots, "auto")
        self.capabilities = Capabilities(
            reset_kind=NO_RESET, policy_reset_kind=NO_RESET,  # the per-slot state is the server's (kept apart per group)
            wants_active=True,  # the loop tells each call's active slots: only theirs are sent
            accelerated_elsewhere=True,  # --amp, --compile and --cuda-graph travel with the spec to the server
            enforces_policy_timeout=True)  # requests time out and reconnects retry up to policy_timeout_s
        self.remote, self.spec, self.envs = remote, spec, envs
        self.policy_call = (f"served: the server calls the policy (blocks of {spec.policy_block} rows asked for; "
                            f"not verified bitwise across the connection)" if remote.protocol == "fasteval" else
                            "served (openpi): the server's own batching")
        self.tasks = None
        self.groups = group_rows(envs, bool(spec.pipeline))
        self._group_of = {id(h2d.group(rows)[0]): g for g, rows in enumerate(self.groups)}
        self.has_tasks = bool(envs.has_attr(TASK_ATTR))
        self._noted: list[int] | None = None

    def note_active(self, active: list[int]) -> None:
        self._noted = active

    def _active_in(self, g: int) -> list[int] | None:
        """The slots of group ``g`` that run an episode in this call (what the loop noted, right before
        calling for this group), or None for every slot of the group (nothing noted: the dry run; or
        every slot active)."""
        rows, noted = self.groups[g], self._noted
        self._noted = None
        if noted is None or len(noted) == rows.stop - rows.start:
            return None
        return noted

    def dry_run(self, obs: Any) -> None:
        self._check()
        self.plain_step = self._step = self.__call__

    def use_step(self, step: Any) -> None:
        """Accelerators are the server's business (``--amp``, ``--compile``, ``--cuda-graph`` travel with the spec)."""

    def __call__(self, obs: Any) -> torch.Tensor:
        return self._group_call(self._group_of[id(obs)])

    def _group_call(self, g: int) -> torch.Tensor:
        raise NotImplementedError

    def _check(self) -> None:
        raise NotImplementedError

    def _split(self, slots: Sequence[int], seeds: Sequence[int]) -> list[tuple[int, list[int], list[int], list[int]]]:
        """Per group: (group, slots, group rows, seeds) of the given slots."""
        out = []
        for g, rows in enumerate(self.groups):
            picked = [(s, int(seed)) for s, seed in zip(slots, seeds) if rows.start <= s < rows.stop]
            out.append((g, [s for s, _ in picked], [s - rows.start for s, _ in picked], [seed for _, seed in picked]))
        return out

    def _exchange(self, requests: list[dict], slow: bool = False) -> list[Any]:
        """``slow``: the server loads the policy or runs its dry run (at least :data:`LOAD_TIMEOUT_S`)."""
        conn = self.remote.connection
        return conn.exchange([pack(r) for r in requests], max(conn.timeout_s, LOAD_TIMEOUT_S) if slow else None)


class RemoteRunner(_RemoteBase):
    """fasteval's protocol (see the module docstring)."""

    def __init__(self, remote: RemotePolicy, spec: Any, envs: Any, h2d: Any, n_slots: int):
        super().__init__(remote, spec, envs, h2d, n_slots)
        self.session: str | None = None
        self.seq = [0] * len(self.groups)
        self.events: list[list[Any]] = [[] for _ in self.groups]
        self.group_kinds: list[dict[str, Any]] = []
        self._out: list[torch.Tensor | None] = [None] * len(self.groups)
        self._rows = [list(range(rows.stop - rows.start)) for rows in self.groups]
        self._open()
        remote.connection.on_reconnect = self._resume

    # -- the session -----------------------------------------------------------------------------
    def _open(self) -> None:
        spec = self.spec
        message = {KIND: "open", "observation_space": space_to_wire(self.envs.observation_space),
                   "action_space": space_to_wire(self.envs.action_space),
                   "groups": [[rows.start, rows.stop] for rows in self.groups],
                   "spec": {k: getattr(spec, k) for k in SPEC_FIELDS if hasattr(spec, k)},
                   "seed": int(spec.seed), "has_tasks": self.has_tasks}
        reply = self._request(message, "opened", what="opening a session", error=PolicyLoadError)
        self.session = reply["session"]
        self.group_kinds = reply["groups"]
        self.capabilities = replace(self.capabilities, continuous=bool(reply["continuous"]))
        self.remote.set_digest(str(reply.get("policy_digest", "")))
        self.remote.server_facts.update({"policy_type": reply.get("policy_type"), "device": reply.get("device")})

    def _resume(self) -> None:
        """After a reconnect: attach to the same session (its per-slot state), or stop the run."""
        conn = self.remote.connection
        conn.send(pack({KIND: "open", "resume": self.session}))
        reply = _decode(conn.recv(LOAD_TIMEOUT_S), conn.max_bytes)
        if reply.get(KIND) != "opened":
            raise PolicyServerLost(f"policy server {self.remote.ref} came back without this run's session "
                                   f"({reply.get('error', 'no session')}): the episodes in flight cannot go on exactly")

    def _request(self, message: dict, expect: str, what: str, error: type = RemotePolicyError) -> dict:
        reply = _decode(self._exchange([message], slow=message[KIND] != "step")[0], self.remote.connection.max_bytes)
        kind = reply.get(KIND)
        if kind == "error":
            raise error(f"policy server {self.remote.ref}: {reply.get('request') or what} failed: {reply.get('error')}")
        if kind != expect:
            raise RemotePolicyError(f"policy server {self.remote.ref}: expected a {expect!r} reply to {what}, got {kind!r}")
        return reply

    # -- the engine's calls ----------------------------------------------------------------------
    def _check(self) -> None:
        message = {KIND: "dry_run", "obs": self.envs.obs}
        try:
            reply = self._request(message, "checked", what="the dry run", error=PolicyDryRunError)
        except RemotePolicyError as exc:
            raise PolicyDryRunError(str(exc)) from None
        self.remote.server_facts.update({f"policy_{k}": v for k, v in reply.get("facts", {}).items()})
        self.remote.server_facts.update(reply.get("run_meta", {}))

    def start_slots(self, slots: Sequence[int], seeds: Sequence[int]) -> None:
        self._add_events("start", slots, seeds)

    def reset_slots(self, slots: Sequence[int], seeds: Sequence[int]) -> None:
        self._add_events("reset", slots, seeds)

    def _add_events(self, kind: str, slots: Sequence[int], seeds: Sequence[int]) -> None:
        slots = list(slots)
        tasks = [str(t) for t in self.envs.call(slots, TASK_ATTR)] if self.has_tasks and slots else None
        task_of = dict(zip(slots, tasks)) if tasks is not None else {}
        for g, group_slots, rows, group_seeds in self._split(slots, seeds):
            wave = kind == "start" and self.group_kinds[g]["reset_kind"] == "wave"
            if rows or wave:
                self.events[g].append([kind, rows, group_seeds,
                                       [task_of[s] for s in group_slots] if tasks is not None else None])

    def _group_call(self, g: int) -> torch.Tensor:
        """One step request for group ``g``: the observations of its active slots only (idle rows' actions
        are never used: their rows of the output keep what they held)."""
        rows = self.groups[g]
        active = self._active_in(g)
        if active is None:
            slots, obs = self._rows[g], _host_rows(self.envs.obs, rows)
        else:
            slots, obs = [s - rows.start for s in active], _host_rows(self.envs.obs, np.asarray(active))
        self.seq[g] += 1
        message = {KIND: "step", "group": g, "seq": self.seq[g], "slots": slots,
                   "obs": obs, "events": self.events[g], "rng_seed": torch.initial_seed()}
        reply = self._request(message, "actions", what=f"step request #{self.seq[g]} (group {g})")
        self.events[g] = []
        actions = reply["actions"]
        out = self._out[g]
        if out is None or out.dtype != _torch_dtype(actions.dtype):
            out = self._out[g] = torch.zeros((rows.stop - rows.start, *actions.shape[1:]), dtype=_torch_dtype(actions.dtype))
        expected = (len(slots), *out.shape[1:])
        if actions.shape != expected:
            raise RemotePolicyError(f"policy server {self.remote.ref}: step request #{self.seq[g]} returned actions of "
                                    f"shape {actions.shape}, expected {expected}")
        if active is None:
            out.numpy()[...] = actions
        else:
            out.numpy()[slots] = actions
        return out


class OpenpiRunner(_RemoteBase):
    """openpi's protocol (see the module docstring)."""

    def __init__(self, remote: RemotePolicy, spec: Any, envs: Any, h2d: Any, n_slots: int):
        super().__init__(remote, spec, envs, h2d, n_slots)
        space = envs.action_space
        self.action_shape = () if isinstance(space, gym.spaces.Discrete) else tuple(space.shape)
        self.chunks: list[np.ndarray | None] = [None] * envs.n_slots
        self.pos = np.zeros(envs.n_slots, dtype=np.int64)
        self._out = [torch.zeros((rows.stop - rows.start, *self.action_shape),
                                 dtype=torch.int64 if isinstance(space, gym.spaces.Discrete) else _torch_dtype(np.dtype(space.dtype)))
                     for rows in self.groups]
        self.remote.set_digest(repr(sorted((k, repr(v)) for k, v in remote.connection.metadata.items())))

    def start_slots(self, slots: Sequence[int], seeds: Sequence[int]) -> None:
        self.reset_slots(slots, seeds)

    def reset_slots(self, slots: Sequence[int], seeds: Sequence[int]) -> None:
        for s in slots:
            self.chunks[s] = None  # a new episode asks for a fresh chunk

    def _observation(self, slot: int) -> dict[str, Any]:
        obs = self.envs.obs
        request = {k: v[slot] for k, v in obs.items()} if isinstance(obs, dict) else {"observation": obs[slot]}
        if self.has_tasks:
            request["prompt"] = str(self.envs.call([slot], TASK_ATTR)[0])
        return request

    def _ask(self, slots: list[int], slow: bool = False) -> list[np.ndarray]:
        replies = self._exchange([self._observation(s) for s in slots], slow)
        out = []
        for slot, raw in zip(slots, replies):
            if isinstance(raw, str):
                raise RemotePolicyError(f"policy server {self.remote.ref}: the request for slot {slot} failed: "
                                        f"{raw.strip().splitlines()[0] if raw.strip() else 'error'}")
            reply = unpack(raw, self.remote.connection.max_bytes)
            actions = reply.get("actions") if isinstance(reply, dict) else None
            out.append(self._as_chunk(actions, slot))
        return out

    def _as_chunk(self, actions: Any, slot: int) -> np.ndarray:
        if isinstance(actions, np.ndarray):
            if actions.shape == self.action_shape:
                return actions[None]
            if actions.ndim == len(self.action_shape) + 1 and actions.shape[1:] == self.action_shape and len(actions):
                return actions
        got = f"shape {actions.shape}" if isinstance(actions, np.ndarray) else type(actions).__name__
        raise ActionSpaceMismatchError(
            f"policy server {self.remote.ref}: the reply for slot {slot} has 'actions' of {got}; expected one action of "
            f"shape {self.action_shape} or a chunk [H, {', '.join(map(str, self.action_shape))}] for the env's {self.envs.action_space}.")

    def _check(self) -> None:
        try:
            self._ask([0], slow=True)
        except (RemotePolicyError, ActionSpaceMismatchError) as exc:
            raise PolicyDryRunError(str(exc)) from None

    def _group_call(self, g: int) -> torch.Tensor:
        """The next action of each active slot of group ``g``; a slot whose chunk ran out asks for a new one
        (idle slots ask for nothing: their rows of the output keep what they held)."""
        rows = self.groups[g]
        active = self._active_in(g)
        slots = range(rows.start, rows.stop) if active is None else active
        chunks, pos = self.chunks, self.pos
        need = [s for s in slots if chunks[s] is None or pos[s] >= len(chunks[s])]
        if need:
            for slot, chunk in zip(need, self._ask(need)):
                chunks[slot], pos[slot] = chunk, 0
        view = self._out[g].numpy()
        for s in slots:
            view[s - rows.start] = chunks[s][pos[s]]
            pos[s] += 1
        return self._out[g]


def _decode(raw: Any, max_bytes: int) -> dict:
    if isinstance(raw, str):
        raise RemotePolicyError(f"the policy server answered with text: {raw.strip().splitlines()[0] if raw.strip() else ''}")
    try:
        reply = unpack(raw, max_bytes)
        message_kind(reply, SERVER_KINDS)
    except WireError as exc:
        raise RemotePolicyError(f"the policy server sent an invalid reply: {exc}") from None
    return reply


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.empty(0, dtype=dtype)).dtype

