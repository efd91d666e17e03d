"""Sweeps: spec expansion, exact stored numbers, resume after SIGKILL or a failure, Ray = local, report."""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import fasteval
from fasteval.doors.cli import main
from fasteval.types.errors import UserInputError
from fasteval.doors.sweep import LocalExecutor, SweepSpec, SweepSpecError, load_sweep_file, plan, run_sweep
from fasteval.doors.sweep import executors as executors_module
from fasteval.doors.sweep.plan import digest_bytes, folder_digest
from fasteval.doors.sweep.store import Store, SweepLock
from fasteval.testing import KNOWN_ANSWER_ID, KnownAnswerEnv, expected_episode

REPO = Path(__file__).resolve().parents[1]
PARITY = "fasteval.testing.policies:ParityPolicy"
NAN_SEEDS = [3, 52]
SPEC = {
    "name": "t",
    "episodes": 6,
    "seeds": [0, 50],
    "policies": [{"name": "zero", "ref": "zero"}, {"name": "parity", "ref": PARITY}],
    "envs": [
        {"name": "known", "id": KNOWN_ANSWER_ID},
        {"name": "known-nan", "id": KNOWN_ANSWER_ID, "kwargs": {"nan_reward_seeds": NAN_SEEDS}},
    ],
    "options": {"batch_size": 4, "device": "cpu"},
}
N_EPISODES = 2 * 2 * 2 * 6
ACTIONS = {"zero": lambda obs: 0, "parity": lambda obs: int(round(float(obs[-1])))}
ROW_COLUMNS = ("policy_digest, env_id, env_kwargs, task, seed, job_id, episode_ix, sum_reward, max_reward, length, "
               "success, nan_rewards, task_group, task_id")


# -- envs for the fault tests (module:callable references; importable in subprocesses too) ------------

class _SlowKnownAnswer(KnownAnswerEnv):
    def __init__(self, delay: float = 0.0, hang_marker: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.delay, self.hang_marker = delay, hang_marker

    def step(self, action):
        time.sleep(self.delay)
        hang_until = time.monotonic() + 60
        while self.hang_marker and os.path.exists(self.hang_marker) and time.monotonic() < hang_until:
            time.sleep(0.05)  # a step that does not return (for at most a minute)
        return super().step(action)


def make_slow_env(delay: float = 0.0, hang_marker: str | None = None, **kwargs):
    """KnownAnswerEnv that sleeps ``delay`` s per step (so a sweep can be killed partway), and whose
    steps hang (up to a minute each) while the file ``hang_marker`` exists."""
    return _SlowKnownAnswer(delay, hang_marker, **kwargs)


class _FlakyKnownAnswer(KnownAnswerEnv):
    def __init__(self, fail_seed: int, marker: str, **kwargs):
        super().__init__(**kwargs)
        self.fail_seed, self.marker = fail_seed, marker

    def reset(self, *, seed=None, options=None):
        if seed == self.fail_seed and os.path.exists(self.marker):
            raise RuntimeError(f"injected failure at seed {seed}")
        return super().reset(seed=seed, options=options)


def make_flaky_env(fail_seed: int, marker: str, **kwargs):
    """KnownAnswerEnv whose reset with ``fail_seed`` raises while the file ``marker`` exists."""
    return _FlakyKnownAnswer(fail_seed, marker, **kwargs)


# -- helpers -------------------------------------------------------------------------------------------

def stored_rows(out: Path) -> list[tuple]:
    with sqlite3.connect(out / "results.sqlite") as conn:
        return conn.execute(f"SELECT {ROW_COLUMNS} FROM episodes ORDER BY policy_digest, env_id, env_kwargs, task, seed").fetchall()


def assert_store_is_clean(out: Path, n: int) -> None:
    rows = stored_rows(out)
    assert len(rows) == n
    assert len({r[:5] for r in rows}) == n, "duplicate episode keys"
    with sqlite3.connect(out / "results.sqlite") as conn:
        statuses = conn.execute("SELECT status, COUNT(*) FROM jobs GROUP BY status").fetchall()
    assert dict(statuses).keys() == {"done"}, statuses


def same(got, want) -> bool:
    if isinstance(want, float) and math.isnan(want):
        return isinstance(got, float) and math.isnan(got)
    return type(got) is type(want) and got == want


def check_known_answers(out: Path, n: int) -> None:
    """Every stored episode equals ``expected_episode`` for its policy, env kwargs and seed."""
    with Store(out, create=False) as store:
        episodes = store.episodes()
    assert len(episodes) == n
    for ep in episodes:
        kwargs = json.loads(ep["env_kwargs"])
        want = expected_episode(ep["seed"], ACTIONS[ep["policy_name"]], nan_reward_seeds=kwargs.get("nan_reward_seeds", ()))
        for key in ("seed", "sum_reward", "max_reward", "length", "success", "nan_rewards"):
            assert same(ep[key], want[key]), (ep["policy_name"], ep["env_name"], ep["seed"], key, ep[key], want[key])
        assert ep["task"] == ep["env_id"]


@pytest.fixture
def spy_run_job(monkeypatch):
    """Records (job label, episode indices) of every job the local executor runs in this process."""
    calls = []
    real = executors_module.run_job

    def spy(job, episodes, emit, flush_s=executors_module.FLUSH_S):
        calls.append((job.label, list(episodes)))
        return real(job, episodes, emit, flush_s)

    monkeypatch.setattr(executors_module, "run_job", spy)
    return calls


@pytest.fixture(scope="module")
def clean_sweep(tmp_path_factory) -> Path:
    """The standard sweep, run once in this process: 2 policies x 2 envs x 2 seed blocks x 6 episodes."""
    out = tmp_path_factory.mktemp("clean") / "sweep"
    outcome = run_sweep(SweepSpec.from_dict(SPEC), out, executor=LocalExecutor(workers=1))
    assert outcome.ok and outcome.done == 8 and outcome.episodes_added == N_EPISODES
    return out


# -- spec and plan ---------------------------------------------------------------------------------------

def test_spec_expands_into_one_job_per_policy_env_seed_block():
    spec = SweepSpec.from_dict(SPEC)
    assert spec.n_jobs == 8
    jobs = plan(spec)
    assert len(jobs) == 8 and len({j.job_id for j in jobs}) == 8
    assert [(j.policy_name, j.env_name, j.seed) for j in jobs[:4]] == [
        ("zero", "known", 0), ("zero", "known", 50), ("zero", "known-nan", 0), ("zero", "known-nan", 50)]
    job = jobs[2]
    assert job.env_kwargs_json == '{"nan_reward_seeds":[3,52]}'
    assert job.policy_digest == digest_bytes(b"zero") and jobs[4].policy_digest == digest_bytes(PARITY.encode())
    assert list(job.seeds) == [0, 1, 2, 3, 4, 5]
    eval_spec = job.eval_spec()
    assert (eval_spec.env, eval_spec.policy, eval_spec.n_episodes, eval_spec.seed, eval_spec.batch_size) == (
        KNOWN_ANSWER_ID, "zero", 6, 0, 4)
    assert eval_spec.env_kwargs == {"nan_reward_seeds": [3, 52]}
    assert SweepSpec.from_dict(spec.to_dict()) == spec


def test_seed_blocks_and_per_env_episodes():
    data = {**SPEC, "seeds": {"start": 10, "count": 3}, "envs": [{"id": KNOWN_ANSWER_ID, "episodes": 2}, {"id": "CartPole-v1"}]}
    spec = SweepSpec.from_dict(data)
    assert spec.seeds == (10, 16, 22)  # stride defaults to `episodes`
    jobs = plan(spec)
    assert {(j.env_name, j.n_episodes) for j in jobs} == {(KNOWN_ANSWER_ID, 2), ("CartPole-v1", 6)}


def test_sweep_file_formats_agree(tmp_path):
    (tmp_path / "s.json").write_text(json.dumps(SPEC))
    yaml = pytest.importorskip("yaml")
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(SPEC))
    (tmp_path / "s.toml").write_text(
        'name = "t"\nepisodes = 6\nseeds = [0, 50]\n'
        '[[policies]]\nname = "zero"\nref = "zero"\n'
        f'[[policies]]\nname = "parity"\nref = "{PARITY}"\n'
        f'[[envs]]\nname = "known"\nid = "{KNOWN_ANSWER_ID}"\n'
        f'[[envs]]\nname = "known-nan"\nid = "{KNOWN_ANSWER_ID}"\nkwargs = {{ nan_reward_seeds = [3, 52] }}\n'
        '[options]\nbatch_size = 4\ndevice = "cpu"\n'
    )
    specs = [SweepSpec.from_dict(load_sweep_file(tmp_path / f"s.{ext}")) for ext in ("json", "yaml", "toml")]
    assert specs[0] == specs[1] == specs[2] == SweepSpec.from_dict(SPEC)


