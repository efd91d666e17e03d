"""Run folders: the group commit of episodes.jsonl, and a failed dry run that leaves nothing behind."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from fasteval.doors.cli import main
from fasteval.run.durable import FlushPolicy, GroupCommitLog
from fasteval.run.rundir import format_records
from fasteval.run.rundir import RunDirectory

KA = "fasteval/KnownAnswer-v0"


class FakeClock:
    """A clock the test moves by hand (seconds)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def lines(n: int, start: int = 0) -> list[dict]:
    return [{"episode_ix": i} for i in range(start, start + n)]


# -- the flush policy ----------------------------------------------------------------------------

@pytest.mark.parametrize("pending, age, due", [
    (0, 10.0, False),      # nothing to write, however long
    (1, 0.0, False),
    (1, 0.049, False),
    (1, 0.05, True),       # the oldest record is 50 ms old
    (255, 0.0, False),
    (256, 0.0, True),      # 256 records wait
    (1000, 0.0, True),
])
def test_flush_policy_is_50_ms_or_256_records(pending, age, due):
    assert FlushPolicy().due(pending, age) is due


def test_group_commit_writes_by_age_and_by_count_with_an_injected_clock():
    # Times are binary fractions, so that the clock arithmetic is exact.
    clock, written = FakeClock(), []
    log = GroupCommitLog(written.append, FlushPolicy(max_delay_s=0.5, max_records=256), clock=clock, background=False)
    log.add(lines(3, 0))  # t = 0: buffered
    clock.now += 0.25
    log.add(lines(2, 3))  # the oldest is 0.25 s old: still buffered
    assert written == [] and log.pending == 5
    clock.now += 0.125
    log.poll()  # 0.375 s: not yet
    assert written == []
    clock.now += 0.125
    log.poll()  # 0.5 s after the first record: one write of all five
    assert len(written) == 1 and [json.loads(x)["episode_ix"] for x in written[0].splitlines()] == [0, 1, 2, 3, 4]
    log.add(lines(255, 5))  # age 0, 255 records: buffered
    assert len(written) == 1
    log.add(lines(1, 260))  # the 256th record: written at once, whatever the age
    assert len(written) == 2 and len(written[1].splitlines()) == 256
    log.add(lines(2, 261))
    log.add([])  # an empty step changes nothing
    assert len(written) == 2
    log.close()  # the rest, at the end
    assert len(written) == 3 and len(written[2].splitlines()) == 2
    log.close()  # twice is harmless
    assert len(written) == 3
    assert log.groups_written == 3


def test_age_counts_from_the_oldest_waiting_record_not_the_last_write():
    clock, written = FakeClock(), []
    log = GroupCommitLog(written.append, FlushPolicy(max_delay_s=0.5, max_records=256), clock=clock, background=False)
    clock.now += 10.0  # a long quiet time before the first record must not make it "old"
    log.add(lines(1))
    assert written == []
    clock.now += 0.5
    log.add(lines(1, 1))
    assert len(written) == 1 and len(written[0].splitlines()) == 2


def test_the_background_thread_writes_a_lone_record_within_the_window():
    written = []
    log = GroupCommitLog(written.append, FlushPolicy(max_delay_s=0.05, max_records=256))
    try:
        log.add(lines(1))
        deadline = time.monotonic() + 5.0
        while not written and time.monotonic() < deadline:
            time.sleep(0.005)
        assert written, "a record waited more than 5 s although no further episode finished"
    finally:
        log.close()
    assert "".join(written).splitlines() == ['{"episode_ix":0}']


def test_a_write_error_in_the_thread_is_raised_in_the_caller():
    def full_disk(text):
        raise OSError(28, "No space left on device")

    log = GroupCommitLog(full_disk, FlushPolicy(max_delay_s=0.01, max_records=256))
    log.add(lines(1))
    deadline = time.monotonic() + 30  # the thread's failed write (waiting on it, not a fixed sleep: CI is loaded)
    while log._error is None and time.monotonic() < deadline:
        time.sleep(0.005)
    with pytest.raises(OSError, match="No space"):
        log.add(lines(1, 1))
    log.close()


