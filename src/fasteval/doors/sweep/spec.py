"""The sweep spec: which policies, on which envs, with which seeds, and shared options.

A sweep file (YAML, TOML or JSON) is parsed into plain data by :func:`load_sweep_file`, then
validated once by :meth:`SweepSpec.from_dict` into frozen dataclasses. Nothing here touches
the policies or envs themselves; :mod:`fasteval.doors.sweep.plan` turns a spec into jobs.

Example (YAML)::

    name: demo
    episodes: 20            # per job: per (policy, env, seed block)
    seeds: [0, 1000]        # seed blocks: block s runs seeds s .. s + episodes - 1
    policies:
      - {name: zero, ref: zero}
      - {name: parity, ref: "fasteval.testing.policies:ParityPolicy"}
    envs:
      - {name: known, id: fasteval/KnownAnswer-v0}
      - {name: known-nan, id: fasteval/KnownAnswer-v0, kwargs: {nan_reward_seeds: [3]}}
      - {name: cartpole, id: CartPole-v1, episodes: 5}
    options: {batch_size: 8, device: cpu, vectorization: sync, max_steps: null}
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

from fasteval.types.errors import UserInputError
from fasteval.types.mapping_files import read_mapping_file
from fasteval.types.spec import MAX_SEED, WHAT_FIELDS, EvalSpec



class SweepSpecError(UserInputError):
    """The sweep file is malformed or inconsistent (CLI exit code 2)."""


def canonical_json(value: Any) -> str:
    """Sorted keys, no spaces, no NaN: the form env kwargs are keyed and compared by."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _fail(where: str, expected: str, got: Any, fix: str = "") -> None:
    raise SweepSpecError(f"{where}: expected {expected}, got {got!r}." + (f" {fix}" if fix else ""))


def _check_keys(where: str, data: Any, allowed: tuple[str, ...], required: tuple[str, ...] = ()) -> None:
    if not isinstance(data, Mapping):
        _fail(where, f"a mapping with keys {', '.join(allowed)}", data)
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise SweepSpecError(
            f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; expected only {', '.join(allowed)}. Check the spelling."
        )
    missing = [k for k in required if k not in data]
    if missing:
        raise SweepSpecError(f"{where}: missing required key(s) {', '.join(map(repr, missing))}.")


@dataclass(frozen=True)
class PolicyEntry:
    """One policy of the sweep."""

    name: str
    """Short label used in reports and progress lines. Unique within the sweep."""

    ref: str | tuple[str, ...]
    """Policy reference: ``zero``, ``random``, a checkpoint folder (relative paths are resolved
    against the sweep file's folder), or ``module:callable``. Never a live object. A glob of checkpoint
    folders (``ckpts/*/pretrained_model``) or a list of references is several policies: the plan gives each
    its own cells, named ``NAME/<short name>`` (its step number, or its folder's name; see
    :mod:`fasteval.types.policy_names`)."""

    def __post_init__(self) -> None:
        if not (isinstance(self.name, str) and self.name.strip()):
            _fail("policies[].name", "a non-empty string", self.name)
        if isinstance(self.ref, list):
            object.__setattr__(self, "ref", tuple(self.ref))
        refs = self.ref if isinstance(self.ref, tuple) else (self.ref,)
        if not refs or not all(isinstance(r, str) and r.strip() for r in refs):
            _fail(f"policy {self.name!r}: ref", "a non-empty policy reference (zero, random, a folder, module:callable), "
                  "a glob of checkpoint folders, or a list of them", self.ref)

    @property
    def refs(self) -> tuple[str, ...]:
        """The entry's references, as given (globs not expanded yet: the plan does it)."""
        return self.ref if isinstance(self.ref, tuple) else (self.ref,)


