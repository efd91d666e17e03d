"""Which checkpoint is best (issue 41): ``--rank-by``, races on the metric people compare, and a tie is a tie.

* CartPole (no success signal) with two policies of very different returns (``zero``, about 9.4, against the
  bundled ``cartpole_mlp``, 500): a fixed-n run ranks by the mean return and says so, and names the MLP best; a
  success race (``--stop-when best``) exits 2 with the fix; ``best`` with ``--rank-by return`` races on the
  return with CartPole's declared bounds [0, 500] (and says where they come from); the mean max reward is 1 for
  both, so ``--rank-by max_reward`` is a tie, and a ``max_reward:best`` race ends undecided at its cap;
* all-zero success (three checkpoints that never succeed): no best is named, the three are tied for best, on the
  console, in ``eval_info.json`` and on the page;
* an undecided race says so first, with its leader and how far the interval is from deciding;
* the race's own intervals are at 1 - alpha/K (the best of K is covered), and say so.
"""

from __future__ import annotations

import json

import pytest

from fasteval import evaluate
from fasteval.testing.checkpoints import CheckpointFamily
from fasteval.types.errors import EvaluationAborted, UserInputError
from fasteval.types.metric_bounds import declared_bounds
from fasteval.types.spec import EvalSpec
from tests.report_fixtures import cli

MLP = "src/fasteval/assets/cartpole_mlp"
TWO = {"zero": "zero", "mlp": MLP}


@pytest.fixture(scope="module")
def cartpole_fixed():
    return evaluate(env="CartPole-v1", policy=TWO, n_episodes=12, device="cpu")


def test_without_a_success_signal_the_ranking_is_by_return_and_says_so(cartpole_fixed):
    r = cartpole_fixed
    assert r.ranking[0]["metric"] == "return" and r.ranking[0]["policy"] == "mlp"
    assert r.verdict["state"] == "best" and r.best == "mlp"
    assert "no success signal" in r.verdict["metric_note"]
    assert "(not adjusted for best of 2)" in r.ranking[0]["interval"]


def test_rank_by_max_reward_is_a_tie_on_cartpole():
    r = evaluate(env="CartPole-v1", policy=TWO, n_episodes=6, device="cpu", rank_by="max_reward")
    assert r.ranking[0]["metric"] == "max_reward"
    assert r.verdict["state"] == "tied" and r.best is None
    assert sorted(r.verdict["tied_for_best"]) == ["mlp", "zero"]
    assert r.overall()["best"] is None and sorted(r.overall()["tied_for_best"]) == ["mlp", "zero"]


def test_a_success_race_without_a_success_signal_exits_2_with_the_fix(tmp_path):
    out = cli("--env", "CartPole-v1", "--policy", "zero", "--policy", MLP, "-n", "20", "--stop-when", "best",
              "-o", str(tmp_path / "run"))
    assert out.exit_code == 2, out.output
    assert "no info['is_success']" in out.output and "return:best" in out.output
    with pytest.raises(EvaluationAborted, match="NoSuccessSignalError: --stop-when best: a race on the success rate"):
        evaluate(env="CartPole-v1", policy=TWO, n_episodes=20, device="cpu", stop_when="best")


def test_best_with_rank_by_return_races_on_the_return_with_the_envs_bounds(tmp_path):
    folder = tmp_path / "run"
    out = cli("--env", "CartPole-v1", "--policy", "zero", "--policy", MLP, "-n", "200", "--stop-when", "best",
              "--rank-by", "return", "-o", str(folder))
    assert out.exit_code == 0, out.output
    info = json.loads((folder / "eval_info.json").read_text())
    race = info["race"]
    assert race["metric"] == "return" and race["return_bounds"] == [0.0, 500.0]
    assert "declared by the env" in race["bounds_source"] and "max_episode_steps=500" in race["bounds_source"]
    assert race["reason"] == "one_left" and race["k"] < 200
    assert info["verdict"]["state"] == "best" and info["overall"]["best"] == info["verdict"]["best"]
    names = {r["policy"]: r["ref"] for r in info["ranking"]}
    assert names[info["verdict"]["best"]] == MLP
    assert "verdict: best:" in out.output
    assert "1 - alpha/2" in info["ranking"][0]["interval"] and race["interval_confidence"] == pytest.approx(0.975)


