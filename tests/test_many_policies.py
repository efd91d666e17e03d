"""Many policies in one pass (issue 30): exact pairing, one engine, stacked weights, the doors.

* **Exact pairing.** Every policy of a many-policy run gets, episode for episode, the numbers of its own
  one-policy run: known-answer envs, policies that read the observation (``ParityPolicy``), keep per-slot
  state (``StepCounterPolicy``, ``random``'s per-slot generators), or reset only in waves
  (``WaveOnlyPolicy``), at batch 1, 7 and 64, with the worker pool, and pipelined. The slots are shared
  (a slot runs episodes of several policies one after the other), so a per-slot state that leaked from
  one policy's episode into another's, or a slot's action taken from the wrong runner, changes numbers.
* **The ledger** hands out (policy, episode) pairs interleaved by episode index.
* **Stacked weights** equal the separate calls (CartPole MLP checkpoints: every episode), and refuse, with
  their reason in the meta, what is not functional.
* **The doors**: repeated ``--policy`` and globs (sorted by step, named by step), the library's lists and
  dicts, config files, sweep entries, ``fasteval compare RUN::A RUN::B``, resume per (policy, episode),
  videos named by policy, and the bad inputs (exit 2 with the fix).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from fasteval import evaluate
from fasteval.core.ledger import interleaved_rows
from fasteval.testing.checkpoints import CheckpointFamily
from fasteval.types.errors import UserInputError
from tests.report_fixtures import cli

KA = "fasteval.testing.envs:make_known_answer_env"
PARITY = "fasteval.testing.policies:ParityPolicy"
COUNTER = "fasteval.testing.policies:StepCounterPolicy"
WAVE = "fasteval.testing.policies:WaveOnlyPolicy"
MIXED = (PARITY, "zero", "random", COUNTER)
"""Stateless and row-independent, constant, per-slot generators reseeded per episode, per-slot counters."""
STATELESS = (PARITY, "zero", "fasteval.testing.bernoulli:arm_1")
BASE = dict(env=KA, env_kwargs={"nan_reward_seeds": [5]}, n_episodes=20, seed=3, device="cpu")
CARTPOLE_MLP = str(Path(__file__).resolve().parents[1] / "src" / "fasteval" / "assets" / "cartpole_mlp")
COLUMNS = ("episode_ix", "seed", "sum_reward", "max_reward", "length", "success", "nan_rewards")


def rows(result) -> list[tuple]:
    table = result.per_episode
    cols = [np.asarray(table.column(c)) for c in COLUMNS]
    return [tuple(("nan" if isinstance(v, float) and np.isnan(v) else v) for v in (c[i].item() for c in cols))
            for i in range(len(table))]


_SINGLE: dict = {}


def single(policy, **fields) -> list[tuple]:
    """The policy's own one-policy run (batch 16, sync): the reference of every mode."""
    key = (policy, json.dumps(fields, sort_keys=True, default=str))
    if key not in _SINGLE:
        _SINGLE[key] = rows(evaluate(**{**BASE, **fields, "policy": policy, "batch_size": 16}))
    return _SINGLE[key]


def check_each_policy_is_its_own_run(many, refs, **fields) -> None:
    assert many.names and len(many.policies) == len(refs)
    for name, ref in zip(many.names, refs):
        own = rows(many.policy(name))
        assert len(own) == BASE["n_episodes"]
        assert own == single(ref, **fields), name


@pytest.mark.parametrize("mode", [
    {"batch_size": 1}, {"batch_size": 7}, {"batch_size": 64},
    {"batch_size": 7, "vectorization": "async", "workers": 2},
    {"batch_size": 7, "reset_mode": "wave"},
], ids=["b1", "b7", "b64", "pool", "wave"])
def test_each_policy_gets_its_own_runs_numbers(mode):
    many = evaluate(**BASE, policy=list(MIXED), **mode)
    assert type(many).__name__ == "ManyPolicyResult" and many.meta["status"] == "complete"
    check_each_policy_is_its_own_run(many, MIXED)
    assert len(many.per_episode) == len(MIXED) * BASE["n_episodes"]
    assert sorted(set(many.per_episode.column("policy").tolist())) == sorted(many.names)