@pytest.mark.parametrize("records", [
    [],
    [{"episode_ix": 0}],
    [{"episode_ix": 0, "sum_reward": float("nan"), "success": True, "task": 'a "quoted"\nname'},
     {"episode_ix": 1, "sum_reward": -1.5, "success": False, "task": '},{"episode_ix":'}],
    [{"episode_ix": i, "seed": 10 + i, "max_reward": float("-inf"), "task": "t"} for i in range(300)],
    [{"episode_ix": 0, "x": 1}, {"x": 2, "episode_ix": 1}],              # another first key: one by one
    [{"episode_ix": 0, "l": [{"episode_ix": 5}, {"episode_ix": 6}]}, {"episode_ix": 1}],  # nested boundaries
])
def test_format_records_gives_one_json_line_per_record(records):
    text = format_records(records)
    assert text == "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records)
    back = [json.loads(line) for line in text.splitlines()]
    assert len(back) == len(records)
    for got, want in zip(back, records):
        assert json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True)  # NaN-safe comparison


def test_records_reads_group_committed_lines_and_skips_a_torn_one(tmp_path):
    run_dir = RunDirectory(tmp_path)
    run_dir.open_logs()
    run_dir.append_episode_text(format_records([{"episode_ix": i, "x": i} for i in range(3)]))
    run_dir.append_episode_text('{"episode_ix": 3, "x"')  # what a kill mid-write leaves
    run_dir.close()
    assert [r["episode_ix"] for r in run_dir.records()] == [0, 1, 2]


# -- a failed dry run writes nothing ---------------------------------------------------------------

@pytest.mark.parametrize("policy", ["tests.helpers:raising_policy", "tests.helpers:three_logits"])
def test_a_failed_dry_run_leaves_the_folder_free_for_the_next_run(tmp_path, policy):
    out = tmp_path / "run"
    failed = CliRunner().invoke(main, ["--env", KA, "--policy", policy, "-n", "3", "-o", str(out)])
    assert failed.exit_code == 2, failed.output
    assert not (out / "manifest.json").exists() and not out.exists()
    again = CliRunner().invoke(main, ["--env", KA, "--policy", "zero", "-n", "3", "-o", str(out)])
    assert again.exit_code == 0, again.output
    assert json.loads((out / "manifest.json").read_text())["status"] == "complete"


def test_a_failed_dry_run_in_an_existing_folder_leaves_its_files_alone(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    failed = CliRunner().invoke(main, ["--env", KA, "--policy", "tests.helpers:raising_policy", "-o", str(tmp_path)])
    assert failed.exit_code == 2, failed.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_checkpoint_that_does_not_fit_the_env_names_obs_dim_and_the_env_shape(tmp_path):
    from fasteval.testing import KnownAnswerEnv

    shape = KnownAnswerEnv().observation_space.shape
    assert shape != (4,)  # the bundled CartPole MLP has obs_dim 4
    import fasteval

    checkpoint = Path(fasteval.__file__).parent / "assets" / "cartpole_mlp"
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["--env", KA, "--policy", str(checkpoint), "-o", str(out)])
    assert result.exit_code == 2, result.output
    assert "obs_dim=4" in result.output and f"shape {tuple(shape)}" in result.output
    assert "config.json" in result.output
    assert not out.exists()


# -- the disk fills up mid-run ---------------------------------------------------------------------

