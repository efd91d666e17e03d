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
    report = json.loads(out.read_text())
    rows = report["rows"]
    assert report["problems"] == []  # every fasteval row gave the same per-episode rewards
    assert {"lerobot sync", "fasteval wave sync", "fasteval wave async", "fasteval continuous sync",
            "fasteval continuous async", "env only"} <= set(rows)
    assert rows["fasteval wave sync"]["batching"] == "wave"
    assert rows["fasteval continuous async"]["batching"] == "continuous"
    assert rows["fasteval wave sync"]["sum_rewards"] == pytest.approx(rows["lerobot sync"]["sum_rewards"], abs=1e-4)
    for name in ("fasteval wave sync", "fasteval continuous sync", "fasteval continuous async"):
        assert set(rows[name]["timings"]) >= {"env_step", "policy"}
    assert "| fasteval continuous sync |" in proc.stdout


def test_bench_lerobot_exits_non_zero_when_two_fasteval_rows_disagree(monkeypatch, capsys) -> None:
    """Planted: one row's per-episode rewards differ (no evaluation runs: the rows are made up)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_lerobot

    def row(folder, env_id, n, batch, steps, seed, device, reset_mode, vectorization, obs_format="lerobot"):
        rewards = [1.0, 2.0] if (reset_mode, vectorization) != ("auto", "async") else [1.0, 2.5]
        return {"eval_s": 1.0, "timings": {}, "batching": reset_mode, "sum_rewards": rewards, "chunk_graph": None}

    monkeypatch.setattr(bench_lerobot, "fasteval_row", row)
    monkeypatch.setattr(bench_lerobot, "env_only_row", lambda *args: {"eval_s": 1.0})
    assert bench_lerobot.main(["--tiny", "--skip-lerobot"]) == 1
    assert "FAIL: fasteval continuous async: per-episode rewards differ" in capsys.readouterr().out
