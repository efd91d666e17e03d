"""Every end state of a run agrees across the manifest, eval_info.json and the exit code (issue 29).

The end state is decided in one place (``fasteval.run.record.end_status``); the manifest and
``eval_info.json`` render it from the one record, the CLI maps it to the exit code. Each case below
drives one end state through the ``fasteval`` command (in this process, so that faults can be planted
in the writers) and checks the three, plus what the terminal says was written. A file that could not be
written must not be there (so that it cannot claim another end), and the terminal must not say it wrote it.
"""

from __future__ import annotations

import errno
import json
import os
import signal
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from fasteval.doors.cli import main
from fasteval.testing.bernoulli import BERNOULLI_ENV

KA = "fasteval.testing.envs:make_known_answer_env"
FAULTY = "fasteval.testing.faulty:make_faulty_env"
EXIT = {"complete": 0, "failed": 1}


class _Zeros:
    """Action 0 for every row; what it does at its ``at``-th call is the case's."""

    def __init__(self, at: int, act):
        self.calls, self.at, self.act = 0, at, act

    def __call__(self, obs):
        self.calls += 1
        if self.calls in self.at:
            self.act()
        return torch.zeros(obs.shape[0], dtype=torch.long)


def sigterm_at_3():
    """The first SIGTERM at its 3rd step: the episodes in flight finish, no new ones start."""
    return _Zeros((3,), lambda: os.kill(os.getpid(), signal.SIGTERM))


def sigterm_twice():
    """SIGTERM at its 3rd and 4th step: the second stops the run at once."""
    return _Zeros((3, 4), lambda: os.kill(os.getpid(), signal.SIGTERM))


def raises_at_6():
    return _Zeros((6,), _raise)


def _raise():
    raise RuntimeError("the policy broke at its 6th step")


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def agreement(out: Path, res, status: str, code: int) -> dict:
    """The manifest, eval_info.json and the exit code all say ``status``; returns eval_info.json."""
    manifest = json.loads((out / "manifest.json").read_text())
    info = json.loads((out / "eval_info.json").read_text())
    assert (manifest["status"], info["meta"]["status"], res.exit_code) == (status, status, code), res.output
    assert manifest["segments"][-1]["status"] == status
    assert f"wrote {out / 'eval_info.json'} (status: {status})" in res.output
    return info


def test_complete(tmp_path):
    out = tmp_path / "run"
    res = cli("--env", KA, "-n", 7, "-b", 3, "-o", out)
    info = agreement(out, res, "complete", 0)
    assert len(info["per_episode"]) == 7 and "error" not in json.loads((out / "manifest.json").read_text())


def test_stopped_by_its_rule_is_complete(tmp_path):
    out = tmp_path / "run"
    res = cli("--env", BERNOULLI_ENV, "--env-kwarg", "p=0.95", "-n", 400, "-b", 8, "--stop-when", "above=0.8", "-o", out)
    info = agreement(out, res, "complete", 0)
    assert info["stopping"]["reason"] == "rule" and len(info["per_episode"]) == info["stopping"]["k"] < 400


@pytest.mark.parametrize("policy, signals", [("tests.test_end_states:sigterm_at_3", 1),
                                             ("tests.test_end_states:sigterm_twice", 2)])
def test_interrupted_by_one_signal_or_two(tmp_path, policy, signals):
    out = tmp_path / "run"
    res = cli("--env", KA, "--policy", policy, "-n", 40, "-b", 2, "-o", out)
    info = agreement(out, res, "interrupted", 128 + signal.SIGTERM)
    logged = (out / "episodes.jsonl").read_text().splitlines()
    assert 0 < len(info["per_episode"]) == len(logged) < 40  # every finished episode is kept, and only those
    assert f"fasteval --resume {out}" in res.output


def test_failed_by_an_error_mid_run(tmp_path):
    out = tmp_path / "run"
    res = cli("--env", KA, "--policy", "tests.test_end_states:raises_at_6", "-n", 40, "-b", 2, "-o", out)
    agreement(out, res, "failed", 1)
    assert "the policy broke" in json.loads((out / "manifest.json").read_text())["error"]


def test_failed_by_episodes_that_failed_for_good(tmp_path):
    out = tmp_path / "run"
    res = cli("--env", FAULTY, "--env-kwarg", "fault=raise", "--env-kwarg", "fault_seeds=[2]", "--retries", 0,
              "-n", 6, "-b", 2, "-o", out)
    info = agreement(out, res, "failed", 1)
    assert info["overall"]["n_failed_episodes"] == 1 and len(info["per_episode"]) == 5