def test_example_sweep_file_plans():
    pytest.importorskip("yaml")
    path = REPO / "examples" / "sweep.yaml"
    spec = SweepSpec.from_dict(load_sweep_file(path))
    jobs = plan(spec, base_dir=path.parent)
    assert len(jobs) == spec.n_jobs == 12
    assert {j.policy_ref for j in jobs} >= {"zero", "random", str((REPO / "src/fasteval/assets/cartpole_mlp").resolve())}


def _with(**changes):
    return {**SPEC, **changes}


@pytest.mark.parametrize("data, needle", [
    (_with(episode=5), "unknown key(s) 'episode'"),
    ({k: v for k, v in SPEC.items() if k != "episodes"}, "missing required key(s) 'episodes'"),
    (_with(episodes=0), "episodes: expected an integer >= 1"),
    (_with(seeds=[0, 3]), "blocks 0 and 3 overlap"),
    (_with(seeds=[-1]), "seeds: expected a non-empty list of integers >= 0"),
    (_with(policies=[{"ref": "zero"}, {"ref": "zero", "name": "z2"}]), "expected each ref once"),
    (_with(envs=[{"id": KNOWN_ANSWER_ID}, {"id": KNOWN_ANSWER_ID, "kwargs": {"nan_reward_seeds": [1]}}]), "distinct `name:`"),
    (_with(envs=[{"id": KNOWN_ANSWER_ID, "kwargs": {"x": float("nan")}}]), "plain JSON data"),
    (_with(options={"batch_size": 0}), "batch_size: expected an integer >= 1"),
    (_with(options={"device": "tpu"}), "device: expected cpu, cuda"),
    (_with(options={"batchsize": 4}), "unknown key(s) 'batchsize'"),
    (_with(policies=[]), "policies: expected a non-empty list"),
])
def test_spec_errors_say_what_was_expected(data, needle):
    with pytest.raises(SweepSpecError) as info:
        SweepSpec.from_dict(data)
    assert needle in str(info.value)


def test_bad_files_and_references(tmp_path):
    (tmp_path / "s.txt").write_text("{}")
    with pytest.raises(SweepSpecError, match="expected a .yaml"):
        load_sweep_file(tmp_path / "s.txt")
    (tmp_path / "s.json").write_text("{not json")
    with pytest.raises(SweepSpecError, match="could not parse it as JSON"):
        load_sweep_file(tmp_path / "s.json")
    spec = SweepSpec.from_dict(_with(policies=[{"name": "p", "ref": "no/such/folder"}]))
    with pytest.raises(SweepSpecError, match="relative paths are resolved against"):
        plan(spec, base_dir=tmp_path)


