"""The short names of the policies of a many-policy run, and the order of checkpoint folders.

A run of several policies (``--policy A --policy B``, a glob of checkpoint folders, ``evaluate(policy=[...])``)
labels each policy's records, files and ranking rows with a short name:

* a checkpoint folder with a **step number** in its path (LeRobot's ``checkpoints/005000/pretrained_model``,
  Hugging Face's ``checkpoint-500``, ``step_1200``, ``ckpt-3``): the step, as an integer (``5000``);
* otherwise the **path component that tells the policies apart** (the one that differs between them:
  ``runs/seed1/model`` and ``runs/seed2/model`` are ``seed1`` and ``seed2``), else the folder's name;
* a ``module:callable`` reference: the callable's name (``arm_3``); a built-in (``zero``): itself;
* a live object: its class name.

Names that would collide get ``-2``, ``-3`` ... after the first. :func:`checkpoint_order` sorts folders by
their step number (folders without one after them, by path). Pure string work: no file is read here (the
doors expand globs, :mod:`fasteval.run.policy_refs`).
"""

from __future__ import annotations

import re
from pathlib import PurePath
from typing import Any, Sequence

_STEP = re.compile(r"^(?:(?:global[_-]?)?step|checkpoint|ckpt|iter|epoch)?[_-]?(\d+)$", re.IGNORECASE)
"""A path component that is a step number: ``005000``, ``checkpoint-500``, ``step_1200``, ``ckpt3``."""
_NAME = re.compile(r"[^A-Za-z0-9._+-]+")
MAX_NAME = 64


def step_number(ref: Any) -> int | None:
    """The step number in a checkpoint path (the last component that is one), or None."""
    if not isinstance(ref, str) or ":" in ref and not _is_path(ref):
        return None
    for part in reversed(PurePath(ref).parts):
        match = _STEP.match(part)
        if match:
            return int(match[1])
    return None


def _is_path(ref: str) -> bool:
    return "/" in ref or "\\" in ref or ref.startswith(".")


def checkpoint_order(paths: Sequence[str]) -> list[str]:
    """``paths`` sorted by step number (those without one after them, by path); the order of a glob's matches."""
    def key(path: str) -> tuple[int, int, str]:
        step = step_number(path)
        return (0, step, path) if step is not None else (1, 0, path)

    return sorted(paths, key=key)


def _clean(name: str) -> str:
    """A name safe in a file name and on a terminal line: letters, digits and ``._+-`` only."""
    name = _NAME.sub("_", name).strip("_") or "policy"
    return name[:MAX_NAME]


def _differing_part(path: str, others: Sequence[str]) -> str | None:
    """The last component of ``path`` that is not the same in every one of ``others`` (same depth)."""
    parts = PurePath(path).parts
    peers = [PurePath(o).parts for o in others if len(PurePath(o).parts) == len(parts)]
    if len(peers) < 2:
        return None
    for i in range(len(parts) - 1, -1, -1):
        if len({p[i] for p in peers}) > 1:
            return parts[i]
    return None


def short_name(ref: Any, others: Sequence[Any] = ()) -> str:
    """The short name of one policy among ``others`` (all the run's references; see the module docstring)."""
    if not isinstance(ref, str):
        return _clean(f"{type(ref).__name__}")
    step = step_number(ref)
    if step is not None:
        return str(step)
    if ":" in ref and not _is_path(ref.rpartition(":")[0]) and "://" not in ref:
        return _clean(ref.rpartition(":")[2])  # module:callable
    if "://" in ref:
        return _clean(ref.split("://", 1)[1].rstrip("/").replace("/", "_"))
    paths = [o for o in others if isinstance(o, str)]
    part = _differing_part(ref.rstrip("/"), [p.rstrip("/") for p in paths])
    return _clean(part if part is not None else (PurePath(ref.rstrip("/")).name or ref))


def short_names(refs: Sequence[Any]) -> tuple[str, ...]:
    """The names of a run's policies, in order, made unique (``name``, ``name-2``, ...)."""
    out: list[str] = []
    seen: dict[str, int] = {}
    for ref in refs:
        name = short_name(ref, refs)
        count = seen.get(name, 0) + 1
        seen[name] = count
        out.append(name if count == 1 else f"{name}-{count}")
    # a generated "name-2" may equal a given name: make every name unique once more
    while len(set(out)) < len(out):
        dup = next(n for n in out if out.count(n) > 1)
        i = len(out) - 1 - out[::-1].index(dup)
        out[i] = f"{dup}-{i + 1}"
    return tuple(out)


def check_names(names: Sequence[Any], n_policies: int) -> tuple[str, ...]:
    """Given names (``evaluate(policy={"a": ..., "b": ...})``, a config's ``policy_names``): one per policy,
    unique, and safe as a file name; ValueError saying what was expected."""
    names = tuple(names)
    if len(names) != n_policies:
        raise ValueError(f"policy_names: expected {n_policies} names, one per policy, got {len(names)}: {list(names)}.")
    for name in names:
        if not isinstance(name, str) or not name or _clean(name) != name:
            raise ValueError(f"policy_names: {name!r} is not a usable name; expected letters, digits and ._+- only "
                             f"(at most {MAX_NAME} characters), as it names the policy's files.")
    if len(set(names)) != len(names):
        raise ValueError(f"policy_names: the names must be unique, got {list(names)}.")
    return names
