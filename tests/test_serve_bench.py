"""Smoke run of benchmarks/bench_serve.py --tiny: it runs, prints both tables, and its served rows equal
the in-process ones. Never asserts on timings."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("websockets")

from tests.serve_helpers import REPO, repo_env  # noqa: E402


def test_bench_serve_tiny_runs_and_prints_its_tables():
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_serve.py"), "--tiny", "--no-act"],
                          capture_output=True, text=True, timeout=600, cwd=REPO, env=repo_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "| workload " in out and "| CartPole MLP |    16 |" in out
    assert "served per-episode results equal in-process: True" in out
    assert "| policy " in out and "in-process, 1 call on 16 rows" in out and "fixed 10 ms per call" in out


def test_bench_serve_memory_tiny_runs_and_prints_its_table():
    """``bench_serve.py --memory --tiny``: a burst of 8 clients; every request answered, none dropped."""
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_serve.py"), "--memory", "--tiny"],
                          capture_output=True, text=True, timeout=600, cwd=REPO, env=repo_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in proc.stdout.splitlines() if line.startswith("| 8 ")]
    assert len(rows) == 1 and rows[0][-2:] == ["8", "0"], proc.stdout
