"""Resolve ``module:callable`` references (for envs and policies)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from fasteval.types.errors import UserInputError


def split_callable_ref(ref: str) -> tuple[str, str] | None:
    """``"pkg.mod:attr"`` or ``"path/file.py:attr"`` -> (module part, attr). ``None`` if not of that form."""
    if ":" not in ref:
        return None
    module, _, attr = ref.rpartition(":")
    if not module or not attr or not attr.replace(".", "").replace("_", "").isalnum():
        return None
    return module, attr


def is_path_ref(module: str) -> bool:
    return module.endswith(".py") or "/" in module or "\\" in module


def resolve_callable(ref: str, *, what: str, trust_remote_code: bool = False) -> Any:
    """Import ``module:attr`` (dotted attr allowed) and return the attribute.

    A module given as a file path (``path/to/file.py:fn``) runs arbitrary code, so it
    needs ``trust_remote_code``. Raises :class:`UserInputError` with a fix on failure.
    """
    parts = split_callable_ref(ref)
    if parts is None:
        raise UserInputError(f"{what} {ref!r}: expected the form module:callable (e.g. my_pkg.policies:make_policy).")
    module_name, attr = parts
    if is_path_ref(module_name):
        if not trust_remote_code:
            raise UserInputError(
                f"{what} {ref!r} loads Python code from a file path. That runs arbitrary code; pass "
                f"--trust-remote-code if you trust {module_name}."
            )
        path = Path(module_name)
        if not path.is_file():
            raise UserInputError(f"{what} {ref!r}: no such file {module_name}.")
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules.setdefault(path.stem, module)
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    else:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise UserInputError(
                f"{what} {ref!r}: could not import module {module_name!r} ({exc}). Install the package that "
                f"provides it, or check the spelling."
            ) from None
    obj: Any = module
    for name in attr.split("."):
        if not hasattr(obj, name):
            public = [n for n in dir(module) if not n.startswith("_")]
            raise UserInputError(f"{what} {ref!r}: module {module_name!r} has no attribute {attr!r}. It has: {', '.join(public[:20])}.")
        obj = getattr(obj, name)
    if not callable(obj):
        raise UserInputError(f"{what} {ref!r}: {attr!r} is not callable (got {type(obj).__name__}).")
    return obj
