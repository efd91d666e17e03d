"""benchmarks/bench_lerobot.py runs at tiny size and prints every row (no timing is asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lerobot")

ROOT = Path(__file__).resolve().parents[2]


def test_bench_lerobot_tiny(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_lerobot.py"), "--tiny", "--json", str(out)],
                          capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert {"lerobot sync", "fasteval wave sync", "fasteval wave async", "fasteval continuous sync",
            "fasteval continuous async", "env only"} <= set(rows)
    assert rows["fasteval wave sync"]["batching"] == "wave"
    assert rows["fasteval continuous async"]["batching"] == "continuous"
    assert rows["fasteval wave sync"]["sum_rewards"] == pytest.approx(rows["lerobot sync"]["sum_rewards"], abs=1e-4)
    for name in ("fasteval wave sync", "fasteval continuous sync", "fasteval continuous async"):
        assert set(rows[name]["timings"]) >= {"env_step", "policy"}
    assert "| fasteval continuous sync |" in proc.stdout
