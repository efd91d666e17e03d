"""Crash-safety: every fault gets planted in a tiny env or policy, and nothing finished is lost."""

from __future__ import annotations

import json
import math
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
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fasteval import evaluate
from fasteval.doors.cli import main
from fasteval.types.errors import EvaluationAborted
from fasteval.testing import expected_episode

FAULTY = "fasteval.testing.faulty:make_faulty_env"
KA = "fasteval/KnownAnswer-v0"


def expected(seed0: int, n: int, skip=()):
    return {i: expected_episode(seed0 + i) for i in range(n) if i not in skip}


def assert_exact(result, exp):
    got = {r["episode_ix"]: r for r in result.per_episode}
    assert set(got) == set(exp)
    for i, e in exp.items():
        for key in ("seed", "sum_reward", "max_reward", "length", "success"):
            assert got[i][key] == e[key], (i, key, got[i], e)


# -- env faults ---------------------------------------------------------------------------------

@pytest.mark.parametrize("vectorization", ["sync", "async"])
@pytest.mark.parametrize("fault", ["raise", "raise_reset"])
def test_env_that_raises_once_is_retried_and_results_are_exact(tmp_path, vectorization, fault):
    kwargs = dict(fault=fault, fault_seeds=[3, 5], fault_step=2, once_dir=str(tmp_path))
    result = evaluate(env=FAULTY, env_kwargs=kwargs, n_episodes=10, batch_size=3, vectorization=vectorization,
                      workers=2 if vectorization == "async" else None)  # blocks of 2 and 1 slots
    assert_exact(result, expected(0, 10))
    assert result.n_failed == 0
    assert sorted(e["episode_ix"] for e in result.errors) == [3, 5]
    assert all(not e["final"] and "planted" in e["error"] and e["traceback"] for e in result.errors)
    step_errors = [e for e in result.errors if e["stage"] == "step"]
    assert all(e["step"] == 2 for e in step_errors)
    json.dumps(result.to_eval_info())  # every record is JSON-ready


def test_env_that_always_raises_fails_for_good_after_retries():
    kwargs = dict(fault="raise", fault_seeds=[3], fault_step=2)
    result = evaluate(env=FAULTY, env_kwargs=kwargs, n_episodes=8, batch_size=3, retries=2)
    assert result.n_failed == 1
    assert [e["attempt"] for e in result.errors] == [1, 2, 3]
    assert [e["final"] for e in result.errors] == [False, False, True]
    assert_exact(result, expected(0, 8, skip={3}))
    overall = result.overall()
    assert overall["n_failed_episodes"] == 1 and overall["n_episodes"] == 7


@pytest.mark.parametrize("workers", [1, 3])  # one worker for the batch (all restart), one per slot
def test_dead_async_worker_is_recorded_with_its_signal_and_never_hangs(tmp_path, workers):
    kwargs = dict(fault="die", fault_seeds=[4], fault_step=3, once_dir=str(tmp_path))
    result = evaluate(env=FAULTY, env_kwargs=kwargs, n_episodes=9, batch_size=3, vectorization="async", workers=workers)
    assert_exact(result, expected(0, 9))
    (error,) = result.errors
    assert error["episode_ix"] == 4 and error["exit_code"] == -signal.SIGKILL
    assert "signal 9" in error["error"]


@pytest.mark.parametrize("workers", [1, 2])
def test_hanging_async_env_times_out_and_is_retried(tmp_path, workers):
    kwargs = dict(fault="hang", fault_seeds=[2], fault_step=1, once_dir=str(tmp_path))
    t0 = time.perf_counter()
    result = evaluate(env=FAULTY, env_kwargs=kwargs, n_episodes=6, batch_size=2, vectorization="async", step_timeout=1.0,
                      workers=workers)
    assert time.perf_counter() - t0 < 60  # generous: proves it did not wait for the hour-long hang
    assert_exact(result, expected(0, 6))
    (error,) = result.errors
    assert "timed out" in error["error"]


