"""Progress while a run goes (issue 42): env steps on the terminal's bar; off a terminal, a line at most every
FASTEVAL_PROGRESS_EVERY_S seconds (a line per slow episode, a heartbeat while none ends, nothing for a short run)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from click.testing import CliRunner

from fasteval.doors.cli import main
from fasteval.doors.progress import RunProgress, in_flight

KA = "fasteval/KnownAnswer-v0"


def fake_engine():
    ledger = SimpleNamespace(slot_episode=np.array([2, -1, 3]), acc_len=np.array([120, 0, 234]),
                             length=np.array([500, 400, 0, 0]), finished=np.array([True, True, False, False]))
    return SimpleNamespace(ledger=ledger, max_steps=520)


def test_in_flight_counts_the_running_episodes_steps():
    assert in_flight(fake_engine().ledger) == (120 + 234, 2, 234)
    assert in_flight(None) == (0, 0, 0)


def test_off_a_terminal_a_line_at_most_every_period_and_a_heartbeat():
    lines: list[str] = []
    clock = iter([0.0]).__next__
    progress = RunProgress(fake_engine(), 4, lambda: (2, 1, 10.0, True), lines.append, every_s=30.0, clock=clock)
    progress.episodes_finished(900, now=10.0)  # too soon after the start
    progress.tick(now=20.0)
    assert lines == []
    progress.episodes_finished(0, now=31.0)
    assert lines == ["progress: 2/4 episodes, success 50.0%, 1,254 env steps, 2 in flight up to step 234/520, 31 s"]
    progress.tick(now=50.0)  # said 19 s ago
    progress.tick(now=61.0)  # a heartbeat: nothing said for 30 s
    assert len(lines) == 2 and lines[1].endswith("in flight up to step 234/520, 61 s")


def test_on_a_terminal_the_bar_shows_the_steps():
    bar = SimpleNamespace(texts=[])
    bar.set_description_str = lambda text, refresh: bar.texts.append(text)
    progress = RunProgress(fake_engine(), 4, lambda: (0, 0, 0.0, True), lambda line: None, bar=bar, every_s=30.0,
                           clock=lambda: 0.0)
    progress.tick(now=1.0)
    progress.episodes_finished(900, now=100.0)  # the bar counts episodes itself: no line
    assert bar.texts == ["354 env steps, 2 in flight up to step 234/520", "1,254 env steps, 2 in flight up to step 234/520"]


def progress_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("progress: ")]


def test_the_cli_prints_a_line_per_finished_episode_group_when_asked(tmp_path, monkeypatch):
    monkeypatch.setenv("FASTEVAL_PROGRESS_EVERY_S", "0")
    result = CliRunner().invoke(main, ["--env", KA, "--policy", "zero", "-n", "4", "-b", "1", "-o", str(tmp_path / "r"),
                                       "--no-report"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = progress_lines(result)
    assert [line.split(",")[0] for line in lines] == [f"progress: {i}/4 episodes" for i in range(1, 5)]


def test_a_short_run_off_a_terminal_prints_no_progress_line(tmp_path, monkeypatch):
    monkeypatch.delenv("FASTEVAL_PROGRESS_EVERY_S", raising=False)
    result = CliRunner().invoke(main, ["--env", KA, "--policy", "zero", "-n", "4", "-o", str(tmp_path / "r"),
                                       "--no-report"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert progress_lines(result) == []


def test_a_suite_shows_each_tasks_progress(tmp_path, monkeypatch):
    monkeypatch.setenv("FASTEVAL_PROGRESS_EVERY_S", "0")
    args = ["--env", "tests.test_suites:make_named_task_env", "--env-kwarg", 'task=["open", "close"]', "-n", "2",
            "-b", "1", "--policy", "fasteval.testing.policies:ParityPolicy", "-o", str(tmp_path / "run")]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert [line.split(",")[0] for line in progress_lines(result)] == [
        "progress: 1/2 episodes", "progress: 2/2 episodes", "progress: 1/2 episodes", "progress: 2/2 episodes"]
