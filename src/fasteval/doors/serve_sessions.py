"""fasteval's batched protocol on the server: one session per evaluating engine.

A client engine opens a session with its spaces, its slot groups (one, or two with ``--pipeline``)
and the spec fields its policy side needs. The session holds one :class:`~fasteval.doors.serve_policy.ServedRunner`
per group, so everything that is per slot (chunk queues, observation history, per-episode noise
generators, task descriptions) stays on the server, in the same runner an in-process engine builds,
and the two groups never share state. Messages (maps with ``"__fasteval__"``: their kind):

``open``  ``observation_space``, ``action_space`` (:func:`~fasteval.types.wire.space_to_wire`), ``groups``
  (``[[start, stop], ...]``, contiguous from 0), ``spec`` (observation_format, rename, obs_dtype,
  reset_mode, env, env_kwargs, amp, compile, cuda_graph), ``seed``, ``has_tasks``; or ``resume``: the
  id of a session this client had before its connection dropped. Reply ``opened``: the session id, each
  group's ``reset_kind`` and ``continuous``, and the policy digest.
``dry_run``  ``obs``: every slot's first observation. Each group's runner runs the engine's dry run
  and picks its accelerators. Reply ``checked`` with their facts.
``step``  ``group``, ``seq`` (the client's request number), ``slots`` (rows of the group whose
  observations follow and whose actions come back), ``obs``, ``events`` (``[kind, rows, seeds, tasks]``
  in the order they happened: ``start`` for a wave's start, ``reset`` for a slot's next episode) and
  ``rng_seed`` (the client's run seed: a new one reseeds the session's torch RNG, as a new run does
  in-process). Reply ``actions`` (``[len(slots), ...]``) and ``server_timing``. A request repeated
  with the same ``seq`` (the client retrying after a dropped connection) gets the same reply again
  without running the policy twice.
``close``  the session ends.

With ``--batch-sessions`` the ``dry_run`` reply's facts say whether each group's steps may share policy calls
with other sessions (``batch_sessions``; :mod:`fasteval.doors.serve_merge`), and such steps go through
:meth:`Session.prepare_merged` and :meth:`Session.merged_reply` instead of :meth:`Session.step`.

Anything wrong in a message is a :class:`~fasteval.types.wire.WireError`; an exception of the policy is
reported as ``error`` naming the request. Neither touches another session.
"""

from __future__ import annotations

import dataclasses
import secrets
from time import perf_counter
from typing import Any

import numpy as np
import torch

from fasteval.core.capabilities import run_meta_of
from fasteval.doors.serve_policy import RunnerOptions, ServedRunner
from fasteval.types.errors import UserInputError
from fasteval.types.wire import KIND, WireError, field, space_from_wire

CLIENT_SPEC_FIELDS = ("observation_format", "rename", "obs_dtype", "reset_mode", "env", "env_kwargs", "amp",
                      "compile", "cuda_graph", "policy_block")
"""The client spec fields that shape the served runner (the rest of the spec stays on the client)."""


def client_options(base: RunnerOptions, spec: Any) -> RunnerOptions:
    """The server's options with the client's :data:`CLIENT_SPEC_FIELDS`, validated as an EvalSpec validates them."""
    from fasteval.types.spec import EvalSpec

    if not isinstance(spec, dict):
        raise WireError(f"open: field 'spec' must be a map, got {type(spec).__name__}")
    unknown = sorted(set(spec) - set(CLIENT_SPEC_FIELDS))
    if unknown:
        raise WireError(f"open: unknown spec fields {unknown}; expected some of {list(CLIENT_SPEC_FIELDS)}")
    values = {k: spec[k] for k in CLIENT_SPEC_FIELDS if k in spec}
    try:
        EvalSpec(**{"env": "x", **values})  # the spec's own checks of each value
    except (UserInputError, ValueError, TypeError) as exc:
        raise WireError(f"open: {exc}") from None
    return dataclasses.replace(base, **values)


def _groups(raw: Any) -> list[tuple[int, int]]:
    if not isinstance(raw, list) or not raw or len(raw) > 2:
        raise WireError("open: field 'groups' must be a list of one or two [start, stop] pairs")
    out, start = [], 0
    for pair in raw:
        if (not isinstance(pair, list) or len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool)
                                                                   for v in pair) or pair[0] != start or pair[1] <= start):
            raise WireError(f"open: groups must be contiguous [start, stop] pairs from 0, got {raw!r}")
        out.append((pair[0], pair[1]))
        start = pair[1]
    if start > 65536:
        raise WireError(f"open: {start} slots is over the server's limit of 65536")
    return out


