"""Progress lines say what is known: the success rate where the env reports a success signal, the
mean return where it does not (never a ``success 0.0%`` that only says the env is silent)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from fasteval.doors.cli import _Progress
from fasteval.render.words import NO_SIGNAL, progress_outcome


def test_progress_outcome_words():
    assert progress_outcome(8, 5, -10.0, True) == "success 62.5%"
    assert progress_outcome(4, 0, -1121.0, False) == f"mean return -280.2 ({NO_SIGNAL})"
    assert progress_outcome(0, 0, 0.0, False) == "no episode yet"
    assert "success" not in progress_outcome(3, 0, 3.0, False).split("(")[0]


def test_the_bar_shows_the_return_of_an_env_without_a_success_signal(capsys):
    ledger = SimpleNamespace(success=np.zeros(4, bool), sum_reward=np.array([-100.0, -200.0, -300.0, -400.0]))
    silent = _Progress(4, enabled=True, signal=lambda: False)
    silent(ledger, np.array([0, 1]))
    silent(ledger, np.array([2, 3]))
    silent.bar.refresh()
    silent.close()
    err = capsys.readouterr().err
    assert "mean return -250" in err and "success 0.0%" not in err
    ledger.success[:] = [True, False, True, True]
    loud = _Progress(4, enabled=True, signal=lambda: True)
    loud(ledger, np.array([0, 1, 2, 3]))
    loud.bar.refresh()
    loud.close()
    assert "success 75.0%" in capsys.readouterr().err


def test_the_cli_bar_is_told_the_envs_signal(monkeypatch, tmp_path):
    """The CLI's bar asks the run's envs: CartPole (no is_success) says False, the known-answer env True."""
    import fasteval.doors.cli as cli_module
    from fasteval.testing import KNOWN_ANSWER_ID
    from tests.report_fixtures import cli

    made = []

    class Recording(_Progress):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(cli_module, "_Progress", Recording)
    for env in ("CartPole-v1", KNOWN_ANSWER_ID):
        result = cli("--env", env, "--policy", "zero", "-n", "4", "-b", "2", "-o", str(tmp_path / env.replace("/", "_")),
                     "--no-report")
        assert result.exit_code == 0, result.output
    assert [p.signal() for p in made] == [False, True]


def test_sweep_progress_lines_say_the_return_without_a_signal():
    import tempfile

    from fasteval.doors.sweep import LocalExecutor, SweepSpec, run_sweep
    from tests.report_fixtures import PARITY, KNOWN_ANSWER_ID

    spec = {"name": "progress", "episodes": 4, "seeds": [0], "policies": [{"name": "parity", "ref": PARITY}],
            "envs": [{"name": "known", "id": KNOWN_ANSWER_ID}, {"name": "cartpole", "id": "CartPole-v1"}],
            "options": {"batch_size": 2, "device": "cpu"}}
    lines: list[str] = []
    run_sweep(SweepSpec.from_dict(spec), tempfile.mkdtemp(), executor=LocalExecutor(1), report=False, progress=lines.append)
    [known] = [line for line in lines if "x known" in line]
    [cartpole] = [line for line in lines if "x cartpole" in line]
    assert known.endswith("successes") and "4 episodes" in known
    assert "mean return" in cartpole and NO_SIGNAL in cartpole and "successes" not in cartpole
    value = float(cartpole.split("mean return ")[1].split(" ")[0])
    assert math.isfinite(value) and value > 0
