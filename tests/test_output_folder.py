"""A new run never writes over files fasteval did not write (issue 42): ``-o`` into a folder that holds other files
and no fasteval run exits 2 with the fix, and leaves every file as it was."""

import json

import pytest
from click.testing import CliRunner

from fasteval.doors.cli import main
from fasteval.run.output_folder import holds_fasteval_run, new_folder_problem

KA = "fasteval/KnownAnswer-v0"


def invoke(args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _checkpoint(folder):
    folder.mkdir()
    files = {"config.json": '{"type": "act", "chunk_size": 100}', "model.safetensors": "weights"}
    for name, text in files.items():
        (folder / name).write_text(text)
    return files


def _unchanged(folder, files):
    return {p.name: p.read_text() for p in folder.iterdir()} == files


@pytest.mark.parametrize("style", ["native", "lerobot"])
def test_a_checkpoint_folder_as_the_output_folder_is_refused_and_left_as_it_was(tmp_path, style):
    ck = tmp_path / "ck"
    files = _checkpoint(ck)
    args = (["--env", KA, "--policy", "zero", "-n", "2", "-o", ck] if style == "native" else
            ["--env.type=known_answer", "--policy.path=zero", "--eval.n_episodes=2", f"--output_dir={ck}"])
    result = invoke(args)
    assert result.exit_code == 2, result.output
    assert "is not empty and holds no fasteval run (config.json, model.safetensors)" in result.output
    assert "Choose a new or empty --output-dir" in result.output and "Traceback" not in result.output
    assert _unchanged(ck, files)


@pytest.mark.parametrize("name", ["report.html", "eval_info.json", "notes.txt", "manifest.json"])
def test_any_other_file_in_the_folder_is_refused(tmp_path, name):
    out = tmp_path / "out"
    out.mkdir()
    (out / name).write_text('{"mine": true}')  # a manifest.json of another tool is not a fasteval run's
    result = invoke(["--env", KA, "--policy", "zero", "-n", "2", "-o", out])
    assert result.exit_code == 2 and "holds no fasteval run" in result.output, result.output
    assert _unchanged(out, {name: '{"mine": true}'})


def test_a_config_files_output_dir_is_checked_too(tmp_path):
    out = tmp_path / "shared"
    out.mkdir()
    (out / "config.json").write_text("{}")
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"env": KA, "n_episodes": 2, "output_dir": str(out)}))
    result = invoke(["--config", config])
    assert result.exit_code == 2 and "holds no fasteval run" in result.output, result.output
    assert (out / "config.json").read_text() == "{}"


def test_new_and_empty_folders_run_and_a_run_folder_keeps_its_rules(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    for out in (empty, tmp_path / "new"):
        result = invoke(["--env", KA, "--policy", "zero", "-n", "2", "-o", out])
        assert result.exit_code == 0, result.output
        assert holds_fasteval_run(out) and new_folder_problem(out) is None
    again = invoke(["--env", KA, "--policy", "zero", "-n", "2", "-o", empty])
    assert again.exit_code == 2 and "already holds a fasteval run. Pass --resume" in again.output
    assert invoke(["--resume", empty]).exit_code == 0
    assert invoke(["--env", KA, "--policy", "zero", "-n", "2", "-o", empty, "--print-config"]).exit_code == 0


def test_a_suites_folder_holds_a_run(tmp_path):
    task = tmp_path / "suite" / "tasks" / "g_0"
    task.mkdir(parents=True)
    (task / "manifest.json").write_text(json.dumps({"what": {}, "status": "complete"}))
    (tmp_path / "suite" / "eval_info.json").write_text("{}")
    assert holds_fasteval_run(tmp_path / "suite") and new_folder_problem(tmp_path / "suite") is None
    (task / "manifest.json").write_text("not json")
    assert "holds no fasteval run (eval_info.json, tasks)" in new_folder_problem(tmp_path / "suite")
