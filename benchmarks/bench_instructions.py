"""Instructions per episode: the CLI against the plainest exact loop, counted by callgrind (issue 29).

Wall-clock ratios move by 10% and more on a shared machine; the number of instructions a run
executes does not. Each row runs under ``valgrind --tool=callgrind`` (with ``PYTHONHASHSEED=0``, so
that string hashing, and so dict and set layouts, are the same in every run, and with OpenBLAS, OpenMP
and MKL on one thread: their idle worker threads spin-wait, and the instructions they spin for depend on
the scheduler, by 15 million and more per run, more than 20 CartPole episodes cost) twice, at ``--small``
and ``--large`` episodes, and the difference of the two totals, divided by the difference of the
episode counts, is the row's cost per episode: start-up (imports, env and engine building, the
dry run, writing the run folder's fixed files) cancels out.

Rows (CartPole-v1, the action ``0`` every step, seeds ``0..n-1``):

* ``CLI``: ``fasteval --policy zero --env CartPole-v1 -b 16 -n N --seed 0 --device cpu -o DIR``, with
  its normal outputs (the run folder, its crash-safe episode log, ``eval_info.json``) in a temp folder;
* ``plain loop``: one env (``gym.make(id)``), ``env.reset(seed=i)``, then ``env.step(0)`` until
  terminated or truncated, episode after episode: what any exact evaluator must at least do.

The ratio CLI / plain loop is what fasteval's own work costs on top of the env's, per episode; the
target is <= 1.15x.

Breakdown rows (``--rows``): ``cli-no-report`` (without ``report.html``), ``library`` (``evaluate()``:
the engine without a run folder), ``lean-loop`` (the plain loop on the env as fasteval builds it, without
gymnasium's checker, order and time-limit wrappers), and ``cli-wide-window``, for analysis only: the
CLI with its crash window (records wait at most 50 ms before they are written) set to an hour, so that
records are written 256 at a time. Under callgrind a run is 50-100x slower than natively, so the 50 ms
window closes after 2 or 3 episodes and every small group pays the group's fixed costs (building the
records, encoding, the write): this row shows how much of the CLI's count that is. It also makes the
count depend on how fast valgrind runs (the machine's load), by a few percent: compare runs made on the
same machine at the same time, or repeat (``--repeat``) and take the smallest. ``--profile`` also writes both rows' callgrind files (``--out``) and prints the
C functions whose counts grow most per episode in the CLI row (``callgrind_annotate``, differenced
the same way); for the Python side use cProfile's call counts.

    python benchmarks/bench_instructions.py [--small 200] [--large 2200] [--rows cli,loop] [--profile]
    python benchmarks/bench_instructions.py --tiny     # the test suite: the plain loop at 10 and 30 episodes

At ``--tiny`` the CLI row is run once without valgrind (that it works, and the same episodes), not
counted: ``import torch`` alone is about 5 billion instructions, a minute under callgrind.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import check_line, command_line, format_machine, machine_info, markdown_table  # noqa: E402

ENV, BATCH, SEED = "CartPole-v1", 16, 0
TARGET = 1.15

LOOP = """
import sys
import gymnasium as gym
n = int(sys.argv[1])
env = gym.make({env!r})
steps = 0
for i in range(n):
    env.reset(seed={seed} + i)
    while True:
        _obs, _reward, terminated, truncated, _info = env.step(0)
        steps += 1
        if terminated or truncated:
            break
print("env_steps", steps)
"""

LIBRARY = """
import sys
from fasteval import evaluate
evaluate(env={env!r}, policy="zero", batch_size={batch}, n_episodes=int(sys.argv[1]), seed={seed}, device="cpu")
"""


WIDE_WINDOW = """
import sys
from fasteval.run import durable
wide = durable.FlushPolicy(max_delay_s=3600.0)  # records wait for 256 of them, never for the clock
durable.run_durable.__defaults__ = tuple(wide if isinstance(d, durable.FlushPolicy) else d
                                         for d in durable.run_durable.__defaults__)
