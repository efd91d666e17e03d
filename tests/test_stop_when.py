"""``--stop-when``: the rule is checked on prefixes of episode indices, so a stopped run reports
exactly episodes 0..k-1, with the same k and the same numbers in every mode.

All runs use the Bernoulli known-answer env (fasteval.testing.bernoulli): each episode's success
and return are fixed by its seed, so the expected k follows from the rule alone
(:class:`~fasteval.types.sequential.StopMonitor` fed the exact outcomes in index order).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from fasteval import evaluate
from fasteval.testing.bernoulli import BERNOULLI_ENV, expected_bernoulli_episode
from fasteval.types.errors import UserInputError
from fasteval.types.sequential import StopMonitor

P = 0.95
CAP = 400


def expected_k(rule: str, p=P, n=CAP, seed=0, field="success", bounds=None, max_length=5) -> int | None:
    values = [expected_bernoulli_episode(seed + i, p, max_length=max_length)[field] for i in range(n)]
    return StopMonitor(rule, 0.95, bounds, cap=n).feed(values)


def run(rule="above=0.8", p=P, n=CAP, **kwargs):
    options = dict(env=BERNOULLI_ENV, env_kwargs={"p": p}, policy="zero", n_episodes=n, device="cpu", batch_size=16)
    options.update(kwargs)
    return evaluate(stop_when=rule, **options)


MODES = {
    "b1": dict(batch_size=1),
    "b7": dict(batch_size=7),
    "b64": dict(batch_size=64),
    "pool": dict(batch_size=7, vectorization="async", workers=2),
    "pipeline": dict(batch_size=8, vectorization="async", workers=2, pipeline=True),
}


@pytest.fixture(scope="module")
def by_mode():
    return {name: run(**kw) for name, kw in MODES.items()}


def test_same_k_and_numbers_in_every_mode(by_mode):
    k = expected_k("above=0.8")
    assert k is not None and 10 < k < CAP
    first = by_mode["b1"]
    for name, result in by_mode.items():
        stop = result.meta["stopping"]
        assert stop["k"] == k and stop["reason"] == "rule" and stop["decision"] == "above", name
        assert result.column("episode_ix").tolist() == list(range(k)), name
        assert result.per_episode == first.per_episode, name
        assert stop["cs_low"] == first.meta["stopping"]["cs_low"] > 0.8, name
        assert all(ix >= k for ix in stop["computed_past_stop"]), name
    exact = [expected_bernoulli_episode(i, P) for i in range(k)]
    assert first.column("success").tolist() == [e["success"] for e in exact]
    assert np.allclose(first.column("sum_reward"), [e["sum_reward"] for e in exact])
    assert first.overall()["n_episodes"] == k


def test_large_batches_compute_past_the_stop_and_drop_it(by_mode):
    big = by_mode["b64"].meta["stopping"]
    assert big["n_computed_past_stop"] + big["n_cancelled"] > 0  # 64 slots run ahead of the prefix
    assert big["n_computed_past_stop"] == len(big["computed_past_stop"])


def test_cap_reached_when_the_rule_never_holds():
    result = run("above=0.9", p=0.9, n=120)
    stop = result.meta["stopping"]
    assert stop["reason"] == "cap" and not stop["fired"] and stop["k"] == 120 and len(result.per_episode) == 120
    assert stop["cs_low"] <= 0.9


def test_half_width_and_return_rules():
    k = expected_k("ci<=0.1")
    assert run("ci<=0.1").meta["stopping"]["k"] == k
    bounds = (0.0, 1.0)
    k_ret = expected_k("return:above=0.6", field="sum_reward", bounds=bounds)
    result = run("return:above=0.6", return_bounds=bounds, batch_size=5)
    stop = result.meta["stopping"]
    assert stop["k"] == k_ret and stop["metric"] == "return" and stop["return_bounds"] == [0.0, 1.0]
    assert math.isclose(stop["estimate"], float(np.mean(result.column("sum_reward"))))


def test_bad_rules_are_refused_before_any_work():
    with pytest.raises(UserInputError, match="cannot read"):
        run("above 0.8")
    with pytest.raises(UserInputError, match="needs --return-bounds"):
        run("return:above=0.5")


def test_return_outside_its_bounds_is_an_error():
    with pytest.raises(Exception, match="outside them"):
        run("return:ci<=0.01", return_bounds=(0.0, 0.4), n=50)


# -- CLI, eval_info.json, resume -------------------------------------------------------------------------------
def cli(*args):
    from fasteval.doors.cli import main

    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_cli_writes_the_stopping_block(tmp_path):
    out = tmp_path / "run"
    res = cli("--env", BERNOULLI_ENV, "--env-kwarg", f"p={P}", "--policy", "zero", "-n", CAP, "-b", 32,
              "--stop-when", "above=0.8", "-o", out)
    assert res.exit_code == 0, res.output
    info = json.loads((out / "eval_info.json").read_text())
    k = expected_k("above=0.8")
    assert info["stopping"]["k"] == k and info["stopping"]["reason"] == "rule"
    assert info["per_task"][0]["stopping"]["k"] == k
    assert len(info["per_episode"]) == k and info["overall"]["n_episodes"] == k
    assert "trajectory" in info["stopping"] and info["stopping"]["trajectory"]["k"][-1] == k
    # the episodes computed past the stop stay in the log: nothing computed is lost
    logged = [json.loads(line)["episode_ix"] for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert set(range(k)) <= set(logged) and set(logged) - set(range(k)) == set(info["stopping"]["computed_past_stop"])


def test_resume_of_a_stopped_run_stays_stopped(tmp_path):
    out = tmp_path / "run"
    args = ("--env", BERNOULLI_ENV, "--env-kwarg", f"p={P}", "--policy", "zero", "-n", CAP, "-b", 8, "--stop-when", "above=0.8")
    assert cli(*args, "-o", out).exit_code == 0
    before = (out / "eval_info.json").read_text()
    lines = (out / "episodes.jsonl").read_text()
    res = cli(*args[:-2], "--stop-when", "above=0.8", "--resume", out)
    assert res.exit_code == 0, res.output
    assert (out / "episodes.jsonl").read_text() == lines  # nothing ran
    after, before = json.loads((out / "eval_info.json").read_text())["stopping"], json.loads(before)["stopping"]
    assert before["n_cancelled"] > 0  # 8 slots ran ahead of the prefix: the first segment cancelled some in flight
    assert after == before  # every count survives the resume (n_cancelled is every segment's: issue 31)
    segments = json.loads((out / "manifest.json").read_text())["segments"]
    assert [s["n_cancelled"] for s in segments] == [before["n_cancelled"], 0]  # this segment ran nothing


def test_resume_of_an_interrupted_run_gives_the_uninterrupted_result(tmp_path):
    """Cut a finished run's log back to a ragged prefix (as a kill leaves it), resume: same k, same rows."""
    full = tmp_path / "full"
    args = ("--env", BERNOULLI_ENV, "--env-kwarg", f"p={P}", "--policy", "zero", "-n", CAP, "-b", 8, "--stop-when", "above=0.8")
    assert cli(*args, "-o", full).exit_code == 0
    reference = json.loads((full / "eval_info.json").read_text())
    k = reference["stopping"]["k"]
    cut = tmp_path / "cut"
    cut.mkdir()
    lines = (full / "episodes.jsonl").read_text().splitlines()  # the lines as written (each carries its digest)
    keep = [x for x in lines if json.loads(x)["episode_ix"] < k // 2 or json.loads(x)["episode_ix"] in (k // 2 + 3, k // 2 + 5)]
    (cut / "episodes.jsonl").write_text("".join(x + "\n" for x in keep))
    manifest = json.loads((full / "manifest.json").read_text())
    manifest["status"] = "interrupted"
    (cut / "manifest.json").write_text(json.dumps(manifest))
    res = cli(*args, "--resume", cut)
    assert res.exit_code == 0, res.output
    resumed = json.loads((cut / "eval_info.json").read_text())
    assert resumed["stopping"]["k"] == k and resumed["per_episode"] == reference["per_episode"]
    assert resumed["stopping"]["cs_low"] == reference["stopping"]["cs_low"]


def test_resume_of_a_capped_run_with_a_larger_cap_continues(tmp_path):
    out = tmp_path / "run"
    base = ("--env", BERNOULLI_ENV, "--env-kwarg", f"p={P}", "--policy", "zero", "-b", 8, "--stop-when", "above=0.8")
    k = expected_k("above=0.8")
    assert cli(*base, "-n", k // 2, "-o", out).exit_code == 0
    assert json.loads((out / "eval_info.json").read_text())["stopping"]["reason"] == "cap"
    res = cli(*base, "-n", CAP, "--resume", out)
    assert res.exit_code == 0, res.output
    info = json.loads((out / "eval_info.json").read_text())
    assert info["stopping"]["k"] == k and info["stopping"]["reason"] == "rule" and len(info["per_episode"]) == k


def test_resume_of_a_capped_run_with_only_a_larger_n_continues(tmp_path):
    """``fasteval --resume DIR -n 3000`` (issue 31): the run records ``resumable: true``; the rule comes from the
    manifest, so the command needs only the new cap (it was refused: "the run has 100")."""
    out = tmp_path / "run"
    k = expected_k("above=0.8")
    base = ("--env", BERNOULLI_ENV, "--env-kwarg", f"p={P}", "--policy", "zero", "-b", 8, "--stop-when", "above=0.8")
    assert cli(*base, "-n", k // 2, "-o", out).exit_code == 0
    first = json.loads((out / "eval_info.json").read_text())["stopping"]
    assert first["reason"] == "cap" and first["resumable"] is True
    res = cli("--resume", out, "-n", CAP, "--trust-remote-code")  # the env is a module:callable the manifest names
    assert res.exit_code == 0, res.output
    info = json.loads((out / "eval_info.json").read_text())
    assert info["stopping"]["k"] == k and info["stopping"]["reason"] == "rule" and len(info["per_episode"]) == k
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["what"]["n_episodes"] == CAP and manifest["what"]["stop_when"] == "above=0.8"


# -- suites and sweeps --------------------------------------------------------------------------------------------
def test_each_task_of_a_suite_stops_on_its_own():
    from fasteval.doors.suites import Task, run_suite

    suite = {"coins": {0: Task(BERNOULLI_ENV, {"p": 0.95}), 1: Task(BERNOULLI_ENV, {"p": 0.99})}}
    result = run_suite(suite, policy="zero", n_episodes=CAP, stop_when="above=0.8", batch_size=8, device="cpu")
    blocks = result.meta["stopping_per_task"]
    ks = [b["k"] for b in blocks]
    assert [(b["task_group"], b["task_id"]) for b in blocks] == [("coins", 0), ("coins", 1)]
    assert ks == [expected_k("above=0.8", p=0.95), expected_k("above=0.8", p=0.99)] and ks[0] != ks[1]
    overall = result.meta["stopping"]
    assert overall["k"] == sum(ks) and overall["n_tasks"] == 2 and overall["reason"] == "rule"
    assert len(result.per_episode) == sum(ks)
    # simultaneous bounds on the mean of the two rates: each task's sequence at 97.5%, averaged
    assert overall["cs_low"] < np.mean([b["cs_low"] for b in blocks]) and overall["cs_low"] <= overall["estimate"]
    doc = result.eval_info_document()
    assert [t["stopping"]["k"] for t in doc["per_task"]] == ks and doc["stopping"]["k"] == sum(ks)


def test_sweep_cells_stop_on_their_own(tmp_path):
    from fasteval.doors.sweep import LocalExecutor, SweepSpec, run_sweep
    from fasteval.doors.sweep.store import Store

    spec = {"name": "s", "episodes": CAP, "seeds": [0],
            "policies": [{"name": "zero", "ref": "zero"}],
            "envs": [{"name": "coin", "id": BERNOULLI_ENV, "kwargs": {"p": P}}],
            "options": {"batch_size": 8, "device": "cpu", "stop_when": "above=0.8"}}
    assert run_sweep(SweepSpec.from_dict(spec), tmp_path / "sw", executor=LocalExecutor(workers=1), report=False).ok
    k = expected_k("above=0.8")
    with Store(tmp_path / "sw", create=False) as store:
        stored = store.episodes()
    assert sorted(e["episode_ix"] for e in stored) == list(range(k))
    assert [bool(e["success"]) for e in sorted(stored, key=lambda e: e["seed"])] == [
        expected_bernoulli_episode(i, P)["success"] for i in range(k)]
    again = run_sweep(SweepSpec.from_dict(spec), tmp_path / "sw", executor=LocalExecutor(workers=1), report=False)
    assert again.skipped == 1 and again.episodes_added == 0  # a stopped job stays stopped


def test_config_file_sets_the_rule(tmp_path):
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"env": BERNOULLI_ENV, "env_kwargs": {"p": P}, "policy": "zero", "n_episodes": CAP,
                                  "batch_size": 16, "stop_when": "above=0.8", "confidence": 0.95}))
    out = tmp_path / "run"
    refused = cli("--config", config, "-o", out)  # a file cannot choose code to run (issue 20) ...
    assert refused.exit_code == 2 and "--trust-remote-code" in refused.output
    res = cli("--config", config, "-o", out, "--trust-remote-code")  # ... the command line can
    assert res.exit_code == 0, res.output
    assert json.loads((out / "eval_info.json").read_text())["stopping"]["k"] == expected_k("above=0.8")
    assert json.loads((out / "config.json").read_text())["stop_when"] == "above=0.8"


def test_cli_bad_rule_exits_2_before_any_work(tmp_path):
    res = cli("--env", BERNOULLI_ENV, "--stop-when", "above=80", "-o", tmp_path / "x")
    assert res.exit_code == 2 and "fraction in (0, 1)" in res.output and not (tmp_path / "x").exists()


@pytest.mark.parametrize("batch_size", [1, 16])
def test_saved_episode_data_holds_exactly_the_reported_episodes(batch_size):
    """Episodes computed past the stop (a wide batch runs ahead of k) are not the run's: their steps are not saved."""
    result = run(batch_size=batch_size, return_episode_data=True)
    k = result.meta["stopping"]["k"]
    saved = sorted(set(result.episode_data["episode"].tolist()))
    assert saved == result.column("episode_ix").tolist() == list(range(k))
    lengths = np.bincount(result.episode_data["episode"].numpy(), minlength=k)
    assert lengths.tolist() == result.column("length").tolist()
