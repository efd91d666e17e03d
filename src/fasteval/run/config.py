"""Config files: a whole :class:`~fasteval.types.spec.EvalSpec` (plus ``output_dir``) as YAML, JSON or TOML.

The format is flat: the EvalSpec field names (``env``, ``policy``, ``env_kwargs``, ``n_episodes``,
``batch_size``, ``seed``, ``vectorization``, ``device``, ``max_steps``, ...) plus ``output_dir``::

    env: fasteval/KnownAnswer-v0
    policy: zero
    n_episodes: 50
    batch_size: 10
    seed: 1000
    env_kwargs: {nan_reward_seeds: [3]}
    output_dir: outputs/eval/known

* ``fasteval --config FILE`` loads it; options given on the command line win (``env_kwargs`` and
  ``rename`` are merged key by key, the command line's keys winning). Fields in neither take
  the command line's defaults.
* Every CLI run saves the resolved config as ``config.json`` next to ``eval_info.json``;
  ``--print-config`` prints the same document and exits. Loading it gives the same spec back.
* A relative checkpoint folder in ``policy`` is looked up next to the file first (as sweep files
  do), then in the current folder; saved configs hold absolute folders.
* Where the episodes run is not part of the spec, but a config may say it too (:data:`BACKEND_DEFAULTS`:
  ``backend``, ``address``, ``ray_workers``, ``num_cpus``, ``num_gpus``, ``ray_block``, ``ship_policy``,
  ``ray_policy_actors``; the
  CLI's ``--backend ray`` and its options, docs/distributed.md); the command line wins here too, a bad
  value is refused with one line (:func:`backend_config`), and a run on Ray saves them in ``config.json``.
* :func:`fasteval.doors.sweep.spec.config_to_sweep_dict` turns a config into a one-job sweep spec (``fasteval sweep``'s format:
  the same key names under ``options``).

Loading does only the file reading and key checks; the values are validated by ``EvalSpec``.

A config file is data (see docs/security.md): it cannot grant trust (``trust_remote_code: true`` in
it is refused unless the command line passes the flag too), and an ``env`` or ``policy`` from the file that
names code (``module:callable``, ``path/file.py:callable``) needs ``--trust-remote-code`` on the
command line.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from pathlib import Path
from typing import Any, Mapping

from fasteval.types.errors import UserInputError
from fasteval.types.mapping_files import read_mapping_file
from fasteval.types.spec import VIDEO_LAYOUTS, EvalSpec

CONFIG_FILE_NAME = "config.json"
EXTRA_KEYS = ("output_dir", "defaults")
DEFAULT_SETS = VIDEO_LAYOUTS
"""``defaults`` (informational): whose defaults filled what the command line left out, fasteval's or
LeRobot's (docs/lerobot.md); the same two names as the video layouts."""
BACKEND_DEFAULTS: dict[str, Any] = {"backend": "local", "address": None, "ray_workers": None, "num_cpus": 1.0,
                                    "num_gpus": 0.0, "ray_block": None, "ship_policy": True, "ray_policy_actors": None}
"""The backend keys of a config file and their defaults (the CLI's: ``--backend``, ``--address``,
``--ray-workers``, ``--num-cpus``, ``--num-gpus``, ``--ray-block``, ``--ship-policy``, ``--ray-policy-actors``)."""
MERGED_FIELDS = ("env_kwargs", "rename", "policy_overrides")
"""Mapping fields merged key by key (config first, then the command line)."""
PARAM_FOR_FIELD = {"compile": "compile_policy"}
"""CLI parameter names that differ from the EvalSpec field they set."""


class ConfigError(UserInputError):
    """The config file cannot be read or holds unknown keys (CLI exit code 2)."""


def spec_fields() -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(EvalSpec))


def allowed_keys() -> tuple[str, ...]:
    return (*spec_fields(), *EXTRA_KEYS, *BACKEND_DEFAULTS)