def test_disk_full_mid_run_keeps_the_written_groups_and_resume_finishes_exactly(tmp_path, monkeypatch):
    import errno

    from fasteval.run.durable import run_durable
    from fasteval.run.engine import Engine
    from fasteval.run.rundir import DiskFullError
    from fasteval.types.spec import EvalSpec
    from fasteval.testing import expected_episode

    spec = EvalSpec(env=KA, policy="zero", n_episodes=30, batch_size=3, seed=7, device="cpu")
    original = RunDirectory.append_episode_text
    calls = []

    def fills_up(self, text):
        calls.append(text)
        if len(calls) > 2:  # two groups fit on the disk, then it is full
            with open(self.path / "episodes.jsonl", "a") as handle:
                handle.write(text[: len(text) // 2])  # a torn group, as a full disk leaves it
            raise DiskFullError(errno.ENOSPC, f"disk full while writing {self.path / 'episodes.jsonl'}")
        original(self, text)

    monkeypatch.setattr(RunDirectory, "append_episode_text", fills_up)
    policy = FlushPolicy(max_delay_s=3600.0, max_records=4)  # groups by count only: deterministic
    with Engine(spec) as engine:
        failed = run_durable(engine, RunDirectory(tmp_path), flush_policy=policy, announce=lambda m: None)
    assert failed.status == "failed" and isinstance(failed.error, DiskFullError)
    kept = RunDirectory(tmp_path).records()
    assert 8 <= len(kept) < 30  # the two groups that fitted (>= 4 records each) are valid
    monkeypatch.setattr(RunDirectory, "append_episode_text", original)  # space was freed
    with Engine(spec) as engine:
        outcome = run_durable(engine, RunDirectory(tmp_path), resume=True, announce=lambda m: None)
    assert outcome.status == "complete" and outcome.resumed_episodes == len(kept)
    for record in outcome.result.per_episode:
        want = expected_episode(record["seed"])
        assert (record["sum_reward"], record["length"], record["success"]) == (
            want["sum_reward"], want["length"], want["success"])
    assert [r["episode_ix"] for r in outcome.result.per_episode] == list(range(30))


# -- one run per folder (issue 20) -----------------------------------------------------------------

def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def as_if_killed(out: Path) -> None:
    manifest = json.loads((out / "manifest.json").read_text())
    (out / "manifest.json").write_text(json.dumps({**manifest, "status": "running"}))
    (out / "eval_info.json").unlink()


def test_every_record_carries_the_run_id_of_its_manifest(tmp_path):
    out = tmp_path / "run"
    plan = json.dumps({"1": [["raise", 0]]})
    result = cli("--env", "fasteval.testing.fault_plan:make_fault_plan_env", "--env-kwarg", f"plan={plan}",
                 "--env-kwarg", f"state_dir={tmp_path / 'state'}", "-n", "4", "-o", out)
    assert result.exit_code == 0, result.output
    run_id = json.loads((out / "manifest.json").read_text())["run_id"]
    assert isinstance(run_id, str) and len(run_id) == 32
    for name in ("episodes.jsonl", "errors.jsonl"):
        records = [json.loads(line) for line in (out / name).read_text().splitlines()]
        assert records and all(r["run_id"] == run_id for r in records), name
    assert "run_id" not in json.loads((out / "eval_info.json").read_text())["per_episode"][0]


def test_a_folder_with_records_but_no_manifest_is_refused(tmp_path):
    # issue 20: delete manifest.json, start another run (another seed) into the folder: it appended
    out = tmp_path / "run"
    assert cli("--env", KA, "-n", "30", "-o", out).exit_code == 0
    (out / "manifest.json").unlink()
    before = (out / "episodes.jsonl").read_bytes()
    again = cli("--env", KA, "-n", "30", "--seed", "1000", "-o", out)
    assert again.exit_code == 2 and "no manifest.json" in again.output, again.output
    assert (out / "episodes.jsonl").read_bytes() == before


@pytest.mark.parametrize("tamper, needle", [
    ("another run", "run_id"),
    ("another seed", "has seed 100"),
])
def test_resume_refuses_records_that_are_not_this_runs(tmp_path, tamper, needle):
    out, other = tmp_path / "run", tmp_path / "other"
    assert cli("--env", KA, "-n", "10", "-o", out).exit_code == 0
    assert cli("--env", KA, "-n", "10", "--seed", "1000", "-o", other).exit_code == 0
    lines_ = (out / "episodes.jsonl").read_text().splitlines()[:5]
    foreign = json.loads((other / "episodes.jsonl").read_text().splitlines()[3])
    if tamper == "another seed":
        foreign["run_id"] = json.loads(lines_[0])["run_id"]
    (out / "episodes.jsonl").write_text("\n".join([*lines_, json.dumps(foreign)]) + "\n")
    as_if_killed(out)
    resumed = cli("--resume", out)
    assert resumed.exit_code == 2 and "not this run's" in resumed.output and needle in resumed.output, resumed.output


def test_a_second_process_on_a_folder_in_use_exits_2_naming_the_holder(tmp_path):
    import os
    import subprocess
    import sys

    out = tmp_path / "run"
    out.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom fasteval.run.folder_lock import FolderLock\n"
         "FolderLock(sys.argv[1]).acquire()\nprint('held', flush=True)\ntime.sleep(300)", str(out)],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        assert holder.stdout.readline().strip() == "held"
        second = cli("--env", KA, "-n", "3", "-o", out)
        assert second.exit_code == 2 and f"in use by another fasteval process (pid {holder.pid}" in second.output, (
            second.output)
        assert not (out / "manifest.json").exists()
    finally:
        holder.kill()
        holder.wait(timeout=30)
    assert cli("--env", KA, "-n", "3", "-o", out).exit_code == 0  # the kernel released it with the process


@pytest.mark.parametrize("name", ["episodes.jsonl", "errors.jsonl"])
def test_records_are_never_written_through_a_symlink(tmp_path, name):
    out, outside = tmp_path / "run", tmp_path / "outside.txt"
    out.mkdir()
    outside.write_text("")
    (out / name).symlink_to(outside)
    result = cli("--env", KA, "-n", "3", "-o", out)
    assert result.exit_code == 2 and "symbolic link" in result.output, result.output
    assert outside.read_text() == ""


def test_disk_full_names_the_file_keeps_complete_lines_and_marks_the_manifest_failed(tmp_path, monkeypatch):
    import errno
    import os

    from fasteval.run.record_file import RecordFile

    calls = []

    def fills_up(fd, data):
        calls.append(len(data))
        if len(calls) == 2:  # the first group fits, half of the second does, then the disk is full
            return os.write(fd, bytes(data[: len(data) // 2]))
        if len(calls) > 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return os.write(fd, data)

    monkeypatch.setattr(RecordFile, "write", staticmethod(fills_up))
    out = tmp_path / "run"
    result = cli("--env", KA, "-n", "600", "-b", "8", "-o", out)
    assert result.exit_code == 1, result.output
    assert f"disk full while writing {out / 'episodes.jsonl'}" in result.output
    text = (out / "episodes.jsonl").read_text()
    assert text.endswith("\n") and all(json.loads(line) for line in text.splitlines())  # parseable
    assert 0 < len(text.splitlines()) < 600  # the group that fitted; the torn one was cut back
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "episodes.jsonl" in manifest["error"]
    monkeypatch.undo()
    resumed = cli("--resume", out)  # space was freed
    assert resumed.exit_code == 0, resumed.output
    assert sorted(json.loads(line)["episode_ix"] for line in (out / "episodes.jsonl").read_text().splitlines()) == list(range(600))


def test_output_folder_as_save_episodes_folder_exits_2_before_the_run(tmp_path):
    out = tmp_path / "x"
    result = cli("--env", KA, "-n", "2", "-o", out, "--save-episodes", out)
    assert result.exit_code == 2 and "is the output folder" in result.output, result.output
    assert not (out / "manifest.json").exists()


def test_a_hung_sync_env_ends_the_cli_run_with_the_manifest_failed_and_the_resume_command(tmp_path):
    import os
    import subprocess
    import sys

    out, plan = tmp_path / "run", json.dumps({"4": [["hang", 2]]})
    args = ["--env", "fasteval.testing.fault_plan:make_fault_plan_env", "--env-kwarg", f"plan={plan}",
            "--env-kwarg", f"state_dir={tmp_path / 'state'}", "-n", "8", "-b", "2", "--step-timeout", "1", "-o", str(out)]
    done = subprocess.run([sys.executable, "-m", "fasteval.doors.cli", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 1, done.stderr
    assert "an env step did not return within 1 s (--step-timeout)" in done.stderr
    assert f"fasteval --resume {out} --trust-remote-code" in done.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "--step-timeout" in manifest["error"]
    recorded = [json.loads(line)["episode_ix"] for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert 0 < len(recorded) < 8 and 4 not in recorded  # the finished episodes are kept
    resumed = cli("--resume", out, "--trust-remote-code")  # the hang fired once (its marker is kept)
    assert resumed.exit_code == 0, resumed.output


def test_the_background_thread_sleeps_until_the_groups_deadline():
    """The flush thread wakes when the oldest buffered record is due, not on a fixed beat (issue 29: each
    wake-up is work); nothing buffered: every max_delay_s / 2."""
    t = [0.0]
    written = []
    log = GroupCommitLog(written.append, FlushPolicy(max_delay_s=0.05, max_records=256), clock=lambda: t[0],
                         background=False)
    assert log._poll_until_due() == pytest.approx(0.025)
    log.add(lines(1))
    t[0] = 0.01
    assert log._poll_until_due() == pytest.approx(0.04) and not written
    t[0] = 0.05
    assert log._poll_until_due() == pytest.approx(0.025) and len(written) == 1  # due: written, nothing left
    log.add(lines(1, 1))
    t[0] = 0.07
    log.add(lines(1, 2))
    assert log._poll_until_due() == pytest.approx(0.03) and len(written) == 1  # the oldest's deadline: 0.1