def test_pipelined_many_policy_run_equals_the_own_runs():
    many = evaluate(**BASE, policy=list(STATELESS), batch_size=8, vectorization="async", workers=2, pipeline=True)
    assert many.meta["pipeline"] is True
    check_each_policy_is_its_own_run(many, STATELESS)


def test_a_wave_only_policy_makes_the_whole_run_waves_and_every_policy_is_still_exact():
    refs = (WAVE, PARITY, COUNTER)
    many = evaluate(**BASE, policy=list(refs), batch_size=5)
    assert many.meta["batching"] == "wave"
    check_each_policy_is_its_own_run(many, refs)


def test_the_policies_are_really_different_in_this_setting():
    """The comparison above can fail: the policies' numbers differ from each other."""
    assert len({tuple(single(p)) for p in MIXED}) == len(MIXED)


def test_the_ledger_interleaves_pairs_by_episode_index():
    ep, pol = interleaved_rows(3, 2)
    assert list(zip(ep.tolist(), pol.tolist())) == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]
    ep, pol = interleaved_rows(0, 3, pairs=[(2, 4), (0, 1), (1, 1), (0, 0)])
    assert list(zip(ep.tolist(), pol.tolist())) == [(0, 0), (1, 0), (1, 1), (4, 2)]


def test_every_policys_prefix_grows_at_the_same_pace():
    """In the order episodes start, policy p's k-th episode never starts before every other policy's
    (k-1)-th: the ledger's rows are handed out in index order."""
    from fasteval.run.engine import Engine
    from fasteval.types.spec import EvalSpec

    family = CheckpointFamily((0.2, 0.5, 0.7))
    spec = EvalSpec(env=family.env_ref, env_kwargs=family.env_kwargs, policy=family.policies(), n_episodes=30,
                    batch_size=5, device="cpu")
    started = []
    with Engine(spec) as engine:
        segment = engine.run_segment(on_finished=lambda ledger, done: started.extend(done.tolist()))
    ledger = segment.ledger
    assert sorted(started) == list(range(ledger.n_episodes))  # rows are started (and so numbered) in order
    ep = ledger.episode_ids
    assert all(ep[r] <= ep[r + 1] for r in range(ledger.n_episodes - 1))


# -- stacked weights ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mlp_checkpoints(tmp_path_factory):
    from fasteval.robot.policies.checkpoint import perturbed_checkpoints

    return [str(p) for p in perturbed_checkpoints(CARTPOLE_MLP, tmp_path_factory.mktemp("mlp"), 4, scale=0.15)]


def test_stacked_weights_equal_the_separate_calls_episode_for_episode(mlp_checkpoints, monkeypatch):
    """CartPole, argmax heads: the stacked call's logits round like a batched matmul (within 1e-5 of the
    separate calls', checked below), and no argmax flips on these episodes, so every episode is equal."""
    monkeypatch.setenv("FASTEVAL_STACK_WEIGHTS", "stacked")  # the stacked path itself, whatever the timing
    common = dict(env="CartPole-v1", policy=mlp_checkpoints, n_episodes=8, batch_size=8, device="cpu", seed=0)
    separate = evaluate(**common)
    stacked = evaluate(**common, stack_weights=True)
    assert separate.meta["policy_calls"].startswith("separate")
    assert stacked.meta["policy_calls"].startswith("stacked")
    for name in separate.names:
        assert rows(stacked.policy(name)) == rows(separate.policy(name))
    assert len({tuple(rows(separate.policy(n))) for n in separate.names}) > 1  # the checkpoints differ


def _bits(result):
    return {name: [(r["episode_ix"], r["seed"], r["sum_reward"].hex() if isinstance(r["sum_reward"], float) else
                    r["sum_reward"], r["length"], r["success"]) for r in result.policy(name).per_episode]
            for name in result.names}


