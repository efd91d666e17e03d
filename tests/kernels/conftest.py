"""Fixtures for the kernel parity tests: one parametrisation per backend."""

from __future__ import annotations

import pytest

from fasteval.kernels import BACKENDS, load_backend

COMPILED = ("cython", "numba")


def pytest_configure(config):
    config.addinivalue_line("markers", "compiled: exercises a compiled kernel backend (Cython or Numba)")
    config.addinivalue_line("markers", "cython: exercises the Cython kernel backend")
    config.addinivalue_line("markers", "numba: exercises the Numba kernel backend")


def _backend_params():
    params = []
    for name in BACKENDS:
        marks = [pytest.mark.compiled, getattr(pytest.mark, name)] if name in COMPILED else []
        params.append(pytest.param(name, marks=marks, id=name))
    return params


@pytest.fixture(scope="session", params=_backend_params())
def backend(request):
    """The kernel module of one backend, warmed up; skipped if it does not import here."""
    name = request.param
    try:
        module = load_backend(name)
    except ImportError as exc:
        hint = " (build it with `pip install --no-build-isolation -e .`)" if name == "cython" else ""
        pytest.skip(f"kernel backend {name!r} is not available: {exc}{hint}")
    warmup = getattr(module, "warmup", None)
    if warmup is not None:
        warmup()
    return module


@pytest.fixture(scope="session")
def reference():
    return load_backend("reference")
