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
    pytest.importorskip("metaworld")
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_libero.py"), "--tiny", "--metaworld", "--pusht",
                           "--json", str(out)],
                          capture_output=True, text=True, timeout=2400, env=env, cwd=ROOT, stdin=subprocess.DEVNULL)
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
    assert rows[f"fasteval sync{tag}"]["reset_reuse"].startswith("off")  # opt-in for now (model_reuse.py)
    # the same table for Meta-World (ACT, the same n_action_steps) and PushT (Diffusion executing 8 of 16)
    for other in (" [metaworld, n_action_steps 2]", " [pusht, n_action_steps 8]"):
        assert {f"lerobot-eval sync{other}", f"fasteval sync{other}"} <= set(rows), other
        assert any(r.startswith("fasteval pool") and r.endswith(other) for r in rows), other
    assert report["steps"] == {"libero": 3, "metaworld": 3, "pusht": 3}
    # where the time goes: per-operation costs of each env, and the sync rows split by them
    costs = report["costs"]
    assert costs["libero"]["unread_step_s"] is not None  # LIBERO skips an unread step's camera renders
    for env_type in ("metaworld", "pusht"):  # skipping declared (robot/env_kinds/unread.py): timed; else n/a
        assert costs[env_type]["unread_step_s"] is None or costs[env_type]["unread_step_s"] > 0
    for env_type in ("libero", "metaworld", "pusht"):
        assert costs[env_type]["reset_s"] > 0 and costs[env_type]["read_step_s"] > 0
    split = report["where_time_goes"][f"fasteval sync{tag}"]
    assert set(split) == {"resets", "physics", "renders of reads", "policy", "other"}
    assert abs(sum(split.values()) - rows[f"fasteval sync{tag}"]["eval_s"]) < 1e-6
    assert "### where the time goes" in proc.stdout and "| renders of reads |" in proc.stdout