def test_stacking_is_chosen_by_device_or_by_measure_and_changes_no_result(mlp_checkpoints, monkeypatch):
    """``--stack-weights`` keeps the separate calls on a CPU by default (issue 41: stacking ran 2.4-3.2x slower on
    CPU at -b 16), the same path on every run; ``measure`` times both paths once and keeps the faster. Whichever
    it keeps, each policy's episodes are exactly those of that path forced on its own (the choice picks a path,
    never changes one); the meta says which was chosen and why."""
    common = dict(env="CartPole-v1", policy=mlp_checkpoints, n_episodes=6, batch_size=4, device="cpu", seed=3)
    monkeypatch.setenv("FASTEVAL_STACK_WEIGHTS", "stacked")
    forced_stacked = evaluate(**common, stack_weights=True)
    monkeypatch.setenv("FASTEVAL_STACK_WEIGHTS", "separate")
    forced_separate = evaluate(**common, stack_weights=True)
    assert forced_separate.meta["policy_calls"].startswith("separate (stacking not chosen: forced by FASTEVAL_STACK_WEIGHTS")
    assert forced_stacked.meta["policy_calls"].startswith("stacked (") and "forced" in forced_stacked.meta["policy_calls"]
    assert "stacked weights" in forced_stacked.meta["policy_call"] and "stacked" not in forced_separate.meta["policy_call"]
    assert _bits(forced_separate) == _bits(evaluate(**common))  # the separate path is the run without --stack-weights
    monkeypatch.delenv("FASTEVAL_STACK_WEIGHTS")
    by_device = evaluate(**common, stack_weights=True)
    assert by_device.meta["policy_calls"].startswith("separate (stacking not chosen: chosen by device: on a CPU")
    assert _bits(by_device) == _bits(forced_separate)
    monkeypatch.setenv("FASTEVAL_STACK_WEIGHTS", "measure")
    chosen = evaluate(**common, stack_weights=True)
    calls = chosen.meta["policy_calls"]
    assert "measured" in calls and "us per step stacked against" in calls and "differ from run to run" in calls, calls
    assert _bits(chosen) == _bits(forced_stacked if calls.startswith("stacked") else forced_separate)


def test_the_device_rule_stacks_on_cuda_only():
    from fasteval.core.policy_set import stacking_choice_for

    assert stacking_choice_for(torch.device("cuda", 0)) is True
    assert stacking_choice_for(torch.device("cpu")) is False


def test_the_console_says_which_path_stacking_chose(mlp_checkpoints, tmp_path, monkeypatch):
    monkeypatch.delenv("FASTEVAL_STACK_WEIGHTS", raising=False)
    out = cli("--env", "CartPole-v1", "--policy", mlp_checkpoints[0], "--policy", mlp_checkpoints[1], "-n", "2",
              "--stack-weights", "--no-report", "-o", str(tmp_path / "run"))
    assert out.exit_code == 0, out.output
    line = next(x for x in out.output.splitlines() if x.startswith("policies"))
    assert "separate (stacking not chosen: chosen by device: on a CPU" in line, line


def test_stacking_choice_keeps_the_faster_path_and_a_bad_setting_is_refused(monkeypatch):
    from fasteval.core.policy_set import stack_mode, stacking_choice
    from fasteval.types.errors import UserInputError

    assert stacking_choice(separate_s=3e-4, stacked_s=1e-4) is True
    assert stacking_choice(separate_s=1e-4, stacked_s=3e-4) is False
    assert stacking_choice(separate_s=1e-4, stacked_s=1e-4) is False  # a tie: the separate calls
    monkeypatch.setenv("FASTEVAL_STACK_WEIGHTS", "always")
    with pytest.raises(UserInputError, match="expected device, stacked, separate or measure, got 'always'"):
        stack_mode()


STACK_TOLERANCE = 1e-5
"""Largest difference of a stacked call's logits from the separate calls' (float32, absolute; measured
below 1e-6 on these MLPs: the rounding of a batched matmul against a plain one)."""


def test_stacked_logits_are_within_the_rounding_of_batched_matmuls(mlp_checkpoints):
    import torch

    from fasteval.core.policy_set import StackedCall
    from fasteval.robot.policies.checkpoint import load_checkpoint

    modules = [load_checkpoint(p).eval() for p in mlp_checkpoints]
    logits = StackedCall([m.net for m in modules], lambda x: x, lambda a: a)
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        stacked = logits.plain_step(x)
        separate = torch.stack([m.net(x) for m in modules])
    assert stacked.shape == separate.shape == (4, 64, 2)
    assert float((stacked - separate).abs().max()) <= STACK_TOLERANCE


def test_stacking_falls_back_where_a_policy_is_not_functional():
    many = evaluate(**BASE, policy=[PARITY, COUNTER], batch_size=4, stack_weights=True)
    assert many.meta["policy_calls"].startswith("separate (stacking refused: policy 1")
    check_each_policy_is_its_own_run(many, (PARITY, COUNTER))