def test_checkpoint_digest_is_of_the_files(tmp_path):
    asset = Path(fasteval.__file__).parent / "assets" / "cartpole_mlp"
    copy = tmp_path / "ckpt"
    shutil.copytree(asset, copy)
    assert folder_digest(copy) == folder_digest(asset)
    (copy / ".DS_Store").write_text("ignored")
    assert folder_digest(copy) == folder_digest(asset)
    spec = SweepSpec.from_dict(_with(policies=[{"name": "a", "ref": "ckpt"}], envs=[{"id": "CartPole-v1"}]))
    job = plan(spec, base_dir=tmp_path)[0]
    assert job.policy_ref == str(copy.resolve()) and job.policy_digest == folder_digest(asset)
    twice = _with(policies=[{"name": "a", "ref": "ckpt"}, {"name": "b", "ref": str(asset)}], envs=[{"id": "CartPole-v1"}])
    with pytest.raises(SweepSpecError, match="are the same policy"):
        plan(SweepSpec.from_dict(twice), base_dir=tmp_path)
    (copy / "notes.txt").write_text("changed")
    assert folder_digest(copy) != folder_digest(asset)


# -- the store ------------------------------------------------------------------------------------------

def test_store_keys_are_unique_and_nan_survives(tmp_path):
    job = plan(SweepSpec.from_dict(SPEC))[2]  # known-nan, seeds 0..5
    record = {**expected_episode(3, nan_reward_seeds=[3]), "task": job.task, "task_group": job.task, "task_id": 0}
    with Store(tmp_path) as store:
        store.sync_jobs([job])
        assert store.add_episodes(job, [record]) == 1
        assert store.add_episodes(job, [record]) == 0  # already stored: left alone
        with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
            store.conn.execute(
                "INSERT INTO episodes SELECT * FROM episodes WHERE seed = 3")
        (ep,) = store.episodes()
        assert math.isnan(ep["sum_reward"]) and math.isnan(ep["max_reward"]) and ep["nan_rewards"] == 1
        assert store.sync_jobs([job])[job.job_id] == [0, 1, 2, 4, 5]
        store.check_settings({"max_steps": None})
        with pytest.raises(UserInputError, match="another output folder"):
            store.check_settings({"max_steps": 5})
        with pytest.raises(ValueError, match="does not belong"):
            store.add_episodes(job, [{**record, "seed": 99}])


def test_every_option_that_changes_the_numbers_is_a_stored_setting():
    """Each sweep option that is a *what* field of EvalSpec changes ``result_settings`` when it leaves its
    default (the stop rule's with a rule); the *how* options never do."""
    from dataclasses import fields as dc_fields

    from fasteval.doors.sweep.spec import SweepOptions
    from fasteval.types.spec import WHAT_FIELDS

    other = {"max_steps": 5, "obs_dtype": "float64", "stop_when": "above=0.5", "confidence": 0.9,
             "return_bounds": (0.0, 1.0), "batch_size": 3, "device": "cpu", "vectorization": "async", "workers": 2,
             "reset_mode": "wave", "trust_remote_code": True, "retries": 0, "on_nan_action": "skip-episode",
             "step_timeout": 5.0, "torch_threads": 2, "rank_by": "return"}
    names = [f.name for f in dc_fields(SweepOptions)]
    assert sorted(other) == sorted(names), "give the new option a value here"
    rule = {"stop_when": "above=0.5"}
    for name in names:
        base = rule if name in ("confidence", "return_bounds") else {}
        changed = SweepOptions(**base, **{name: other[name]}).result_settings() != SweepOptions(**base).result_settings()
        assert changed == (name in WHAT_FIELDS), name
    assert SweepOptions().result_settings() == {"max_steps": None}  # what stores written before obs_dtype hold


def test_a_sweep_resumed_with_another_obs_dtype_is_refused(tmp_path):
    out = tmp_path / "sweep"
    first = _with(policies=[{"name": "zero", "ref": "zero"}], envs=[{"name": "known", "id": KNOWN_ANSWER_ID}])
    run_sweep(SweepSpec.from_dict(first), out, executor=LocalExecutor(workers=1), report=False)
    changed = _with(**{k: v for k, v in first.items() if k != "options"},
                    options={**first["options"], "obs_dtype": "float64"})
    with pytest.raises(UserInputError, match="obs_dtype"):
        run_sweep(SweepSpec.from_dict(changed), out, executor=LocalExecutor(workers=1), report=False)
    assert run_sweep(SweepSpec.from_dict(first), out, executor=LocalExecutor(workers=1), report=False).ok


def test_one_sweep_per_folder(tmp_path):
    with SweepLock(tmp_path):
        with pytest.raises(UserInputError, match="another sweep"):
            with SweepLock(tmp_path):
                pass
    with SweepLock(tmp_path):  # released
        pass


# -- local sweeps ----------------------------------------------------------------------------------------

def test_local_sweep_stores_exact_known_answers(clean_sweep):
    check_known_answers(clean_sweep, N_EPISODES)
    assert_store_is_clean(clean_sweep, N_EPISODES)
    with Store(clean_sweep, create=False) as store:
        jobs = store.jobs()
    assert all(j["attempts"] == 1 and j["error"] is None for j in jobs)


def test_rerun_skips_everything(clean_sweep, spy_run_job):
    before = stored_rows(clean_sweep)
    outcome = run_sweep(SweepSpec.from_dict(SPEC), clean_sweep, executor=LocalExecutor(workers=1), report=False)
    assert outcome.skipped == 8 and outcome.done == 0 and outcome.episodes_added == 0
    assert spy_run_job == []
    assert stored_rows(clean_sweep) == before


def test_more_episodes_runs_only_the_new_ones(tmp_path, clean_sweep, spy_run_job):
    out = tmp_path / "grow"
    shutil.copytree(clean_sweep, out)
    outcome = run_sweep(SweepSpec.from_dict(_with(episodes=8, seeds=[0, 50])), out, executor=LocalExecutor(1), report=False)
    assert outcome.done == 8 and outcome.episodes_added == 16
    assert {tuple(eps) for _, eps in spy_run_job} == {(6, 7)}
    check_known_answers(out, 64)


def test_workers_do_not_change_results(tmp_path, clean_sweep):
    out = tmp_path / "two"
    outcome = run_sweep(SweepSpec.from_dict(SPEC), out, executor=LocalExecutor(workers=2), report=False)
    assert outcome.ok and outcome.done == 8
    assert stored_rows(out) == stored_rows(clean_sweep)


