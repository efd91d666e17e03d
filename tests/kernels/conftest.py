"""Fixtures for the kernel parity tests: one parametrisation per compiled backend.

Every compiled backend is compared with ``fasteval.kernels.reference`` (the specification); the
reference is never compared with itself. A compiled backend that does not import here is skipped
with the reason, except in CI (``CI=true``, set by ``.ci/run``): CI builds the Cython extension and
installs Numba (a core dependency), so a missing backend there is a broken build and fails loudly.
"""

from __future__ import annotations

import os
from types import ModuleType

import pytest

from fasteval.kernels import load_backend

COMPILED = ("cython", "numba")
BUILD_HINT = {"cython": " (build it with `python setup.py build_ext --inplace` or `pip install --no-build-isolation -e .`)",
              "numba": " (pip install numba: a dependency of fasteval)"}


def pytest_configure(config):
    config.addinivalue_line("markers", "compiled: exercises a compiled kernel backend (Cython or Numba)")
    config.addinivalue_line("markers", "cython: exercises the Cython kernel backend")
    config.addinivalue_line("markers", "numba: exercises the Numba kernel backend")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def require_backend(name: str) -> ModuleType:
    """The kernel module of compiled backend ``name``; skips (fails in CI) when it does not import."""
    try:
        return load_backend(name)
    except ImportError as exc:
        message = f"kernel backend {name!r} is not available: {exc}{BUILD_HINT.get(name, '')}"
        if in_ci():
            pytest.fail(f"{message}. CI builds every compiled backend, so this is a broken build.", pytrace=False)
        pytest.skip(message)


@pytest.fixture(scope="session",
                params=[pytest.param(name, marks=[pytest.mark.compiled, getattr(pytest.mark, name)], id=name)
                        for name in COMPILED])
def backend(request):
    """The kernel module of one compiled backend, warmed up."""
    module = require_backend(request.param)
    module.warmup()  # every compiled backend has one (the JIT compiles there)
    return module


@pytest.fixture(scope="session")
def reference():
    return load_backend("reference")