def test_a_max_reward_race_on_a_tie_ends_undecided_at_the_cap(tmp_path):
    folder = tmp_path / "run"
    out = cli("--env", "CartPole-v1", "--policy", "zero", "--policy", MLP, "-n", "8", "--stop-when",
              "max_reward:best", "-o", str(folder))
    assert out.exit_code == 0, out.output
    info = json.loads((folder / "eval_info.json").read_text())
    v = info["verdict"]
    assert info["race"]["reason"] == "cap" and v["state"] == "undecided" and info["overall"]["best"] is None
    assert v["headline"].startswith("undecided at the cap (k = 8)") and v["gap"]["short_by"] > 0
    assert "verdict: undecided at the cap" in out.output
    html = (folder / "report.html").read_text()
    assert "undecided at the cap" in html and 'data-state="undecided"' in html


def test_the_bounds_the_env_declares():
    assert declared_bounds("gym_pusht/PushT-v0", "max_reward")[0] == (0.0, 1.0)
    assert declared_bounds("gym_pusht/PushT-v0", "return")[0] == (0.0, 300.0)
    assert declared_bounds("gym_pusht/PushT-v0", "return", env_kwargs={"max_episode_steps": 400}) is None
    assert declared_bounds("CartPole-v1", "return", max_steps=100)[0] == (0.0, 100.0)
    assert declared_bounds("Pendulum-v1", "return") is None
    # a PushT race on max_reward needs no --return-bounds; an env without declared bounds does
    EvalSpec(env="gym_pusht/PushT-v0", policy=["a", "b"], stop_when="max_reward:best")
    with pytest.raises(UserInputError, match="--return-bounds"):
        EvalSpec(env="Pendulum-v1", policy=["a", "b"], stop_when="return:best")


def test_rank_by_and_a_race_rule_of_another_metric_are_refused(tmp_path):
    with pytest.raises(UserInputError, match="--rank-by is return"):
        EvalSpec(env="CartPole-v1", policy=["a", "b"], stop_when="max_reward:best", rank_by="return")
    with pytest.raises(UserInputError, match="--rank-by"):
        EvalSpec(env="CartPole-v1", policy=["a", "b"], rank_by="coverage")
    out = cli("--env", "CartPole-v1", "--policy", "zero", "--policy", MLP, "-n", "4", "--stop-when",
              "max_reward:best", "--rank-by", "return", "-o", str(tmp_path / "r"))
    assert out.exit_code == 2 and "--rank-by is return" in out.output


ZERO = CheckpointFamily((0.0, 0.0, 0.0))


def test_all_zero_success_is_a_three_way_tie_everywhere(tmp_path):
    folder = tmp_path / "run"
    policies = [a for p in ZERO.policies() for a in ("--policy", p)]
    out = cli("--env", ZERO.env_ref, "--env-kwarg", f"p={json.dumps(list(ZERO.rates))}", *policies, "-n", "30",
              "-o", str(folder))
    assert out.exit_code == 0, out.output
    info = json.loads((folder / "eval_info.json").read_text())
    v = info["verdict"]
    assert v["state"] == "tied" and v["best"] is None and info["overall"]["best"] is None
    assert v["tied_for_best"] == ["arm_0", "arm_1", "arm_2"]
    assert v["headline"].startswith("arm_0, arm_1 and arm_2 are tied for best") and "n = 30" in v["headline"]
    assert "verdict: arm_0, arm_1 and arm_2 are tied for best" in out.output
    html = (folder / "report.html").read_text()
    assert "tied for best" in html and 'data-state="tied"' in html and "best policy" not in html


def test_an_undecided_race_says_so_first_with_its_leader_and_gap():
    family = CheckpointFamily((0.5, 0.55), share=0.5)
    r = evaluate(env=family.env_ref, env_kwargs=family.env_kwargs, policy=family.policies(), n_episodes=30,
                 device="cpu", stop_when="best")
    v = r.verdict
    assert r.race["reason"] == "cap" and v["state"] == "undecided" and r.best is None
    assert v["leader"] == r.ranking[0]["policy"] and v["gap"]["rival"] == r.ranking[1]["policy"]
    assert v["gap"]["ci_low"] < 0 and v["gap"]["short_by"] == pytest.approx(-v["gap"]["ci_low"])
    assert v["headline"].startswith("undecided at the cap (k = 30)") and "must rise by" in v["headline"]


def test_rank_by_travels_through_a_config_and_a_sweep_option(tmp_path):
    from fasteval.doors.sweep.spec import SweepOptions

    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"env": "CartPole-v1", "policy": ["zero", MLP], "n_episodes": 4, "rank_by": "max_reward"}))
    folder = tmp_path / "run"
    out = cli("--config", str(cfg), "-o", str(folder))
    assert out.exit_code == 0, out.output
    info = json.loads((folder / "eval_info.json").read_text())
    assert info["ranking"][0]["metric"] == "max_reward" and info["verdict"]["state"] == "tied"
    assert SweepOptions(rank_by="max_reward").result_settings()["rank_by"] == "max_reward"


