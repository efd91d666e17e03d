"""The environment split, end to end: LeRobot's ACT served from the Python 3.12 LeRobot environment,
evaluated from this (main, 3.11) environment, per seed equal to LeRobot's in-process run.

Needs the LeRobot environment of scripts/lerobot_env.sh (with the serve extra): its python is
``$FASTEVAL_LEROBOT_PYTHON``, else the script's default place; the test skips without it. It does
not build that environment (several GB): CI runs the script first (see docs/serving.md).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("websockets")
pytest.importorskip("gym_pusht")

from tests.serve_helpers import REPO, ServerProcess, repo_env  # noqa: E402

N, BATCH, STEPS, SEED = 4, 2, 25, 1000


def lerobot_python() -> str:
    path = os.environ.get("FASTEVAL_LEROBOT_PYTHON") or str(
        Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "fasteval" / "lerobot-py312" / "bin" / "python")
    if not Path(path).is_file():
        pytest.skip(f"no LeRobot environment at {path} (build it with scripts/lerobot_env.sh)")
    probe = subprocess.run([path, "-c", "import lerobot, websockets, msgpack"], capture_output=True, text=True, timeout=300)
    if probe.returncode != 0:
        pytest.skip(f"the LeRobot environment {path} lacks lerobot or the serve extra: {probe.stderr.strip()[-200:]}")
    return path


def cli(python: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([python, "-m", "fasteval.doors.cli", *args], cwd=REPO, env=env or repo_env(),
                          capture_output=True, text=True, timeout=900)


def episodes(out_dir: Path) -> list[tuple]:
    info = json.loads((out_dir / "eval_info.json").read_text())
    return [(e["episode_ix"], e["seed"], e["sum_reward"], e["max_reward"], e["success"]) for e in info["per_episode"]]


@pytest.fixture(scope="module")
def act_folder(tmp_path_factory) -> tuple[str, Path]:
    python = lerobot_python()
    folder = tmp_path_factory.mktemp("act")
    made = subprocess.run([python, "-c", "import sys; from pathlib import Path; from fasteval.robot.lerobot.testing import "
                           "write_act_checkpoint; write_act_checkpoint(Path(sys.argv[1]), seed=0)", str(folder)],
                          cwd=REPO, env=repo_env(), capture_output=True, text=True, timeout=900)
    assert made.returncode == 0, made.stderr[-2000:]
    return python, folder


def test_act_served_from_the_lerobot_env_equals_its_in_process_run(act_folder, tmp_path):
    import sys

    python, folder = act_folder
    flags = ["--env.type=pusht", f"--eval.n_episodes={N}", f"--eval.batch_size={BATCH}", f"--max-steps={STEPS}",
             f"--seed={SEED}"]
    local = cli(python, f"--policy.path={folder}", "--policy.device=cpu", *flags, "-o", str(tmp_path / "local"))
    assert local.returncode == 0, local.stderr[-3000:]
    with ServerProcess(f"--policy.path={folder}", python=python) as server:
        remote = cli(sys.executable, "--policy", server.url, *flags, "-o", str(tmp_path / "remote"))
    assert remote.returncode == 0, remote.stderr[-3000:]
    ours, theirs = episodes(tmp_path / "remote"), episodes(tmp_path / "local")
    assert [e[1] for e in ours] == list(range(SEED, SEED + N))
    assert any(e[2] > 0 for e in theirs)  # not a comparison of zeros
    assert ours == theirs
    meta = json.loads((tmp_path / "remote" / "eval_info.json").read_text())
    assert "LeRobotPolicy" in json.dumps(meta)