def test_kill_partway_then_resume_equals_clean_run(tmp_path, spy_run_job):
    data = {
        "name": "slow", "episodes": 8, "seeds": [0, 100],
        "policies": [{"name": "zero", "ref": "zero"}, {"name": "parity", "ref": PARITY}],
        "envs": [{"name": "slow", "id": "tests.test_sweep:make_slow_env", "kwargs": {"delay": 0.008}}],
        "options": {"batch_size": 2, "device": "cpu"},
    }
    spec_file = tmp_path / "slow.json"
    spec_file.write_text(json.dumps(data))
    out = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [sys.executable, "-c", "from fasteval.doors.cli import main; main()", "sweep", str(spec_file), "-o", str(out), "-w", "1",
         "--no-report", "--trust-remote-code"],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    stored, deadline = 0, time.monotonic() + 90
    try:
        while stored == 0 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
            try:
                with sqlite3.connect(out / "results.sqlite", timeout=5) as conn:
                    stored = conn.execute("SELECT COUNT(*) FROM episodes").fetchone()[0]
            except sqlite3.OperationalError:  # not created yet
                pass
    finally:
        proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL, err.decode()[-2000:]
    total = 2 * 2 * 8
    partial = stored_rows(out)
    assert 0 < len(partial) < total, f"expected a partial store, got {len(partial)} of {total} episodes"
    with sqlite3.connect(out / "results.sqlite") as conn:
        assert conn.execute("SELECT COUNT(*) FROM jobs WHERE status = 'running'").fetchone()[0] >= 1

    spec = SweepSpec.from_dict(data)
    outcome = run_sweep(spec, out, executor=LocalExecutor(workers=1), report=False)
    assert outcome.ok and outcome.episodes_added == total - len(partial)
    assert sum(len(eps) for _, eps in spy_run_job) == total - len(partial)  # finished episodes were not rerun
    clean = tmp_path / "clean"
    run_sweep(spec, clean, executor=LocalExecutor(workers=1), report=False)
    assert stored_rows(out) == stored_rows(clean)
    assert set(partial) <= set(stored_rows(out))
    assert_store_is_clean(out, total)


def test_failed_job_is_recorded_then_retried(tmp_path, spy_run_job):
    marker = tmp_path / "fail-now"
    marker.write_text("")
    data = {
        "name": "flaky", "episodes": 6, "seeds": [0, 50],
        "policies": [{"name": "zero", "ref": "zero"}],
        "envs": [{"name": "flaky", "id": "tests.test_sweep:make_flaky_env",
                  "kwargs": {"fail_seed": 53, "marker": str(marker)}}],
        "options": {"batch_size": 2, "device": "cpu"},
    }
    spec_file = tmp_path / "flaky.json"
    spec_file.write_text(json.dumps(data))
    out = tmp_path / "out"
    args = ["sweep", str(spec_file), "-o", str(out), "-w", "1", "--trust-remote-code"]  # the file names an env callable
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 1, first.output
    assert "re-run the same command" in first.output and "injected failure at seed 53" in first.output
    with Store(out, create=False) as store:
        jobs = {j["seed"]: j for j in store.jobs()}
        assert jobs[0]["status"] == "done" and jobs[50]["status"] == "failed"
        assert "injected failure at seed 53" in jobs[50]["error"] and jobs[50]["attempts"] == 1
        assert sorted(e["seed"] for e in store.episodes()) == [0, 1, 2, 3, 4, 5, 50, 51, 52, 54, 55]
    report = json.loads((out / "report.json").read_text())
    assert report["cells"][0]["errors"] == 1 and "seed 53" in report["cells"][0]["error_texts"][0]

    marker.unlink()
    spy_run_job.clear()
    second = CliRunner().invoke(main, args)
    assert second.exit_code == 0, second.output
    assert [eps for _, eps in spy_run_job] == [[3]]  # only the missing episode of the failed job
    with Store(out, create=False) as store:
        jobs = {j["seed"]: j for j in store.jobs()}
        assert jobs[50]["status"] == "done" and jobs[50]["attempts"] == 2 and jobs[50]["error"] is None
        episodes = store.episodes()
    assert len(episodes) == 12
    for ep in episodes:
        want = expected_episode(ep["seed"])
        assert all(same(ep[k], want[k]) for k in ("sum_reward", "max_reward", "length", "success", "nan_rewards"))


# -- Ray -------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_ray_backend_matches_local(tmp_path, clean_sweep):
    ray = pytest.importorskip("ray", reason="Ray is not installed: ./scripts/install.sh ray")
    from fasteval.doors.sweep import RayExecutor

    started = time.perf_counter()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # never a cluster left by another test
    try:
        out = tmp_path / "ray"
        outcome = run_sweep(SweepSpec.from_dict(SPEC), out, executor=RayExecutor(num_cpus=1, max_retries=1), report=False)
    finally:
        ray.shutdown()
    print(f"ray sweep took {time.perf_counter() - started:.1f} s (including ray.init)")
    assert outcome.ok and outcome.done == 8
    assert stored_rows(out) == stored_rows(clean_sweep)
    with Store(out, create=False) as store:
        assert {(j["status"], j["attempts"]) for j in store.jobs()} == {("done", 1)}


def test_ray_missing_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    (tmp_path / "s.json").write_text(json.dumps(SPEC))
    result = CliRunner().invoke(main, ["sweep", str(tmp_path / "s.json"), "-o", str(tmp_path / "o"), "--backend", "ray",
                                         "--trust-remote-code"])
    assert result.exit_code == 2
    assert "./scripts/install.sh ray" in result.output


# -- CLI and report ---------------------------------------------------------------------------------------

