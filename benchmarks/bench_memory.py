"""Memory of an evaluation: peak RSS vs episode count at a fixed batch size (issues 4 and 14).

Usage::

    python benchmarks/bench_memory.py [--episodes 1000,100000] [--batch-size 64] [--policy zero]
                                      [--env CartPole-v1] [--json FILE] [--strict] [--tiny]

Each case runs in fresh processes, so every peak is its own. Two doors are measured:

* **CLI** (the target, issue 14): ``fasteval --env E --policy P -n N -b B --device cpu -o DIR`` as
  its own process, run to the end (``eval_info.json``, ``episodes.jsonl``, ``config.json`` written);
  its peak (``VmHWM``, read at exit) covers the whole process: imports, engine, run, result
  table and the streamed ``eval_info.json``.
* **engine** (``--child``): import everything, build the engine (``Engine(spec)``, the engine of
  every door), run a small warm-up, then ``engine.run(n)``. It reads the peak (``VmHWM``) at
  two points:

  * **loop peak**: inside the ``on_finished`` callback, which the hot loop calls as episodes end;
    its last call comes after the last episode, before the engine builds the result table. This
    is everything the engine itself holds: envs, host buffers, policy, and the ledger (its
    per-episode arrays are O(n), ~60 bytes per episode, so that results are exact per episode);
  * **with results**: after ``run()`` returned, so it also holds ``EvalResult.per_episode``, a
    columnar table (NumPy arrays, mostly views of the ledger's).

Targets: the CLI's peak at the larger n within 10% of the smaller one (issue 14), and the engine's
loop peak likewise (issue 4), at the same batch size. ``--strict`` exits 1 when either fails.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

TARGET_RATIO = 1.10


def _maxrss_bytes() -> int:
    """This process's peak resident set size in bytes.

    Linux: ``VmHWM`` from ``/proc/self/status``, the high-water mark of this process's own memory
    map. Not ``ru_maxrss``: Linux carries that across ``fork`` + ``exec``, so a child's value starts
    at its parent's peak (here, the driver's: torch imported, results parsed) and hides the child's
    own. Elsewhere: ``ru_maxrss``.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kilobytes on Linux, bytes on macOS
    return int(kb) * (1 if sys.platform == "darwin" else 1024)


def _current_rss_bytes() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return -1


def child(args: argparse.Namespace) -> None:
    """One case, in this fresh process; prints one JSON line."""
    import numpy as np

    from fasteval.run.engine import Engine
    from fasteval.types.spec import EvalSpec

    spec = EvalSpec(env=args.env, policy=args.policy, batch_size=args.batch_size, n_episodes=args.n, device="cpu",
                    seed=args.seed)
    after_import = _maxrss_bytes()
    engine = Engine(spec)
    engine.run(min(args.n, 2 * spec.n_slots), WARMUP_SEED)  # dry run, first touch of every slot
    before = _maxrss_bytes()
    loop_peak = [0]

    def on_finished(ledger, rows) -> None:
        loop_peak[0] = _maxrss_bytes()

    t0 = time.perf_counter()
    result = engine.run(args.n, args.seed, on_finished=on_finished)
    seconds = time.perf_counter() - t0
    with_results = _maxrss_bytes()
    ledger = engine.ledger
    per_episode_arrays = {name: arr for name, arr in vars(ledger).items()
                          if isinstance(arr, np.ndarray) and arr.shape[:1] == (ledger.n_episodes,)}
    ledger_bytes = sum(a.nbytes for a in per_episode_arrays.values())
    o = result.overall()
    print(json.dumps({
        "n": args.n, "batch_size": spec.n_slots, "seconds": seconds, "eval_s": result.eval_s,
        "env_steps": int(o["env_steps"]), "avg_sum_reward": float(o["avg_sum_reward"]),
        "rss_after_import": after_import, "rss_before_run": before, "loop_peak": loop_peak[0],
        "with_results": with_results, "current_rss_end": _current_rss_bytes(),
        "ledger_bytes": ledger_bytes, "ledger_bytes_per_episode": ledger_bytes / ledger.n_episodes,
        "ledger_arrays": sorted(per_episode_arrays), "records": len(result.per_episode),
        "result_table_bytes": result.per_episode.nbytes,
    }))
    engine.close()


