"""Runs under bad input and signals (issue 32): unique default folders, values past what the machine can
do, runs that never start, a hung policy and one SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from click.testing import CliRunner

from fasteval.doors.cli import default_output_dir, main
from fasteval.testing.envs import KnownAnswerEnv

KA = "fasteval.testing.envs:make_known_answer_env"
ROOT = Path(__file__).resolve().parent.parent


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


# -- parallel runs without -o -------------------------------------------------------------------------
def test_default_folders_are_unique_and_sort_by_start_time(monkeypatch):
    monkeypatch.setattr(time, "strftime", lambda fmt, *a: "2026-05-01_10-00-00")  # all in the same second
    names = [default_output_dir("CartPole-v1").name for _ in range(50)]
    assert len(set(names)) == 50
    assert all(n.startswith("2026-05-01_10-00-00-") and n.endswith("_CartPole-v1") for n in names)
    monkeypatch.setattr(time, "strftime", lambda fmt, *a: "2026-05-01_10-00-01")
    later = default_output_dir("CartPole-v1").name
    assert all(later > n for n in names)  # a later start sorts after, whatever the suffixes


def test_runs_started_in_the_same_second_without_o_do_not_collide(tmp_path, monkeypatch):
    """``for s in 0 100 200; do fasteval -p random --seed $s -n 5 & done`` made two of three exit 2."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(time, "strftime", lambda fmt, *a: "2026-05-01_10-00-00")
    results = [cli("--env", KA, "-p", "random", "--seed", seed, "-n", 5) for seed in (0, 100, 200)]
    assert [r.exit_code for r in results] == [0, 0, 0], [r.output for r in results]
    folders = sorted((tmp_path / "outputs" / "eval").iterdir())
    assert len(folders) == 3
    seeds = sorted(json.loads((f / "manifest.json").read_text())["what"]["seed"] for f in folders)
    assert seeds == [0, 100, 200]


# -- values past what the machine can do: exit 2, one line, nothing written ------------------------------
@pytest.mark.parametrize("option, value, expected", [
    ("--cpu-threads", "100000", "cpu_threads: expected None or an integer from 1 to 1024"),
    ("--max-steps", "10000000000000000000000", "max_steps: expected None or an integer from 1 to 2**63 - 1"),
])
def test_values_the_machine_cannot_do_exit_2_with_one_line(tmp_path, option, value, expected):
    out = tmp_path / "run"
    res = cli("--env", KA, "-n", 2, option, value, "-o", out)
    assert res.exit_code == 2, res.output
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: ") and expected in lines[0]
    assert not out.exists()


# -- a run that does not start leaves no folder ----------------------------------------------------------
class AbortingEnv(KnownAnswerEnv):
    """An env whose first reset aborts the process (as GLFW does for a human render mode on a headless box)."""

    def reset(self, **kwargs):
        os.abort()


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])  # tests.* importable
    return env


@pytest.mark.parametrize("existing", [False, True])
def test_a_run_that_dies_before_its_first_episode_leaves_no_folder(tmp_path, existing):
    out = tmp_path / "run"
    if existing:
        out.mkdir()  # an empty folder the user made: it stays empty (no lock file left in it)
    proc = subprocess.run([sys.executable, "-m", "fasteval.doors.cli", "--env", "tests.test_bad_input_runs:AbortingEnv",
                           "-n", "3", "-o", str(out)], capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=300)
    assert proc.returncode in (-signal.SIGABRT, 128 + signal.SIGABRT), proc.stderr
    assert (list(out.iterdir()) == []) if existing else not out.exists()


# -- a hung policy and one SIGTERM ------------------------------------------------------------------------
class _HangsAt:
    def __init__(self, at: int, marker: str):
        self.calls, self.at, self.marker = 0, at, marker

    def __call__(self, obs):
        self.calls += 1
        if self.calls == self.at:
            Path(self.marker).write_text("hanging")
            time.sleep(3600)  # a policy call that never returns (no --policy-timeout)
        return torch.zeros(obs.shape[0], dtype=torch.long)


def hangs_at_30():
    return _HangsAt(30, os.environ["FASTEVAL_TEST_MARKER"])


