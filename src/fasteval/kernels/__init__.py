"""Episode-bookkeeping kernels with several interchangeable backends.

The backend is chosen once, at import, and logged:

1. ``cython``    compiled from ``csrc/_cython_ops.pyx`` (fastest per call);
2. ``numba``     JIT-compiled, cached on disk (``numba_ops.py``);
3. ``reference`` plain NumPy/Python (``reference.py``), the specification.

``FASTEVAL_KERNELS=cython|numba|reference`` forces one. If the preferred compiled
backend is missing, fasteval falls back to the next one with a single warning.
Every backend exposes the same functions with the same signatures; see
``reference.py`` for their contracts.
"""

from __future__ import annotations

import importlib
import logging
import os
import warnings
from types import ModuleType

from fasteval.kernels.reference import IDLE

logger = logging.getLogger(__name__)

BACKENDS = ("cython", "numba", "reference")
KERNEL_NAMES = ("step_bookkeeping",)
ENV_VAR = "FASTEVAL_KERNELS"


def load_backend(name: str) -> ModuleType:
    """Import and return the module of backend ``name`` (raises ImportError if unavailable)."""
    if name == "cython":
        return importlib.import_module("fasteval.kernels._cython_ops")
    if name == "numba":
        return importlib.import_module("fasteval.kernels.numba_ops")
    if name == "reference":
        return importlib.import_module("fasteval.kernels.reference")
    raise ValueError(f"unknown kernel backend {name!r}; expected one of {', '.join(BACKENDS)}")


def available_backends() -> list[str]:
    """Names of the backends that import on this machine, fastest first."""
    names = []
    for name in BACKENDS:
        try:
            load_backend(name)
        except ImportError:
            continue
        names.append(name)
    return names


def _choose() -> tuple[str, ModuleType]:
    forced = os.environ.get(ENV_VAR, "").strip().lower()
    if forced:
        if forced not in BACKENDS:
            raise ValueError(
                f"{ENV_VAR}={forced!r} is not a kernel backend; expected one of {', '.join(BACKENDS)}. "
                f"Unset it to let fasteval choose."
            )
        return forced, load_backend(forced)
    try:
        return "cython", load_backend("cython")
    except ImportError as exc:
        cython_error = exc
    for name in ("numba", "reference"):
        try:
            module = load_backend(name)
        except ImportError:
            continue
        warnings.warn(
            f"fasteval's compiled Cython kernels are not built ({cython_error}); using the {name} "
            f"backend. Reinstall with `pip install -e .` (without FASTEVAL_NO_EXTENSIONS=1) to build them.",
            RuntimeWarning,
            stacklevel=2,
        )
        return name, module
    raise ImportError("no kernel backend could be imported")  # reference always imports


BACKEND, _module = _choose()
logger.info("fasteval kernels: using the %s backend", BACKEND)

step_bookkeeping = _module.step_bookkeeping

__all__ = ["BACKEND", "BACKENDS", "IDLE", "available_backends", "load_backend", *KERNEL_NAMES]
