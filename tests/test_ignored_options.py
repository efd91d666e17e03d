"""Options a run would ignore are said in one stderr line each, and the run goes ahead (issue 42)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from fasteval.doors.cli import main

KA = "fasteval/KnownAnswer-v0"
PREFIX = "fasteval: warning: "


def run(args):
    return CliRunner().invoke(main, args, catch_exceptions=False)


def warnings_of(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith(PREFIX)]


def test_workers_with_sync_envs_is_said_and_the_run_goes_ahead(tmp_path):
    result = run(["--env", KA, "--policy", "zero", "-n", "3", "-b", "2", "--workers", "4", "-o", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    assert warnings_of(result) == [f"{PREFIX}--workers 4 has no effect with --vectorization sync (the envs step in "
                                   f"this process); add --vectorization async to step them in worker processes."]
    assert json.loads((tmp_path / "r" / "eval_info.json").read_text())["overall"]["n_episodes"] == 3


def test_stack_weights_with_one_policy_is_said(tmp_path):
    result = run(["--env", KA, "--policy", "zero", "-n", "2", "--stack-weights", "--print-config"])
    assert result.exit_code == 0, result.output
    (line,) = warnings_of(result)
    assert "--stack-weights has no effect with one policy" in line


def test_the_same_checkpoint_twice_is_said_once(tmp_path):
    ck = tmp_path / "ck"
    ck.mkdir()
    link = tmp_path / "link"
    link.symlink_to(ck)
    result = run(["--env", KA, "--policy", "zero", "--policy", str(ck), "--policy", str(link), "--policy", "zero",
                  "--policy", "zero", "-n", "2", "--print-config"])
    assert result.exit_code == 0, result.output
    lines = warnings_of(result)
    assert lines == [f"{PREFIX}the policy zero is given 3 times; it runs 3 times on the same seeds (an A/A check, 3x "
                     f"the work). Give each checkpoint once unless that is what you want.",
                     f"{PREFIX}the policy {ck} is given 2 times; it runs 2 times on the same seeds (an A/A check, 2x "
                     f"the work). Give each checkpoint once unless that is what you want."]


def test_a_plain_run_has_no_warning(tmp_path):
    result = run(["--env", KA, "--policy", "zero", "--policy", "tests.helpers:three_logits", "--stack-weights",
                  "--vectorization", "async", "--workers", "2", "-n", "2", "--print-config"])
    assert result.exit_code == 0, result.output
    assert warnings_of(result) == []


def test_no_arguments_print_the_help_and_run_nothing(tmp_path, monkeypatch):
    """`fasteval` alone used to run a 10-episode zero policy into outputs/ (issue 42): it prints --help, as click
    does for a group without arguments (exit 2), and writes nothing."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, [], prog_name="fasteval")
    assert result.exit_code == 2
    assert result.stderr.startswith("Usage: fasteval [OPTIONS]") and "--policy" in result.stderr
    assert list(tmp_path.iterdir()) == []