def _int_list(value: Any, what: str, below: int | None = None) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        raise WireError(f"step: {what} must be a list of integers >= 0")
    if below is not None and any(v >= below for v in value):
        raise WireError(f"step: {what} must be rows of the group (below {below}), got {value}")
    return value


class Session:
    """One client engine's runners (see the module docstring). Used on the compute thread only."""

    def __init__(self, base: RunnerOptions, message: dict):
        self.id = secrets.token_hex(8)
        observation_space = space_from_wire(message.get("observation_space"))
        action_space = space_from_wire(message.get("action_space"))
        self.groups = _groups(message.get("groups"))
        self.options = client_options(base, message.get("spec", {}))
        self.seed = field(message, "seed", int, "an integer")
        has_tasks = bool(message.get("has_tasks", False))
        self.runners = [ServedRunner(self.options, observation_space, action_space, stop - start, self.seed, has_tasks)
                        for start, stop in self.groups]
        self.last: dict[int, tuple[int, dict]] = {}
        self.detached_at: float | None = None
        self.spaces = (observation_space, action_space)
        self.prospect = (repr(self.options), repr(observation_space), repr(action_space))
        """What a merge key holds of this session before its dry run (:meth:`waits_for`)."""
        self.plans: list[Any] = []
        """Per group, its :class:`~fasteval.doors.serve_merge.MergePlan` (only with ``--batch-sessions``)."""

    def opened(self, resumed: bool = False) -> dict[str, Any]:
        from fasteval.run.rundir import policy_digest

        first = self.runners[0]
        return {KIND: "opened", "session": self.id, "resumed": resumed,
                "groups": [r.describe() for r in self.runners],
                "continuous": all(r.runner.capabilities.continuous for r in self.runners),
                "policy_digest": policy_digest(first.policy, self.options.policy),
                "policy_type": type(first.policy).__name__, "device": str(first.device)}

    def dry_run(self, message: dict) -> dict[str, Any]:
        obs = message.get("obs")
        facts: dict[str, Any] = {}
        for (start, stop), runner in zip(self.groups, self.runners):
            runner.write(slice(0, stop - start), _rows(obs, slice(start, stop)))
            with runner.rng():
                facts = runner.check()
        meta = {}
        for runner in self.runners:
            meta.update(run_meta_of(runner.policy))
        return {KIND: "checked", "facts": {k: v for k, v in facts.items() if isinstance(v, (str, bool, int, float))},
                "run_meta": {k: v for k, v in meta.items() if isinstance(v, (str, bool, int, float))}}

    # -- cross-session batching (fasteval.doors.serve_merge; only with --batch-sessions) ---------
    def plan_merges(self) -> str:
        """Decide, after the dry run, which groups may share calls with other sessions; returns the fact."""
        from fasteval.doors.serve_merge import plan_for
        from fasteval.run.rundir import policy_digest

        digest = policy_digest(self.runners[0].policy, self.options.policy)
        self.plans = [plan_for(runner, digest, *self.spaces) for runner in self.runners]
        return "; ".join(dict.fromkeys(plan.fact for plan in self.plans))

    def merge_key(self, message: dict) -> tuple | None:
        """The merge key of a step request's group, or None (stepped per session)."""
        group = message.get("group")
        if not self.plans or not isinstance(group, int) or isinstance(group, bool) or not 0 <= group < len(self.plans):
            return None
        return self.plans[group].key

    def waits_for(self, key: tuple) -> bool:
        """Whether a merged call of ``key`` should wait for this session's request: it is attached, and one of its
        groups has that key, or (before its dry run) it was opened with the key's options and spaces."""
        if self.detached_at is not None:
            return False
        if self.plans:
            return any(plan.key == key for plan in self.plans)
        return self.prospect == key[1:4]

    def prepare_merged(self, message: dict) -> Any:
        """A step request's own part of a merged call: checks, observation rows, reseed, events. Returns the
        cached reply of a retried request, else ``(runner, plan, row index or None, group, seq)``."""
        parsed = self._parse_step(message)
        if isinstance(parsed, dict):
            return parsed
        group, seq, runner = parsed
        slots = _int_list(message.get("slots"), "slots", runner.n_rows)
        whole = len(slots) == runner.n_rows and slots == list(range(runner.n_rows))
        runner.write(slice(0, runner.n_rows) if whole else slots, message.get("obs"))
        self._maybe_reseed(message.get("rng_seed"))
        with runner.rng():
            self._events(runner, message.get("events", []))
        index = None if whole else torch.as_tensor(slots, dtype=torch.long)
        return runner, self.plans[group], index, group, seq

    def merged_reply(self, group: int, seq: int, actions: torch.Tensor, timing: dict) -> dict[str, Any]:
        if actions.dtype == torch.bfloat16:
            actions = actions.float()
        reply = {KIND: "actions", "group": group, "seq": seq, "actions": actions.numpy(), "server_timing": dict(timing)}
        self.last[group] = (seq, reply)
        return reply

    def _maybe_reseed(self, rng_seed: Any) -> None:
        if isinstance(rng_seed, int) and not isinstance(rng_seed, bool) and rng_seed != self.seed:
            self.seed = rng_seed
            for each in self.runners:
                each.reseed(rng_seed)

    def _parse_step(self, message: dict) -> Any:
        group = field(message, "group", int, "a group index")
        if not 0 <= group < len(self.runners):
            raise WireError(f"step: group {group} does not exist (the session has {len(self.runners)})")
        seq = field(message, "seq", int, "an integer")
        cached = self.last.get(group)
        if cached is not None and cached[0] == seq:
            return cached[1]  # the client retried after a dropped connection: same answer, no second policy call
        runner = self.runners[group]
        if not runner.checked:
            raise WireError("step: the session's dry run has not run yet (send dry_run first)")
        return group, seq, runner

    def step(self, message: dict) -> dict[str, Any]:
        parsed = self._parse_step(message)
        if isinstance(parsed, dict):
            return parsed
        group, seq, runner = parsed
        started = perf_counter()
        slots = _int_list(message.get("slots"), "slots", runner.n_rows)
        rows: Any = slice(0, runner.n_rows) if len(slots) == runner.n_rows and slots == list(range(runner.n_rows)) else slots
        runner.write(rows, message.get("obs"))
        self._maybe_reseed(message.get("rng_seed"))
        with runner.rng():
            self._events(runner, message.get("events", []))
            actions = runner.step()
            if not isinstance(rows, slice):
                actions = actions[torch.as_tensor(rows, dtype=torch.long, device=actions.device)]
            host = actions.detach().to("cpu")
        if host.dtype == torch.bfloat16:
            host = host.float()  # numpy has no bfloat16; the cast is exact, and the client casts to the env's dtype
        reply = {KIND: "actions", "group": group, "seq": seq, "actions": host.numpy(),
                 "server_timing": {"infer_ms": 1000.0 * (perf_counter() - started)}}
        self.last[group] = (seq, reply)
        return reply

    @staticmethod
    def _events(runner: ServedRunner, events: Any) -> None:
        if not isinstance(events, list):
            raise WireError("step: field 'events' must be a list")
        for event in events:
            if not isinstance(event, list) or len(event) != 4 or event[0] not in ("start", "reset"):
                raise WireError("step: each event must be [\"start\" or \"reset\", rows, seeds, tasks or None]")
            kind, rows, seeds, tasks = event
            rows = _int_list(rows, "event rows", runner.n_rows)
            seeds = _int_list(seeds, "event seeds")
            if len(seeds) != len(rows):
                raise WireError("step: an event needs one seed per row")
            if tasks is not None:
                if not isinstance(tasks, list) or len(tasks) != len(rows) or not all(isinstance(t, str) for t in tasks):
                    raise WireError("step: an event's tasks must be one string per row")
                for row, task in zip(rows, tasks):
                    runner.slots.tasks[row] = task
            if kind == "start":
                runner.runner.start_slots(rows, seeds)
            else:
                runner.runner.reset_slots(rows, seeds)


def _rows(obs: Any, rows: slice) -> Any:
    if isinstance(obs, dict):
        return {key: value[rows] if isinstance(value, np.ndarray) else value for key, value in obs.items()}
    return obs[rows] if isinstance(obs, np.ndarray) else obs