def test_cli_sweep_then_report(tmp_path, clean_sweep):
    (tmp_path / "s.json").write_text(json.dumps(SPEC))
    out = tmp_path / "cli"
    result = CliRunner().invoke(main, ["sweep", str(tmp_path / "s.json"), "-o", str(out), "-w", "1", "--no-report",
                                         "--trust-remote-code"])
    assert result.exit_code == 0, result.output
    assert stored_rows(out) == stored_rows(clean_sweep)
    assert not (out / "report.md").exists()
    result = CliRunner().invoke(main, ["report", str(out)])
    assert result.exit_code == 0, result.output
    try:
        import matplotlib  # noqa: F401

        names = ("report.md", "report.json", "success.png", "returns.png")
    except ImportError:  # the report degrades to text and says so
        names = ("report.md", "report.json")
        assert "./scripts/install.sh sweep" in (out / "report.md").read_text()
    for name in names:
        assert (out / name).stat().st_size > 0, name
    missing = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert missing.exit_code == 2 and "no results store" in missing.output
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(_with(seeds=[0, 1])))
    result = CliRunner().invoke(main, ["sweep", str(bad), "-o", str(tmp_path / "bad")])
    assert result.exit_code == 2 and "overlap" in result.output


def test_report_from_store(clean_sweep):
    pytest.importorskip("matplotlib")
    for name in ("success.png", "returns.png"):
        data = (clean_sweep / name).read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 1000, name
    doc = json.loads((clean_sweep / "report.json").read_text())
    cells = {(c["policy"], c["env"]): c for c in doc["cells"]}
    assert set(cells) == {(p, e) for p in ("zero", "parity") for e in ("known", "known-nan")}
    seeds = [*range(0, 6), *range(50, 56)]
    for (policy, env), cell in cells.items():
        nan_seeds = NAN_SEEDS if env == "known-nan" else []
        eps = [expected_episode(s, ACTIONS[policy], nan_reward_seeds=nan_seeds) for s in seeds]
        assert cell["episodes"] == 12 and cell["errors"] == 0
        assert cell["successes"] == sum(e["success"] for e in eps)
        assert cell["nan_reward_episodes"] == len(nan_seeds)
        if nan_seeds:
            assert cell["mean_return"] is None and cell["return_ci95"] == [None, None]  # NaN is not hidden
        else:
            mean = sum(e["sum_reward"] for e in eps) / 12
            assert cell["mean_return"] == pytest.approx(mean)
            assert cell["return_ci95"][0] <= mean <= cell["return_ci95"][1]
    totals = doc["totals"]
    assert totals["episodes"] == N_EPISODES and totals["jobs"]["done"] == 8
    assert totals["env_steps"] == sum(
        expected_episode(s)["length"] for s in seeds) * 4
    assert totals["wall_s"] > 0 and totals["episodes_per_s"] > 0
    pairs = {(p["env"], p["a"], p["b"]): p for p in doc["paired"]}
    known = pairs[("known", "zero", "parity")]
    assert known["episodes"] == 12 and known["success_mcnemar"]["method"] == "exact binomial"
    # parity earns +0.5 per step where zero does not: the paired difference B - A is +0.5 x length on average
    assert known["return_diff"]["mean_diff"] > 0 and known["return_diff"]["direction"] == "B - A"
    md = (clean_sweep / "report.md").read_text()
    assert "| zero | known |" in md and "Wilson" in md and "McNemar" in md


# -- envs without a success signal (issue 14) ---------------------------------------------------------

def _store_with_signals(out: Path, signal: dict[str, bool | None]) -> list:
    """The standard sweep's jobs with their known-answer episodes stored directly; every episode of
    env ``name`` carries ``has_success_signal = signal[name]`` (None: the field is absent)."""
    jobs = plan(SweepSpec.from_dict(SPEC))
    with Store(out) as store:
        store.sync_jobs(jobs)
        for job in jobs:
            kwargs = json.loads(job.env_kwargs_json)
            records = []
            for i in range(job.n_episodes):
                ep = expected_episode(job.seed + i, ACTIONS[job.policy_name], nan_reward_seeds=kwargs.get("nan_reward_seeds", ()))
                record = {**ep, "task": job.task, "task_group": job.task, "task_id": 0}
                if signal[job.env_name] is not None:
                    record["has_success_signal"] = signal[job.env_name]
                records.append(record)
            store.add_episodes(job, records)
            store.job_done(job.job_id, 0.1)
    return jobs


def test_report_says_no_success_signal_and_drops_success_stats(tmp_path):
    from fasteval.doors.sweep.report import write_report
    from fasteval.render import NO_SIGNAL

    _store_with_signals(tmp_path, {"known": False, "known-nan": True})
    doc = write_report(tmp_path)
    saved = json.loads((tmp_path / "report.json").read_text())
    cells = {(c["policy"], c["env"]): c for c in saved["cells"]}
    seeds = [*range(0, 6), *range(50, 56)]
    for policy in ("zero", "parity"):
        silent, signalled = cells[(policy, "known")], cells[(policy, "known-nan")]
        assert silent["success_signal"] is False
        assert silent["successes"] is None and silent["success_pct"] is None and silent["success_ci95"] == [None, None]
        assert silent["episodes"] == 12 and silent["mean_return"] == pytest.approx(
            sum(expected_episode(s, ACTIONS[policy])["sum_reward"] for s in seeds) / 12)  # returns stay
        wins = sum(expected_episode(s, ACTIONS[policy], nan_reward_seeds=NAN_SEEDS)["success"] for s in seeds)
        assert signalled["success_signal"] is True and signalled["successes"] == wins
        assert signalled["success_pct"] == pytest.approx(100 * wins / 12)
    pairs = {p["env"]: p for p in saved["paired"]}
    assert pairs["known"]["success_signal"] is False and pairs["known"]["success_mcnemar"] is None
    assert pairs["known"]["return_diff"]["mean_diff"] > 0  # the return comparison stays (B - A: parity earns more)
    assert pairs["known-nan"]["success_mcnemar"]["method"] == "exact binomial"
    assert [a["envs"] for a in saved["across_envs"]] == [1, 1]  # the silent env is left out of the aggregates
    md = (tmp_path / "report.md").read_text()
    assert f"| zero | known | {NO_SIGNAL} |" in md and f"| parity | known | {NO_SIGNAL} |" in md
    assert f"| known | zero | parity | 12 | {NO_SIGNAL} | - | - |" in md
    assert "| zero | known-nan | 0.0 [" not in md or cells[("zero", "known-nan")]["successes"] == 0
    if doc["plots"] != "plots skipped: matplotlib is not installed (./scripts/install.sh sweep)":
        from fasteval.render.sweep_plots import success_figure

        assert doc["plots"] == ["returns.png", "success.png"]
        (ax,) = success_figure(saved).axes
        assert [t.get_text() for t in ax.get_xticklabels()] == ["known-nan"]
        assert "known" in ax.get_title() and NO_SIGNAL in ax.get_title()


