"""Every script the docs name runs (issue 42): README.md and docs/*.md name scripts a user will type; each one
exists, each Python script is run by a test at a tiny size, and each shell script at least parses.

``scripts/train_demo_policy.py`` (README, "Development") crashed after training and saved nothing; it is run here
to a saved checkpoint. The other Python scripts are run by the test files listed in ``RUN_BY``.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.serve_helpers import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SCRIPT_RE = re.compile(r"\b((?:scripts|examples|benchmarks)/[A-Za-z0-9_./-]+\.(?:py|sh))\b")


def named_scripts() -> list[str]:
    found = set()
    for doc in DOCS:
        found.update(SCRIPT_RE.findall(doc.read_text()))
    return sorted(found)


NAMED = named_scripts()


def test_the_docs_name_scripts_and_each_exists():
    assert "scripts/train_demo_policy.py" in NAMED
    missing = [s for s in NAMED if not (REPO / s).is_file()]
    assert not missing, f"the docs name scripts that are not in the tree: {missing}"


@pytest.mark.parametrize("script", [s for s in NAMED if s.endswith(".py")])
def test_each_python_script_the_docs_name_is_run_by_a_test(script):
    """A test file other than this one runs the script (its file name and a run of it appear there), or it is
    run below."""
    if script == "scripts/train_demo_policy.py":
        return  # run below
    name = script.rsplit("/", 1)[-1]
    runners = [t.name for t in (REPO / "tests").rglob("test_*.py")
               if t.name != "test_doc_scripts.py" and name in t.read_text()]
    assert runners, f"{script} is named in the docs but no test runs it: run it at a tiny size in a test"


@pytest.mark.parametrize("script", [s for s in NAMED if s.endswith(".sh")])
def test_each_shell_script_the_docs_name_parses(script):
    proc = subprocess.run(["bash", "-n", str(REPO / script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_train_demo_policy_trains_and_saves_a_checkpoint_that_fasteval_loads(tmp_path):
    out = tmp_path / "cp"
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "train_demo_policy.py"), "--target", "0",
                           "--population", "4", "--elites", "2", "--episodes", "1", "--max-generations", "2",
                           "--out", str(out)], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "held-out(100 eps" in proc.stdout and "saved to" in proc.stdout
    assert (out / "config.json").is_file()
    from fasteval import evaluate

    result = evaluate(env="CartPole-v1", policy=str(out), n_episodes=2, batch_size=2, device="cpu")
    assert result.overall()["n_episodes"] == 2


# -- install hints (issue 42): fasteval is not on a package index --------------------------------------------
INSTALL_RE = re.compile(r"install\.sh ([a-z0-9_,]+)")


def _texts():
    files = [*DOCS, *(REPO / "src" / "fasteval").rglob("*.py"), *(REPO / "benchmarks").glob("*.py")]
    return {f: f.read_text() for f in files}


def test_no_doc_or_message_says_pip_install_fasteval_extra():
    """`pip install 'fasteval[sweep]'` fails in a fresh venv; the install script's form is given instead (the
    README says so once, in its own words)."""
    bad = [str(f.relative_to(REPO)) for f, text in _texts().items()
           if re.search(r"pip install '?fasteval\[", text.replace("not\n`pip install 'fasteval[sweep]'`", ""))]
    assert not bad, f"these still say pip install 'fasteval[...]': {bad}"


def test_every_extra_an_install_hint_names_exists():
    import tomllib

    extras = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    named = {name for text in _texts().values() for group in INSTALL_RE.findall(text) for name in group.split(",")}
    assert {"sweep", "ray", "serve"} <= named
    assert named <= extras, f"install hints name extras pyproject.toml does not have: {sorted(named - extras)}"


def test_the_parquet_export_hint_names_the_parquet_extra(monkeypatch):
    import importlib.util

    from fasteval.run import sinks
    from fasteval.types.errors import UserInputError

    real = importlib.util.find_spec
    monkeypatch.setattr(sinks.importlib.util, "find_spec", lambda name, *a: None if name == "pyarrow" else real(name, *a))
    with pytest.raises(UserInputError) as info:
        sinks.check_export_formats(["parquet"])
    assert str(info.value) == ("--export parquet needs the 'pyarrow' package, which is not installed: pip install pyarrow "
                               "(or, in the fasteval checkout, ./scripts/install.sh parquet).")
