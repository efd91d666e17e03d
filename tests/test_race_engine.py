"""``--stop-when best`` through the engine (issue 30): the race of types/sequential/race.py, run for real.

On the known-answer checkpoint family (policy k succeeds on seed s with probability p_k, exactly, with a
shared per-seed difficulty), a race run through the engine:

* equals the simulator's race (the same outcomes fed to :class:`Race` directly): the same eliminations
  at the same k, against the same policies, and the same numbers;
* is batch-invariant: batch 1, 7 and 64 and the worker pool give the same race block and the same
  episodes (only what was computed past a stop, and cancelled, depends on the batch);
* survives a SIGKILL: a killed CLI run, resumed, ends with the race (and every policy's episodes) of
  the run that was never killed;
* drops a policy's episodes in flight and gives its slots to the others at once (its episodes past its k
  are not counted), ends when one is left, when all are tied (``best:eps``), or at the cap;
* races on the mean return (``return:best`` with ``--return-bounds``);
* says so: the terminal's race lines, ``eval_info.json``'s race block and ranking, the per-policy records.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from fasteval import evaluate
from fasteval.testing.checkpoints import RETURN_BOUNDS, CheckpointFamily
from fasteval.types.sequential.race import Race
from tests.report_fixtures import cli

FAMILY = CheckpointFamily((0.3, 0.5, 0.8), share=0.5)
CAP = 400
ENGINE_ONLY = ("n_cancelled", "computed_past_stop", "n_computed_past_stop")
"""Race-block keys that depend on how far the run got past its decisions (the batch, the timing): not
the race's numbers."""


def race_run(family: CheckpointFamily = FAMILY, rule: str = "best", n: int = CAP, **fields):
    return evaluate(env=family.env_ref, env_kwargs=family.env_kwargs, policy=family.policies(), n_episodes=n,
                    device="cpu", stop_when=rule, **fields)


def race_numbers(result) -> dict:
    return {k: v for k, v in result.race.items() if k not in ENGINE_ONLY}


def episodes(result) -> dict:
    return {name: result.policy(name).per_episode.to_list() for name in result.names}


def simulated(family: CheckpointFamily, rule: str, n: int, metric: str = "success", seed: int = 0, **kw) -> Race:
    race = Race(rule, family.n_policies, cap=n, names=[f"arm_{k}" for k in range(family.n_policies)], **kw)
    race.feed(family.outcomes(np.arange(seed, seed + n), metric))
    return race


@pytest.fixture(scope="module")
def reference():
    return race_run(batch_size=16)


def test_the_engines_race_is_the_simulators(reference):
    race = simulated(FAMILY, "best", CAP)
    summary = {k: v for k, v in race.summary().items()}
    assert race_numbers(reference) == summary
    assert reference.race["reason"] == "one_left" and len(reference.race["eliminations"]) == 2
    for p, name in enumerate(reference.names):  # each policy's counted episodes are its own first n_p
        mine = reference.policy(name).per_episode
        n_p = int(race.episodes_used()[p])
        assert mine.column("episode_ix").tolist() == list(range(n_p))
        assert mine.column("success").tolist() == FAMILY.outcomes(np.arange(n_p))[p].tolist()


@pytest.mark.parametrize("mode", [{"batch_size": 1}, {"batch_size": 7}, {"batch_size": 64},
                                  {"batch_size": 7, "vectorization": "async", "workers": 2}],
                         ids=["b1", "b7", "b64", "pool"])
def test_the_race_is_batch_invariant(reference, mode):
    result = race_run(**mode)
    assert race_numbers(result) == race_numbers(reference)
    assert episodes(result) == episodes(reference)
    assert result.ranking == reference.ranking


def test_a_dropped_policys_slots_go_to_the_others_and_its_late_episodes_do_not_count():
    result = race_run(batch_size=64)
    race = result.race
    for e in race["eliminations"]:
        dropped = result.policy(e["name"])
        assert len(dropped.per_episode) == e["k"] and dropped.meta["race"]["dropped_at"] == e["k"]
        assert dropped.meta["race"]["dropped_by"] == e["by_name"]
    # at batch 64 the dropped policies had episodes in flight past their k: cancelled or listed, never counted
    assert race["n_cancelled"] + race["n_computed_past_stop"] > 0
    assert result.overall()["n_episodes"] == race["total_episodes"]


