"""Expand a :class:`~fasteval.doors.sweep.spec.SweepSpec` into jobs: one per (policy, env, seed block).

This is the one place of the sweep that looks at the filesystem before running: it resolves
checkpoint folders (relative to the sweep file's folder) and computes each policy's digest.

Policy digest: ``sha256`` of a checkpoint folder's files (relative path, size and bytes of
every file, in sorted order; names starting with ``.`` are skipped), or of the reference
string for ``zero``, ``random`` and ``module:callable``. The digest, not the name, keys the
stored episodes: renaming a policy keeps its results, retraining a checkpoint in place does not.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fasteval.core.ledger import available_memory_bytes, episode_memory_bytes, memory_size  # numpy only: no torch
from fasteval.types.errors import UserInputError
from fasteval.types.refs import split_callable_ref
from fasteval.types.spec import EvalSpec
from fasteval.doors.sweep.spec import SweepOptions, SweepSpec, SweepSpecError, canonical_json


@dataclass(frozen=True)
class Job:
    """One unit of work: a policy on an env for one seed block. Crosses process boundaries by pickle.

    Episode ``i`` (``0 <= i < n_episodes``) is reset with seed ``seed + i`` and stored under the
    key ``(policy_digest, env_id, env_kwargs_json, task, seed + i)``.
    """

    policy_name: str
    """Label from the sweep spec."""
    policy_ref: str
    """The reference the worker loads (checkpoint folders as absolute paths)."""
    policy_digest: str
    """sha256 hex of the checkpoint's files, or of the reference string."""
    env_name: str
    """Label from the sweep spec."""
    env_id: str
    """Gymnasium id or ``module:callable``."""
    env_kwargs_json: str
    """Env kwargs as canonical JSON."""
    task: str
    """The task of the episodes, as the engine reports it (for single-task envs, the env id)."""
    seed: int
    """First seed of the block."""
    n_episodes: int
    """Episodes in the block."""
    options: SweepOptions
    """Shared options (batch size, device, ...)."""

    def __post_init__(self) -> None:
        for name in ("policy_name", "policy_ref", "policy_digest", "env_name", "env_id", "task"):
            if not (isinstance(getattr(self, name), str) and getattr(self, name)):
                raise UserInputError(f"Job.{name}: expected a non-empty string, got {getattr(self, name)!r}.")
        if not (isinstance(self.seed, int) and self.seed >= 0 and isinstance(self.n_episodes, int) and self.n_episodes >= 1):
            raise UserInputError(f"Job: expected seed >= 0 and n_episodes >= 1, got seed={self.seed!r}, n_episodes={self.n_episodes!r}.")
        if not isinstance(self.options, SweepOptions):
            raise UserInputError(f"Job.options: expected SweepOptions, got {type(self.options).__name__}.")

    @property
    def job_id(self) -> str:
        """Stable id from the episode key's fixed part and the block's first seed."""
        key = canonical_json([self.policy_digest, self.env_id, self.env_kwargs_json, self.task, self.seed])
        return hashlib.sha256(key.encode()).hexdigest()[:20]

    @property
    def seeds(self) -> range:
        return range(self.seed, self.seed + self.n_episodes)

    @property
    def label(self) -> str:
        return f"{self.policy_name} x {self.env_name} seeds {self.seed}..{self.seed + self.n_episodes - 1}"

    def eval_spec(self) -> EvalSpec:
        """The engine spec of this job (what each worker builds its Engine from)."""
        import json

        return EvalSpec(env=self.env_id, policy=self.policy_ref, env_kwargs=json.loads(self.env_kwargs_json),
                        n_episodes=self.n_episodes, seed=self.seed, **self.options.eval_fields())


def digest_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def folder_digest(folder: str | Path) -> str:
    """sha256 over (relative path, size, bytes) of every file under ``folder``, in sorted order."""
    folder = Path(folder)
    h = hashlib.sha256()
    files = sorted(
        p for p in folder.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)
    )
    for path in files:
        rel = path.relative_to(folder).as_posix().encode()
        h.update(len(rel).to_bytes(8, "little") + rel + path.stat().st_size.to_bytes(8, "little"))
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def resolve_policy(ref: str, base_dir: str | Path | None = None) -> tuple[str, str]:
    """``ref`` -> (the reference a worker loads, its digest). Raises :class:`SweepSpecError`.

    Relative folder paths are resolved against ``base_dir`` (the sweep file's folder).
    """
    # Here, not at the top: fasteval.robot.policies imports torch, and `fasteval sweep`/`fasteval report` refuse a
    # bad path without it (issue 42).
    from fasteval.robot.policies.builtin import BUILTIN_POLICIES
    from fasteval.robot.policies.checkpoint import WEIGHTS_NAME, is_checkpoint_dir
    from fasteval.robot.policies.remote import is_remote_ref

    if ref in BUILTIN_POLICIES or is_remote_ref(ref):  # a served policy: its address (docs/serving.md)
        return ref, digest_bytes(ref.encode())
    path = Path(ref)
    if not path.is_absolute() and base_dir is not None:
        path = Path(base_dir) / path
    if path.is_dir():
        if not is_checkpoint_dir(path):
            raise SweepSpecError(
                f"policy {ref!r}: the folder {str(path)!r} is not a checkpoint; expected config.json and {WEIGHTS_NAME} in it."
            )
        return str(path.resolve()), folder_digest(path)
    if split_callable_ref(ref) is not None:
        return ref, digest_bytes(ref.encode())
    where = f" (relative paths are resolved against {str(base_dir)!r})" if base_dir is not None else ""
    raise SweepSpecError(
        f"policy {ref!r}: expected 'zero', 'random', a checkpoint folder{where}, or module:callable; "
        f"no folder {str(path)!r} exists and it is not of the form module:callable."
    )


