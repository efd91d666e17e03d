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
