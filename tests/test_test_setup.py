"""The test setup itself: deterministic hypothesis in CI, and every pytest mark registered."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

SHOW_PROFILE = ("import tests.conftest as c\n"
                "from hypothesis import settings\n"
                "d = settings.default\n"
                "print(c.HYPOTHESIS_PROFILE, d.derandomize, d.database is None, d.print_blob)\n")


@pytest.mark.parametrize("ci, profile, expected", [
    ("true", "", "ci True True True"),  # CI
    ("", "", "ci True True True"),  # a newcomer's first run: the same examples as CI, every time
    ("", "explore", "explore False False True"),  # opt-in exploration: random examples, a database
    ("true", "explore", "explore False"),  # (hypothesis itself drops the database on CI machines)
])
def test_hypothesis_runs_derandomized_without_a_database_unless_asked_to_explore(ci, profile, expected):
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "HYPOTHESIS_PROFILE")}
    if ci:
        env["CI"] = ci
    if profile:
        env["HYPOTHESIS_PROFILE"] = profile
    done = subprocess.run([sys.executable, "-c", SHOW_PROFILE], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith(expected), done.stdout


def test_the_kernel_marks_are_registered():
    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    markers = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    names = {m.split(":")[0].strip() for m in markers}
    assert {"compiled", "cython", "numba", "gpu", "slow"} <= names


def test_collecting_the_kernel_tests_raises_no_unknown_mark_warning():
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider",
                           "-W", "error::pytest.PytestUnknownMarkWarning", "tests/kernels"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_the_training_example_writes_into_an_ignored_folder_by_default():
    import re

    source = (REPO / "examples" / "train_with_eval.py").read_text()
    match = re.search(r'"--logdir", default="([^"]+)"', source)
    assert match, "the example's --logdir default was not found"
    top = match.group(1).split("/")[0] + "/"
    ignored = [line.strip() for line in (REPO / ".gitignore").read_text().splitlines()]
    assert top in ignored, f"{match.group(1)} is not below an ignored folder ({ignored})"


def test_the_readme_lists_every_file_of_the_output_folder():
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("The output folder (`-o`) gets these files"):][:1500]
    for name in ("manifest.json", "episodes.jsonl", "errors.jsonl", "eval_info.json", "config.json"):
        assert f"`{name}`" in section, name
