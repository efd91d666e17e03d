"""A/B: the same ``fasteval bench`` workloads on two source trees, interleaved, as ratios.

Used to show that a change to the engine is no slower (issue 16: the one step sequence).
``--before`` is another checkout of fasteval (for example ``git worktree add ../before <rev>``);
``--after`` defaults to this checkout. Each repeat runs every workload once per tree,
alternating which tree goes first, so that load on the machine hits both alike. Reports the
median ``eval_s`` per tree and after/before (below 1.0 means the change is faster).

    python benchmarks/ab_compare.py --before ../before [--repeats 6] [--tiny]

Every round also runs the *before* tree a second time (the A/A control, ``control``), in the same
rotation, so the table shows the noise of this machine beside the change: ``control / before`` is
what "no difference" looks like now. Besides the ratio of medians, each row gives the median of
the per-round ratios (each round's after over the same round's before: slow drifts of the machine
cancel) and the ratio of the fastest samples (noise only ever adds time).

Workloads: CartPole with the zero policy at batch 16 (9-step episodes: bookkeeping-heavy), the
bundled CartPole MLP at batch 16, and the pipelined busy-env workload of bench_pipeline.py
(async envs, ``--pipeline``, conv policy).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import command_line, format_machine, machine_info, markdown_table  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

WORKLOADS = {
    "cartpole zero b16 sync": ["--env", "CartPole-v1", "--policy", "zero", "-b", "16", "-n", "2000"],
    "cartpole mlp b16 sync": ["--env", "CartPole-v1", "--policy", "{repo}/src/fasteval/assets/cartpole_mlp",
                              "-b", "16", "-n", "100"],
    "cartpole zero b64 pool": ["--env", "CartPole-v1", "--policy", "zero", "-b", "64", "-n", "2000",
                               "--vectorization", "async", "--workers", "2"],
    "busy env pipelined async": ["--env", "fasteval.testing.busy:make_busy_env", "--policy",
                                 "{bench}/bench_pipeline.py:ConvPolicy", "--trust-remote-code", "-b", "2", "-n", "30",
                                 "--vectorization", "async", "--pipeline"],
}
TINY = {"-n": "6"}


def bench_once(tree: Path, args: list[str], repeats: int) -> float:
    """Median eval_s of one ``fasteval bench`` call run from ``tree``'s sources."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        code = ("import sys; sys.path.insert(0, sys.argv.pop(1))\n"
                "try:\n    from fasteval.doors.cli import main\n"
                "except ImportError:  # a tree from before the one-folder-per-layer move\n"
                "    from fasteval.cli import main\n"
                "main()")
        cmd = [sys.executable, "-c", code, str(tree / "src"), "bench", *args, "--repeats", str(repeats),
               "--json", str(out)]
        # PYTHONPATH as well: the pool's worker processes (forkserver) import fasteval from it, not from sys.path
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree / "src"), os.environ.get("PYTHONPATH", "")])}
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=tmp, env=env)
        data = json.loads(out.read_text())
    return float(data["cells"][0]["eval_s"]["median"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="the other checkout (the baseline)")
    parser.add_argument("--after", type=Path, default=REPO, help="this checkout by default")
    parser.add_argument("--repeats", type=int, default=6,
                        help="interleaved rounds, each a 3-repeat bench call per tree; a multiple of 6 puts each "
                             "tree (before, after, control) in each place of the order equally often (unbalanced "
                             "orders showed a 1-2%% order bias in an A/A run)")
    parser.add_argument("--tiny", action="store_true", help="a seconds-long smoke run (for the test suite)")
    args = parser.parse_args(argv)
    trees = {"before": args.before.resolve(), "after": args.after.resolve(), "control": args.before.resolve()}
    samples: dict[str, dict[str, list[float]]] = {w: {"before": [], "after": [], "control": []} for w in WORKLOADS}
    rotations = (["before", "after", "control"], ["after", "control", "before"], ["control", "before", "after"])
    for round_ in range(1 if args.tiny else args.repeats):
        order = rotations[round_ % 3] if round_ % 2 == 0 else rotations[round_ % 3][::-1]
        for name, template in WORKLOADS.items():
            cmd = [a.format(repo=REPO, bench=HERE) for a in template]
            if args.tiny:
                cmd = [TINY.get(prev, a) if prev in TINY else a for prev, a in zip([""] + cmd, cmd)]
            for which in order:
                samples[name][which].append(bench_once(trees[which], cmd, 1 if args.tiny else 3))
    print(format_machine(machine_info()))
    print("command:", command_line())
    rows = []
    for name, by_tree in samples.items():
        rows.append(summary_row(name, by_tree))
    print(markdown_table(["workload", "before eval_s (ms)", "after eval_s (ms)", "after / before",
                          "paired after / before", "fastest after / before", "control / before (A/A)",
                          "paired control / before"], rows))
    return 0


def summary_row(name: str, by_tree: dict[str, list[float]]) -> list[str]:
    """One table row: medians, the ratio of medians, the median per-round ratio, the ratio of the
    fastest samples, and the same two ratios for the A/A control."""
    before, after, control = (by_tree[k] for k in ("before", "after", "control"))
    mb, ma, mc = (statistics.median(v) for v in (before, after, control))
    paired = statistics.median(a / b for a, b in zip(after, before))
    paired_control = statistics.median(c / b for c, b in zip(control, before))
    return [name, f"{mb * 1e3:.1f}", f"{ma * 1e3:.1f}", f"{ma / mb:.3f}", f"{paired:.3f}",
            f"{min(after) / min(before):.3f}", f"{mc / mb:.3f}", f"{paired_control:.3f}"]


if __name__ == "__main__":
    raise SystemExit(main())