WARMUP_SEED = 10_000_000


def run_case(args: argparse.Namespace, n: int) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--n", str(n), "--batch-size", str(args.batch_size),
           "--policy", args.policy, "--env", args.env, "--seed", str(args.seed)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"child for n={n} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1]
    return json.loads(line)


CLI_LAUNCHER = """
import atexit, os, sys
sys.path.insert(0, sys.argv.pop(1))
from bench_memory import _maxrss_bytes
out = sys.argv.pop(1)
atexit.register(lambda: open(out, "w").write(str(_maxrss_bytes())))
from fasteval.doors.cli import main
sys.argv[0] = "fasteval"
main()
"""
"""Runs the ``fasteval`` command in this process and writes its peak RSS when it exits (``atexit``
runs after click's ``sys.exit``): the whole process, from interpreter start to exit."""


def run_cli_case(args: argparse.Namespace, n: int) -> dict[str, Any]:
    """The ``fasteval`` command as its own process; returns its peak RSS, time and record count."""
    with tempfile.TemporaryDirectory(prefix="fasteval-mem-") as tmp:
        out, peak_file = Path(tmp) / "run", Path(tmp) / "peak"
        options = ["--env", args.env, "--policy", args.policy, "-n", str(n), "-b", str(args.batch_size),
                   "--seed", str(args.seed), "--device", "cpu", "-o", str(out)]
        cmd = [sys.executable, "-c", CLI_LAUNCHER, str(HERE), str(peak_file), *options]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
        seconds = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"fasteval for n={n} failed (exit {proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
        with (out / "eval_info.json").open() as f:  # count without loading (this driver stays small)
            records = sum(1 for line in f if line.startswith('    {"episode_ix": '))
        return {
            "n": n, "seconds": seconds, "peak": int(peak_file.read_text()), "records": records,
            "eval_info_bytes": (out / "eval_info.json").stat().st_size,
            "command": " ".join(["fasteval", *options[:-1], "DIR"]),
        }


