"""``fasteval bench`` (CliRunner, known-answer env) and the issue-4 benchmark scripts at tiny size.

Never asserts wall-clock times: only exit codes, printed tables, JSON layout and exact returns.
Peers that need the ``bench`` extra (TorchRL, Stable-Baselines3) are skipped with a reason
when missing; the peer script itself then prints the row as SKIPPED with that reason.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from fasteval.doors.bench.harness import bench_cell, parse_batch_sizes, parse_vectorizations
from fasteval.doors.cli import main
from fasteval.types.errors import UserInputError
from fasteval.types.spec import EvalSpec
from fasteval.testing import expected_episode

ROOT = Path(__file__).resolve().parents[1]
KA = "fasteval/KnownAnswer-v0"
MACHINE_KEYS = {"date", "cpu", "cores", "usable_cores", "gpu", "torch", "gymnasium", "numpy", "fasteval", "kernel_backend",
                "python", "os"}
CELL_KEYS = {"batch_size", "vectorization", "n_episodes", "env_steps", "repeats", "warmup_episodes", "episodes_per_s",
             "steps_per_s", "stages_s", "stages_share", "stages_us_per_step", "overhead_us_per_step", "avg_sum_reward",
             "exact_across_repeats", "eval_s", "samples"}


def ka_mean_return(n: int, seed: int = 0) -> float:
    return sum(expected_episode(seed + i)["sum_reward"] for i in range(n)) / n


def bench(args):
    return CliRunner().invoke(main, ["bench", *args], catch_exceptions=False)


# -- the command -----------------------------------------------------------------------------------
def test_bench_single_configuration_prints_the_table():
    result = bench(["--env", KA, "--policy", "zero", "-n", "12", "-b", "4", "--repeats", "2"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "episodes/s median [min-max]" in out and "env steps/s median [min-max]" in out
    assert "overhead us/step" in out
    for stage in ("env_step", "policy", "transfers", "bookkeeping"):
        assert stage in out
    assert "machine:" in out and "torch" in out and "gymnasium" in out
    assert "fastest:" not in out  # one configuration: nothing to choose


def test_bench_sweep_and_json(tmp_path):
    path = tmp_path / "bench.json"
    n = 20
    result = bench(["--env", KA, "--policy", "zero", "-n", str(n), "--repeats", "2", "--sweep-batch", "1,4,8",
                    "--vectorization", "sync", "--json", str(path)])
    assert result.exit_code == 0, result.output
    assert "fastest: batch" in result.output
    doc = json.loads(path.read_text())
    assert {"schema", "machine", "command", "spec", "cells", "fastest"} <= set(doc)
    assert MACHINE_KEYS <= set(doc["machine"])
    assert doc["machine"]["gpu"]  # "none" or device names
    assert doc["spec"]["env"] == KA and doc["spec"]["batch_sizes"] == [1, 4, 8]
    cells = doc["cells"]
    assert [(c["batch_size"], c["vectorization"]) for c in cells] == [(1, "sync"), (4, "sync"), (8, "sync")]
    expected = ka_mean_return(n)
    steps = sum(expected_episode(i)["length"] for i in range(n))
    for cell in cells:
        assert CELL_KEYS <= set(cell)
        assert cell["repeats"] == 2 and len(cell["samples"]) == 2
        assert cell["n_episodes"] == n and cell["env_steps"] == steps
        assert cell["avg_sum_reward"] == pytest.approx(expected, abs=1e-12)
        assert cell["exact_across_repeats"] is True
        for key in ("episodes_per_s", "steps_per_s", "overhead_us_per_step", "eval_s"):
            assert set(cell[key]) == {"median", "min", "max"}
            assert cell[key]["min"] <= cell[key]["median"] <= cell[key]["max"]
        assert {"env_step", "h2d", "policy", "d2h", "bookkeeping", "transfers", "other"} <= set(cell["stages_s"])
        assert cell["stages_s"]["transfers"] >= 0
    assert (doc["fastest"]["batch_size"], doc["fastest"]["vectorization"]) in {(1, "sync"), (4, "sync"), (8, "sync")}


def test_bench_grid_with_async_gives_the_same_returns(tmp_path):
    path = tmp_path / "bench.json"
    result = bench(["--env", KA, "-n", "10", "--repeats", "1", "--sweep-batch", "2", "--vectorization", "sync,async",
                    "--json", str(path)])
    assert result.exit_code == 0, result.output
    cells = json.loads(path.read_text())["cells"]
    assert [c["vectorization"] for c in cells] == ["sync", "async"]
    assert cells[0]["avg_sum_reward"] == cells[1]["avg_sum_reward"] == pytest.approx(ka_mean_return(10), abs=1e-12)


@pytest.mark.parametrize("args", [
    ["--sweep-batch", "1,x"],
    ["--sweep-batch", "0"],
    ["--vectorization", "sync,threads"],
    ["--env", "NoSuchEnv-v0"],
    ["--repeats", "0"],
])
def test_bench_bad_input_exits_2(args):
    base = ["--env", KA, "-n", "4", "--repeats", "1"]
    result = CliRunner().invoke(main, ["bench", *base, *args])
    assert result.exit_code == 2, result.output


def test_bench_is_listed_and_has_help():
    result = CliRunner().invoke(main, ["bench", "--help"])
    assert result.exit_code == 0
    assert "--sweep-batch" in result.output and "--repeats" in result.output and "--json" in result.output


# -- the harness -------------------------------------------------------------------------------------
def test_bench_cell_overhead_formula_and_stages():
    spec = EvalSpec(env=KA, policy="zero", n_episodes=15, batch_size=4, device="cpu")
    cell = bench_cell(spec, repeats=3)
    assert len(cell.samples) == 3 and cell.warmup_episodes == 4
    for s in cell.samples:
        assert s.n_episodes == 15
        overhead = 1e6 * (s.eval_s - s.timings["env_step"] - s.timings["policy"]) / s.env_steps
        assert s.overhead_us_per_step == pytest.approx(overhead)
        assert s.other_s >= 0
    stages = cell.stage_seconds()
    assert stages["transfers"] == pytest.approx(
        sorted(s.timings["h2d"] + s.timings["d2h"] for s in cell.samples)[1])
    summary = cell.summary()
    assert summary["avg_sum_reward"] == pytest.approx(ka_mean_return(15), abs=1e-12)
    assert not math.isnan(summary["overhead_us_per_step"]["median"])


def test_bench_cell_without_warmup_still_runs():
    cell = bench_cell(EvalSpec(env=KA, policy="zero", n_episodes=5, batch_size=2, device="cpu"), repeats=1, warmup_episodes=0)
    assert cell.warmup_episodes == 0 and cell.warmup_s == 0.0 and len(cell.samples) == 1


def test_parsers():
    assert parse_batch_sizes("1, 16,16,256") == [1, 16, 256]
    assert parse_vectorizations("sync,async,sync") == ["sync", "async"]
    for bad in ("", "a", "-1", "1,,0"):
        with pytest.raises(UserInputError):
            parse_batch_sizes(bad)
    with pytest.raises(UserInputError):
        parse_vectorizations("fast")


# -- the benchmark scripts at tiny size ------------------------------------------------------------
def run_script(name: str, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / name), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


@pytest.fixture(scope="module")
def peers_tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("peers") / "peers.json"
    proc = run_script("bench_peers.py", "--tiny", "--json", str(path))
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    return proc, json.loads(path.read_text())


def test_bench_peers_tiny_prints_every_row(peers_tiny):
    proc, doc = peers_tiny
    out = proc.stdout
    assert "| row " in out and "## Summary" in out and "## Targets" in out
    for row in ("fasteval", "classic loop", "torchrl", "sb3", "env only (limit)", "policy only (limit)"):
        assert f"| {row} " in out, row  # a row, or the row marked SKIPPED with its reason
    for wl in ("cartpole-demo", "cartpole-zero"):
        for b in (1, 4):
            assert f"### {wl} " in out and f"b={b}, n=" in out
    assert {"cpu", "torch", "gymnasium", "numpy", "fasteval", "kernel_backend"} <= set(doc["machine"])
    assert [c["b"] for c in doc["cases"] if c["workload"] == "cartpole-zero"] == [1, 4]


def test_bench_peers_tiny_returns_agree_or_are_explained(peers_tiny):
    _, doc = peers_tiny
    for case in doc["cases"]:
        rows = {r["row"]: r for r in case["rows"]}
        assert rows["fasteval"]["vs_fasteval"] == 1.0
        assert rows["fasteval"]["mode"].startswith(("sync", "async"))
        # The classic loop uses the same seeds; on these envs its sums match fasteval's exactly.
        assert rows["classic loop"]["agrees"] is True, case["workload"]
        assert rows["env only (limit)"]["note"] == "replayed fasteval's exact episodes"
        for peer in ("torchrl", "sb3"):
            if peer not in rows:  # a peer that is not installed is skipped with its reason
                assert peer in case["skipped"], (peer, case["skipped"])
                continue
            assert isinstance(rows[peer]["agrees"], bool) and rows[peer]["diff"] is not None
            # Only each env's first episode is seeded, so agreement is not required: the note says why,
            # whether or not the means agree (b > n: SB3 counts the last envs' episodes, with other seeds).
            why = "b > n:" if peer == "sb3" and case["b"] > case["n"] else "only each env's first episode is seeded"
            assert why in rows[peer]["note"], rows[peer]["note"]


def test_bench_peers_tiny_torchrl_seeded_episodes_match(peers_tiny):
    pytest.importorskip("torchrl", reason="TorchRL is in the bench extra: ./scripts/install.sh bench")
    _, doc = peers_tiny
    for case in doc["cases"]:
        rows = {r["row"]: r for r in case["rows"]}
        assert "torchrl" in rows, case["skipped"]
        assert "seeded episodes match fasteval's" in rows["torchrl"]["note"], rows["torchrl"]["note"]


def test_bench_peers_tiny_sb3_seeded_episodes_match(peers_tiny):
    """SB3 seeds each env's first episode (seed + i): those episodes are fasteval's for the same seeds,
    read from each env's Monitor whatever order evaluate_policy collected them in."""
    pytest.importorskip("stable_baselines3", reason="Stable-Baselines3 is in the bench extra: ./scripts/install.sh bench")
    _, doc = peers_tiny
    for case in doc["cases"]:
        rows = {r["row"]: r for r in case["rows"]}
        assert "sb3" in rows, case["skipped"]
        assert f"its {min(case['b'], case['n'])} seeded episodes match fasteval's" in rows["sb3"]["note"], rows["sb3"]["note"]