def test_report_without_any_success_signal_has_no_success_plot(tmp_path):
    pytest.importorskip("matplotlib")
    from fasteval.doors.sweep.report import write_report
    from fasteval.render import NO_SIGNAL

    _store_with_signals(tmp_path, {"known": False, "known-nan": False})
    doc = write_report(tmp_path)
    assert doc["plots"] == ["returns.png"] and not (tmp_path / "success.png").exists()
    md = (tmp_path / "report.md").read_text()
    assert "success.png" not in md and "![returns](returns.png)" in md
    assert md.count(NO_SIGNAL) >= 4 + 2  # 4 cells, 2 paired rows
    assert json.loads((tmp_path / "report.json").read_text())["across_envs"] == []


def test_unknown_success_signal_keeps_the_success_rate(tmp_path):
    """Episodes stored without the flag (older stores, or an env layer that does not track it)
    are read as signalled: the report shows their success rate as before."""
    from fasteval.doors.sweep.report import build_report

    _store_with_signals(tmp_path, {"known": None, "known-nan": True})
    with Store(tmp_path, create=False) as store:
        assert {ep["has_success_signal"] for ep in store.episodes() if ep["env_name"] == "known"} == {None}
        doc = build_report(store)
    assert all(c["success_signal"] and c["successes"] is not None for c in doc["cells"])
    assert all(p["success_mcnemar"] is not None for p in doc["paired"])


def test_store_made_before_the_signal_column_is_migrated(tmp_path):
    jobs = _store_with_signals(tmp_path, {"known": True, "known-nan": False})
    with sqlite3.connect(tmp_path / "results.sqlite") as conn:
        conn.execute("ALTER TABLE episodes DROP COLUMN has_success_signal")  # the old layout
    with Store(tmp_path, create=False) as store:  # read-only use: the flag is unknown
        assert {ep["has_success_signal"] for ep in store.episodes()} == {None}
    with Store(tmp_path) as store:  # a sweep opening it adds the column; old rows stay unknown
        assert {ep["has_success_signal"] for ep in store.episodes()} == {None}
        record = {**expected_episode(jobs[0].seed + 0), "task": jobs[0].task, "has_success_signal": False}
        store.conn.execute("DELETE FROM episodes WHERE job_id = ? AND seed = ?", (jobs[0].job_id, jobs[0].seed))
        assert store.add_episodes(jobs[0], [record]) == 1
        flags = {(ep["job_id"], ep["seed"]): ep["has_success_signal"] for ep in store.episodes()}
    assert flags[(jobs[0].job_id, jobs[0].seed)] is False


def _figure_doc(cells: list[tuple[str, str, list[float]]]) -> dict:
    return {"cells": [{"policy": p, "env": e, "returns": r, "episodes": len(r), "success_signal": True,
                       "success_pct": 50.0, "success_ci95": [10.0, 90.0]} for p, e, r in cells]}


def test_returns_figure_shares_x_per_env_labels_axes_and_marks_constant_returns():
    pytest.importorskip("matplotlib")
    from fasteval.render.sweep_plots import returns_figure

    doc = _figure_doc([
        ("a", "cartpole", [500.0] * 8),                 # a perfect policy: every return equal
        ("b", "cartpole", [9.0, 10.0, 11.0, 30.0]),
        ("a", "pusht", [0.1, 0.5, float("nan")]),
        ("b", "pusht", [2.0, 3.0]),
    ])
    fig = returns_figure(doc)
    axes = np.asarray(fig.axes).reshape(2, 2)  # rows: policies a, b; columns: envs cartpole, pusht
    for j in range(2):
        assert axes[0, j].get_shared_x_axes().joined(axes[0, j], axes[1, j])
        assert axes[1, j].get_xlabel() == "return"
        assert axes[0, j].get_xlim() == axes[1, j].get_xlim()
    assert not axes[0, 0].get_shared_x_axes().joined(axes[0, 0], axes[0, 1])  # envs keep their own scales
    assert [axes[i, 0].get_ylabel() for i in range(2)] == ["episodes", "episodes"]
    constant = [a for a in axes[0, 0].get_children() if a.get_gid() == "constant-return"]
    assert len(constant) == 2 and "all = 500" in axes[0, 0].get_title()
    lo, hi = axes[0, 0].get_xlim()
    assert lo < 500.0 < hi
    for ax in (axes[1, 0], axes[0, 1], axes[1, 1]):
        assert not [a for a in ax.get_children() if a.get_gid() == "constant-return"] and ax.patches  # histograms
    assert "1 NaN" in axes[0, 1].get_title()
    # same bins across the policies of one env
    widths = {round(p.get_width(), 9) for ax in (axes[0, 1], axes[1, 1]) for p in ax.patches}
    assert len(widths) == 1


def test_returns_figure_all_constant_env_gets_a_visible_range():
    pytest.importorskip("matplotlib")
    from fasteval.render.sweep_plots import returns_figure

    fig = returns_figure(_figure_doc([("a", "e", [0.0, 0.0]), ("b", "e", [0.0])]))
    top, bottom = fig.axes
    lo, hi = top.get_xlim()
    assert lo <= -1.0 and hi >= 1.0 and bottom.get_xlim() == (lo, hi)
    assert all([a for a in ax.get_children() if a.get_gid() == "constant-return"] for ax in (top, bottom))