def test_each_policy_has_its_own_weight_digest_on_every_page(tmp_path):
    from fasteval.run.rundir import policy_digest

    folder = tmp_path / "run"
    out = cli("--env", "CartPole-v1", "--policy", "zero", "--policy", MLP, "-n", "3", "-o", str(folder))
    assert out.exit_code == 0, out.output
    manifest = json.loads((folder / "manifest.json").read_text())
    digests = manifest["policy_digests"]
    assert set(digests) == {"zero", "cartpole_mlp"} and len(set(digests.values())) == 2
    assert digests["zero"] == policy_digest(None, "zero")
    ranking = (folder / "report.html").read_text()
    assert all(d in ranking for d in digests.values())
    for name, digest in digests.items():
        own = (folder / "policies" / name / "report.html").read_text()
        assert digest in own and all(d not in own for n, d in digests.items() if n != name)


def test_lerobot_flags_give_each_checkpoint_its_own_lerobot_eval_info(tmp_path):
    folder = tmp_path / "run"
    out = cli("--env", "CartPole-v1", "--policy", "zero", "--policy", MLP, "--eval.n_episodes=3", "--eval.batch_size=2",
              "--videos", "0", "-o", str(folder))
    assert out.exit_code == 0, out.output
    run = json.loads((folder / "eval_info.json").read_text())
    for name in ("zero", "cartpole_mlp"):
        own = json.loads((folder / "policies" / name / "eval_info.json").read_text())
        assert set(own) >= {"per_episode", "per_task", "per_group", "overall"} and "policies" not in own
        assert own["per_episode"] == run["policies"][name]["per_episode"]
        assert own["overall"]["avg_sum_reward"] == run["policies"][name]["overall"]["avg_sum_reward"]


@pytest.mark.parametrize("stop_when", [None, "ci<=0.45"])
def test_a_sweep_ranks_by_its_rank_by_and_gives_no_verdict_after_a_data_dependent_stop(tmp_path, stop_when):
    from fasteval.doors.sweep import LocalExecutor, SweepSpec, run_sweep
    from fasteval.doors.sweep.report import build_report
    from fasteval.doors.sweep.store import Store
    from fasteval.testing import KNOWN_ANSWER_ID

    options = {"batch_size": 4, "device": "cpu", "rank_by": "return", **({"stop_when": stop_when} if stop_when else {})}
    spec = {"name": "t", "episodes": 6, "seeds": [0],
            "policies": [{"name": "zero", "ref": "zero"}, {"name": "parity", "ref": "fasteval.testing.policies:ParityPolicy"}],
            "envs": [{"name": "known", "id": KNOWN_ANSWER_ID}], "options": options}
    out = tmp_path / "sweep"
    assert run_sweep(SweepSpec.from_dict(spec), out, executor=LocalExecutor(workers=1)).ok
    with Store(out, create=False) as store:
        doc = build_report(store)
    assert doc["rank_by"] == "return" and doc["best_per_env"][0]["metric"] == "return"
    (pair,) = doc["paired"]
    assert pair["return_diff"]["test"].startswith("paired t-test of the mean difference")
    assert (pair["verdict"] is None) == (stop_when is not None)


def test_pusht_with_all_zero_success_is_a_tie_and_a_max_reward_race_uses_the_declared_bounds():
    """PushT (gym-pusht), two policies that never succeed in 30 steps: the success ranking names no best, and
    ``max_reward:best`` races with the env's declared bounds [0, 1] (no --return-bounds) and ends undecided."""
    pytest.importorskip("gym_pusht")
    common = dict(env="gym_pusht/PushT-v0", policy=["zero", "random"], n_episodes=3, max_steps=30, device="cpu",
                  batch_size=6)
    fixed = evaluate(**common)
    assert fixed.ranking[0]["metric"] == "success" and all(r["estimate"] == 0.0 for r in fixed.ranking)
    assert fixed.verdict["state"] == "tied" and fixed.best is None
    assert fixed.verdict["headline"].startswith("zero and random are tied for best by success rate")
    race = evaluate(**common, stop_when="max_reward:best")
    assert race.race["metric"] == "max_reward" and race.race["return_bounds"] == [0.0, 1.0]
    assert "max_reward lies in [0, 1]" in race.race["bounds_source"]
    assert race.verdict["state"] == "undecided" and race.verdict["headline"].startswith("undecided at the cap")
