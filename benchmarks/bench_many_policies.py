"""Many checkpoints in one pass against one run each (issue 30): throughput, and stacked weights.

Eight CartPole MLP checkpoints (the bundled ``src/fasteval/assets/cartpole_mlp`` with Gaussian noise on
its weights, :func:`fasteval.robot.policies.checkpoint.perturbed_checkpoints`, written to a temp folder:
nothing large in git), seeds ``0..n-1`` for each. Rows, interleaved per repeat (repeat loop outermost):

* ``8 CLI runs``: ``fasteval --policy CKPT_k -n N -b B -o DIR_k --no-report``, one after another (each its
  own process: import, envs, dry run, run folder): how checkpoints are evaluated today;
* ``one pass``: ``fasteval --policy 'DIR/checkpoints/*/pretrained_model' -n N -b B -o DIR --no-report``,
  the same episodes for every checkpoint in one process, slots shared (``-b B``), and again with ``-b 8B``
  (each policy's share of the slots as in its own run);
* ``one pass, stacked``: the same with ``--stack-weights`` (one vmap call over the 8 checkpoints), at ``-b B`` and
  ``-b 8B``: as ``--stack-weights`` chooses (both paths timed once after the dry runs, the faster kept; the
  ``policy calls`` column says which), and with the stacked call forced (``FASTEVAL_STACK_WEIGHTS=stacked``):
  stacked weights on the CPU against the separate calls, and whether the choice picked the faster.

The per-policy episodes of every one-pass row are checked equal to the 8 runs' (the same seeds, the same
numbers). The target: ``8 CLI runs / one pass >= 1.3`` on CPU (wall clock of the whole command).

**The policy stage, stacked against separate** (in-process, no env): the median time of one step's calls
on a ``[B, 4]`` observation: 8 separate calls (one per checkpoint, as the separate path makes them) against
one stacked call (``torch.func`` ``vmap(functional_call)``); and the ``policy`` stage seconds of the
one-pass runs.

Wall-clock ratios need a quiet machine: the load average at the start is in the header; rerun there.

    PYTHONPATH=src python benchmarks/bench_many_policies.py [--episodes 100] [--batch 16] [--repeats 3] [--device cuda] [--json out.json]
    PYTHONPATH=src python benchmarks/bench_many_policies.py --tiny    # the test suite: 2 checkpoints, 3 episodes
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Samples, command_line, format_machine, machine_info, markdown_table, write_json  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "src" / "fasteval" / "assets" / "cartpole_mlp"
ENV = "CartPole-v1"
TARGET = 1.3


def fasteval(*args: str, extra_env: dict[str, str] | None = None) -> float:
    """Seconds of one ``fasteval`` command (a fresh process, as a user runs it); raises if it fails."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
           **(extra_env or {})}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "fasteval.doors.cli", *args], capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"fasteval {' '.join(args)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return seconds


def per_policy_episodes(folder: Path) -> dict[str, list[dict[str, Any]]]:
    info = json.loads((folder / "eval_info.json").read_text())
    if "policies" in info:
        return {name: entry["per_episode"] for name, entry in info["policies"].items()}
    return {"": info["per_episode"]}


def strip(records: list[dict[str, Any]]) -> list[tuple]:
    return [(r["episode_ix"], r["seed"], r["sum_reward"], r["length"], r["success"]) for r in records]


