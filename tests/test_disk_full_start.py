"""A new run on a full disk (issue 42): it said "in use by another fasteval process" naming its own pid and left an
empty folder. Now: one line saying the disk is full (ENOSPC), exit 2, and no folder. ENOSPC is simulated."""

from __future__ import annotations

import errno
import os
import types

import pytest
from click.testing import CliRunner

import fasteval.run.folder_lock as folder_lock
import fasteval.run.rundir as rundir
from fasteval.doors.cli import main
from fasteval.run.record_file import RecordFile


def full(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("where", ["lock", "manifest"])
def test_a_new_run_on_a_full_disk_says_so_and_leaves_no_folder(tmp_path, monkeypatch, where):
    if where == "lock":  # not even the lock file's few bytes fit
        fake_os = types.SimpleNamespace(**{k: getattr(os, k) for k in dir(os) if not k.startswith("__")})
        fake_os.write = full
        monkeypatch.setattr(folder_lock, "os", fake_os)
    monkeypatch.setattr(rundir, "write_json_atomic", full)  # the lock's bytes fit, the manifest does not
    monkeypatch.setattr(RecordFile, "write", staticmethod(full))
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["--env", "CartPole-v1", "-n", "2", "-o", str(out)])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and "is full (ENOSPC" in errors[0], result.output
    assert "in use by another" not in result.output and "Traceback" not in result.output
    assert not out.exists()
    monkeypatch.undo()  # the disk has room again: the same folder starts at once
    again = CliRunner().invoke(main, ["--env", "CartPole-v1", "-n", "2", "-o", str(out)])
    assert again.exit_code == 0, again.output


def test_the_disk_full_lines_resume_hint_has_trust_remote_code_where_the_run_needs_it(tmp_path, monkeypatch):
    calls = []

    def fills_up(fd, data):
        calls.append(1)
        if len(calls) > 1:  # the first group fits, then the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return os.write(fd, data)

    monkeypatch.setattr(RecordFile, "write", staticmethod(fills_up))
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["--env", "fasteval/KnownAnswer-v0", "--policy",
                                       "fasteval.testing.policies:ParityPolicy", "--trust-remote-code", "-n", "600",
                                       "-b", "8", "-o", str(out)])
    assert result.exit_code == 1, result.output
    assert f"run `fasteval --resume {out} --trust-remote-code` to finish" in result.output