def test_bench_peers_missing_peer_is_skipped_with_reason():
    # Hide both peers (as on a machine without the bench extra): their rows are SKIPPED, with the reason.
    code = (
        "import runpy, sys; sys.modules['torchrl'] = None; sys.modules['stable_baselines3'] = None; "
        f"sys.argv = ['bench_peers.py', '--tiny', '--workloads', 'cartpole-zero', '--batch-sizes', '1']; "
        f"runpy.run_path({str(ROOT / 'benchmarks' / 'bench_peers.py')!r}, run_name='__main__')"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "| torchrl " in out and "| sb3 " in out
    assert out.count("SKIPPED:") == 2 and "./scripts/install.sh bench" in out
    assert "| classic loop " in out and "| fasteval " in out


def test_bench_memory_tiny(tmp_path):
    path = tmp_path / "memory.json"
    proc = run_script("bench_memory.py", "--tiny", "--json", str(path))
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    assert "| episodes |" in proc.stdout and "loop peak (MB)" in proc.stdout
    assert ("PASS:" in proc.stdout) or ("FAIL:" in proc.stdout)
    doc = json.loads(path.read_text())
    assert doc["episodes"] == [100, 1000]
    small, big = doc["results"]["100"][0], doc["results"]["1000"][0]
    assert small["records"] == 100 and big["records"] == 1000
    assert small["loop_peak"] > 0 and big["with_results"] >= big["loop_peak"]
    assert big["ledger_bytes"] > small["ledger_bytes"]  # the per-episode ledger is what grows in the loop
    assert big["result_table_bytes"] < 100 * 1000  # columnar: ~50 B per episode, not ~410 B dicts
    cli_small, cli_big = doc["cli"]["100"][0], doc["cli"]["1000"][0]  # the CLI door, its whole process
    assert cli_small["records"] == 100 and cli_big["records"] == 1000
    assert cli_big["peak"] > 50 * 2**20 and doc["cli_ratio"] == cli_big["peak"] / cli_small["peak"]
    assert "CLI peak RSS (whole process)" in proc.stdout


# -- the threads in the header (issue 14) ---------------------------------------------------------------
def test_bench_header_names_the_threads_the_runs_used(tmp_path):
    import torch

    from fasteval.doors.bench.machine import machine_info

    before = torch.get_num_threads()
    torch.set_num_threads(2)  # the process default differs from what the runs use (cpu_threads=1)
    try:
        path = tmp_path / "bench.json"
        result = bench(["--env", KA, "--policy", "zero", "-n", "6", "-b", "2", "--repeats", "1", "--json", str(path)])
        default = machine_info()["torch_threads"]
    finally:
        torch.set_num_threads(before)
    assert result.exit_code == 0, result.output
    assert default == 2
    assert "(1 thread in the runs)" in result.output and "(2 threads" not in result.output
    doc = json.loads(path.read_text())
    assert doc["torch_threads"] == [1] and [c["torch_threads"] for c in doc["cells"]] == [1]


def test_bench_cell_reports_the_spec_threads():
    cell = bench_cell(EvalSpec(env=KA, policy="zero", n_episodes=4, batch_size=2, device="cpu", cpu_threads=2), repeats=1)
    assert cell.summary()["torch_threads"] == 2


def test_format_machine_threads_wording():
    from fasteval.doors.bench.machine import machine_info
    from fasteval.render.bench_text import format_machine

    info = dict(machine_info(), torch_threads=8)
    assert "(8 threads by default)" in format_machine(info)
    assert "(1 thread in the runs)" in format_machine(info, run_threads=[1, 1])
    assert "(1/2 threads in the runs)" in format_machine(info, run_threads=[2, 1, None])