def policy_stage(checkpoints: list[Path], batch: int, calls: int) -> dict[str, float]:
    """Median seconds of one step's policy calls on ``[batch, 4]``: 8 separate calls, one stacked call."""
    import torch

    from fasteval.core.policy_set import StackedCall
    from fasteval.robot.policies.checkpoint import load_checkpoint

    torch.set_num_threads(1)
    modules = [load_checkpoint(p).eval() for p in checkpoints]
    stacked = StackedCall(modules, lambda x: x, lambda a: a)
    x = torch.randn(batch, 4, generator=torch.Generator().manual_seed(0))
    out: dict[str, list[float]] = {"separate": [], "stacked": []}
    with torch.inference_mode():
        for _ in range(20):  # warm-up
            stacked.plain_step(x)
            [m(x) for m in modules]
        for _ in range(calls):  # interleaved
            t0 = time.perf_counter()
            for m in modules:
                m(x)
            out["separate"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            stacked.plain_step(x)
            out["stacked"].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in out.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoints", type=int, default=8)
    ap.add_argument("--episodes", type=int, default=100)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--calls", type=int, default=2000, help="timed calls of the policy-stage comparison")
    ap.add_argument("--tiny", action="store_true", help="2 checkpoints, 3 episodes, 1 repeat (smoke test)")
    ap.add_argument("--device", default="cpu", help="the runs' --device (cuda: with CUDA graphs where they capture)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    if args.tiny:
        args.checkpoints, args.episodes, args.repeats, args.calls, args.batch = 2, 3, 1, 50, 4
    from fasteval.robot.policies.checkpoint import perturbed_checkpoints

    machine = machine_info()
    samples = Samples()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        checkpoints = perturbed_checkpoints(BASE, root / "ckpt", args.checkpoints)
        pattern = str(root / "ckpt" / "checkpoints" / "*" / "pretrained_model")
        common = ["--env", ENV, "-n", str(args.episodes), "--seed", "0", "--device", args.device, "--no-report"]
        big = str(args.checkpoints * args.batch)
        forced = {"FASTEVAL_STACK_WEIGHTS": "stacked"}
        rows: dict[str, Any] = {
            f"{args.checkpoints} CLI runs, -b {args.batch} each": None,
            f"one pass, -b {args.batch}": ["-b", str(args.batch)],
            f"one pass, -b {args.batch}, --stack-weights (chosen)": ["-b", str(args.batch), "--stack-weights"],
            f"one pass, -b {args.batch}, --stack-weights (stacked forced)": (["-b", str(args.batch), "--stack-weights"], forced),
            f"one pass, -b {big}": ["-b", big],
            f"one pass, -b {big}, --stack-weights (chosen)": ["-b", big, "--stack-weights"],
            f"one pass, -b {big}, --stack-weights (stacked forced)": (["-b", big, "--stack-weights"], forced),
        }
        same: dict[str, bool] = {}
        singles: dict[str, list[tuple]] = {}
        timings: dict[str, dict[str, float]] = {}
        for repeat in range(args.repeats):
            for label, extra in rows.items():
                out = root / f"r{repeat}-{abs(hash(label))}"
                if extra is None:
                    total = 0.0
                    for k, ckpt in enumerate(checkpoints):
                        total += fasteval(*common, "--policy", str(ckpt), "-b", str(args.batch), "-o", str(out / str(k)))
                        if repeat == 0:
                            singles[str((k + 1) * 1000)] = strip(per_policy_episodes(out / str(k))[""])
                    samples.add(label, total)
                    continue
                extra, extra_env = extra if isinstance(extra, tuple) else (extra, None)
                samples.add(label, fasteval(*common, "--policy", pattern, *extra, "-o", str(out), extra_env=extra_env))
                if repeat == 0:
                    got = {name: strip(recs) for name, recs in per_policy_episodes(out).items()}
                    same[label] = got == singles
                    info = json.loads((out / "eval_info.json").read_text())
                    timings[label] = {"policy_s": info["timings"].get("policy", float("nan")),
                                      "eval_s": info["overall"]["eval_s"], "policy_calls": info["meta"]["policy_calls"]}
        stage = policy_stage(checkpoints, args.batch * (1 if args.tiny else args.checkpoints), args.calls)
    runs_label = next(iter(rows))
    table = []
    for label in rows:
        seconds = samples.median(label)
        ratio = samples.median(runs_label) / seconds
        t = timings.get(label, {})
        calls = str(t.get("policy_calls", "")).split(" (")[0]
        table.append([label, seconds, ratio, t.get("eval_s", float("nan")), t.get("policy_s", float("nan")),
                      "" if label == runs_label else str(same.get(label)), calls])
    best = max(r[2] for r in table[1:])
    doc = {"command": command_line(), "machine": machine, "device": args.device, "checkpoints": args.checkpoints, "episodes": args.episodes,
           "batch": args.batch, "repeats": args.repeats, "samples": samples.to_dict(), "same_episodes": same,
           "timings": timings, "policy_stage": stage, "best_ratio": best}
    print(format_machine(machine))
    print(f"- {args.checkpoints} checkpoints x {args.episodes} episodes (seeds 0..{args.episodes - 1}) on {ENV}, "
          f"median of {args.repeats} repeats, rows interleaved")
    print()
    print(markdown_table(["row", "wall s (whole command)", "vs the separate runs", "engine s", "policy stage s",
                          "same episodes as the separate runs", "policy calls"], table))
    print()
    for label, t in timings.items():
        if "--stack-weights" in label:
            print(f"- {label}: {t['policy_calls']}")
    print()
    print(f"Policy stage, one step on [{args.batch * (1 if args.tiny else args.checkpoints)}, 4]: "
          f"{args.checkpoints} separate calls {1e6 * stage['separate']:.1f} us, one stacked call "
          f"{1e6 * stage['stacked']:.1f} us ({stage['separate'] / stage['stacked']:.2f}x)")
    verdict = "PASS" if best >= TARGET else "FAIL"
    print(f"{verdict}: one pass >= {TARGET}x the separate runs (best row {best:.2f}x); per-policy episodes equal in "
          f"every one-pass row: {all(same.values())}")
    if args.json:
        write_json(args.json, doc)
    return 0 if all(same.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