def _fill_the_disk(monkeypatch, *, eval_info: bool, manifests_left: int | None = None):
    """From now on, writes to episodes.jsonl fail with ENOSPC; with ``eval_info``, writing eval_info.json
    too; with ``manifests_left``, the manifest can be written that many more times."""
    from fasteval.run import rundir
    from fasteval.run.record_file import RecordFile

    real_write, real_json = RecordFile.write, rundir.write_json_atomic
    left = [manifests_left]

    def write(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}").endswith("episodes.jsonl"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    def write_json(path, document):
        name = Path(path).name
        if (name == "eval_info.json" and eval_info) or (name == "manifest.json" and left[0] is not None and left[0] <= 0):
            raise OSError(errno.ENOSPC, "No space left on device")
        if name == "manifest.json" and left[0] is not None:
            left[0] -= 1
        return real_json(path, document)

    monkeypatch.setattr(RecordFile, "write", staticmethod(write))
    monkeypatch.setattr(rundir, "write_json_atomic", write_json)


def test_a_failed_final_flush_fails_the_run_in_every_file(tmp_path, monkeypatch):
    """Every record waits for the final flush, which fails: the run's results are not all kept, so eval_info.json
    says failed as the manifest does (it used to keep ``complete``), and the exit code is 1."""
    from fasteval.run.durable import FlushPolicy

    monkeypatch.setattr(FlushPolicy, "due", lambda self, pending, age: False)  # only the final flush writes
    _fill_the_disk(monkeypatch, eval_info=False)
    out = tmp_path / "run"
    res = cli("--env", KA, "-n", 7, "-b", 3, "-o", out)
    info = agreement(out, res, "failed", 1)
    assert len(info["per_episode"]) == 7  # computed, and kept in eval_info.json
    assert (out / "episodes.jsonl").read_text() == ""  # the group was cut back: resume reruns all 7, exactly
    assert "disk full while writing" in json.loads((out / "manifest.json").read_text())["error"]
    assert f"only 0 of these 7 episodes are in {out / 'episodes.jsonl'}" in res.output


def test_a_full_disk_says_only_what_was_written(tmp_path, monkeypatch):
    """episodes.jsonl and eval_info.json cannot be written, the manifest can: it says failed, there is no
    eval_info.json to say otherwise, the terminal claims no file it did not write, the exit code is 1."""
    _fill_the_disk(monkeypatch, eval_info=True)
    out = tmp_path / "run"
    res = cli("--env", KA, "-n", 40, "-b", 4, "-o", out)
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["status"], res.exit_code) == ("failed", 1) and not (out / "eval_info.json").exists()
    assert "wrote" not in res.output.replace("was not written", "")  # neither eval_info.json nor report.html
    assert f"{out / 'eval_info.json'} was not written (status: failed)" in res.output
    assert "stopped after 0 of 40 episodes" in res.output  # what the folder holds, not what was computed
    assert (out / "episodes.jsonl").read_text() == ""


def test_a_full_disk_that_takes_the_manifest_too_leaves_no_eval_info_to_disagree(tmp_path, monkeypatch):
    """The first manifest (status running) fits; then nothing does. No eval_info.json, exit code 1, and the
    terminal says so: the folder claims no end it did not reach (resume finishes it)."""
    _fill_the_disk(monkeypatch, eval_info=False, manifests_left=1)
    out = tmp_path / "run"
    res = cli("--env", KA, "-n", 40, "-b", 4, "-o", out)
    assert res.exit_code == 1 and not (out / "eval_info.json").exists()  # written, then taken back
    assert json.loads((out / "manifest.json").read_text())["status"] == "running"  # what a kill leaves: --resume
    assert f"{out / 'eval_info.json'} was not written (status: failed)" in res.output


def test_a_run_without_a_finished_episode_does_not_blame_the_envs_success_signal(tmp_path):
    """Every episode failed for good: the summary says no episode finished (issue 42: "no success signal (the env
    never reported info['is_success'])", which the env had no chance to report)."""
    out = tmp_path / "run"
    res = cli("--env", FAULTY, "--env-kwarg", "fault=raise", "--env-kwarg", "fault_seeds=[0,1]", "--retries", 0,
              "-n", 2, "-o", out)
    assert res.exit_code == 1, res.output
    line = next(line for line in res.output.splitlines() if line.startswith("pc_success"))
    assert "no episode finished" in line and "success signal" not in line