def backend_config(data: Mapping[str, Any], where: str = "config") -> dict[str, Any]:
    """The backend keys ``data`` holds (:data:`BACKEND_DEFAULTS`), checked: :class:`ConfigError` (exit 2) with
    one line for a bad value (what was expected, what was found)."""
    def bad(key: str, expected: str) -> ConfigError:
        return ConfigError(f"{where}: {key}: expected {expected}, got {data[key]!r}. Fix the file, or give "
                           f"--{key.replace('_', '-')} on the command line.")

    def number(value: Any) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool)

    out: dict[str, Any] = {}
    for key in BACKEND_DEFAULTS:
        if key not in data:
            continue
        value = data[key]
        if key == "backend" and value not in ("local", "ray"):
            raise bad(key, "local or ray")
        if key == "address" and value is not None and (not isinstance(value, str) or not value):
            raise bad(key, "a Ray address string (auto, HOST:PORT, ray://HOST:PORT) or null")
        if key in ("ray_workers", "ray_block", "ray_policy_actors") and value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise bad(key, "an integer >= 1 or null")
        if key in ("num_cpus", "num_gpus") and (not number(value) or value < 0):
            raise bad(key, "a number >= 0")
        if key == "ship_policy" and not isinstance(value, bool):
            raise bad(key, "true or false")
        out[key] = float(value) if key in ("num_cpus", "num_gpus") else value
    return out


def read_config_file(path: str | Path) -> dict[str, Any]:
    """Parse a ``.yaml``/``.yml``, ``.json`` or ``.toml`` file into a dict (no key checks)."""
    return read_mapping_file(path, what="config file", error=ConfigError, yaml_hint="pip install pyyaml",
                             top_level="a mapping of EvalSpec fields")


def load_config(path: str | Path) -> dict[str, Any]:
    """Read and check a config file: known keys only, ``policy`` a string, ``env_kwargs`` a mapping.

    Returns the plain data (EvalSpec fields plus ``output_dir``), with a relative checkpoint folder
    in ``policy`` resolved against the file's folder when it exists there.
    """
    path = Path(path)
    data = read_config_file(path)
    check_keys(data, where=f"config file {str(path)!r}")
    policy = data.get("policy")
    if policy is not None:
        data["policy"] = _config_policies(policy, path)
    out = data.get("output_dir")
    if out is not None:
        from fasteval.run.paths import path_problem

        problem = "expected a folder path string" if not isinstance(out, str) else path_problem(out, kind="dir")
        if problem is not None:
            raise ConfigError(f"config file {str(path)!r}: output_dir {out!r} is not usable: {problem}.")
    if "env_kwargs" in data and not isinstance(data["env_kwargs"], Mapping):
        raise ConfigError(f"config file {str(path)!r}: env_kwargs: expected a mapping, got {data['env_kwargs']!r}.")
    return data


def _config_policies(policy: Any, path: Path) -> Any:
    """A config's ``policy``: one reference string or a list of them (several policies in one run); each
    relative checkpoint folder looked up beside the file first, each glob expanded there (or in the current
    folder); one reference in the end is returned as a string."""
    from fasteval.run.policy_refs import as_policy_field, expand_glob, is_glob

    refs = policy if isinstance(policy, list) else [policy]
    if not refs or any(not isinstance(p, str) or (p.startswith("<") and p.endswith(">")) for p in refs):
        raise ConfigError(f"config file {str(path)!r}: policy: expected a policy reference string (zero, random, "
                          f"a checkpoint folder, module:callable) or a list of them, got {policy!r}. A live policy "
                          "object cannot be saved in a config; pass it to fasteval.evaluate() instead.")
    elsewhere = path.parent.resolve() != Path.cwd().resolve()
    out: list[str] = []
    for ref in refs:
        if is_glob(ref):
            beside = elsewhere and not Path(ref).is_absolute()
            try:
                out.extend(str(Path(m).resolve()) if beside else m for m in expand_glob(ref, path.parent if beside else None))
            except UserInputError:
                if not beside:
                    raise
                out.extend(expand_glob(ref))
            continue
        there = path.parent / ref
        out.append(str(there.resolve()) if not Path(ref).is_absolute() and there.is_dir() and elsewhere else ref)
    return as_policy_field(out) if len(out) == 1 else out


def check_keys(data: Mapping[str, Any], where: str = "config") -> None:
    unknown = [k for k in data if k not in allowed_keys()]
    if unknown:
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(str(key), allowed_keys(), n=1, cutoff=0.6)
            hints.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise ConfigError(f"{where}: unknown key(s) {', '.join(hints)}; expected EvalSpec fields "
                          f"({', '.join(spec_fields())}), output_dir, or the backend's "
                          f"({', '.join(BACKEND_DEFAULTS)}).")
    if "defaults" in data and data["defaults"] not in DEFAULT_SETS:
        raise ConfigError(f"{where}: defaults: expected {' or '.join(DEFAULT_SETS)}, got {data['defaults']!r}.")
    backend_config(data, where)


