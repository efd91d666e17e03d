"""Ctrl-C outside a run's episodes and a parent that dies under its workers (issue 42): one line and exit 130, as
the README says (not click's "Aborted!" and exit 1, nor a KeyboardInterrupt traceback); workers end quietly."""

from __future__ import annotations

import importlib
import os
import sys

import gymnasium as gym
import pytest
from click.testing import CliRunner

import fasteval.doors.cli as cli
from fasteval.core import worker_process
from fasteval.doors import entry


def interrupt(*args, **kwargs):
    raise KeyboardInterrupt


def assert_one_line_130(result) -> None:
    assert result.exit_code == 130, result.output
    assert "Aborted!" not in result.output and "Traceback" not in result.output
    assert [line for line in result.output.splitlines() if line.startswith("Error")] == [
        "Error: interrupted by SIGINT (Ctrl-C)."]


def test_ctrl_c_before_the_first_episode_exits_130_in_one_line(monkeypatch, tmp_path):
    monkeypatch.setattr(cli, "build_engine", interrupt)  # torch, the policy, the envs: built before the run
    assert_one_line_130(CliRunner().invoke(cli.main, ["--env", "CartPole-v1", "-n", "1", "-o", str(tmp_path / "r")]))
    assert not (tmp_path / "r").exists()


def test_ctrl_c_while_a_subcommand_starts_exits_130_in_one_line(monkeypatch, tmp_path):
    monkeypatch.setattr(cli.LazyGroup, "_load", staticmethod(interrupt))  # `fasteval sweep` importing its parts
    (tmp_path / "s.json").write_text("{}")
    assert_one_line_130(CliRunner().invoke(cli.main, ["sweep", str(tmp_path / "s.json")]))


class InterruptImport:
    """A meta path finder: importing ``fasteval.doors.cli`` is interrupted (a Ctrl-C during the imports)."""

    def find_spec(self, name, path=None, target=None):
        if name == "fasteval.doors.cli":
            raise KeyboardInterrupt
        return None


def test_ctrl_c_during_the_console_scripts_imports_exits_130_in_one_line(monkeypatch, capsys):
    monkeypatch.delitem(sys.modules, "fasteval.doors.cli")
    monkeypatch.delattr(importlib.import_module("fasteval.doors"), "cli", raising=False)
    monkeypatch.setattr(sys, "meta_path", [InterruptImport(), *sys.meta_path])
    with pytest.raises(SystemExit) as exited:
        entry.main()
    assert exited.value.code == 130
    assert capsys.readouterr().err == entry.INTERRUPTED_LINE + "\n"


class GoneParent:
    """The worker's end of a pipe whose parent process has died: every send fails."""

    def send(self, message):
        raise BrokenPipeError(32, "Broken pipe")

    def recv(self):
        raise EOFError


def test_a_worker_whose_parent_died_ends_without_a_traceback(monkeypatch):
    layout = shared = None
    # while building its envs (it tells the parent they are ready: the pipe is gone)
    assert worker_process.worker_main(0, GoneParent(), lambda: gym.make("CartPole-v1"), shared, layout, range(0, 1),
                                      dict(os.environ)) is None

    class Serving:  # mid-command: the reply's send finds the pipe gone
        def __init__(self, *args):
            pass

        def serve(self):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(worker_process, "_Worker", Serving)
    monkeypatch.setattr(worker_process.SharedBuffers, "attach", staticmethod(lambda *a: None))
    monkeypatch.setattr(worker_process, "_build_envs", lambda conn, factory, block: {0: gym.make("CartPole-v1")})
    assert worker_process.worker_main(0, GoneParent(), None, shared, layout, range(0, 1), dict(os.environ)) is None


SLOW_CLICK_IMPORT = '''
import sys, time

class SlowClick:  # `import click` (the first of fasteval.doors.cli's imports) takes a minute: Ctrl-C lands in it
    def find_spec(self, name, path=None, target=None):
        if name == "click":
            sys.stderr.write("IMPORTING click\\n")
            sys.stderr.flush()
            time.sleep(60)
        return None

sys.meta_path.insert(0, SlowClick())
'''


@pytest.mark.parametrize("module", ["fasteval.doors.cli"])
def test_ctrl_c_during_python_m_imports_exits_130_in_one_line(tmp_path, module):
    """``python -m fasteval.doors.cli`` behaves as the console script: a SIGINT while it imports is one line, 130."""
    import signal
    import subprocess

    from tests.serve_helpers import repo_env

    (tmp_path / "sitecustomize.py").write_text(SLOW_CLICK_IMPORT)
    env = repo_env()
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
    proc = subprocess.Popen([sys.executable, "-m", module, "--help"], env=env, stderr=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stderr.readline() == "IMPORTING click\n"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert (proc.returncode, err) == (130, entry.INTERRUPTED_LINE + "\n"), err