def test_a_tie_ends_the_race():
    family = CheckpointFamily((0.6, 0.605, 0.61), share=1.0, max_length=1)
    result = race_run(family, "best:eps=0.05", n=3000, batch_size=32)
    assert result.race["reason"] == "tied" and result.race["tied"] is True
    assert result.race["k"] < 3000 and not result.race["eliminations"]
    assert race_numbers(result) == simulated(family, "best:eps=0.05", 3000).summary()


def test_the_cap_ends_an_undecided_race():
    result = race_run(n=20, batch_size=7)
    assert result.race["reason"] == "cap" and result.race["k"] == 20
    assert all(len(r.per_episode) == 20 for r in result.policies)


def test_a_race_on_the_mean_return():
    result = race_run(rule="return:best", return_bounds=RETURN_BOUNDS, batch_size=7)
    expected = simulated(FAMILY, "return:best", CAP, metric="return", return_bounds=RETURN_BOUNDS,
                         bounds_source="--return-bounds")
    assert race_numbers(result) == expected.summary()
    assert result.ranking[0]["metric"] == "return" and result.best == "arm_2"


def test_the_cli_shows_the_race_and_records_it(tmp_path):
    folder = tmp_path / "run"
    policies = [a for p in FAMILY.policies() for a in ("--policy", p)]
    result = cli("--env", FAMILY.env_ref, "--env-kwarg", f"p={json.dumps(list(FAMILY.rates))}", "--env-kwarg",
                 f"share={FAMILY.share}", *policies, "-n", str(CAP), "-b", "7", "--stop-when", "best", "-o", str(folder))
    assert result.exit_code == 0, result.output
    assert "race: dropped arm_0 after" in result.output and "race: done (one_left)" in result.output
    info = json.loads((folder / "eval_info.json").read_text())
    assert [(e["name"], e["k"], e["by_name"]) for e in info["race"]["eliminations"]] == \
        [(e["name"], e["k"], e["by_name"]) for e in simulated(FAMILY, "best", CAP).summary()["eliminations"]]
    assert info["ranking"][0]["policy"] == "arm_2" and info["ranking"][-1]["dropped_by"] == "arm_2"
    assert info["meta"]["status"] == "complete"
    again = cli("--resume", str(folder), "--trust-remote-code")  # a finished race: the resume runs nothing
    assert again.exit_code == 0, again.output
    assert json.loads((folder / "eval_info.json").read_text())["race"]["eliminations"] == info["race"]["eliminations"]


def test_a_killed_race_resumes_to_the_same_race(tmp_path, reference):
    """SIGKILL the CLI mid-race (its log has some records, in any order), resume: the race and every
    policy's episodes are the uninterrupted run's."""
    folder = tmp_path / "run"
    policies = [a for p in FAMILY.policies() for a in ("--policy", p)]
    args = [sys.executable, "-m", "fasteval.doors.cli", "--env", FAMILY.env_ref,
            "--env-kwarg", f"p={json.dumps(list(FAMILY.rates))}", "--env-kwarg", f"share={FAMILY.share}",
            "--env-kwarg", "step_delay_s=0.002", *policies, "-n", str(CAP), "-b", "8", "--stop-when", "best",
            "--trust-remote-code", "-o", str(folder)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = folder / "episodes.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if log.is_file() and log.read_text().count("\n") >= 40:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert json.loads((folder / "manifest.json").read_text())["status"] == "running"
    assert not (folder / "eval_info.json").exists()
    result = cli("--resume", str(folder), "--trust-remote-code")
    assert result.exit_code == 0, result.output
    info = json.loads((folder / "eval_info.json").read_text())
    race = {k: v for k, v in info["race"].items() if k not in ENGINE_ONLY}
    assert json.loads(json.dumps(race)) == json.loads(json.dumps(race_numbers(reference)))
    assert {k: v["per_episode"] for k, v in info["policies"].items()} == \
        json.loads(json.dumps(episodes(reference)))