# -- trust and size (issue 20) ------------------------------------------------------------------

def test_a_sweep_file_cannot_grant_trust(tmp_path):
    spec_file = tmp_path / "s.json"
    spec_file.write_text(json.dumps(_with(options={"trust_remote_code": True})))
    result = CliRunner().invoke(main, ["sweep", str(spec_file), "-o", str(tmp_path / "o"), "-w", "1", "--no-report"])
    assert result.exit_code == 2 and "can never grant trust" in result.output, result.output
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("entry", [
    {"policies": [{"name": "p", "ref": PARITY}]},  # module:callable policy
    {"envs": [{"name": "shell", "id": "os:system", "kwargs": {"command": "touch PWNED"}}]},
    {"envs": [{"name": "file", "id": "./evil.py:make"}]},
])
def test_code_named_by_a_sweep_file_needs_the_flag(tmp_path, entry, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec_file = tmp_path / "s.json"
    data = _with(**entry)
    if "policies" not in entry:
        data["policies"] = [{"name": "zero", "ref": "zero"}]
    spec_file.write_text(json.dumps(data))
    result = CliRunner().invoke(main, ["sweep", str(spec_file), "-o", str(tmp_path / "o"), "-w", "1", "--no-report"])
    assert result.exit_code == 2 and "--trust-remote-code" in result.output, result.output
    assert not (tmp_path / "PWNED").exists() and not (tmp_path / "o").exists()


def test_a_million_seed_blocks_are_refused_before_anything_is_built(tmp_path):
    spec_file = tmp_path / "s.json"
    spec_file.write_text(json.dumps(_with(seeds={"start": 0, "count": 1_000_000}, policies=[{"name": "z", "ref": "zero"}])))
    result = CliRunner().invoke(main, ["sweep", str(spec_file), "-o", str(tmp_path / "o"), "-w", "1", "--no-report"])
    assert result.exit_code == 2 and "--max-jobs" in result.output and "2000000 jobs" in result.output, result.output
    assert not (tmp_path / "o").exists()
    from fasteval.doors.sweep.spec import SweepSpec

    spec = SweepSpec.from_dict(_with(seeds={"start": 0, "count": 30}, policies=[{"name": "z", "ref": "zero"}]), max_jobs=60)
    assert spec.n_jobs == 60


def test_seed_blocks_past_int64_are_refused():
    from fasteval.doors.sweep.spec import SweepSpecError

    with pytest.raises(SweepSpecError, match="at most 2\\*\\*63 - 1"):
        SweepSpec.from_dict(_with(seeds=[0, 2**64 - 1]))


# -- issue 32: a sweep spec is checked before anything runs; the report shows the spec's cells ------------------

def test_an_env_id_typo_exits_2_with_gymnasiums_suggestion_before_any_job(tmp_path):
    spec_file = tmp_path / "typo.json"
    spec_file.write_text(json.dumps(_with(envs=[{"name": "good", "id": KNOWN_ANSWER_ID},
                                                 {"name": "bad", "id": "CartPoel-v1"}])))
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["sweep", str(spec_file), "-o", str(out), "-w", "1", "--trust-remote-code"])
    assert result.exit_code == 2, result.output
    assert "env 'bad'" in result.output and "Did you mean: `CartPole`?" in result.output and "Nothing ran" in result.output
    assert not (out / "results.sqlite").exists()  # the good jobs did not run first


def test_every_bad_reference_is_named_at_once(tmp_path):
    spec = SweepSpec.from_dict(_with(
        policies=[{"name": "ok", "ref": "zero"}, {"name": "gone", "ref": "fasteval.testing.policies:NoSuchPolicy"}],
        envs=[{"name": "v", "id": "CartPole-v99"}, {"name": "ns", "id": "no_such_plugin_xyz/Thing-v0"},
              {"name": "call", "id": "fasteval.testing.envs:no_such_env"}]))
    with pytest.raises(SweepSpecError) as info:
        plan(spec)
    text = str(info.value)
    assert text.startswith("sweep: 4 problems, nothing ran")
    for needle in ("env 'v'", "CartPole", "env 'ns'", "not installed", "env 'call'",
                   "policy 'gone'", "has no attribute"):
        assert needle in text, (needle, text)


def test_a_cell_no_longer_in_the_spec_leaves_the_report_and_stays_in_the_store(tmp_path):
    """A typo'd env fixed and re-run into the same folder: the report shows this spec's cells and their
    planned episodes only; the store keeps the old cell's rows (a later spec may name it again)."""
    first = _with(policies=[{"name": "zero", "ref": "zero"}],
                  envs=[{"name": "known", "id": KNOWN_ANSWER_ID}, {"name": "old", "id": KNOWN_ANSWER_ID,
                                                                   "kwargs": {"nan_reward_seeds": [1]}}])
    out = tmp_path / "sweep"
    run_sweep(SweepSpec.from_dict(first), out, executor=LocalExecutor(workers=1), report=False)
    second = _with(policies=first["policies"], envs=[first["envs"][0], {"name": "new", "id": "CartPole-v1"}])
    outcome = run_sweep(SweepSpec.from_dict(second), out, executor=LocalExecutor(workers=1))
    cells = [(c["policy"], c["env"]) for c in outcome.report["cells"]]
    assert cells == [("zero", "known"), ("zero", "new")]
    assert "24 of 24 planned episodes stored" in outcome.report["summary"]
    assert "Jobs: 4 done" in outcome.report["summary"]
    assert len(stored_rows(out)) == 36  # the old cell's 12 episodes are kept
    rebuilt = json.loads((out / "report.json").read_text())
    assert [(c["policy"], c["env"]) for c in rebuilt["cells"]] == cells


# -- issue 32: a sweep stops as a run does (first signal: the jobs in flight finish; second: at once) ----------

SLOW_SWEEP = {
    "name": "slow", "episodes": 4, "seeds": {"start": 0, "count": 6, "stride": 100},
    "policies": [{"name": "zero", "ref": "zero"}],
    "envs": [{"name": "slow", "id": "tests.test_sweep:make_slow_env", "kwargs": {"delay": 0.04}}],
    "options": {"batch_size": 2, "device": "cpu"},
}


