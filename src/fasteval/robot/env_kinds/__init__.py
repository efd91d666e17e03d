"""What fasteval knows about kinds of env, plugged into core's env factory (:class:`~fasteval.core.envs.EnvKinds`).

Core builds an env from its id or ``module:callable`` and knows no plugin, simulator or display. This
module knows:

* **plugin namespaces**: which package registers the envs of a namespaced id (``gym_pusht/PushT-v0``
  imports ``gym_pusht``, ``Meta-World/...`` imports ``metaworld``; :data:`PLUGINS`), how a package that
  declares itself a gymnasium plugin through an entry point is loaded, and what to tell the user when
  a namespace is unknown (the package to install);
* **MuJoCo**: which envs render through MuJoCo (:func:`is_mujoco`, the one check, for an id, a
  reference or a built env), so that ``MUJOCO_GL=egl`` is set on a machine without a display before
  MuJoCo is imported (:mod:`fasteval.robot.env_kinds.headless`);
* **unread observations**: which kinds of env can step without computing an observation nobody reads, and
  how (:mod:`fasteval.robot.env_kinds.unread`);
* **render modes**: ``render_mode="human"`` opens a window, which a headless run cannot do (MuJoCo's
  GLFW would abort the process): :func:`render_mode_problem` refuses it before anything is built.

Which namespaces a *file* may make fasteval import is a trust rule: :mod:`fasteval.types.trust`
(docs/security.md). Here an id is built as the caller asked.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any, Mapping

import gymnasium as gym

from fasteval.robot.env_kinds.headless import ensure_headless_gl
from fasteval.robot.env_kinds.headless import headless as no_display  # (the name `headless` is the submodule)
from fasteval.types.errors import EnvNotFoundError, UserInputError
from fasteval.types.refs import resolve_callable, split_callable_ref
from fasteval.types.trust import declared_env_plugins, registered_namespaces

PLUGINS: dict[str, tuple[str, str]] = {
    "Meta-World": ("metaworld", "metaworld"),
    "gym_pusht": ("gym_pusht", "gym-pusht"),
    "gym_aloha": ("gym_aloha", "gym-aloha"),
    "gym_xarm": ("gym_xarm", "gym-xarm"),
    "gym_hil": ("gym_hil", "gym-hil"),
    "ALE": ("ale_py", "ale-py"),
    "fasteval": ("fasteval.testing", "fasteval"),  # the known-answer envs register on importing fasteval.testing
}
"""Env plugins by namespace: ``namespace -> (module that registers it, pip package)``. Their names are
:data:`fasteval.types.trust.ENV_PLUGINS` (the ones a file may name)."""
MUJOCO_MODULES = ("mujoco", "metaworld", "gym_aloha")
"""Modules whose envs render through MuJoCo (see :func:`is_mujoco`)."""
HEADLESS_GL = ("egl", "osmesa")
"""``MUJOCO_GL`` backends that render off-screen: with them MuJoCo has no window to show."""


def namespace_module(namespace: str) -> str | None:
    """The module that registers the envs of ``namespace`` (``Meta-World`` -> ``metaworld``), or
    ``None`` when the namespace is not a module name and not a known plugin."""
    if namespace in PLUGINS:
        return PLUGINS[namespace][0]
    if all(part.isidentifier() for part in namespace.split(".")):
        return namespace
    return None


def is_mujoco(env: Any) -> bool:
    """Whether ``env`` renders through MuJoCo (gymnasium's MuJoCo envs, MetaWorld, ALOHA): the one check.

    ``env`` is a registered id (its entry point is read; nothing is imported, since MuJoCo reads
    ``MUJOCO_GL`` when it is imported), a ``module:callable`` reference, or a built env (the modules of
    its unwrapped class and that class's bases). The rule is the same for all three: the code comes
    from a module named in :data:`MUJOCO_MODULES`."""
    if isinstance(env, str):
        try:
            entry = gym.spec(env).entry_point
        except gym.error.Error:
            entry = env  # a module:callable reference names its module itself
        where = [entry if isinstance(entry, str) else getattr(entry, "__module__", "") or ""]
    else:
        unwrapped = env.unwrapped if isinstance(env, gym.Env) else env
        where = [getattr(cls, "__module__", "") or "" for cls in type(unwrapped).__mro__]
    return any(name in text.lower() for text in where for name in MUJOCO_MODULES)


def render_mode_problem(env: str, kwargs: Mapping[str, Any], environ: Mapping[str, str] | None = None,
                        platform: str | None = None) -> str | None:
    """Why ``env`` with ``kwargs`` cannot render as asked on this machine, or ``None``.

    ``render_mode="human"`` opens a window. On a headless run there is none to open: Linux without
    ``DISPLAY`` / ``WAYLAND_DISPLAY``, or a MuJoCo env with ``MUJOCO_GL`` set to an off-screen backend
    (``egl``, ``osmesa``). MuJoCo's GLFW would abort the process (exit 134), pygame would fail mid-run."""
    if kwargs.get("render_mode") != "human":
        return None
    environ = os.environ if environ is None else environ
    gl = (environ.get("MUJOCO_GL") or "").lower()
    if no_display(environ, platform):
        why = "this machine has no display (neither DISPLAY nor WAYLAND_DISPLAY is set)"
    elif gl in HEADLESS_GL and is_mujoco(env):
        why = f"MUJOCO_GL={gl} renders off-screen"
    else:
        return None
    return (f"env {env!r}: render_mode='human' opens a window, and {why}; the run could not start (MuJoCo's "
            f"GLFW would abort it). Drop --env-kwarg render_mode=human, or use render_mode=rgb_array with --videos N "
            f"to see episodes.")


def import_env_namespace(env_id: str) -> None:
    """Import the plugin that registers namespaced id ``env_id`` (``ns/Name-vN``), unless its namespace is
    registered already. A package declaring ``ns`` in gymnasium's ``gymnasium.envs`` entry points is
    loaded as gymnasium 0.29 loaded plugins (the entry point inside ``namespace(ns)``, called if it is
    a function); otherwise the module of :func:`namespace_module` is imported. Whether a file may ask for
    this is :func:`fasteval.types.trust.check_env_ref`'s decision, made before."""
    if "/" not in env_id:
        return
    namespace = env_id.split("/", 1)[0]
    if namespace in registered_namespaces():
        return
    declared = declared_env_plugins().get(namespace)
    if declared is not None:
        with gym.envs.registration.namespace(namespace):
            loaded = declared.load()
            if callable(loaded) and not isinstance(loaded, type):
                loaded()
        return
    module = namespace_module(namespace)
    if module is None:
        return  # not a module name: gymnasium reports the unknown id
    try:
        importlib.import_module(module)
    except ImportError:
        pass  # gymnasium raises NamespaceNotFound next; namespace_hint says what to install


def namespace_hint(namespace: str) -> str:
    """What to do about an unknown env namespace: the package to install, or why its import failed."""
    module = namespace_module(namespace)
    if module is None:
        return (f"The namespace {namespace!r} is not a Python module name and not a plugin fasteval knows "
                f"({', '.join(sorted(PLUGINS))}); import the package that registers it first, or give "
                f"the env as module:callable.")
    package = PLUGINS.get(namespace, (module, None))[1]
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and module.split(".")[0] == exc.name.split(".")[0]:
            install = f"`pip install {package}`" if package else "install the package that provides it"
            return f"The namespace {namespace!r} comes from the plugin module {module!r}, which is not installed: {install}."
        return f"Importing {module!r} (which registers {namespace!r}) failed: {type(exc).__name__}: {exc}."
    except Exception as exc:  # a plugin that is installed but broken
        return f"Importing {module!r} (which registers {namespace!r}) failed: {type(exc).__name__}: {exc}."
    return f"The module {module!r} is installed but registers no {namespace!r} envs; check the env id."


def prepare_env(env: str, kwargs: Mapping[str, Any]) -> None:
    """Before ``env`` is built (in the main process and in every env worker): refuse a render mode this
    machine cannot give (:class:`UserInputError`), import the plugin of a namespaced id, and set
    ``MUJOCO_GL=egl`` for a MuJoCo env on a machine without a display."""
    problem = render_mode_problem(env, kwargs)
    if problem is not None:
        raise UserInputError(problem)
    import_env_namespace(env)
    if is_mujoco(env):
        ensure_headless_gl()


def check_env_known(env: str, kwargs: Mapping[str, Any], trust_remote_code: bool = False) -> None:
    """Check, without building it, that ``env`` can be built here: its plugin imports and gymnasium has it
    registered (an unknown id gets gymnasium's "Did you mean" and the package to install), or its
    ``module:callable`` resolves; and its render mode can be given (:func:`prepare_env`). For a door that
    checks many envs before running any (``fasteval sweep``). Raises :class:`EnvNotFoundError` /
    :class:`UserInputError`."""
    prepare_env(env, kwargs)
    if split_callable_ref(env) is not None:
        resolve_callable(env, what="env", trust_remote_code=trust_remote_code)
        return
    try:
        gym.spec(env)
    except gym.error.NamespaceNotFound as exc:
        raise EnvNotFoundError(f"env {env!r}: {exc} {ENV_KINDS.not_found_hint(env)}".rstrip()) from None
    except gym.error.Error as exc:  # NameNotFound / VersionNotFound carry gymnasium's suggestion
        raise EnvNotFoundError(f"env {env!r}: {exc}") from None


LEROBOT_ENV = "fasteval.robot.lerobot.envs:make_env"
"""LeRobot's env types, as fasteval builds them (``fasteval.robot.lerobot.envs.ENV_REF``)."""
HEAVY_ENVS: dict[str, tuple[int, int, str]] = {
    "libero": (int(1.25 * 1024 ** 3), int(2.0 * 1024 ** 3), "LIBERO envs"),
}
"""Declared memory of heavy kinds: (bytes per env, bytes per process that hosts them, name). LIBERO, measured on
the 2-core development machine (libero_10 task 0, 256 px, after the first reset): the first env of a process
brought it to 3.0 GiB RSS (LeRobot, torch, robosuite and LIBERO imported), each further env added 1.2 GiB."""


LEROBOT_GL_TYPES = ("libero", "libero_plus", "metaworld", "aloha")
"""LeRobot env types whose observations are MuJoCo frames."""


def renders_with_gl(env: Any, kwargs: Mapping[str, Any]) -> bool:
    """Whether envs of ``env`` (an id or ``module:callable``) with ``kwargs`` render frames through MuJoCo's GL: LeRobot's
    MuJoCo pixel types (:data:`LEROBOT_GL_TYPES`), or a MuJoCo env (:func:`is_mujoco`) asked for frames
    (``render_mode`` ``rgb_array`` / ``depth_array``, or a pixel ``obs_type``). Decided from the names alone."""
    if not isinstance(env, str):
        return False
    if env.endswith(LEROBOT_ENV):
        kind = str(dict(kwargs).get("type", ""))
        return kind in LEROBOT_GL_TYPES or kind.startswith("libero")
    if not is_mujoco(env):
        return False
    return kwargs.get("render_mode") in ("rgb_array", "depth_array") or "pixels" in str(kwargs.get("obs_type", ""))


@dataclass(frozen=True)
class RobotEnvKinds:
    """fasteval's :class:`~fasteval.core.envs.EnvKinds` (picklable: env workers get it with the factory)."""

    def prepare(self, env: str, kwargs: Mapping[str, Any]) -> None:
        prepare_env(env, kwargs)

    def not_found_hint(self, env: str) -> str:
        return namespace_hint(env.split("/", 1)[0]) if "/" in env else ""

    def adapt(self, obj: Any, built: bool) -> Any:
        """Envs of other libraries as slot envs: TorchRL's (:func:`fasteval.robot.torchrl.envs.adapt_env`)."""
        from fasteval.robot.torchrl.envs import adapt_env

        return adapt_env(obj, built)

    def memory(self, env: str, kwargs: Mapping[str, Any]) -> tuple[int, int, str] | None:
        """What one env costs in memory, for heavy kinds (:data:`HEAVY_ENVS`: LIBERO through LeRobot), else ``None``."""
        if env.endswith(LEROBOT_ENV) and str(dict(kwargs).get("type", "")).startswith("libero"):
            return HEAVY_ENVS["libero"]
        return None

    def renderer(self, env: str, kwargs: Mapping[str, Any]) -> str | None:
        """The GL renderer this process's envs render with, where they render through MuJoCo
        (:func:`renders_with_gl`; :func:`fasteval.robot.env_kinds.renderer.process_renderer`), else ``None``."""
        from fasteval.robot.env_kinds.renderer import process_renderer

        return process_renderer(renders_with_gl(env, kwargs))

    def unread_step(self, env: Any) -> Any:
        """A built env's step without its observation's work, where its kind declares one
        (:func:`fasteval.robot.env_kinds.unread.unread_step`), else ``None``."""
        from fasteval.robot.env_kinds.unread import unread_step

        return unread_step(env)


ENV_KINDS = RobotEnvKinds()