def entry_policies(entry: Any, base_dir: str | Path | None = None) -> list[tuple[str, str]]:
    """``[(name, ref)]`` of a sweep's policy entry: itself, or for a glob (expanded against ``base_dir``) or a
    list, each of its policies named ``ENTRY/<short name>`` (:mod:`fasteval.run.policy_refs`)."""
    from fasteval.run.policy_refs import expand_policy_refs, is_glob
    from fasteval.types.policy_names import short_names

    if len(entry.refs) == 1 and not is_glob(entry.refs[0]):
        return [(entry.name, entry.refs[0])]
    try:
        refs = expand_policy_refs(entry.refs, base_dir)
    except UserInputError as exc:
        raise SweepSpecError(f"policy {entry.name!r}: {exc}") from None
    if len(refs) == 1:
        return [(entry.name, refs[0])]
    return [(f"{entry.name}/{short}", ref) for short, ref in zip(short_names(refs), refs)]


def check_refs(spec: SweepSpec) -> None:
    """Every env and ``module:callable`` policy of ``spec`` resolves, checked before any job runs: an env id
    typo (``CartPoel-v1``) is a :class:`SweepSpecError` with gymnasium's suggestion (exit 2), not a failed
    job after the good ones ran. Each problem is named, all of them at once. Nothing is built: a plugin's
    module and a callable's module are imported (the trust rules were applied to the file before)."""
    from fasteval.robot.env_kinds import check_env_known
    from fasteval.robot.policies.remote import is_remote_ref
    from fasteval.types.refs import resolve_callable

    trust = spec.options.trust_remote_code
    problems = []
    for env in spec.envs:
        try:
            check_env_known(env.id, env.kwargs, trust)
        except UserInputError as exc:
            problems.append(f"env {env.name!r}: {exc}")
    for policy in spec.policies:
        for ref in policy.refs:
            if split_callable_ref(ref) is not None and not is_remote_ref(ref):
                try:
                    resolve_callable(ref, what="policy", trust_remote_code=trust)
                except UserInputError as exc:
                    problems.append(f"policy {policy.name!r}: {exc}")
    if len(problems) == 1:
        raise SweepSpecError(f"sweep: {problems[0]} Nothing ran.")
    if problems:
        raise SweepSpecError(f"sweep: {len(problems)} problems, nothing ran: " + " | ".join(problems))


def check_jobs_fit_in_memory(spec: SweepSpec) -> None:
    """Refuse (exit 2, one line) a sweep whose jobs' episodes cannot fit in this machine's memory, as ``-n`` is
    refused (:func:`fasteval.core.ledger.check_fits_in_memory`), per job, before the store lists any episode."""
    available = available_memory_bytes()
    if available is None:
        return
    for env in spec.envs:
        n = spec.episodes_for(env)
        needed = episode_memory_bytes(n)
        if needed > available:
            raise SweepSpecError(
                f"sweep: env {env.name!r}: episodes={n} per job: the job's per-episode results alone need about "
                f"{memory_size(needed)} of memory ({episode_memory_bytes(1)} bytes per episode), and this machine has "
                f"{memory_size(available)} available. Give fewer episodes per seed block and more seed blocks "
                f"(seeds: [...]).")


def plan(spec: SweepSpec, base_dir: str | Path | None = None) -> list[Job]:
    """All jobs of ``spec``, in (policy, env, seed block) order. Checks that digests are distinct, and that
    every env and policy resolves (:func:`check_refs`)."""
    resolved: list[tuple[str, str, str]] = []
    seen: dict[str, str] = {}
    for entry in spec.policies:
        for name, given in entry_policies(entry, base_dir):
            ref, digest = resolve_policy(given, base_dir)
            if digest in seen:
                raise SweepSpecError(
                    f"policies {seen[digest]!r} and {name!r} are the same policy (identical files, digest "
                    f"{digest[:12]}); their episodes would share keys. Keep one of them."
                )
            seen[digest] = name
            resolved.append((name, ref, digest))
    check_jobs_fit_in_memory(spec)
    check_refs(spec)
    jobs = []
    for name, ref, digest in resolved:
        for env in spec.envs:
            for seed in spec.seeds:
                jobs.append(Job(
                    policy_name=name, policy_ref=ref, policy_digest=digest,
                    env_name=env.name, env_id=env.id, env_kwargs_json=env.kwargs_json, task=env.id,
                    seed=seed, n_episodes=spec.episodes_for(env), options=spec.options,
                ))
    return jobs