PLAN_ENV = "fasteval.testing.fault_plan:make_fault_plan_env"
PLANNED_POLICY = "fasteval.testing.fault_plan:make_planned_policy"


@pytest.mark.parametrize("vectorization, workers", [("sync", None), ("async", 1), ("async", 2)])
def test_a_retry_and_a_final_give_up_in_one_step_leave_the_other_episode_exact(tmp_path, vectorization, workers):
    # Issue 20's repro, on the known-answer env: episode 1 (seed 2) raises at step 0 on its first
    # two attempts, episode 0 (seed 1) at step 1 on its first. With one retry, seed 2's second
    # failure is a final give-up with no episode left to take, in the same step as seed 1's retry:
    # seed 1's stale reward of its failed attempt was folded into its restarted episode.
    plan = {2: [["raise", 0], ["raise", 0]], 1: [["raise", 1]]}
    from fasteval.testing.fault_plan import parity_action

    result = evaluate(env=PLAN_ENV, env_kwargs=dict(plan=plan, state_dir=str(tmp_path)), policy=PLANNED_POLICY,
                      n_episodes=2, seed=1, batch_size=2, retries=1, vectorization=vectorization, workers=workers)
    (episode,) = result.per_episode
    want = expected_episode(1, parity_action)
    assert (episode["seed"], episode["length"], episode["sum_reward"]) == (1, want["length"], want["sum_reward"])
    assert result.n_failed == 1
    assert [(e["seed"], e["attempt"], e["final"]) for e in result.errors if e["final"]] == [(2, 2, True)]


def shape_changing_env(**kwargs) -> "gym.Env":
    """KnownAnswerEnv whose observation gets a 4th entry at step 2 of the episode with seed 3."""
    from fasteval.testing.envs import KnownAnswerEnv

    class ShapeChanging(KnownAnswerEnv):
        def step(self, action):
            obs, reward, terminated, truncated, info = super().step(action)
            if self._seed == 3 and self._t == 2:
                obs = np.append(obs, 0.0)
            return obs, reward, terminated, truncated, info

    return ShapeChanging(**kwargs)


@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_an_observation_that_changes_shape_is_that_episodes_failure_with_the_cause(vectorization):
    # issue 20: sync stopped with a bare numpy message and nothing in errors.jsonl; the pool said
    # "worker died (exit code 1)" and lost the cause
    result = evaluate(env="tests.test_faults:shape_changing_env", n_episodes=6, batch_size=2, retries=1,
                      vectorization=vectorization, workers=1 if vectorization == "async" else None)
    assert_exact(result, expected(0, 6, skip={3}))
    assert result.n_failed == 1
    assert [(e["episode_ix"], e["attempt"], e["final"]) for e in result.errors] == [(3, 1, False), (3, 2, True)]
    assert all("does not fit its observation space" in e["error"] and "(4,)" in e["error"] for e in result.errors)


# -- policy faults ------------------------------------------------------------------------------

class NanOnEpisode:
    """Continuous actions; NaN for the slot whose observation says seed % 97 == target."""

    def __init__(self, target_seed: int):
        self.target = target_seed

    def select_action(self, obs):
        action = torch.zeros(obs.shape[0], 1)
        hit = (obs[:, 0] * 97).round().long() == self.target
        action[hit] = float("nan")
        return action


def continuous_known_answer(**kwargs):
    import gymnasium as gym

    from fasteval.testing.envs import KnownAnswerEnv

    class Continuous(gym.ActionWrapper):
        def __init__(self, env):
            super().__init__(env)
            self.action_space = gym.spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
            self.sent = []

        def action(self, action):
            assert np.isfinite(action).all(), "a non-finite action reached the env"
            return 0

    return Continuous(KnownAnswerEnv(**kwargs))