def test_stacking_refuses_another_architecture(mlp_checkpoints):
    many = evaluate(env="CartPole-v1", policy=[mlp_checkpoints[0], PARITY], n_episodes=2, batch_size=2, device="cpu",
                    stack_weights=True)
    assert many.meta["policy_calls"].startswith("separate (stacking refused: policy 1 is a ParityPolicy")


# -- doors ----------------------------------------------------------------------------------------------------
def test_a_glob_expands_to_checkpoints_in_step_order_named_by_step(tmp_path, mlp_checkpoints):
    from fasteval.run.policy_refs import expand_glob
    from fasteval.types.policy_names import short_names

    root = tmp_path / "outputs" / "train" / "act" / "checkpoints"
    for k, step in enumerate((100, 20, 3000)):
        shutil.copytree(mlp_checkpoints[k], root / f"{step:06d}" / "pretrained_model")
    (root / "last").symlink_to(root / "003000")  # LeRobot's link to the newest: the same folder, counted once
    found = expand_glob(str(root / "*" / "pretrained_model"))
    assert [Path(p).parent.name for p in found] == ["000020", "000100", "003000"]
    assert short_names(found) == ("20", "100", "3000")
    with pytest.raises(UserInputError, match="no folder matches"):
        expand_glob(str(tmp_path / "nothing" / "*"))


def test_short_names():
    from fasteval.types.policy_names import short_names

    assert short_names(["runs/seed1/model", "runs/seed2/model"]) == ("seed1", "seed2")
    assert short_names(["a/checkpoint-500", "a/checkpoint-1000"]) == ("500", "1000")
    assert short_names(["zero", "random", "m.pol:arm_3"]) == ("zero", "random", "arm_3")
    assert short_names(["zero", "zero"]) == ("zero", "zero-2")


def test_the_cli_takes_policy_repeated_and_a_glob(tmp_path, mlp_checkpoints):
    folder = tmp_path / "run"
    glob_dir = Path(mlp_checkpoints[0]).parents[1]
    result = cli("--env", "CartPole-v1", "--policy", str(glob_dir / "*" / "pretrained_model"), "--policy", "zero",
                 "-n", "6", "-b", "4", "-o", str(folder))
    assert result.exit_code == 0, result.output
    info = json.loads((folder / "eval_info.json").read_text())
    assert list(info["policies"]) == ["1000", "2000", "3000", "4000", "zero"]
    assert [r["policy"] for r in info["ranking"]] and len(info["ranking"]) == 5
    assert "rank  policy" in result.output
    for name, entry in info["policies"].items():
        assert entry["overall"]["n_episodes"] == 6 and entry["meta"]["policy_name"] == name
    lines = [json.loads(line) for line in (folder / "episodes.jsonl").read_text().splitlines()]
    assert sorted({line["policy"] for line in lines}) == sorted(info["policies"])
    assert (folder / "policies" / "zero" / "report.html").is_file()


def test_the_library_takes_lists_and_dicts():
    named = evaluate(**BASE, policy={"parity": PARITY, "nothing": "zero"}, batch_size=4)
    assert named.names == ("parity", "nothing")
    assert rows(named.policy("parity")) == single(PARITY)
    one = evaluate(**BASE, policy=[PARITY], batch_size=4)
    assert type(one).__name__ == "EvalResult" and rows(one) == single(PARITY)


def test_the_evaluator_runs_many_policies_many_times():
    from fasteval import Evaluator

    with Evaluator(KA, [PARITY, COUNTER], env_kwargs=BASE["env_kwargs"], batch_size=4, device="cpu") as ev:
        first = ev.evaluate(n_episodes=20, seed=3)
        again = ev.evaluate(n_episodes=20, seed=3)
    for name, ref in zip(first.names, (PARITY, COUNTER)):
        assert rows(first.policy(name)) == rows(again.policy(name)) == single(ref)