def mb(x: float) -> str:
    return f"{x / 2**20:.1f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", default="1000,100000", help="comma-separated episode counts (first = reference)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--policy", default="zero")
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeats", type=int, default=1, help="fresh subprocesses per case (median of the peaks)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per child")
    p.add_argument("--json", dest="json_path", default=None)
    p.add_argument("--strict", action="store_true", help="exit 1 if the target fails")
    p.add_argument("--tiny", action="store_true", help="smoke run: 100 and 1000 episodes, batch 8")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args)
        return 0
    if args.tiny:
        args.episodes, args.batch_size = "100,1000", 8
    counts = [int(x) for x in args.episodes.split(",") if x.strip()]
    if len(counts) < 2 or min(counts) < 1 or args.batch_size < 1 or args.repeats < 1:
        p.error("--episodes needs at least two counts >= 1; --batch-size and --repeats must be >= 1")

    import statistics

    from common import check_line, command_line, format_machine, machine_info, markdown_table, write_json

    info = machine_info()
    print(f"# Memory (issues 4 and 14): peak RSS vs episode count at a fixed batch size\n\n{format_machine(info)}")
    print(f"- command: `{command_line()}`")
    print(f"- env {args.env}, policy {args.policy}, batch size {args.batch_size}, episodes {counts}; one fresh "
          f"subprocess per case and repeat ({args.repeats}); peaks are VmHWM (the process's own high-water RSS)\n", flush=True)
    results: dict[int, list[dict[str, Any]]] = {n: [] for n in counts}
    cli: dict[int, list[dict[str, Any]]] = {n: [] for n in counts}
    for _ in range(args.repeats):
        for n in counts:
            cli[n].append(run_cli_case(args, n))
            print(f"n={n}: CLI done in {cli[n][-1]['seconds']:.1f} s", file=sys.stderr, flush=True)
            results[n].append(run_case(args, n))
            print(f"n={n}: engine done in {results[n][-1]['seconds']:.1f} s", file=sys.stderr, flush=True)

    def med(n: int, key: str) -> float:
        return statistics.median(r[key] for r in results[n])

    def cli_med(n: int, key: str) -> float:
        return statistics.median(r[key] for r in cli[n])

    ref = counts[0]
    print(f"CLI door: `{cli[ref][0]['command']}` (one process per case; peak = its VmHWM at exit)\n")
    print(markdown_table(
        ["episodes", "b", "CLI run (s)", "CLI peak RSS (MB)", "CLI x", "eval_info.json (MB)"],
        [[str(n), str(args.batch_size), f"{cli_med(n, 'seconds'):.2f}", mb(cli_med(n, "peak")),
          f"{cli_med(n, 'peak') / cli_med(ref, 'peak'):.3f}", mb(cli[n][0]["eval_info_bytes"])] for n in counts]))
    print("\nengine door (in-process):\n")
    rows = []
    for n in counts:
        r0 = results[n][0]
        rows.append([
            str(n), str(r0["batch_size"]), f"{med(n, 'seconds'):.2f}", str(r0["env_steps"]), mb(med(n, "rss_before_run")),
            mb(med(n, "loop_peak")), f"{med(n, 'loop_peak') / med(ref, 'loop_peak'):.3f}", mb(med(n, "with_results")),
            f"{med(n, 'with_results') / med(ref, 'with_results'):.3f}", f"{r0['ledger_bytes'] / 2**20:.2f}",
            f"{(med(n, 'with_results') - med(n, 'loop_peak')) / n:.0f}",
        ])
    print(markdown_table(
        ["episodes", "b", "run (s)", "env steps", "RSS before run (MB)", "loop peak (MB)", "loop x", "with results (MB)",
         "results x", "ledger (MB)", "result B/episode"], rows))
    big = counts[-1]
    r_big = results[big][0]
    ratio = med(big, "loop_peak") / med(ref, "loop_peak")
    ratio_total = med(big, "with_results") / med(ref, "with_results")
    cli_ratio = cli_med(big, "peak") / cli_med(ref, "peak")
    print(f"\nWhat grows with n: the ledger's per-episode arrays ({', '.join(r_big['ledger_arrays'])}: "
          f"{r_big['ledger_bytes_per_episode']:.0f} bytes per episode, {r_big['ledger_bytes'] / 2**20:.1f} MB at n={big}), "
          f"kept so every episode's result is exact; the result table is columnar ({r_big['result_table_bytes'] / 2**20:.1f} MB "
          f"at n={big}, mostly views of the ledger's arrays), and the CLI streams eval_info.json from it. "
          f"Everything else (envs, host buffers, policy, accumulators) is sized by the batch.")
    lines = [
        check_line(f"CLI peak RSS (whole process) at n={big} within {100 * (TARGET_RATIO - 1):.0f}% of n={ref} "
                   f"(batch {args.batch_size})", cli_ratio <= TARGET_RATIO,
                   f"{mb(cli_med(big, 'peak'))} MB / {mb(cli_med(ref, 'peak'))} MB = {cli_ratio:.3f}x"),
        check_line(f"loop peak RSS at n={big} within {100 * (TARGET_RATIO - 1):.0f}% of n={ref} (batch {args.batch_size})",
                   ratio <= TARGET_RATIO, f"{mb(med(big, 'loop_peak'))} MB / {mb(med(ref, 'loop_peak'))} MB = {ratio:.3f}x"),
        f"INFO: with the per-episode result table included: {mb(med(big, 'with_results'))} MB / "
        f"{mb(med(ref, 'with_results'))} MB = {ratio_total:.3f}x",
    ]
    print("\n" + "\n".join(lines))
    if args.json_path:
        write_json(args.json_path, {"machine": info, "command": command_line(), "batch_size": args.batch_size,
                                    "episodes": counts, "results": {str(k): v for k, v in results.items()},
                                    "cli": {str(k): v for k, v in cli.items()}, "cli_ratio": cli_ratio,
                                    "loop_ratio": ratio, "with_results_ratio": ratio_total, "target_ratio": TARGET_RATIO,
                                    "pass": ratio <= TARGET_RATIO and cli_ratio <= TARGET_RATIO})
        print(f"\nwrote {args.json_path}")
    return 1 if (args.strict and (ratio > TARGET_RATIO or cli_ratio > TARGET_RATIO)) else 0


if __name__ == "__main__":
    sys.exit(main())
