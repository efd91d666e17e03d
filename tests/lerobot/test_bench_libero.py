"""benchmarks/bench_libero.py runs at tiny size and prints every row (no timing is asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lerobot")

from fasteval.robot.lerobot.libero import assets_dir, libero_dir  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(libero_dir() is None or assets_dir() is None, reason="hf-libero or LIBERO's assets not installed")
def test_bench_libero_tiny(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
           "LIBERO_CONFIG_PATH": str(tmp_path / "libero"), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_libero.py"), "--tiny", "--json", str(out)],
                          capture_output=True, text=True, timeout=1200, env=env, cwd=ROOT, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    rows = report["rows"]
    assert report["problems"] == []
    tag = " [libero, n_action_steps 2]"
    assert {f"lerobot-eval sync{tag}", f"fasteval sync{tag}", f"fasteval sync, skip off{tag}"} <= set(rows)
    assert any(r.startswith("fasteval pool") for r in rows)
    assert rows[f"fasteval sync{tag}"]["episodes"] == rows[f"lerobot-eval sync{tag}"]["episodes"]
    assert rows[f"fasteval sync{tag}"]["episodes"] == rows[f"fasteval sync, skip off{tag}"]["episodes"]
    assert rows[f"fasteval sync{tag}"]["unread_observations"] == "on"
    assert rows[f"fasteval sync, skip off{tag}"]["unread_observations"].startswith("off")
    assert set(rows[f"fasteval sync{tag}"]["timings"]) >= {"env_step", "policy"}
    assert rows[f"fasteval sync{tag}"]["protocol"]["observation_height"] == 32
    assert f"| fasteval sync{tag} |" in proc.stdout and "projected fasteval time on c cores" in proc.stdout
