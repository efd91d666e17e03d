"""A pool run whose env hangs ends promptly after its timeout message (issue 40): the replacement of the killed
worker builds its envs in the background (awaited only when it is given work), and closing the pool kills what is
still running, so a run with nothing left to do does not wait minutes for a replacement's slow build (LIBERO's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

PLAN_ENV = "fasteval.testing.fault_plan:make_fault_plan_env"
REBUILD_S = 600.0
"""How long an env built after the hang takes (a replacement worker's): the run must not wait for it."""


def test_a_pool_cli_run_whose_reset_hangs_returns_after_its_timeout_message(tmp_path) -> None:
    out, state = tmp_path / "run", tmp_path / "state"
    cmd = [sys.executable, "-m", "fasteval.doors.cli", "--policy", "fasteval.testing.fault_plan:make_planned_policy",
           "--env", PLAN_ENV, "--env-kwarg", 'plan={"0": [["hang", -1]]}', "--env-kwarg", f"state_dir={state}",
           "--env-kwarg", f"rebuild_s={REBUILD_S}", "-n", "1", "-b", "1", "--vectorization", "async", "--workers", "1",
           "--step-timeout", "1", "--retries", "0", "--output-dir", str(out)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1] / "src"),
                                                       os.environ.get("PYTHONPATH", "")])}
    # Generous (a loaded box): a run that waited for the replacement's build would be killed at this timeout.
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=REBUILD_S / 3, env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "env worker 0 timed out: no answer to the first reset of 1 env(s) in turn" in proc.stdout + proc.stderr
    (record,) = [json.loads(line) for line in (out / "errors.jsonl").read_text().splitlines()]
    assert record["stage"] == "reset" and record["final"]
    assert "raise --step-timeout" in record["error"]  # what happened, and which option to raise


def test_a_replacement_worker_is_awaited_only_when_it_is_given_work(tmp_path) -> None:
    from fasteval.core.envs import EnvFactory
    from fasteval.core.workers import WorkerPoolEnvs

    factory = EnvFactory(PLAN_ENV, {"plan": {"0": [["hang", -1]]}, "state_dir": str(tmp_path), "rebuild_s": 1.0})
    probe = factory()
    pool = WorkerPoolEnvs(factory, 2, probe.observation_space, probe.action_space, n_workers=2, step_timeout=0.25)
    try:
        pool.reset_slots([0, 1], [0, 1])  # slot 0 hangs in its reset: worker 0 killed, its replacement started
        (failure,) = pool.failures
        assert failure.slot == 0 and "timed out" in failure.error
        replacement = pool._workers[0]
        assert replacement.starting and replacement.process.is_alive()  # not waited for
        pool.failures.clear()
        assert pool.rebuild(0) == [0]
        pool.reset_slots([0], [2])  # given work: awaited now (its 1 s build), then it answers
        assert pool.failures == [] and not replacement.starting
        pool.step([0, 1], np.zeros((2, 1), np.float32))
        assert pool.failures == []
    finally:
        closed = time.monotonic()
        pool.close()
        probe.close()
    assert time.monotonic() - closed < 60  # generous: close never waits long for a worker


def test_closing_a_pool_kills_a_replacement_that_is_still_building(tmp_path) -> None:
    from fasteval.core.envs import EnvFactory
    from fasteval.core.workers import WorkerPoolEnvs

    factory = EnvFactory(PLAN_ENV, {"plan": {"0": [["hang", -1]]}, "state_dir": str(tmp_path), "rebuild_s": REBUILD_S})
    probe = factory()
    pool = WorkerPoolEnvs(factory, 1, probe.observation_space, probe.action_space, n_workers=1, step_timeout=0.25)
    try:
        pool.reset_slots([0], [0])
        replacement = pool._workers[0].process
        assert replacement.is_alive()
    finally:
        pool.close()
        probe.close()
    assert not replacement.is_alive()  # killed, not joined for the 600 s of its build
