"""Which code a run may call, by where its references came from (the threat model: docs/security.md).

A reference is *code* when it names a callable: ``module:callable`` (an installed module) or
``path/file.py:callable`` (a file, which runs when it is imported). A gymnasium id, ``zero``,
``random`` and a checkpoint folder (weights, never pickles) are data.

The rules, for an env or a policy reference:

* a file path runs arbitrary code: it needs ``--trust-remote-code`` (the spec's ``trust_remote_code``),
  wherever it comes from (the engine checks this itself, for envs and policies alike);
* a ``module:callable`` typed **on the command line** is the user's own choice of installed code. A
  policy callable is called with the spaces only; an env callable gets the ``--env-kwarg`` values
  as its arguments, so it must be an env constructor: a ``gymnasium.Env`` or TorchRL ``EnvBase`` subclass
  (``torchrl.envs:GymEnv``), the entry point of a registered gymnasium id, or a function annotated to return
  one of them. Any other
  callable (``os:system``, ``subprocess:run``, ``builtins:exec``) needs the flag;
* a ``module:callable`` that comes from a **file** (``--config``, a sweep spec, a run's manifest on
  ``--resume``) needs the flag on the command line, whatever it names: a shared file must be data.
  Only the entry point of a registered gymnasium id is allowed without it (it is that id), and fasteval's own
  env constructors that ``--env.type`` names (:data:`FASTEVAL_ENV_CONSTRUCTORS`);
* a gymnasium id with a namespace (``ns/Name-v0``) is data once its namespace is registered, but to
  find an unregistered one fasteval imports the package that registers it, which runs that package's
  top-level code. From a **file**, only an installed gymnasium plugin may be imported: a namespace that
  an installed package declares in gymnasium's ``gymnasium.envs`` entry-point group, or one of
  :data:`ENV_PLUGINS` (the plugins of robot learning that register on import). Any other namespace
  (``this/Foo-v0`` would ``import this``) needs the flag; on the command line it is the user's choice;
* a file can never grant trust: ``trust_remote_code: true`` in a config or sweep file is refused unless
  the command line passes the flag too (then the file grants nothing: it only repeats it), and a
  manifest's is ignored.

The library API (``fasteval.evaluate``) is called by Python code, which can run anything anyway: only
the file-path rule applies there.
"""

from __future__ import annotations

import importlib
import inspect
import typing
from typing import Any, Mapping

from fasteval.types.errors import UserInputError
from fasteval.types.refs import is_path_ref, split_callable_ref

COMMAND_LINE = "the command line"
FLAG = "--trust-remote-code"

ENV_PLUGINS = frozenset({"gym_pusht", "gym_aloha", "gym_xarm", "gym_hil", "Meta-World", "ALE", "fasteval"})
"""Env namespaces whose plugin a file may make fasteval import without the flag (docs/security.md).

These are the env packages of robot learning (LeRobot's ``gym-pusht``, ``gym-aloha``, ``gym-xarm``,
``gym-hil``; ``metaworld``; ``ale-py``) that register their envs when imported and do nothing else on
import, and fasteval's own known-answer envs (``fasteval/KnownAnswer-v0``: ``fasteval.testing``). They declare no entry point: gymnasium 1.0 removed the plugin loader that read them (see
:func:`declared_env_plugins`), so an installed plugin can no longer be told apart by its metadata. The
module each one imports is the env layer's (``fasteval.robot.env_kinds.PLUGINS``)."""
FASTEVAL_ENV_CONSTRUCTORS = frozenset({
    "fasteval.robot.lerobot.envs:make_env",  # LeRobot's env types (--env.type=libero, ...): fasteval.robot.lerobot.envs
    "fasteval.robot.metaworld:make_metaworld_env", "fasteval.doors.suites:make_metaworld_env",  # --env.type=metaworld
    "fasteval.robot.fast_envs.pusht:make_pusht",  # --env.type=pusht's fast PushT
})
"""fasteval's own env constructors, the ones ``--env.type`` names: data from a file, as the entry point of a
registered gymnasium id is. Their kwargs choose an env type and its tasks from LeRobot's and fasteval's tables
(no hub code: :func:`fasteval.robot.lerobot.envs.env_config`), so a run's manifest or config naming them needs
no ``--trust-remote-code`` (tests/test_trust.py checks the list against the robot layer's constants)."""
PLUGIN_GROUP = "gymnasium.envs"
"""The entry-point group through which a package declares itself a gymnasium env plugin."""


def is_code_ref(ref: Any) -> bool:
    """Whether ``ref`` names a callable (``module:callable`` or ``path/file.py:callable``). A URL
    (``ws://HOST:PORT``, ``openpi+ws://...``, ``hf://org/repo``) names a server or a hub checkpoint: no
    local code, whatever its colons."""
    return isinstance(ref, str) and "://" not in ref and split_callable_ref(ref) is not None


def is_file_ref(ref: Any) -> bool:
    parts = split_callable_ref(ref) if isinstance(ref, str) else None
    return parts is not None and is_path_ref(parts[0])


def registered_entry_point(ref: str) -> str | None:
    """The gymnasium id whose entry point is exactly ``ref`` (``module:callable``), or ``None``."""
    import gymnasium as gym

    for env_id, spec in gym.registry.items():
        if isinstance(spec.entry_point, str) and spec.entry_point == ref:
            return env_id
    return None