def spec_from_config(data: Mapping[str, Any]) -> tuple[EvalSpec, str | None]:
    """Checked config data -> ``(EvalSpec, output_dir or None)``. ``env`` is required here."""
    check_keys(data)
    if "env" not in data:
        raise ConfigError("config: missing 'env' (a gymnasium id or module:callable).")
    fields = {k: v for k, v in data.items() if k in spec_fields()}
    return EvalSpec(**fields), data.get("output_dir")


def config_document(spec: EvalSpec, output_dir: str | Path | None, defaults: str | None = None,
                    backend: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The resolved config: every EvalSpec field, plus ``output_dir`` (and ``defaults``: which set of defaults
    the command line got; ``backend``: the backend keys of a run not run locally). Loading it gives ``spec``
    back."""
    doc = spec.to_dict()

    def absolute(policy: Any) -> Any:  # a saved config must not depend on where it is read
        if isinstance(policy, str) and not Path(policy).is_absolute() and Path(policy).is_dir():
            return str(Path(policy).resolve())
        return policy

    policy = doc.get("policy")
    doc["policy"] = [absolute(p) for p in policy] if isinstance(policy, list) else absolute(policy)
    doc["output_dir"] = None if output_dir is None else str(output_dir)
    if defaults is not None:
        doc["defaults"] = defaults
    if backend and backend.get("backend", "local") != "local":
        doc.update({k: backend[k] for k in BACKEND_DEFAULTS if k in backend})
    return doc


def dump_config(spec: EvalSpec, output_dir: str | Path | None, defaults: str | None = None,
                backend: Mapping[str, Any] | None = None) -> str:
    return json.dumps(config_document(spec, output_dir, defaults, backend), indent=2)


def save_config(path: str | Path, spec: EvalSpec, output_dir: str | Path | None, defaults: str | None = None,
                backend: Mapping[str, Any] | None = None) -> Path:
    from fasteval.types.results import write_json_atomic

    return write_json_atomic(path, config_document(spec, output_dir, defaults, backend))


def merge(spec: EvalSpec, config: Mapping[str, Any], given: set[str]) -> EvalSpec:
    """``spec`` (built from the command line) with ``config`` applied to every field not in ``given``.

    Fields in ``given`` keep the command line's value; :data:`MERGED_FIELDS` are merged key by key
    (config, then command line). Fields absent from the config keep ``spec``'s value.
    """
    changes: dict[str, Any] = {}
    for name in spec_fields():
        if name not in config:
            continue
        if name in MERGED_FIELDS and isinstance(config[name], Mapping):
            changes[name] = {**config[name], **(getattr(spec, name) if name in given else {})}
        elif name not in given:
            changes[name] = config[name]
    return spec.replace(**changes) if changes else spec


def given_on_command_line(ctx: Any) -> set[str]:
    """EvalSpec fields (and ``output_dir``) whose CLI option was given on the command line (or by its
    environment variable): the one such check (``--config`` merges under them, ``--resume`` compares them)."""
    from click.core import ParameterSource

    out = set()
    for name in allowed_keys():
        param = PARAM_FOR_FIELD.get(name, name)
        if param in ctx.params and ctx.get_parameter_source(param) in (ParameterSource.COMMANDLINE,
                                                                         ParameterSource.ENVIRONMENT):
            out.add(name)
    return out


def apply_config(ctx: Any, spec: EvalSpec, output_dir: Any, config_file: str | Path) -> tuple[EvalSpec, Any]:
    """The CLI's ``--config``: load the file, merge it under the command line, return ``(spec, output_dir)``."""
    data = load_config(config_file)
    given = given_on_command_line(ctx)
    check_config_trust(data, given, spec.trust_remote_code, config_file)
    spec = merge(spec, data, given)
    if "output_dir" not in given and data.get("output_dir") is not None:
        output_dir = Path(data["output_dir"])
    return spec, output_dir


def check_config_trust(data: Mapping[str, Any], given: set[str], trust_remote_code: bool, path: str | Path) -> None:
    """The trust rules for a config file (docs/security.md): it cannot grant trust, and the code it
    names (an ``env`` or ``policy`` not overridden on the command line) needs the command line's
    ``--trust-remote-code``. Raises :class:`ConfigError` (exit 2) before anything is imported or run."""
    from fasteval.types.trust import check_env_ref, check_policy_ref, refuse_trust_from_file

    where = f"config file {str(path)!r}"
    try:
        refuse_trust_from_file(data, where, trust_remote_code)
        if "env" in data and "env" not in given:
            check_env_ref(data["env"], where, trust_remote_code)
        if "policy" in data and "policy" not in given:
            check_policy_ref(data["policy"], where, trust_remote_code)
    except UserInputError as exc:
        raise ConfigError(str(exc)) from None
