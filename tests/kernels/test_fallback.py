"""An install without the Cython build (``FASTEVAL_NO_EXTENSIONS=1 pip install``, or a wheel with no
compiled extension): the kernel loader says so once, falls back as ``fasteval.kernels`` documents
(Numba, else the NumPy reference), and ``FASTEVAL_KERNELS=reference`` forces the pure path silently.

Each case runs in a fresh interpreter on a copy of ``src/fasteval`` without the compiled module, so
nothing of this process's (built) kernels is reused.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fasteval.testing import expected_episode
from tests.kernels.conftest import require_backend

SRC = Path(__file__).resolve().parents[2] / "src"
NOT_BUILT = "compiled Cython kernels are not built"
SHOW = "import fasteval.kernels as k; print(k.BACKEND, k.__file__)"


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """A copy of the package as an install without the Cython build leaves it."""
    root = tmp_path_factory.mktemp("no-cython")
    shutil.copytree(SRC / "fasteval", root / "fasteval",
                    ignore=shutil.ignore_patterns("_cython_ops*.so", "_cython_ops*.pyd", "__pycache__"))
    assert not list((root / "fasteval" / "kernels").glob("_cython_ops*.so"))
    return root


def run(tree: Path, code: str, hide: tuple[str, ...] = (), cwd: Path | None = None, **env: str):
    """``code`` in a fresh interpreter importing fasteval from ``tree``; ``hide``: modules made unimportable."""
    prelude = "".join(f"import sys; sys.modules[{name!r}] = None\n" for name in hide)
    environ = {k: v for k, v in os.environ.items() if k != "FASTEVAL_KERNELS"}
    environ.update(env, PYTHONPATH=str(tree))
    return subprocess.run([sys.executable, "-c", prelude + code], env=environ, cwd=cwd or tree, capture_output=True,
                          text=True, timeout=300)


def test_without_the_cython_build_the_loader_warns_once_and_uses_numba(tree):
    require_backend("numba")
    done = run(tree, SHOW)
    assert done.returncode == 0, done.stderr
    backend, where = done.stdout.split()
    assert Path(where).is_relative_to(tree)  # the copy was imported, not the built tree
    assert backend == "numba"
    assert done.stderr.count("RuntimeWarning") == 1 and NOT_BUILT in done.stderr
    assert "using the numba backend" in done.stderr and "FASTEVAL_NO_EXTENSIONS" in done.stderr


def test_without_cython_or_numba_the_loader_falls_back_to_the_reference(tree):
    done = run(tree, SHOW, hide=("numba",))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == "reference"
    assert done.stderr.count("RuntimeWarning") == 1 and "using the reference backend" in done.stderr


def test_the_env_var_forces_the_pure_path_without_a_warning(tree):
    done = run(tree, SHOW, FASTEVAL_KERNELS="reference")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == "reference"
    assert "Warning" not in done.stderr


def test_the_env_var_naming_a_missing_build_fails_and_says_so(tree):
    done = run(tree, SHOW, FASTEVAL_KERNELS="cython")
    assert done.returncode != 0
    assert "_cython_ops" in done.stderr  # the import error of the forced backend, not a silent fallback


def test_a_run_without_the_cython_build_gives_the_known_answers(tree, tmp_path):
    """The whole CLI on the fallback kernels: the known-answer env's own numbers, and the backend recorded."""
    out = tmp_path / "run"
    code = ("from fasteval.doors.cli import main\n"
            f"main(['--env', 'fasteval/KnownAnswer-v0', '--policy', 'zero', '-n', '9', '-b', '4', '--seed', '2', "
            f"'--no-report', '-o', {str(out)!r}])\n")
    done = run(tree, code, hide=("numba",))
    assert done.returncode == 0, done.stderr
    info = json.loads((out / "eval_info.json").read_text())
    got = [{k: r[k] for k in ("seed", "sum_reward", "max_reward", "length", "success")} for r in info["per_episode"]]
    want = [{k: e[k] for k in ("seed", "sum_reward", "max_reward", "length", "success")}
            for e in (expected_episode(2 + i) for i in range(9))]
    assert got == want
    assert info["meta"]["kernel_backend"] == "reference"