def _start_sweep(tmp_path: Path, workers: int, background: bool = False,
                 sweep: dict = SLOW_SWEEP) -> tuple[subprocess.Popen, Path, Path]:
    """A real ``fasteval sweep`` process (in a script's background job with ``background``: bash sets its
    SIGINT to SIG_IGN there), its folder and its stderr file; returns once a job has finished."""
    spec_file = tmp_path / "slow.json"
    spec_file.write_text(json.dumps(sweep))
    out, log = tmp_path / "out", tmp_path / "stderr.txt"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "fasteval.doors.cli", "sweep", str(spec_file), "-o", str(out), "-w", str(workers),
           "--trust-remote-code"]
    if background:  # the PID of the background job, then wait for it; exec keeps that PID the sweep's
        script = f"exec 2>{shlex.quote(str(log))}; {shlex.join(cmd)} & echo $! > {shlex.quote(str(tmp_path / 'pid'))}; wait $!"
        proc = subprocess.Popen(["bash", "-c", script], cwd=REPO, env=env)
    else:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stderr=log.open("w"), stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while "done   zero" not in (log.read_text() if log.exists() else "") and time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        time.sleep(0.05)
    return proc, out, log


def _jobs(out: Path) -> dict[str, int]:
    with sqlite3.connect(out / "results.sqlite") as conn:
        return dict(conn.execute("SELECT status, COUNT(*) FROM jobs GROUP BY status").fetchall())


def _resume_equals_a_clean_run(tmp_path: Path, out: Path, sweep: dict = SLOW_SWEEP) -> None:
    spec = SweepSpec.from_dict(sweep)
    outcome = run_sweep(spec, out, executor=LocalExecutor(workers=1), report=False)
    assert outcome.ok
    clean = tmp_path / "clean"
    run_sweep(spec, clean, executor=LocalExecutor(workers=1), report=False)
    assert stored_rows(out) == stored_rows(clean)
    assert_store_is_clean(out, 6 * 4)


@pytest.mark.parametrize("workers, sig", [(1, signal.SIGINT), (2, signal.SIGTERM)])
def test_a_first_signal_finishes_the_jobs_in_flight_and_says_how_to_resume(tmp_path, workers, sig):
    proc, out, log = _start_sweep(tmp_path, workers)
    proc.send_signal(sig)
    proc.wait(120)
    err = log.read_text()
    assert proc.returncode == 128 + sig, err
    assert f"{signal.Signals(sig).name} received: finishing the jobs in flight" in err
    assert f"Resume with:\n  fasteval sweep {tmp_path / 'slow.json'} -o {out} --trust-remote-code" in err
    assert "Aborted!" not in err and "Traceback" not in err
    jobs = _jobs(out)
    assert "running" not in jobs and jobs.get("pending", 0) >= 1, jobs  # each started job finished, others wait
    assert len(stored_rows(out)) == 4 * jobs["done"]  # whole jobs only
    assert (out / "report.md").exists()  # the store and the report were written
    _resume_equals_a_clean_run(tmp_path, out)


def _interrupt_twice(proc: subprocess.Popen, log: Path) -> str:
    """SIGINT, then a second SIGINT once the sweep has said it got the first; the sweep's stderr (it exited 130,
    stopped at once, without a traceback)."""
    proc.send_signal(signal.SIGINT)
    while "SIGINT received" not in log.read_text():
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    proc.wait(120)
    err = log.read_text()
    assert proc.returncode == 130, err
    assert "stopped at once by a second SIGINT" in err and "Traceback" not in err
    return err


def test_a_second_signal_stops_at_once_and_resume_is_exact(tmp_path):
    proc, out, log = _start_sweep(tmp_path, 1)
    err = _interrupt_twice(proc, log)
    assert "Resume with:\n  fasteval sweep" in err
    _resume_equals_a_clean_run(tmp_path, out)


def _children(pid: int) -> set[int]:
    """The live processes whose parent is ``pid`` (Linux's /proc)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.add(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process tree from /proc")
def test_a_second_signal_kills_pool_workers_stuck_in_a_step_and_resume_is_exact(tmp_path):
    """With ``-w 2`` the workers ignore SIGINT (the driver decides). After a job has finished, every step
    hangs: a second signal must kill the workers at once, not leave them in their steps for a minute."""
    hang = tmp_path / "hang"
    sweep = {**SLOW_SWEEP, "envs": [{**SLOW_SWEEP["envs"][0],
                                     "kwargs": {**SLOW_SWEEP["envs"][0]["kwargs"], "hang_marker": str(hang)}}]}
    proc, out, log = _start_sweep(tmp_path, 2, sweep=sweep)
    hang.touch()
    workers = _children(proc.pid)
    assert len(workers) >= 2, workers  # the pool's workers (and multiprocessing's resource tracker)
    _interrupt_twice(proc, log)
    deadline = time.monotonic() + 5
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    stuck = [pid for pid in workers if _alive(pid)]
    for pid in stuck:  # (a failed run leaves nothing behind)
        os.kill(pid, signal.SIGKILL)
    assert not stuck, "pool workers outlived the sweep"
    hang.unlink()
    _resume_equals_a_clean_run(tmp_path, out, sweep)


def test_a_background_sweep_of_a_script_stops_on_sigint_too(tmp_path):
    """``nohup bash -c '... &'``: bash starts the job with SIGINT ignored; it used to run on and exit 0."""
    proc, out, log = _start_sweep(tmp_path, 1, background=True)
    pid = int((tmp_path / "pid").read_text())
    os.kill(pid, signal.SIGINT)
    proc.wait(120)  # bash's `wait $!` returns the sweep's exit status
    err = log.read_text()
    assert proc.returncode == 130, err
    assert "SIGINT received" in err and "Resume with:" in err
    assert _jobs(out).get("pending", 0) >= 1