def test_nan_actions_stop_the_run_by_default_and_keep_finished_episodes():
    with pytest.raises(EvaluationAborted) as info:
        evaluate(env="tests.test_faults:continuous_known_answer", policy=NanOnEpisode(6), n_episodes=12, batch_size=2)
    message = str(info.value.__cause__)
    assert "episode 6" in message and "seed 6" in message and "skip-episode" in message
    partial = info.value.partial
    assert 0 < len(partial.per_episode) < 12
    for record in partial.per_episode:
        assert record["sum_reward"] == expected_episode(record["seed"])["sum_reward"]


def test_nan_actions_skip_episode_records_it_and_goes_on():
    result = evaluate(env="tests.test_faults:continuous_known_answer", policy=NanOnEpisode(6), n_episodes=12,
                      batch_size=3, on_nan_action="skip-episode")
    assert_exact(result, expected(0, 12, skip={6}))
    assert result.n_failed == 1 and result.errors[0]["stage"] == "policy"


def test_the_nan_action_step_is_the_same_in_errors_jsonl_and_in_the_message():
    # issue 20: errors.jsonl said step 2 where the message said 3 (here: the first step, 1-based in both)
    skipped = evaluate(env="tests.test_faults:continuous_known_answer", policy=NanOnEpisode(6), n_episodes=12,
                       batch_size=3, on_nan_action="skip-episode")
    (record,) = skipped.errors
    with pytest.raises(EvaluationAborted) as info:
        evaluate(env="tests.test_faults:continuous_known_answer", policy=NanOnEpisode(6), n_episodes=12, batch_size=3)
    assert record["step"] == 1 and "(seed 6, step 1)" in str(info.value.__cause__)


class TooLargeOnEpisode(NanOnEpisode):
    """Continuous actions; 2.0 (outside Box(-1, 1)) for the slot whose observation says seed % 97 == target."""

    def select_action(self, obs):
        action = torch.zeros(obs.shape[0], 1)
        action[(obs[:, 0] * 97).round().long() == self.target] = 2.0
        return action


def test_out_of_range_actions_are_warned_once_and_counted_in_the_meta():
    # issue 20: they reached the env silently
    with pytest.warns(RuntimeWarning, match="outside the action space") as caught:
        result = evaluate(env="tests.test_faults:continuous_known_answer", policy=TooLargeOnEpisode(6), n_episodes=12,
                          batch_size=3)
    assert len([w for w in caught if "outside the action space" in str(w.message)]) == 1
    assert result.meta["n_out_of_range_actions"] == expected_episode(6)["length"]  # every step of episode 6
    assert_exact(result, expected(0, 12))  # sent as they are (the env maps every action to 0)
    in_range = evaluate(env="tests.test_faults:continuous_known_answer", policy=NanOnEpisode(99), n_episodes=4)
    assert in_range.meta["n_out_of_range_actions"] == 0


def test_policy_raising_mid_run_keeps_finished_episodes():
    class RaisesLater:
        calls = 0

        def select_action(self, obs):
            RaisesLater.calls += 1
            if RaisesLater.calls > 6:
                raise RuntimeError("policy exploded")
            return torch.zeros(obs.shape[0], dtype=torch.long)

    with pytest.raises(EvaluationAborted, match="policy exploded") as info:
        evaluate(env=KA, policy=RaisesLater(), n_episodes=20, batch_size=2)
    partial = info.value.partial
    assert len(partial.per_episode) >= 1
    for record in partial.per_episode:
        assert record["sum_reward"] == expected_episode(record["seed"])["sum_reward"]


def test_nan_rewards_are_counted_per_episode_not_averaged_away():
    result = evaluate(env=KA, env_kwargs={"nan_reward_seeds": [1, 4]}, n_episodes=6, batch_size=4)
    nan_eps = [r["episode_ix"] for r in result.per_episode if r["nan_rewards"]]
    assert nan_eps == [1, 4]
    assert math.isnan(result.overall()["avg_sum_reward"])
    assert result.overall()["n_nan_reward_episodes"] == 2


# -- CLI: durable output, exit codes, resume ----------------------------------------------------

