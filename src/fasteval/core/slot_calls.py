"""Per-slot env calls: read an attribute of (or call a method on) the envs of some slots only.

Used to read task descriptions at reset and to render video frames: in-process for sync envs,
in the env workers for async envs, only for the slots that need it.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence


def slot_getter(envs: Any, name: str) -> Callable[[Sequence[int]], list[Any]]:
    """``get(slots) -> [value per slot]``: call ``env.<name>()`` (or read the attribute) on those slots only.

    A thin wrapper over :meth:`fasteval.core.envs.SlotEnvs.call`: in-process for sync envs, in the
    env workers for async envs (whose replies carry the values of slots asked for at every step,
    such as video frames, without another message). Raises :class:`fasteval.types.errors.EnvStepError` if an env raises.
    """
    call = envs.call

    def get(slots: Sequence[int]) -> list[Any]:
        return call(slots, name)

    return get


def env_has_attr(envs: Any, name: str) -> bool:
    """Whether slot 0's env (through its wrappers) has attribute ``name``. Asked once, at build time."""
    return bool(envs.has_attr(name))
