"""Faster versions of third-party envs, bit-identical to the originals (light: imports no env).

Each fast env subclasses the original and changes one internal path. It is used only for the
versions of the original package that the identity test checked (``tests/test_pusht_fast.py``):
for any other version, :func:`pusht_env_id` falls back to the original env.
"""

from __future__ import annotations

from importlib import metadata

PUSHT_CHECKED_VERSIONS = ("0.1.8",)
"""``gym-pusht`` versions whose frames, states, rewards, flags and infos the identity test compared."""

FAST_PUSHT = "fasteval.robot.fast_envs.pusht:make_pusht"
"""The ``module:callable`` env reference of :class:`fasteval.robot.fast_envs.pusht.FastPushTEnv`."""


def installed_version(distribution: str) -> str | None:
    """The installed version of ``distribution`` (``None`` if it is not installed)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def pusht_env_id(task: str = "PushT-v0") -> str:
    """The env for ``--env.type=pusht``: :data:`FAST_PUSHT` when the installed ``gym-pusht`` is a
    checked version and the task is ``PushT-v0``, else gym-pusht's own ``gym_pusht/<task>``."""
    if task == "PushT-v0" and installed_version("gym-pusht") in PUSHT_CHECKED_VERSIONS:
        return FAST_PUSHT
    return f"gym_pusht/{task}"


def env_note(env: str) -> str | None:
    """What a run's metadata says about a fast env (``meta["env_note"]``); ``None`` for any other env."""
    if env == FAST_PUSHT:
        return (f"fasteval's bit-identical subclass of gym_pusht/PushT-v0 (gym-pusht {installed_version('gym-pusht')}): "
                f"the same frames, states, rewards, flags and infos, a faster image path; --no-fast-env steps "
                f"gym-pusht's own env")
    return None
