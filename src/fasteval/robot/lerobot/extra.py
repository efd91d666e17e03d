"""Is the ``lerobot`` extra usable here? One check, with errors that say what to do.

LeRobot 0.6 needs Python >= 3.12 (and pins torch < 2.12), so the check looks at the Python
version first: on 3.11 the install itself is impossible, and saying so beats "not installed".
Both failures are :class:`~fasteval.types.errors.PolicyLoadError` (CLI exit code 2).
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Sequence

from fasteval.types.errors import PolicyLoadError

MIN_PYTHON = (3, 12)
INSTALL_HINT = "./scripts/install.sh lerobot  (LeRobot 0.6.x with PushT; CPU-only torch: see docs/lerobot.md)"


def require_lerobot(what: str, version_info: Sequence[int] | None = None) -> ModuleType:
    """Import and return ``lerobot``; raise :class:`PolicyLoadError` naming ``what`` needed it.

    ``version_info`` (default ``sys.version_info``) is a parameter so the wrong-Python message
    can be tested on any interpreter.
    """
    version = tuple((version_info or sys.version_info)[:2])
    if version < MIN_PYTHON:
        raise PolicyLoadError(
            f"{what} needs LeRobot, and LeRobot 0.6 needs Python >= {MIN_PYTHON[0]}.{MIN_PYTHON[1]}; this is Python "
            f"{version[0]}.{version[1]}. Create a Python 3.12 environment (e.g. `pyenv install 3.12`, or run "
            f"scripts/lerobot_env.sh) and install it there: {INSTALL_HINT}."
        )
    try:
        return importlib.import_module("lerobot")
    except ImportError as exc:
        raise PolicyLoadError(
            f"{what} needs LeRobot, which is not installed in this Python ({sys.executable}): {exc}. "
            f"Install it with: {INSTALL_HINT}."
        ) from None
