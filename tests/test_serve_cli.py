"""The command line with a served policy: exit 2 for a server that is down or a wrong token, `fasteval
serve` registered, and a server killed mid-run: the run stops, keeps its episodes, prints the resume
command, and `fasteval --resume` (server back) finishes it with the in-process numbers."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

pytest.importorskip("websockets")

from fasteval import evaluate  # noqa: E402
from fasteval.testing import KNOWN_ANSWER_ID  # noqa: E402
from tests.serve_helpers import REPO, ServerProcess, repo_env  # noqa: E402
from tests.test_serve import NOISE  # noqa: E402
from tests.test_serve_faults import free_port  # noqa: E402


def fasteval(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fasteval.doors.cli", *args], cwd=REPO, env=repo_env(**env),
                          capture_output=True, text=True, timeout=600)


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("Error:")]


def test_serve_is_a_subcommand():
    out = fasteval("--help")
    assert out.returncode == 0 and "serve" in out.stdout
    out = fasteval("serve", "--help")
    assert out.returncode == 0 and "--max-batch" in out.stdout and "--token" in out.stdout


def test_a_server_that_is_down_exits_2_with_one_line(tmp_path):
    port = free_port()
    out = fasteval("--policy", f"ws://127.0.0.1:{port}", "--env", KNOWN_ANSWER_ID, "-n", "2", "-o", str(tmp_path / "run"))
    assert out.returncode == 2, out.stderr
    assert len(error_lines(out.stderr)) == 1 and "is not reachable" in out.stderr
    assert not (tmp_path / "run" / "manifest.json").exists()


@pytest.mark.parametrize("option", ["--max-message-mb", "--max-wait-ms", "--session-ttl", "--max-inflight-mb",
                                    "--batch-sessions"])
def test_serve_refuses_non_finite_numbers_before_it_binds(option):
    """``nan`` passed click's FloatRange and reached ``int(nan * 2**20)``: a traceback, exit 1."""
    out = fasteval("serve", "zero", "--port", "0", option, "nan")
    assert out.returncode == 2 and "not a finite number" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_serve_applies_the_command_lines_env_rules(tmp_path):
    """``--env subprocess:run --env-kwarg args=[...]`` ran the command (the probe env was built with those
    kwargs); the main command refuses a callable that is not an env constructor without the flag."""
    mark = tmp_path / "ran"
    out = fasteval("serve", "zero", "--port", "0", "--env", "subprocess:run", "--env-kwarg",
                   f'args=["touch", "{mark}"]')
    assert out.returncode == 2 and "is not an env constructor" in out.stderr, out.stderr
    assert not mark.exists()


def test_a_bad_token_exits_2(tmp_path):
    with ServerProcess(NOISE, "--token", "right") as server:
        out = fasteval("--policy", server.url, "--env", KNOWN_ANSWER_ID, "-n", "2", "-o", str(tmp_path / "run"),
                       FASTEVAL_SERVE_TOKEN="wrong")
        good = fasteval("--policy", server.url, "--env", KNOWN_ANSWER_ID, "-n", "2", "-o", str(tmp_path / "ok"),
                        FASTEVAL_SERVE_TOKEN="right")
    assert out.returncode == 2 and "HTTP 401" in out.stderr
    assert good.returncode == 0, good.stderr


def _lines(path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_kill_mid_run_then_resume(tmp_path):
    n, out_dir = 1500, tmp_path / "run"
    args = ["--env", KNOWN_ANSWER_ID, "-n", str(n), "-b", "4", "--seed", "5", "--policy-timeout", "2", "-o", str(out_dir)]
    server = ServerProcess(NOISE).start()
    url = server.url
    try:
        client = subprocess.Popen([sys.executable, "-m", "fasteval.doors.cli", "--policy", url, *args], cwd=REPO,
                                  env=repo_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 300
        while _lines(out_dir / "episodes.jsonl") < 40 and client.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        server.kill()
        _stdout, stderr = client.communicate(timeout=300)
    finally:
        server.stop()
    done = _lines(out_dir / "episodes.jsonl")
    assert client.returncode == 1, stderr
    assert 0 < done < n, f"{done} episodes recorded: the kill should land mid-run"
    assert f"fasteval --resume {out_dir}" in stderr and "could not be reached again within 2 s" in stderr
    with ServerProcess(NOISE, port=server.port):
        resumed = fasteval("--resume", str(out_dir))
    assert resumed.returncode == 0, resumed.stderr
    info = json.loads((out_dir / "eval_info.json").read_text())
    ours = [(e["episode_ix"], e["seed"], e["sum_reward"], e["length"]) for e in info["per_episode"]]
    local = evaluate(env=KNOWN_ANSWER_ID, policy=NOISE, n_episodes=n, batch_size=4, seed=5, device="cpu")
    assert ours == [(e["episode_ix"], e["seed"], e["sum_reward"], e["length"]) for e in local.per_episode]
