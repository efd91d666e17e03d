"""Recognising LeRobot checkpoints, and the errors when LeRobot cannot be used (these run everywhere)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from fasteval.types.errors import PolicyLoadError
from fasteval.robot.lerobot import extra
from fasteval.robot.lerobot.checkpoint import is_lerobot_checkpoint, lerobot_policy_type
from fasteval.robot.policies.loaders import load_policy


def fake_checkpoint(folder: Path, config: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_recognises_lerobot_type_only(tmp_path: Path) -> None:
    assert lerobot_policy_type(fake_checkpoint(tmp_path / "a", {"type": "act", "n_obs_steps": 1})) == "act"
    assert not is_lerobot_checkpoint(fake_checkpoint(tmp_path / "b", {"architecture": "mlp", "type": "x"}))
    assert not is_lerobot_checkpoint(fake_checkpoint(tmp_path / "c", {"n_obs_steps": 1}))
    assert not is_lerobot_checkpoint(fake_checkpoint(tmp_path / "d", ["act"]))
    assert not is_lerobot_checkpoint(tmp_path / "missing")
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "config.json").write_text("{not json")
    assert not is_lerobot_checkpoint(tmp_path / "e")


def test_wrong_python_message() -> None:
    with pytest.raises(PolicyLoadError, match=r"needs Python >= 3\.12; this is Python 3\.11.*pyenv install 3\.12"):
        extra.require_lerobot("X", version_info=(3, 11, 9))


def test_missing_extra_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "lerobot", None)  # import lerobot -> ImportError
    with pytest.raises(PolicyLoadError, match=r"not installed.*\./scripts/install\.sh lerobot"):
        extra.require_lerobot("X", version_info=(3, 12, 0))


def test_load_policy_routes_lerobot_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder with LeRobot's "type" never reaches fasteval's own checkpoint loader."""
    import gymnasium as gym

    folder = fake_checkpoint(tmp_path / "act", {"type": "act"})
    monkeypatch.setattr(extra, "MIN_PYTHON", (99, 0))
    space = gym.spaces.Box(-1, 1, (2,))
    with pytest.raises(PolicyLoadError, match=r"LeRobot checkpoint .*type 'act'.*needs Python >= 99\.0"):
        load_policy(str(folder), space, space, 1)


@pytest.mark.parametrize("case", ["python", "missing"])
def test_cli_exit_2(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from fasteval.doors.cli import main

    folder = fake_checkpoint(tmp_path / "act", {"type": "act"})
    if case == "python":
        monkeypatch.setattr(extra, "MIN_PYTHON", (99, 0))
    else:
        monkeypatch.setattr(extra, "MIN_PYTHON", (3, 0))
        monkeypatch.setitem(sys.modules, "lerobot", None)
    result = CliRunner().invoke(main, ["--policy", str(folder), "--env", "fasteval/KnownAnswer-v0", "-n", "1",
                                       "-b", "1", "--device", "cpu"])
    assert result.exit_code == 2, result.output
    expected = "needs Python >= 99.0" if case == "python" else "not installed"
    assert expected in result.output