@dataclass(frozen=True)
class EnvEntry:
    """One env of the sweep (an id plus keyword arguments)."""

    name: str
    """Short label used in reports. Unique within the sweep. Defaults to the id."""

    id: str
    """Gymnasium id or ``module:callable`` returning an Env."""

    kwargs_json: str = "{}"
    """The env kwargs as canonical JSON (sorted keys): the exact form keyed in the store."""

    episodes: int | None = None
    """Episodes per seed block for this env; ``None`` uses the sweep's ``episodes``."""

    def __post_init__(self) -> None:
        if not (isinstance(self.name, str) and self.name.strip()):
            _fail("envs[].name", "a non-empty string", self.name)
        if not (isinstance(self.id, str) and self.id.strip()):
            _fail(f"env {self.name!r}: id", "a gymnasium id or module:callable", self.id)
        try:
            kwargs = json.loads(self.kwargs_json)
        except (TypeError, ValueError):
            kwargs = None
        if not isinstance(kwargs, dict) or canonical_json(kwargs) != self.kwargs_json:
            _fail(f"env {self.name!r}: kwargs_json", "canonical JSON of a mapping (use EnvEntry.make)", self.kwargs_json)
        if self.episodes is not None and not (_is_int(self.episodes) and self.episodes >= 1):
            _fail(f"env {self.name!r}: episodes", "an integer >= 1 (or leave it out)", self.episodes)

    @classmethod
    def make(cls, name: str, id: str, kwargs: Mapping[str, Any] | None = None, episodes: int | None = None) -> "EnvEntry":
        kwargs = {} if kwargs is None else kwargs
        if not isinstance(kwargs, Mapping):
            _fail(f"env {name!r}: kwargs", "a mapping of keyword arguments", kwargs)
        try:
            text = canonical_json(dict(kwargs))
        except (TypeError, ValueError) as exc:
            raise SweepSpecError(
                f"env {name!r}: kwargs must be plain JSON data (numbers, strings, booleans, lists, mappings; "
                f"no NaN), got {kwargs!r} ({exc})."
            ) from None
        return cls(name=name, id=id, kwargs_json=text, episodes=episodes)

    @property
    def kwargs(self) -> dict[str, Any]:
        """A fresh dict of the kwargs (what the engine is given)."""
        return json.loads(self.kwargs_json)


@dataclass(frozen=True)
class SweepOptions:
    """Options shared by every job: :class:`~fasteval.types.spec.EvalSpec` fields, plus torch threads.

    ``max_steps``, ``obs_dtype`` and the stop rule's options change the numbers (a store keeps them:
    :meth:`result_settings`); the others change speed or failure handling, so a resume may change them."""

    batch_size: int = 16
    """Env slots stepped together in each job."""

    device: str = "auto"
    """Policy device in each worker: ``cpu``, ``cuda``, ``cuda:N`` or ``auto``."""

    vectorization: str = "sync"
    """``sync`` or ``async`` envs inside each job."""

    workers: int | None = None
    """Env worker processes per job with ``async`` envs (``None``: ``min(batch, usable cores)``)."""

    max_steps: int | None = None
    """Step cap per episode (``None``: the env's own limit). It changes results, so a store
    remembers it and refuses to resume with a different value."""

    reset_mode: str = "auto"
    """Stateful policies: ``per-env``, ``wave`` or ``auto``."""

    trust_remote_code: bool = False
    """Allow code references (``module:callable``, ``path/file.py:callable``). Set by
    ``fasteval sweep --trust-remote-code``: a file can never grant trust (docs/security.md), so ``true``
    in a file's ``options`` is refused without the flag."""

    retries: int = 1
    """Times an episode is retried from its seed after its env raised, hung or died. An episode
    that still fails is left out of the store, and its job is marked ``failed``."""

    on_nan_action: str = "error"
    """Non-finite policy actions: ``error`` stops the job, ``skip-episode`` fails that episode."""

    step_timeout: float | None = 300.0
    """Seconds an async env may take for one step or reset (``None``: forever)."""

    obs_dtype: str = "auto"
    """dtype of float observations for the policy: ``auto`` (the policy's parameter dtype),
    ``float32``, ``float64`` or ``keep`` (see :attr:`fasteval.types.spec.EvalSpec.obs_dtype`)."""

    stop_when: str | None = None
    """``--stop-when`` for every job (each job, one cell's seed block, stops on its own; ``episodes`` is
    its cap). It changes results, so a store remembers it. A job's episodes are stored when it ends:
    exactly its episodes ``0..k-1``."""

    confidence: float = 0.95
    """Level of ``stop_when``'s anytime-valid confidence sequence."""

    return_bounds: tuple[float, float] | None = None
    """``(LO, HI)`` bounds of an episode return, for ``return:`` rules."""

    rank_by: str | None = None
    """What the report ranks each env's policies by (``success``, ``return`` or ``max_reward``; None: success
    where the env has a success signal, else the return). Remembered by the store."""

    torch_threads: int = 1
    """torch intra-op threads while a job runs, the same in every worker, so results never
    depend on where a job ran."""

    def __post_init__(self) -> None:
        try:
            EvalSpec(env="_", **self.eval_fields())  # the engine's own validation and messages
        except UserInputError as exc:
            raise SweepSpecError(f"options.{exc}") from None
        if not (_is_int(self.torch_threads) and self.torch_threads >= 1):
            _fail("options.torch_threads", "an integer >= 1", self.torch_threads)

    def eval_fields(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "torch_threads"}

    def result_settings(self) -> dict[str, Any]:
        """The options that change an episode's numbers or the reported set (a store keeps them): every
        option that is a *what* field of :class:`~fasteval.types.spec.EvalSpec`. ``max_steps`` always, the
        stop rule's with a rule, any other one where it is not its default (so a store written before
        that option was kept reads as its default)."""
        out: dict[str, Any] = {"max_steps": self.max_steps}
        if self.stop_when is not None:
            bounds = list(self.return_bounds) if self.return_bounds is not None else None
            out.update(stop_when=self.stop_when, confidence=self.confidence, return_bounds=bounds)
        for f in fields(self):
            if f.name in WHAT_FIELDS and f.name not in out and f.name not in _STOP_RULE_OPTIONS:
                if getattr(self, f.name) != f.default:
                    out[f.name] = getattr(self, f.name)
        return out


