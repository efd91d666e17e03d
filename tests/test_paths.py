"""Path options: an unusable path is a usage error (exit 2, with a message), never a crash."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from fasteval.doors.cli import main
from fasteval.run.paths import NAME_MAX, UsablePath, path_problem

KA = "fasteval/KnownAnswer-v0"


def test_path_problem_names_what_is_wrong(tmp_path):
    a_file = tmp_path / "f.txt"
    a_file.write_text("x")
    assert path_problem(tmp_path, kind="dir") is None
    assert path_problem(tmp_path / "new" / "deeper", kind="dir", writable=True) is None
    assert "NUL" in path_problem("\x00", kind="dir")
    assert "NUL" in path_problem(str(tmp_path / "a\x00b"), kind="file")
    assert path_problem("", kind="dir") == "the path is empty"
    assert "limit is" in path_problem(str(tmp_path / ("x" * (NAME_MAX + 1))), kind="dir")
    assert path_problem(a_file, kind="dir") == "it is a file, not a folder"
    assert path_problem(tmp_path, kind="file") == "it is a folder, not a file"
    assert "is a file" in path_problem(a_file / "below", kind="dir")
    assert path_problem(tmp_path / "missing.yaml", kind="file", must_exist=True) == "it does not exist"
    assert path_problem(tmp_path / "missing.yaml", kind="file") is None
    assert "encode" in path_problem("bad\udcff\ud800", kind="dir") if os.name == "posix" else True


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root may write anywhere")
def test_path_problem_refuses_a_folder_this_user_may_not_write(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        assert "may not" in path_problem(locked / "run", kind="dir", writable=True)
        assert path_problem(locked / "run", kind="dir") is None  # only outputs need write access
    finally:
        locked.chmod(0o700)


def test_usable_path_rejects_a_bad_kind():
    with pytest.raises(ValueError, match="kind"):
        UsablePath("folder")


def _spec_file(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"name": "t", "episodes": 2, "seeds": [0], "policies": [{"name": "zero", "ref": "zero"}],
                                "envs": [{"name": "known", "id": KA}], "options": {"batch_size": 2, "device": "cpu"}}))
    return str(path)


def _config_file(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"env": KA, "n_episodes": 2}))
    return str(path)


BAD_PATHS = ["\x00", "run\x00", "", "x" * (NAME_MAX + 1)]


@pytest.mark.parametrize("bad", BAD_PATHS, ids=["nul", "trailing-nul", "empty", "too-long"])
@pytest.mark.parametrize("where", ["-o", "--output-dir", "--resume", "--save-episodes", "--config", "output_dir-in-config",
                                   "sweep-file", "sweep-o", "report-dir", "report-o"])
def test_every_path_option_rejects_an_unusable_path_with_exit_2(tmp_path, monkeypatch, where, bad):
    monkeypatch.chdir(tmp_path)  # nothing may land in the checkout, whatever happens
    if where in ("-o", "--output-dir", "--resume", "--save-episodes"):
        args = ["--env", KA, "-n", "2", where, bad]
    elif where == "--config":
        args = ["--config", bad]
    elif where == "output_dir-in-config":
        config = tmp_path / "v.json"
        config.write_text(json.dumps({"env": KA, "n_episodes": 2, "output_dir": bad}))
        args = ["--config", str(config)]
    elif where == "sweep-file":
        args = ["sweep", bad]
    elif where == "sweep-o":
        args = ["sweep", _spec_file(tmp_path), "-o", bad]
    elif where == "report-dir":
        args = ["report", bad]
    else:
        args = ["report", str(tmp_path), "-o", bad]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, (args, result.output, result.exception)
    assert "Traceback" not in result.output
    assert "Error" in result.output and ("usable" in result.output or "empty" in result.output
                                         or "does not exist" in result.output), result.output
    assert {p.name for p in tmp_path.iterdir()} <= {"s.json", "v.json"}


def test_resume_of_a_nul_path_says_so():
    result = CliRunner().invoke(main, ["--resume", "\x00"])
    assert result.exit_code == 2
    assert "NUL byte" in result.output and "--resume" in result.output


def test_output_dir_below_a_file_is_refused_before_running(tmp_path):
    (tmp_path / "file").write_text("x")
    result = CliRunner().invoke(main, ["--env", KA, "-n", "2", "-o", str(tmp_path / "file" / "run")])
    assert result.exit_code == 2, result.output
    assert "is a file" in result.output