def test_a_config_file_holds_a_list_of_policies(tmp_path):
    config = tmp_path / "eval.json"
    config.write_text(json.dumps({"env": KA, "policy": [PARITY, "zero"], "n_episodes": 5, "batch_size": 3}))
    folder = tmp_path / "run"
    result = cli("--config", str(config), "--trust-remote-code", "-o", str(folder))
    assert result.exit_code == 0, result.output
    saved = json.loads((folder / "config.json").read_text())
    assert saved["policy"] == [PARITY, "zero"] and saved["policy_names"] == ["ParityPolicy", "zero"]
    again = cli("--config", str(folder / "config.json"), "--trust-remote-code", "-o", str(tmp_path / "again"))
    assert again.exit_code == 0, again.output
    a = json.loads((folder / "eval_info.json").read_text())["policies"]
    b = json.loads((tmp_path / "again" / "eval_info.json").read_text())["policies"]
    assert {k: v["per_episode"] for k, v in a.items()} == {k: v["per_episode"] for k, v in b.items()}


def test_a_sweep_entry_with_a_glob_is_one_cell_per_checkpoint(tmp_path, mlp_checkpoints):
    from fasteval.doors.sweep import LocalExecutor, SweepSpec, run_sweep
    from fasteval.doors.sweep.plan import plan

    glob_ref = str(Path(mlp_checkpoints[0]).parents[1] / "*" / "pretrained_model")
    spec = SweepSpec.from_dict({"name": "many", "episodes": 3, "policies": [{"name": "mlp", "ref": glob_ref}],
                                "envs": ["CartPole-v1"], "options": {"batch_size": 3, "device": "cpu"}})
    jobs = plan(spec)
    assert [j.policy_name for j in jobs] == ["mlp/1000", "mlp/2000", "mlp/3000", "mlp/4000"]
    outcome = run_sweep(spec, tmp_path / "sweep", executor=LocalExecutor(1), report=False)
    assert outcome.ok


def test_compare_reads_two_policies_of_one_run(tmp_path):
    folder = tmp_path / "run"
    assert cli("--env", KA, "--policy", PARITY, "--policy", "zero", "-n", "12", "-b", "4", "-o", str(folder)).exit_code == 0
    out = tmp_path / "cmp"
    result = cli("compare", f"{folder}::ParityPolicy", f"{folder}::zero", "-o", str(out))
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "compare.json").read_text())
    assert doc["tasks"][0]["n_pairs"] == 12
    refused = cli("compare", str(folder), f"{folder}::zero", "-o", str(out))
    assert refused.exit_code == 2 and "name one" in refused.output
    missing = cli("compare", f"{folder}::nope", f"{folder}::zero", "-o", str(out))
    assert missing.exit_code == 2 and "has no policy 'nope'" in missing.output


def test_videos_are_named_by_policy(tmp_path):
    pytest.importorskip("imageio_ffmpeg")
    folder = tmp_path / "run"
    result = cli("--env", KA, "--policy", PARITY, "--policy", "zero", "-n", "6", "-b", "4", "--videos", "2",
                 "-o", str(folder))
    assert result.exit_code == 0, result.output
    info = json.loads((folder / "eval_info.json").read_text())
    for name in ("ParityPolicy", "zero"):
        paths = info["policies"][name]["overall"]["video_paths"]
        assert len(paths) == 2 and all(f"/videos/{name}/" in p for p in paths)
        assert all(Path(p).is_file() for p in paths)


@pytest.mark.parametrize("select", ["failures", "successes"])
def test_replayed_videos_of_each_policy_are_its_own_runs(tmp_path, select):
    """--video-select failures/successes replays the kept episodes: in a many-policy run each policy keeps
    and replays the episodes its own single run would (the same files, by name and by frame count)."""
    pytest.importorskip("imageio_ffmpeg")
    import imageio.v3 as iio

    many = tmp_path / "many"
    args = ["--env", KA, "-n", "8", "-b", "3", "--videos", "2", "--video-select", select]
    result = cli(*args, "--policy", PARITY, "--policy", "zero", "-o", str(many))
    assert result.exit_code == 0, result.output
    policies = json.loads((many / "eval_info.json").read_text())["policies"]
    for name, ref in (("ParityPolicy", PARITY), ("zero", "zero")):
        single = tmp_path / name
        assert cli(*args, "--policy", ref, "-o", str(single)).exit_code == 0
        theirs = json.loads((single / "eval_info.json").read_text())["overall"]["video_paths"]
        ours = policies[name]["overall"]["video_paths"]
        assert ours and [Path(p).name for p in ours] == [Path(p).name for p in theirs]
        assert all(f"/videos/{name}/" in p for p in ours)
        assert [len(iio.imread(p)) for p in ours] == [len(iio.imread(p)) for p in theirs]


