"""`fasteval report` and `fasteval sweep` refuse a bad path before they import torch (issue 42: 14 s against 2 s).

Each case runs in a fresh interpreter, which reports whether torch was imported by the time the command exited."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.serve_helpers import REPO

PROBE = """
import sys
from fasteval.doors.cli import main
sys.argv = ["fasteval", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    code = exc.code
print("RESULT", "torch" in sys.modules, code)
"""


def probe(*args: str, cwd) -> tuple[bool, int, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=300)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")][-1].split()
    return line[1] == "True", int(line[2]), proc.stderr


@pytest.mark.parametrize("case", ["report-missing", "report-not-a-run", "sweep-missing", "sweep-bad-file"])
def test_a_bad_path_is_refused_without_importing_torch(tmp_path, case):
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad.yaml").write_text("nmae: typo\n")
    args = {"report-missing": ["report", "nowhere"], "report-not-a-run": ["report", "empty"],
            "sweep-missing": ["sweep", "nowhere.yaml"], "sweep-bad-file": ["sweep", "bad.yaml"]}[case]
    torch_imported, code, stderr = probe(*args, cwd=tmp_path)
    assert code == 2, stderr
    assert stderr.count("Error") == 1
    assert not torch_imported, f"{args}: torch was imported before the path was refused"


def test_report_of_a_run_folder_still_works(tmp_path):
    """The lazy imports leave the good path alone: a run folder's report is written."""
    from fasteval import evaluate

    run = tmp_path / "run"
    run.mkdir()
    evaluate(env="fasteval/KnownAnswer-v0", policy="zero", n_episodes=2, batch_size=2, device="cpu").to_json(run / "eval_info.json")
    _, code, stderr = probe("report", "run", cwd=tmp_path)
    assert code in (0, None), stderr
    assert (run / "report.html").is_file()
    assert json.loads((run / "eval_info.json").read_text())["overall"]["n_episodes"] == 2