from fasteval.doors.cli import main
main(sys.argv[1:])
"""


def cli_command(n: int, out: Path) -> list[str]:
    return [sys.executable, "-m", "fasteval.doors.cli", "--policy", "zero", "--env", ENV, "-b", str(BATCH), "-n", str(n),
            "--seed", str(SEED), "--device", "cpu", "-o", str(out)]


def loop_command(n: int, out: Path) -> list[str]:
    return [sys.executable, "-c", LOOP.format(env=ENV, seed=SEED), str(n)]


def lean_loop_command(n: int, out: Path) -> list[str]:
    return [sys.executable, "-c", "from fasteval.core.envs import lean_spec\n" + LOOP.format(env=ENV, seed=SEED).replace(
        f"gym.make({ENV!r})", f"gym.make(lean_spec({ENV!r}))"), str(n)]


def library_command(n: int, out: Path) -> list[str]:
    return [sys.executable, "-c", LIBRARY.format(env=ENV, batch=BATCH, seed=SEED), str(n)]


ROWS = {"cli": ("CLI", cli_command), "loop": ("plain loop", loop_command),
        # the breakdown (--rows): where the CLI's instructions go
        "cli-no-report": ("CLI --no-report", lambda n, out: [*cli_command(n, out), "--no-report"]),
        "cli-wide-window": ("CLI, records written 256 at a time (crash window 1 h: analysis only)",
                            lambda n, out: [sys.executable, "-c", WIDE_WINDOW, *cli_command(n, out)[3:]]),
        "library": ("library evaluate()", library_command),
        "lean-loop": ("plain loop, fasteval's env (no gymnasium wrappers)", lean_loop_command)}


SRC = Path(__file__).resolve().parents[1] / "src"
"""The fasteval source the rows run (``--src``: another checkout's, for a before/after count)."""


def environment() -> dict[str, str]:
    env = dict(os.environ, PYTHONHASHSEED="0")
    for threads in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # no spinning pool threads
        env[threads] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH", "")) if p)
    return env


def counted(command: list[str], callgrind_file: Path) -> int:
    """Instructions ``command`` executes under callgrind (its whole process; children not followed)."""
    proc = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={callgrind_file}", *command],
                          env=environment(), capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed under valgrind (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    match = re.search(r"^(?:summary|totals):\s*(\d+)", callgrind_file.read_text(errors="replace"), re.MULTILINE)
    if match is None:
        raise SystemExit(f"no instruction total in {callgrind_file}")
    return int(match.group(1))


def per_function(callgrind_file: Path) -> dict[str, int]:
    """Exclusive instructions per C function (``callgrind_annotate``), for ``--profile``."""
    proc = subprocess.run(["callgrind_annotate", "--threshold=100", str(callgrind_file)], capture_output=True, text=True)
    out: dict[str, int] = {}
    for line in proc.stdout.splitlines():
        m = re.match(r"^\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(.+?)\s*$", line)
        if m and ":" in m.group(2):
            out[m.group(2)] = out.get(m.group(2), 0) + int(m.group(1).replace(",", ""))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=200)
    parser.add_argument("--large", type=int, default=2200)
    parser.add_argument("--rows", default="cli,loop", help=f"comma-separated, of {', '.join(ROWS)} (cli and loop: the target)")
    parser.add_argument("--repeat", type=int, default=1, help="count each run this many times, keep the smallest")
    parser.add_argument("--profile", action="store_true", help="also print the CLI's top C functions per episode")
    parser.add_argument("--out", type=Path, default=None, help="keep the callgrind files in this folder")
    parser.add_argument("--src", type=Path, default=None, help="run this fasteval source folder (default: this checkout's)")
    parser.add_argument("--tiny", action="store_true", help="the plain loop at 10 and 30 episodes; the CLI run once, uncounted")
    args = parser.parse_args(argv)
    global SRC
    if args.src is not None:
        SRC = args.src.resolve()
    small, large = (10, 30) if args.tiny else (args.small, args.large)
    if large <= small:
        parser.error(f"--large must exceed --small; got {large} <= {small}")
    if shutil.which("valgrind") is None:
        print("SKIP: valgrind is not installed (apt-get install valgrind)")
        return 0
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        parser.error(f"--rows: unknown {unknown}; expected some of {sorted(ROWS)}")
    counted_rows = [r for r in rows if not (args.tiny and r == "cli")]
    with tempfile.TemporaryDirectory() as tmp:
        keep = args.out or Path(tmp)
        keep.mkdir(parents=True, exist_ok=True)
        totals: dict[str, dict[int, int]] = {}
        for row in counted_rows:
            make = ROWS[row][1]
            totals[row] = {}
            for n in (small, large):
                totals[row][n] = min(counted(make(n, Path(tmp) / f"run-{row}-{n}-{k}"), keep / f"callgrind.{row}.{n}")
                                     for k in range(args.repeat))
        if args.tiny and "cli" in rows:  # that the CLI row's command works (not counted: see the docstring)
            subprocess.run(cli_command(small, Path(tmp) / "run-cli-tiny"), env=environment(), check=True,
                           stdout=subprocess.DEVNULL)
        print(format_machine(machine_info()))
        print("command:", command_line())
        print(f"fasteval source: {SRC}")
        print(f"workload: {ENV}, action 0, seeds {SEED}..; callgrind totals at {small} and {large} episodes "
              f"(PYTHONHASHSEED=0; the smallest of {args.repeat} each); per episode = difference / {large - small}")
        per_ep = {row: (totals[row][large] - totals[row][small]) / (large - small) for row in counted_rows}
        table = [[ROWS[row][0], f"{totals[row][small]:,}", f"{totals[row][large]:,}", f"{per_ep[row] / 1e3:,.1f}k"]
                 for row in counted_rows]
        print(markdown_table(["row", f"instructions ({small} episodes)", f"instructions ({large} episodes)",
                              "per episode"], table))
        ratio = per_ep["cli"] / per_ep["loop"] if {"cli", "loop"} <= set(per_ep) else None
        print(check_line(f"CLI instructions per episode <= {TARGET}x the plain loop's", None if ratio is None else
                         ratio <= TARGET, "n/a" if ratio is None else f"{ratio:.3f}x"))
        if args.profile and "cli" in per_ep:
            a, b = per_function(keep / f"callgrind.cli.{small}"), per_function(keep / f"callgrind.cli.{large}")
            grow = sorted(((b.get(k, 0) - a.get(k, 0)) / (large - small), k) for k in set(a) | set(b))[::-1][:40]
            print("\nCLI: C functions by exclusive instructions per episode")
            print(markdown_table(["per episode", "function"], [[f"{v:,.0f}", k] for v, k in grow]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