def test_a_hung_policy_does_not_outlive_one_sigterm(tmp_path):
    """CI's ``timeout`` sends one SIGTERM: --stop-grace after it, the run stops as a second
    signal would (exit 143, manifest and eval_info.json ``interrupted``), and every finished episode is kept."""
    out, marker = tmp_path / "run", tmp_path / "hanging"
    env = {**_env(), "FASTEVAL_TEST_MARKER": str(marker)}
    proc = subprocess.Popen([sys.executable, "-m", "fasteval.doors.cli", "--env", KA, "--policy",
                             "tests.test_bad_input_runs:hangs_at_30", "-n", "200", "-b", "2", "--stop-grace", "1",
                             "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=ROOT)
    try:
        deadline = time.monotonic() + 240
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)  # without the grace: forever
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "1 s after SIGTERM (--stop-grace) episodes are still in flight" in stderr
    manifest = json.loads((out / "manifest.json").read_text())
    info = json.loads((out / "eval_info.json").read_text())
    assert manifest["status"] == info["meta"]["status"] == "interrupted"
    logged = [json.loads(line)["episode_ix"] for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert logged and sorted(logged) == [r["episode_ix"] for r in info["per_episode"]]  # none lost


class SlowEnv(gym.Env):
    """A LIBERO-like pace: a slow reset, then steps that keep landing slowly, in episodes far longer than the grace
    (they never end by themselves; ``FASTEVAL_TEST_MARKER`` is written from an episode's third step on)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, reset_s: float = 0.5, step_s: float = 0.05):
        self.reset_s, self.step_s = reset_s, step_s

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        time.sleep(self.reset_s)
        self.t = 0
        return np.zeros(3, np.float32), {}

    def step(self, action):
        self.t += 1
        if self.t >= 3:  # an episode of the run is under way (not the dry run's single step)
            Path(os.environ["FASTEVAL_TEST_MARKER"]).write_text(str(self.t))
        time.sleep(self.step_s)
        return np.zeros(3, np.float32), 0.0, False, False, {}


def make_slow_env(**kwargs):
    return gym.wrappers.TimeLimit(SlowEnv(**kwargs), max_episode_steps=1_000_000)


@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_the_first_sigterm_ends_a_run_of_long_episodes_within_the_grace(tmp_path, vectorization):
    """A LIBERO run's episodes take many minutes while their steps keep landing: the first SIGTERM waited for them
    (the grace counted only time without an env step). Now the episodes in flight get --stop-grace seconds, then the
    run stops as a second signal would (exit 143, interrupted), in-process envs and workers alike."""
    out, marker = tmp_path / "run", tmp_path / "stepping"
    env = {**_env(), "FASTEVAL_TEST_MARKER": str(marker)}
    proc = subprocess.Popen([sys.executable, "-m", "fasteval.doors.cli", "--env", "tests.test_bad_input_runs:make_slow_env",
                             "-n", "4", "-b", "2", "--vectorization", vectorization, "--stop-grace", "1", "--trust-remote-code",
                             "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=ROOT)
    try:
        deadline = time.monotonic() + 240
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=120)  # before: until the episodes' million steps were done
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "1 s after SIGTERM (--stop-grace) episodes are still in flight" in stderr
    assert json.loads((out / "manifest.json").read_text())["status"] == "interrupted" if out.exists() else True


def test_the_grace_ends_the_process_when_the_second_signal_cannot(monkeypatch):
    """A call stuck in C never sees the grace's second signal: the process is then ended (records flushed,
    manifest interrupted) by ``hard_stop``, HARD_STOP_S later."""
    from fasteval.run import durable

    class Ledger:
        acc_len = torch.zeros(2, dtype=torch.int64).numpy()
        next_episode = 4

    class Engine:
        ledger = Ledger()

        def stop_starting(self):
            pass

    stopped, said, sent = [], [], []
    monkeypatch.setattr(durable, "HARD_STOP_S", 0.1)
    monkeypatch.setattr(signal, "pthread_kill", lambda thread, signum: sent.append(signum))  # nobody hears it
    stopper = durable._StopOnSignal(Engine(), said.append, grace_s=0.2, hard_stop=stopped.append)
    stopper._handle(signal.SIGTERM, None)
    deadline = time.monotonic() + 10
    while not stopped and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sent == [signal.SIGTERM] and stopped == [signal.SIGTERM]
    assert any("0.2 s after SIGTERM (--stop-grace)" in line for line in said)
    with pytest.raises(KeyboardInterrupt):  # and a real second signal stops at once
        stopper._handle(signal.SIGTERM, None)