def is_env_constructor(ref: str) -> bool:
    """Whether installed ``module:callable`` ``ref`` builds an env: a ``gymnasium.Env`` subclass, or a
    function annotated to return one. Imports the module (installed code); calls nothing."""
    import gymnasium as gym

    module_name, attr = split_callable_ref(ref) or ("", "")
    try:
        obj: Any = importlib.import_module(module_name)
        for name in attr.split("."):
            obj = getattr(obj, name)
    except Exception:
        return False  # the engine reports the import error itself
    env_types = _env_types(gym)
    if inspect.isclass(obj):
        return issubclass(obj, env_types)
    if not inspect.isfunction(obj):
        return False
    try:
        returns = typing.get_type_hints(obj).get("return")
    except Exception:
        return False
    return inspect.isclass(returns) and issubclass(returns, env_types)


def _env_types(gym: Any) -> tuple[type, ...]:
    """The env base classes an env constructor may build: ``gymnasium.Env``, and TorchRL's ``EnvBase`` once
    ``torchrl.envs`` is imported (importing the named module imports it for a TorchRL env; nothing else does)."""
    import sys

    torchrl_envs = sys.modules.get("torchrl.envs")
    return (gym.Env,) if torchrl_envs is None else (gym.Env, torchrl_envs.EnvBase)


def declared_env_plugins() -> dict[str, Any]:
    """The env namespaces installed packages declare as gymnasium plugins: ``{namespace: EntryPoint}``.

    A plugin declares ``[project.entry-points."gymnasium.envs"] MyNamespace = "my_pkg.envs:register"``.
    gymnasium 0.26-0.29 loaded every such entry point on import (``load_plugin_envs``, inside
    ``gymnasium.envs.registration.namespace(name)``); gymnasium 1.x removed the loader, but the
    declaration still marks a package that was built to be imported for its envs. Names of the form
    ``__root__`` register into no namespace and are left out."""
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=PLUGIN_GROUP)
            if not (ep.name.startswith("__") and ep.name.endswith("__"))}


def env_namespace(ref: Any) -> str | None:
    """The namespace of gymnasium id ``ref`` (``gym_pusht/PushT-v0`` -> ``gym_pusht``); ``None`` for an id
    without one, a code reference or a URL."""
    if not isinstance(ref, str) or "/" not in ref or "://" in ref or is_code_ref(ref):
        return None
    namespace = ref.split("/", 1)[0]
    return namespace or None


def registered_namespaces() -> set[str]:
    """The env namespaces gymnasium's registry holds now (nothing needs importing for them)."""
    import gymnasium as gym

    return {spec.namespace for spec in gym.registry.values() if spec.namespace is not None}


def plugin_import_allowed(namespace: str) -> bool:
    """Whether a file may make fasteval import the plugin of env ``namespace``: it is registered already
    (nothing is imported), on :data:`ENV_PLUGINS`, or declared by an installed package's entry point."""
    return namespace in registered_namespaces() or namespace in ENV_PLUGINS or namespace in declared_env_plugins()


def refuse(what: str, ref: str, source: str, why: str) -> None:
    raise UserInputError(
        f"{what} {ref!r} (from {source}) {why}. That runs code: pass {FLAG} on the command line if you trust it."
    )


def check_env_ref(ref: Any, source: str, trust_remote_code: bool) -> None:
    """Refuse an env reference from ``source`` that would run untrusted code (see the module docstring)."""
    if trust_remote_code:
        return
    if not is_code_ref(ref):
        namespace = env_namespace(ref)
        if source != COMMAND_LINE and namespace is not None and not plugin_import_allowed(namespace):
            refuse("env", ref, source, f"has the namespace {namespace!r}, which is not an installed gymnasium plugin "
                                       f"(none declares it in the {PLUGIN_GROUP!r} entry points, and it is not one of "
                                       f"{', '.join(sorted(ENV_PLUGINS))}): finding it would import a module, and a "
                                       f"file cannot choose a module to import")
        return
    if is_file_ref(ref):
        refuse("env", ref, source, "loads Python code from a file")
    if ref in FASTEVAL_ENV_CONSTRUCTORS or registered_entry_point(ref) is not None:
        return
    if source != COMMAND_LINE:
        refuse("env", ref, source, "names a Python callable, and a file cannot choose code to run")
    if not is_env_constructor(ref):
        refuse("env", ref, source, "is not an env constructor (a gymnasium.Env or TorchRL EnvBase subclass, the entry point "
                                   "of a registered id, or a function annotated to return one), and it would be called "
                                   "with the --env-kwarg values as its arguments")


def check_policy_ref(ref: Any, source: str, trust_remote_code: bool) -> None:
    """Refuse a policy reference from ``source`` that would run untrusted code (each of a tuple or list of them)."""
    if isinstance(ref, (tuple, list)):
        for one in ref:
            check_policy_ref(one, source, trust_remote_code)
        return
    if trust_remote_code or not is_code_ref(ref):
        return
    if is_file_ref(ref):
        refuse("policy", ref, source, "loads Python code from a file")
    if source != COMMAND_LINE:
        refuse("policy", ref, source, "names a Python callable, and a file cannot choose code to run")


def needs_trust_from_file(env: Any, policy: Any) -> bool:
    """Whether a file naming ``env`` and ``policy`` (a manifest on ``--resume``) needs ``--trust-remote-code``:
    whether :func:`check_env_ref` or :func:`check_policy_ref` refuses them from a file (the one rule)."""
    try:
        check_env_ref(env, "a file", False)
        check_policy_ref(policy, "a file", False)
    except UserInputError:
        return True
    return False


def refuse_trust_from_file(data: Mapping[str, Any], where: str, trust_remote_code: bool,
                           key: str = "trust_remote_code") -> None:
    """A file may not grant trust: ``trust_remote_code: true`` in it is refused unless the command line
    gives the flag (``trust_remote_code``) too; ``false`` is harmless."""
    if data.get(key) and not trust_remote_code:
        raise UserInputError(
            f"{where}: {key}: true: a file can never grant trust (a shared config or sweep file would run code on "
            f"whoever uses it). Pass {FLAG} on the command line if you trust the code the file names."
        )
