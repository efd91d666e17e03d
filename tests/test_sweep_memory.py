"""A sweep's jobs are memory-checked as ``-n`` is (issue 42: ``episodes: 1e14`` was killed by the OOM killer
while the store listed its missing episodes): one line, exit 2, no folder, before anything is listed."""

from __future__ import annotations

import importlib
import json

from click.testing import CliRunner

from fasteval.doors.cli import main
from fasteval.testing import KNOWN_ANSWER_ID

plan_module = importlib.import_module("fasteval.doors.sweep.plan")  # the module (the package exports plan())


def test_a_sweep_whose_jobs_cannot_fit_in_memory_is_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(plan_module, "available_memory_bytes", lambda: 100_000)  # ~1,000 episodes' results
    sweep = {"name": "big", "episodes": 5_000, "seeds": [0],
             "policies": [{"name": "zero", "ref": "zero"}],
             "envs": [{"name": "small", "id": "CartPole-v1", "episodes": 2},
                      {"name": "huge", "id": KNOWN_ANSWER_ID}]}
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(sweep))
    result = CliRunner().invoke(main, ["sweep", str(path), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    error = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(error) == 1 and "env 'huge': episodes=5000 per job" in error[0] and "available" in error[0]
    assert "Traceback" not in result.output
    assert not (tmp_path / "out").exists()
