"""Smoke test of the CartPole benchmark script: it runs and prints its table.

Runs ``benchmarks/bench_cartpole.py --tiny`` (8 episodes, batch 1 and 4, one repeat,
no CLI start-up check) once in a subprocess. Never asserts on timings.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "bench_cartpole.py"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    json_path = tmp_path_factory.mktemp("bench") / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--tiny", "--json", str(json_path)],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )
    return proc, json_path


def test_bench_cartpole_tiny_exits_0(tiny_run):
    proc, _ = tiny_run
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"


def test_bench_cartpole_tiny_prints_the_table(tiny_run):
    proc, _ = tiny_run
    out = proc.stdout
    assert "| policy | b |" in out
    for row in ("fasteval (eval_s)", "classic loop", "env only (limit)", "policy only (rows/s)", "sequential limit"):
        assert row in out, row
    for policy in ("zero", "demo"):
        for b in ("1", "4"):
            assert any(line.startswith(f"| {policy}") and f"| {b} |" in line for line in out.splitlines()), (policy, b)
    # The target lines are always printed (SKIP in tiny mode: no batch >= 16, no CLI check).
    assert out.count("SKIP:") + out.count("PASS:") + out.count("FAIL:") >= 3


def test_bench_cartpole_tiny_json_and_exact_returns(tiny_run):
    proc, json_path = tiny_run
    assert proc.returncode == 0
    doc = json.loads(json_path.read_text())
    assert doc["episodes"] == 8 and doc["batch_sizes"] == [1, 4]
    assert {"cpu", "torch", "gymnasium", "numpy", "fasteval", "kernel_backend", "date"} <= set(doc["machine"])
    # The env-only replay took exactly fasteval's episodes (same seeds, actions, lengths),
    # and on CartPole the classic loop's per-episode sums match fasteval's.
    assert all("exact episode lengths" in line for line in doc["returns"] if line.startswith("- zero") or line.startswith("- demo"))
    assert all("sums differ in 0/" in line for line in doc["returns"] if not line.startswith("- bias"))


@pytest.mark.parametrize("script, args, needles", [
    ("bench_pipeline.py", ["--tiny"], ["| async --pipeline |", "per-episode results identical", "pipelining"]),
    ("gpu_check.py", ["--quick"], ["## Checks", "SKIP: CUDA graph run reports a capture -- no CUDA device", "## End to end", "CartPole-v1 demo MLP"]),
    ("kernels_bench.py", [], ["cython", "reference"]),
    ("bench_workers.py", ["--tiny"], ["| cartpole ", "vs sync (pool / pool+pipeline)", "CartPole b=256"]),
    ("scaling.py", ["--tiny"], ["| workers | env steps/s | speed-up |", "FixedCostEnv"]),
    ("bench_distributed.py", ["--tiny"], ["| local pool |       2 |", "| ray        |       2 |",
                                          "per-episode results identical in every row: True",
                                          "## Per worker", "ray cost ms/episode", "## LIBERO on N nodes (estimate)",
                                          "| 16    |     512 |"]),
    ("ab_compare.py", ["--tiny", "--before", str(ROOT)], ["| cartpole zero b16 sync ", "after / before"]),
    ("bench_cli_overhead.py", ["--tiny"], ["| CLI ", "same episodes in every row: True"]),
    ("bench_rl_hooks.py", ["--tiny"], ["| fasteval EvalCallback ", "| SB3 EvalCallback ",
                                       "same episodes in the two seeded rows at every evaluation: True"]),
    ("bench_sequential.py", ["--tiny"], ["| Bernoulli(0.05) |", "| success A = B = 0.7, independent |", "p = 0.9 vs threshold 0.8",
                                         "single rule 20/20, paired 20/20", "STEP (Snyder et al."]),
    ("bench_race.py", ["--tiny"], ["**(a) 10 checkpoints, p from 0.30 to 0.80**", "| 0.0 | `best` | unpaired |",
                                   "Target declared tied", "or a false tie) <= 0.05 in every paired row: PASS", "`Race` (drops at the same k, stop, tie, leader): 60/60",
                                   "**End to end, through the engine**", "| (a) | 1.0 | `best` | 130 | 7 | 2/2 |",
                                   "fewer episodes than the honest comparator (fixed n = 130 per checkpoint), wrong picks <= 0.05",
                                   "oracle ratio per group: median [min, max] (10 groups)", "**Futility stops**",
                                   "| 0.5 | 1000 |", "stopped where these runs did in 20/20 runs"]),
    ("bench_race.py", ["--tiny", "--engine-only"], ["**End to end, through the engine**", "| (a) | 1.0 | `best` | 130 | 7 | 2/2 |"]),
    ("bench_many_policies.py", ["--tiny"], ["| 2 CLI runs, -b 4 each ", "| one pass, -b 8, --stack-weights (chosen) ",
                                            "| one pass, -b 4, --stack-weights (stacked forced) ", "measured",
                                            "per-policy episodes equal in every one-pass row: True", "Policy stage, one step"]),
    ("bench_truncated.py", ["--tiny"], ["| above=0.8, p = 0.9 | 156 (137) | 0.9 **(design)** |", "| below=0.8, p = 0.7 |",
                                        "| 0.9 vs 0.6, independent |", ">= 30% fewer episodes on average",
                                        "truncated 20/20 (chunked feeding 20/20), anytime-valid 20/20"]),
    ("bench_step_peers.py", ["--tiny"], ["STEP"]),
    ("bench_policy_blocks.py", ["--tiny", "--blocks", "8"], ["| CartPole MLP, -b 16 ", "| CartPole MLP, -b 256 ",
                                                             "episodes equal across these R", "Ratios are blocks / free"]),
    ("bench_videos.py", ["--tiny"], ["| known |", "failures 2", "render s", "encode s"]),
    ("bench_honest_intervals.py", ["--tiny"], ["**The interval of a stopped run**", "| 15, 0.1 |",
                                               "Across-env interval, exact coverage over 4 settings", "PASS:"]),
])
def test_other_benchmarks_run_at_tiny_size(script, args, needles):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], capture_output=True, text=True,
                          timeout=600, cwd=ROOT)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    for needle in needles:
        assert needle in proc.stdout, needle


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind (callgrind counts instructions)")
def test_bench_instructions_runs_at_tiny_size():
    """The plain loop counted at 10 and 30 episodes, the CLI row's command run once (uncounted at tiny size)."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_instructions.py"), "--tiny"],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    row = next(line for line in proc.stdout.splitlines() if line.startswith("| plain loop "))
    small, large, per_episode = (cell.strip() for cell in row.strip("|").split("|")[1:4])
    assert int(large.replace(",", "")) > int(small.replace(",", "")) > 0  # 20 more episodes cost instructions
    assert per_episode.endswith("k") and float(per_episode[:-1].replace(",", "")) > 10
    assert "SKIP: CLI instructions per episode" in proc.stdout  # no ratio without the CLI row's count