def test_cli_writes_manifest_and_episode_log(tmp_path):
    result = CliRunner().invoke(main, ["--env", KA, "-n", "7", "-b", "3", "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["seed"] == 0 and manifest["n_episodes"] == 7
    assert len(manifest["policy_digest"]) == 64
    lines = (tmp_path / "episodes.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["episode_ix"] for line in lines) == list(range(7))


def test_cli_exits_1_when_an_episode_failed_for_good(tmp_path):
    args = ["--env", FAULTY, "--env-kwarg", "fault=raise", "--env-kwarg", "fault_seeds=[2]", "-n", "5", "--retries", "0",
            "-o", str(tmp_path)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output
    assert json.loads((tmp_path / "manifest.json").read_text())["status"] == "failed"
    errors = [json.loads(line) for line in (tmp_path / "errors.jsonl").read_text().splitlines()]
    assert errors[0]["episode_ix"] == 2 and errors[0]["final"]
    info = json.loads((tmp_path / "eval_info.json").read_text())
    assert info["overall"]["n_failed_episodes"] == 1 and info["overall"]["n_episodes"] == 4


def test_cli_refuses_to_overwrite_a_run_and_to_resume_a_different_one(tmp_path):
    assert CliRunner().invoke(main, ["--env", KA, "-n", "3", "-o", str(tmp_path)]).exit_code == 0
    again = CliRunner().invoke(main, ["--env", KA, "-n", "3", "-o", str(tmp_path)])
    assert again.exit_code == 2 and "--resume" in again.output
    clash = CliRunner().invoke(main, ["--resume", str(tmp_path), "--seed", "5"])
    assert clash.exit_code == 2 and "--seed" in clash.output
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    manifest["policy_digest"] = "0" * 64  # as if the weights had changed since
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    changed = CliRunner().invoke(main, ["--resume", str(tmp_path)])
    assert changed.exit_code == 2 and "policy_digest" in changed.output


def test_resume_with_a_torn_last_line_reruns_only_missing_episodes(tmp_path):
    full = tmp_path / "full"
    assert CliRunner().invoke(main, ["--env", KA, "-n", "9", "-b", "2", "-o", str(full)]).exit_code == 0
    cut = tmp_path / "cut"
    assert CliRunner().invoke(main, ["--env", KA, "-n", "9", "-b", "2", "-o", str(cut)]).exit_code == 0
    lines = (cut / "episodes.jsonl").read_text().splitlines()
    (cut / "episodes.jsonl").write_text("\n".join(lines[:4]) + "\n" + lines[4][: len(lines[4]) // 2])
    resumed = CliRunner().invoke(main, ["--resume", str(cut), "-b", "5"])
    assert resumed.exit_code == 0, resumed.output
    assert "4 episodes were already recorded" in resumed.output
    assert comparable(cut / "eval_info.json") == comparable(full / "eval_info.json")


@pytest.mark.parametrize("tear", ["half a line", "no final newline"])
def test_a_torn_last_line_is_cut_back_before_resume_appends(tmp_path, tear):
    # issue 20: the first record appended on resume was glued onto the torn line and lost, and
    # episodes.jsonl disagreed with eval_info.json (exit 0)
    out = tmp_path / "run"
    assert CliRunner().invoke(main, ["--env", KA, "-n", "9", "-b", "2", "-o", str(out)]).exit_code == 0
    lines = (out / "episodes.jsonl").read_text().splitlines()
    torn = lines[4][: len(lines[4]) // 2] if tear == "half a line" else lines[4]
    (out / "episodes.jsonl").write_text("\n".join(lines[:4]) + "\n" + torn)
    resumed = CliRunner().invoke(main, ["--resume", str(out)])
    assert resumed.exit_code == 0, resumed.output
    assert f"episodes.jsonl ended in a torn line (an interrupted write): cut {len(torn)} bytes" in resumed.output
    records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]  # every line parses
    assert sorted(r["episode_ix"] for r in records) == list(range(9))  # each episode once
    info = json.loads((out / "eval_info.json").read_text())
    assert [r["sum_reward"] for r in info["per_episode"]] == [r["sum_reward"] for r in sorted(records, key=lambda r: r["episode_ix"])]


def comparable(path: Path) -> dict:
    info = json.loads(path.read_text())
    overall = {k: v for k, v in info["overall"].items() if k not in ("eval_s", "eval_ep_s", "steps_per_s", "episodes_per_s")}
    return {"per_episode": info["per_episode"], "overall": overall, "per_task": info["per_task"], "per_group": info["per_group"]}


SLOW_ENV = "tests.test_faults:slow_known_answer"


def slow_known_answer(**kwargs) -> "gym.Env":
    """KnownAnswerEnv with 20 ms steps, so that a signal lands mid-run."""
    from fasteval.testing.envs import KnownAnswerEnv

    class Slow(KnownAnswerEnv):
        def step(self, action):
            time.sleep(0.02)
            return super().step(action)

    return Slow(**kwargs)


def _start_slow_run(out: Path) -> tuple[subprocess.Popen, list[str], dict[str, str], Path]:
    """Start a 40-episode CLI run of the slow env into ``out``; return once 5 episodes are logged.

    Returns ``(process, command, environment, episodes.jsonl)``.
    """
    cmd = [sys.executable, "-m", "fasteval.doors.cli", "--env", SLOW_ENV, "-n", "40", "-b", "3", "--seed", "11", "-o", str(out)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    log = out / "episodes.jsonl"
    deadline = time.time() + 60
    while time.time() < deadline and not (log.is_file() and len(log.read_text().splitlines()) >= 5):
        time.sleep(0.02)
    return proc, cmd, env, log


def _uninterrupted(tmp_path: Path, env: dict[str, str]) -> Path:
    """The same 40 episodes in one run (another batch size), for comparison; returns its eval_info.json."""
    clean = tmp_path / "clean"
    fresh = subprocess.run([sys.executable, "-m", "fasteval.doors.cli", "--env", SLOW_ENV, "-n", "40", "-b", "4", "--seed", "11",
                            "-o", str(clean)], capture_output=True, text=True, env=env, timeout=120)
    assert fresh.returncode == 0, fresh.stderr
    return clean / "eval_info.json"


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_sigterm_partway_then_resume_equals_an_uninterrupted_run(tmp_path, sig, code):
    out = tmp_path / "run"
    proc, _cmd, env, log = _start_slow_run(out)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code, stderr
    assert f"fasteval --resume {out} --trust-remote-code" in stderr  # the run names code (a module:callable env)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    recorded = [json.loads(line) for line in log.read_text().splitlines()]
    assert 5 <= len(recorded) < 40
    info = json.loads((out / "eval_info.json").read_text())
    assert len(info["per_episode"]) == len(recorded)  # every finished episode is kept

    resumed = subprocess.run([sys.executable, "-m", "fasteval.doors.cli", "--resume", str(out), "--trust-remote-code"],
                             capture_output=True, text=True, env=env, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert comparable(out / "eval_info.json") == comparable(_uninterrupted(tmp_path, env))
    assert json.loads((out / "manifest.json").read_text())["status"] == "complete"


def test_sigkill_partway_then_resume_equals_an_uninterrupted_run(tmp_path):
    """A kill gives no chance to flush: at most the group-commit window is lost, and --resume
    reruns exactly the episodes missing from episodes.jsonl."""
    out = tmp_path / "run"
    proc, cmd, env, log = _start_slow_run(out)
    proc.kill()
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "running"  # killed: nobody wrote a final status
    assert not (out / "eval_info.json").exists()
    recorded = {json.loads(line)["episode_ix"] for line in log.read_text().splitlines() if line.endswith("}")}
    assert 5 <= len(recorded) < 40

    resumed = subprocess.run([*cmd, "--resume", str(out)], capture_output=True, text=True, env=env, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert f"{len(recorded)} episodes were already recorded" in resumed.stdout
    assert comparable(out / "eval_info.json") == comparable(_uninterrupted(tmp_path, env))
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.endswith("}")]
    assert sorted(r["episode_ix"] for r in lines) == list(range(40))  # each episode logged once: none rerun twice


# -- fuzzing the CLI ----------------------------------------------------------------------------

OPTION_NAMES = ["--env", "--policy", "-n", "-b", "--seed", "--vectorization", "--workers", "--device", "--max-steps",
                "--env-kwarg", "--reset-mode", "--retries", "--on-nan-action", "--step-timeout", "--resume", "-o",
                "--config", "--save-episodes"]
garbage = st.one_of(st.text(max_size=12), st.sampled_from(["-1", "0", "1e9", "nan", "cuda:9", "{", "[]", "a=b", "=", "..", "/",
                                                           "\x00", "a\x00b", "", "x" * 300]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(OPTION_NAMES), garbage), min_size=1, max_size=3))
def test_fuzzed_options_exit_cleanly(tmp_path_factory, pairs):
    out = tmp_path_factory.mktemp("fuzz")
    # Folders the run may write to stay inside `out`: fuzzed -o/--resume values are made relative
    # ("sub/" + value, still holding any NUL byte) to a folder deep enough that a 12-character
    # "../../../../" cannot climb out of it.
    here_deep = out.joinpath(*"abcdefg")
    here_deep.mkdir(parents=True)
    args = [item for name, value in pairs
            for item in (name, "sub/" + value if name in ("-o", "--resume", "--save-episodes") else value)]
    if "--env" not in args:
        args += ["--env", KA]
    if "-o" not in args:
        args += ["-o", str(out / "run")]
    if "-n" not in args:
        args += ["-n", "2"]
    here = os.getcwd()
    os.chdir(here_deep)  # never the checkout
    try:
        result = CliRunner().invoke(main, args)
    finally:
        os.chdir(here)
    assert result.exit_code in (0, 2), (args, result.output, result.exception)
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), (args, result.exception)


@pytest.mark.parametrize("args", [["--resume", "\x00"], ["-o", "\x00"], ["--output-dir", "a\x00b"], ["--config", "\x00"],
                                  ["--resume", ""], ["-o", "x" * 300], ["--save-episodes", "\x00"]])
def test_unusable_paths_found_by_the_fuzzer_exit_2(tmp_path, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["--env", KA, "-n", "2", *args])
    assert result.exit_code == 2, (args, result.output, result.exception)
    assert "not usable" in result.output or "empty" in result.output
    assert list(tmp_path.iterdir()) == []


# -- the watchdog: hangs that nothing else catches (issue 20) -------------------------------------

WATCHDOG_RUN = """
import sys
from fasteval import evaluate
from fasteval.testing.fault_plan import PlannedPolicy
kind, state = sys.argv[1], sys.argv[2]
if kind == "policy":  # the policy hangs in episode 3 (seed 3), at its step 1
    evaluate(env="fasteval.testing.fault_plan:make_fault_plan_env", policy=PlannedPolicy({3: ("hang", 1)}),
             n_episodes=6, batch_size=2, policy_timeout_s=1.0)
else:  # a sync env hangs in the step 2 of episode 4
    evaluate(env="fasteval.testing.fault_plan:make_fault_plan_env",
             env_kwargs={"plan": {4: [["hang", 2]]}, "state_dir": state}, n_episodes=6, batch_size=2, step_timeout=1.0)
print("the run returned")
"""


@pytest.mark.parametrize("kind, needle", [("policy", "the policy did not return within 1 s (--policy-timeout)"),
                                          ("env", "an env step did not return within 1 s (--step-timeout)")])
def test_a_hung_policy_or_sync_env_ends_the_process_with_the_cause(tmp_path, kind, needle):
    done = subprocess.run([sys.executable, "-c", WATCHDOG_RUN, kind, str(tmp_path)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 1, done.stdout + done.stderr
    assert needle in done.stderr and "the run returned" not in done.stdout, done.stderr