_STOP_RULE_OPTIONS = ("stop_when", "confidence", "return_bounds")
"""Options that matter with a stop rule only (:meth:`SweepOptions.result_settings` keeps them with one)."""


OPTION_KEYS = tuple(f.name for f in fields(SweepOptions))


@dataclass(frozen=True)
class SweepSpec:
    """A whole sweep: ``policies x envs x seeds``, ``episodes`` per (policy, env, seed block)."""

    policies: tuple[PolicyEntry, ...]
    """At least one; names and refs unique."""

    envs: tuple[EnvEntry, ...]
    """At least one; names unique, and no two with the same id and kwargs."""

    episodes: int
    """Episodes per job, i.e. per (policy, env, seed block). A report cell (policy x env) holds
    ``episodes x len(seeds)`` episodes."""

    seeds: tuple[int, ...] = (0,)
    """Seed blocks: block ``s`` runs episodes with seeds ``s, s+1, ..., s+episodes-1``. Blocks
    must not overlap (each episode is keyed by its seed)."""

    options: SweepOptions = field(default_factory=SweepOptions)
    """Options shared by every job."""

    name: str = "sweep"
    """Name of the sweep; the default output folder is ``outputs/sweeps/<name>``."""

    def __post_init__(self) -> None:
        if not (isinstance(self.name, str) and re.fullmatch(r"[A-Za-z0-9._-]+", self.name) and self.name not in (".", "..")):
            _fail("name", "letters, digits, '.', '_' or '-' (it names the default output folder)", self.name)
        if not (_is_int(self.episodes) and self.episodes >= 1):
            _fail("episodes", "an integer >= 1 (episodes per policy, env and seed block)", self.episodes)
        if not (isinstance(self.policies, tuple) and self.policies and all(isinstance(p, PolicyEntry) for p in self.policies)):
            _fail("policies", "a non-empty list of {name, ref} entries", self.policies)
        if not (isinstance(self.envs, tuple) and self.envs and all(isinstance(e, EnvEntry) for e in self.envs)):
            _fail("envs", "a non-empty list of {id, kwargs, name} entries", self.envs)
        if not isinstance(self.options, SweepOptions):
            _fail("options", "a SweepOptions", self.options)
        if not (isinstance(self.seeds, tuple) and self.seeds and all(_is_int(s) and s >= 0 for s in self.seeds)):
            _fail("seeds", "a non-empty list of integers >= 0 (the first seed of each block)", self.seeds)
        _unique("policies", "name", [p.name for p in self.policies])
        _unique("policies", "ref", [p.ref for p in self.policies])
        _unique("envs", "name", [e.name for e in self.envs])
        _unique("envs", "(id, kwargs)", [f"{e.id} {e.kwargs_json}" for e in self.envs])
        _unique("seeds", "seed", list(self.seeds))
        for env in self.envs:
            n = self.episodes_for(env)
            blocks = sorted(self.seeds)
            if blocks[-1] + n - 1 > MAX_SEED:
                _fail("seeds", f"blocks whose last seed (block + episodes - 1) is at most 2**63 - 1 (seeds are int64); "
                      f"block {blocks[-1]} with {n} episodes ends at {blocks[-1] + n - 1}", list(self.seeds))
            for lo, hi in zip(blocks, blocks[1:]):
                if lo + n > hi:
                    raise SweepSpecError(
                        f"seeds: blocks {lo} and {hi} overlap for env {env.name!r} ({n} episodes per block: "
                        f"block {lo} runs seeds {lo}..{lo + n - 1}). Space the blocks at least {n} apart, "
                        f"e.g. seeds: {[blocks[0] + i * n for i in range(len(blocks))]}."
                    )

    def episodes_for(self, env: EnvEntry) -> int:
        return env.episodes if env.episodes is not None else self.episodes

    @property
    def n_jobs(self) -> int:
        return len(self.policies) * len(self.envs) * len(self.seeds)

    @classmethod
    def from_dict(cls, data: Any, max_jobs: int | None = None) -> "SweepSpec":
        """Validate plain data (a parsed sweep file) into a spec. Raises :class:`SweepSpecError`.

        ``max_jobs`` caps ``policies x envs x seed blocks`` (``None``: :data:`MAX_JOBS`), checked
        before the seed blocks are built, so a five-line file cannot ask for a million jobs (and
        hundreds of MB of store) by accident; ``fasteval sweep --max-jobs N`` raises the cap."""
        _check_keys("sweep spec", data, ("name", "episodes", "seeds", "policies", "envs", "options"),
                    required=("episodes", "policies", "envs"))
        policies = data["policies"]
        if not isinstance(policies, list) or not policies:
            _fail("policies", "a non-empty list of {name, ref} entries", policies)
        policy_entries = []
        for i, item in enumerate(policies):
            if isinstance(item, str):
                item = {"ref": item}
            _check_keys(f"policies[{i}]", item, ("name", "ref"), required=("ref",))
            ref = item["ref"]
            default_name = ref if isinstance(ref, str) else f"policies[{i}]"
            policy_entries.append(PolicyEntry(name=item.get("name", default_name), ref=ref))
        envs = data["envs"]
        if not isinstance(envs, list) or not envs:
            _fail("envs", "a non-empty list of {id, kwargs, name, episodes} entries", envs)
        env_entries = []
        for i, item in enumerate(envs):
            if isinstance(item, str):
                item = {"id": item}
            _check_keys(f"envs[{i}]", item, ("name", "id", "kwargs", "episodes"), required=("id",))
            env_entries.append(EnvEntry.make(name=item.get("name", item["id"]), id=item["id"],
                                             kwargs=item.get("kwargs"), episodes=item.get("episodes")))
        options = data.get("options") or {}
        _check_keys("options", options, OPTION_KEYS)
        n_blocks = _count_seed_blocks(data.get("seeds", [0]))
        cap = MAX_JOBS if max_jobs is None else max_jobs
        if n_blocks is not None and n_blocks * len(policy_entries) * len(env_entries) > cap:
            raise SweepSpecError(
                f"seeds: {n_blocks} seed blocks x {len(policy_entries)} policies x {len(env_entries)} envs = "
                f"{n_blocks * len(policy_entries) * len(env_entries)} jobs, more than the cap of {cap} (each job is a row "
                f"of the results store and a run). Use fewer blocks, or raise the cap with "
                f"`fasteval sweep --max-jobs N` if you mean it.")
        return cls(
            name=data.get("name", "sweep"),
            episodes=data["episodes"],
            seeds=_parse_seeds(data.get("seeds", [0]), data["episodes"]),
            policies=tuple(policy_entries),
            envs=tuple(env_entries),
            options=SweepOptions(**options),
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain data that :meth:`from_dict` turns back into an equal spec."""
        return {
            "name": self.name,
            "episodes": self.episodes,
            "seeds": list(self.seeds),
            "policies": [{"name": p.name, "ref": list(p.ref) if isinstance(p.ref, tuple) else p.ref} for p in self.policies],
            "envs": [
                {"name": e.name, "id": e.id, "kwargs": e.kwargs, **({"episodes": e.episodes} if e.episodes else {})}
                for e in self.envs
            ],
            "options": {k: getattr(self.options, k) for k in OPTION_KEYS},
        }


def _unique(where: str, what: str, values: list[Any]) -> None:
    seen = set()
    for v in values:
        if v in seen:
            hint = " Give the entries distinct `name:` values." if what == "name" else " Remove the duplicate."
            raise SweepSpecError(f"{where}: expected each {what} once, got {v!r} twice.{hint}")
        seen.add(v)


MAX_JOBS = 10_000
"""Default cap on a sweep file's jobs (``fasteval sweep --max-jobs`` raises it)."""


def _count_seed_blocks(raw: Any) -> int | None:
    """The number of seed blocks ``raw`` asks for, without building them (``None``: malformed,
    :func:`_parse_seeds` says why)."""
    if _is_int(raw):
        return 1
    if isinstance(raw, list):
        return len(raw)
    if isinstance(raw, Mapping) and _is_int(raw.get("count")):
        return raw["count"]
    return None


def trusted_sweep(data: Mapping[str, Any], source: str, trust_remote_code: bool, max_jobs: int | None = None) -> "SweepSpec":
    """A sweep file's data -> :class:`SweepSpec`, with the trust rules of docs/security.md: the file
    cannot grant trust (``options.trust_remote_code: true`` is refused), and a policy or env that names
    code (``module:callable``, a file path) needs ``trust_remote_code`` from the command line (then
    set in the spec's options, for the jobs)."""
    from fasteval.types.trust import check_env_ref, check_policy_ref, refuse_trust_from_file

    options = data.get("options") if isinstance(data, Mapping) else None
    if isinstance(options, Mapping):
        try:
            refuse_trust_from_file(options, f"{source}: options", trust_remote_code)
        except UserInputError as exc:
            raise SweepSpecError(str(exc)) from None
    spec = SweepSpec.from_dict(data, max_jobs=max_jobs)
    try:
        for policy in spec.policies:
            check_policy_ref(policy.ref, source, trust_remote_code)
        for env in spec.envs:
            check_env_ref(env.id, source, trust_remote_code)
    except UserInputError as exc:
        raise SweepSpecError(str(exc)) from None
    return dataclasses.replace(spec, options=dataclasses.replace(spec.options, trust_remote_code=bool(trust_remote_code)))


def _parse_seeds(raw: Any, episodes: Any) -> tuple[int, ...]:
    """``[0, 1000]``, a single int, or ``{start, count, stride}`` (stride defaults to ``episodes``)."""
    if _is_int(raw):
        return (raw,)
    if isinstance(raw, Mapping):
        _check_keys("seeds", raw, ("start", "count", "stride"), required=("count",))
        start, count = raw.get("start", 0), raw["count"]
        stride = raw.get("stride", episodes)
        for key, value, low in (("start", start, 0), ("count", count, 1), ("stride", stride, 1)):
            if not (_is_int(value) and value >= low):
                _fail(f"seeds.{key}", f"an integer >= {low}", value)
        return tuple(start + i * stride for i in range(count))
    if isinstance(raw, list):
        return tuple(raw)
    _fail("seeds", "a list of block start seeds ([0, 1000]), one integer, or {start, count, stride}", raw)
    raise AssertionError  # unreachable


def load_sweep_file(path: str | Path) -> dict[str, Any]:
    """Parse a ``.yaml``/``.yml``, ``.toml`` or ``.json`` sweep file into plain data."""
    return read_mapping_file(path, what="sweep file", error=SweepSpecError, yaml_hint="./scripts/install.sh sweep")


def config_to_sweep_dict(data: Mapping[str, Any], name: str = "config") -> dict[str, Any]:
    """A config (EvalSpec fields) as a one-job ``fasteval sweep`` spec: one policy, one env, one seed block.

    Fields the sweep format has no place for must keep their defaults; anything else raises
    :class:`ConfigError` naming them.
    """
    from fasteval.run.config import BACKEND_DEFAULTS, EXTRA_KEYS, ConfigError, check_keys

    check_keys(data)
    if "env" not in data:
        raise ConfigError("config: missing 'env' (a gymnasium id or module:callable).")
    defaults = {f.name: (f.default if f.default is not dataclasses.MISSING else f.default_factory())  # type: ignore[misc]
                for f in dataclasses.fields(EvalSpec) if f.name != "env"}
    per_job = {"env", "policy", "env_kwargs", "n_episodes", "seed"}
    options = {k: v for k, v in data.items() if k in OPTION_KEYS}
    defaults.update(BACKEND_DEFAULTS)  # a sweep keeps its own backend (its executor): a config's must be the default
    lost = sorted(k for k, v in data.items()
                  if k not in per_job and k not in OPTION_KEYS and k not in EXTRA_KEYS and v != defaults.get(k))
    if lost:
        raise ConfigError(f"config: fields {', '.join(lost)} differ from their defaults, and a sweep spec has no "
                          f"place for them (its options are {', '.join(OPTION_KEYS)}).")
    return {
        "name": name,
        "episodes": data.get("n_episodes", defaults["n_episodes"]),
        "seeds": [data.get("seed", defaults["seed"])],
        "policies": [{"ref": data.get("policy", defaults["policy"])}],
        "envs": [{"id": data["env"], "kwargs": dict(data.get("env_kwargs") or {})}],
        "options": options,
    }
