"""Several policies from the doors: repeated ``--policy``, globs of checkpoint folders, lists and dicts.

Every door turns what it was given into the spec's ``policy`` (one reference, or a tuple of them) and,
where the caller named them, ``policy_names``:

* a **glob** (a reference with ``*``, ``?`` or ``[``; quoted on the command line so the shell leaves it
  alone) expands to every folder it matches, ordered by the step number in its path
  (:func:`fasteval.types.policy_names.checkpoint_order`): ``'outputs/train/act/checkpoints/*/pretrained_model'``
  gives LeRobot's checkpoints in training order. Two matches that are the same folder (LeRobot's ``last``
  link beside the step it points to) count once, under the name with the step number. A glob that
  matches no folder is refused (exit 2);
* a list (repeated ``--policy``, ``evaluate(policy=[...])``, a config's or sweep cell's list) keeps its
  order, each entry expanded in place;
* a dict (``evaluate(policy={"old": a, "new": b})``) names its policies by its keys.

One reference in the end is a one-policy run, as before. The names come from
:func:`fasteval.types.policy_names.short_names` unless given.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from fasteval.types.errors import UserInputError
from fasteval.types.policy_names import checkpoint_order, step_number

GLOB_CHARS = "*?["


def is_glob(ref: Any) -> bool:
    """A reference string with glob characters that is not a ``module:callable`` or a URL."""
    if not isinstance(ref, str) or not any(c in ref for c in GLOB_CHARS):
        return False
    return "://" not in ref


def expand_glob(pattern: str, base: str | os.PathLike | None = None) -> list[str]:
    """The folders ``pattern`` matches (relative to ``base`` when it is relative and ``base`` is given),
    in checkpoint order, the same folder once; UserInputError when none does."""
    rooted = pattern if base is None or os.path.isabs(pattern) else os.path.join(os.fspath(base), pattern)
    matches = [m for m in glob.glob(rooted) if Path(m).is_dir()]
    if not matches:
        raise UserInputError(f"--policy {pattern!r}: no folder matches this pattern; expected checkpoint folders, "
                             f"e.g. 'outputs/train/act/checkpoints/*/pretrained_model' (quote it, so that the shell "
                             f"does not expand it).")
    by_folder: dict[Path, str] = {}
    for match in checkpoint_order(matches):
        real = Path(match).resolve()
        kept = by_folder.get(real)
        if kept is None or (step_number(kept) is None and step_number(match) is not None):
            by_folder[real] = match
    return checkpoint_order(list(by_folder.values()))


def expand_policy_refs(refs: Sequence[Any], base: str | os.PathLike | None = None) -> tuple[Any, ...]:
    """Every reference, with each glob expanded in place (see the module docstring)."""
    out: list[Any] = []
    for ref in refs:
        out.extend(expand_glob(ref, base) if is_glob(ref) else [ref])
    return tuple(out)


def as_policy_field(refs: Sequence[Any]) -> Any:
    """The spec's ``policy`` value: the one reference, or the tuple of them."""
    refs = tuple(refs)
    if not refs:
        raise UserInputError("policy: expected at least one policy reference, got none.")
    return refs[0] if len(refs) == 1 else refs


def library_policy(policy: Any, names: Any = None) -> tuple[Any, Any]:
    """``evaluate(policy=...)`` / ``Evaluator(env, policy)`` -> ``(policy field, policy_names)``: a list or
    tuple (globs expanded), a dict (named by its keys), or one reference or object (a glob expanded)."""
    if isinstance(policy, Mapping):
        if names is not None:
            raise UserInputError("policy_names: a dict of policies names them already; give one or the other.")
        names = tuple(str(k) for k in policy)
        policy = tuple(policy.values())
        if len(policy) == 1:
            return policy[0], None
        return policy, names
    if isinstance(policy, (list, tuple)):
        return as_policy_field(expand_policy_refs(policy)), names
    if is_glob(policy):
        return as_policy_field(expand_glob(policy)), names
    return policy, names