def test_a_resume_runs_only_the_missing_pairs(tmp_path):
    """A run folder whose log lost some (policy, episode) records: the resume reruns exactly those."""
    folder = tmp_path / "run"
    args = ["--env", KA, "--policy", PARITY, "--policy", COUNTER, "-n", "10", "-b", "3"]
    assert cli(*args, "-o", str(folder)).exit_code == 0
    full = json.loads((folder / "eval_info.json").read_text())["policies"]
    log = folder / "episodes.jsonl"
    lines = log.read_text().splitlines()
    kept = [line for line in lines if not (json.loads(line)["episode_ix"] in (2, 7) and
                                           json.loads(line)["policy"] == "StepCounterPolicy")]
    log.write_text("\n".join(kept) + "\n")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["status"] = "interrupted"
    (folder / "manifest.json").write_text(json.dumps(manifest))
    result = cli("--resume", str(folder), "--trust-remote-code")
    assert result.exit_code == 0, result.output
    assert "resumed: 18 episodes were already recorded" in result.output
    again = json.loads((folder / "eval_info.json").read_text())["policies"]
    assert {k: v["per_episode"] for k, v in again.items()} == {k: v["per_episode"] for k, v in full.items()}


@pytest.mark.parametrize("args, message", [
    (["--policy", "nowhere/*/pretrained_model", "--policy", "zero"], "no folder matches"),
    (["--policy", "zero", "--stop-when", "best"], "a race needs at least two policies"),
    (["--policy", "zero", "--policy", "random", "--stop-when", "ci<=0.1"], "with several policies the rule is a race"),
    (["--policy", "zero", "--policy", "random", "--stop-when", "return:best"], "needs --return-bounds"),
    (["--policy", "zero", "--policy", "random", "--stop-when", "best", "--design", "truncated"],
     "a race (--stop-when best) has no truncated design"),
])
def test_bad_many_policy_inputs_exit_2(tmp_path, args, message):
    result = cli("--env", KA, *args, "-n", "4", "-o", str(tmp_path / "run"))
    assert result.exit_code == 2 and message in result.output, result.output
    assert not (tmp_path / "run").exists()


def test_save_episodes_is_refused_with_several_policies(tmp_path):
    result = cli("--env", KA, "--policy", "zero", "--policy", "random", "-n", "2", "--save-episodes",
                 str(tmp_path / "eps"), "-o", str(tmp_path / "run"))
    assert result.exit_code == 2 and "records one policy's rollouts" in result.output


def test_policy_names_must_fit_the_policies():
    from fasteval.types.spec import EvalSpec

    with pytest.raises(UserInputError, match="expected 2 names"):
        EvalSpec(env=KA, policy=("zero", "random"), policy_names=("a",))
    with pytest.raises(UserInputError, match="must be unique"):
        EvalSpec(env=KA, policy=("zero", "random"), policy_names=("a", "a"))
    with pytest.raises(UserInputError, match="noise"):
        EvalSpec(env=KA, policy=("zero", "random"), noise="global")


@pytest.mark.parametrize("run_id", [None, "r1"])
def test_a_many_policy_run_logs_lines_name_each_records_policy_as_its_table_does(run_id):
    """The run log's lines (EpisodeRows.texts, the template path) equal the table's rows encoded, the policy
    field included (fails if the template drops the per-row policy name)."""
    from fasteval.core.ledger import Ledger
    from fasteval.run.record import EpisodeRows
    from fasteval.run.rundir import episode_lines, format_records

    ids, pols = interleaved_rows(4, 3)
    ledger = Ledger(ids.size, 2, seed=5, episode_ids=ids, policy_ids=pols, n_policies=3,
                    policy_names=("1000", "seed2", "zero"))
    ledger.sum_reward[:] = np.arange(ids.size) * 0.5
    ledger.finished[:] = True
    rows = EpisodeRows(ledger, ("g", 0, "t"))
    picks = [0, 4, 5, 11]
    lines = episode_lines(rows, picks, run_id)
    assert lines == format_records(rows.table(picks, run_id=run_id).to_list())
    assert [json.loads(line)["policy"] for line in lines.splitlines()] == ["1000", "seed2", "zero", "zero"]
