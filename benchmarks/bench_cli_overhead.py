"""Per-episode overhead of the CLI on short episodes (issue 14).

Workload: CartPole-v1, the ``zero`` policy, batch 16, 20,000 episodes (about 9.3 steps each):
per-episode costs (seeded resets, records, the durable log) dominate. Rows, interleaved per
repeat, medians of ``--repeats``:

* ``library``: ``Evaluator(...).evaluate()``, its ``eval_s`` (engine built and warmed up first);
* ``CLI``: ``fasteval --policy zero --env CartPole-v1 ... -o DIR`` in a subprocess, the ``eval_s``
  it writes to ``eval_info.json`` (the run with its crash-safe episode log and results files);
* ``sequential loop``: one env, ``reset(seed=seed + i)`` then action ``0`` (a Python int) until the
  episode ends, episode after episode (the env built as fasteval builds it, without gymnasium's
  checker, order and time-limit wrappers, so that only the evaluator's own work differs);
* ``sequential loop, numpy action``: the same with ``np.int64(0)``, the action type every
  gymnasium vector env (and fasteval) passes for a ``Discrete`` space (measured: it does not slow
  CartPole down; the row shows the action type is not where fasteval's time goes);
* ``sequential loop, gym.make``: the same loop on ``gym.make(id)`` as a user writes it, with gymnasium's
  checker, order-enforcing and time-limit wrappers (for context; the targets use the lean loop).

Targets: CLI eval_s <= 1.1x the library's, and <= 1.15x the sequential loop's.

    python benchmarks/bench_cli_overhead.py [--episodes 20000] [--repeats 5] [--tiny]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from time import perf_counter

import gymnasium as gym
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import check_line, command_line, format_machine, machine_info, markdown_table  # noqa: E402

ENV, BATCH = "CartPole-v1", 16


def sequential_loop(n: int, seed: int, action: object = 0, lean: bool = True) -> tuple[float, int]:
    """Seconds for ``n`` seeded episodes of ``action``, one env, no evaluator; and the steps taken.

    ``lean``: the env as fasteval builds it (no checker, order or time-limit wrapper); else ``gym.make(id)``.
    """
    from fasteval.core.envs import lean_spec

    env = gym.make(lean_spec(ENV) if lean else ENV)
    cap = gym.spec(ENV).max_episode_steps
    steps = 0
    start = perf_counter()
    for i in range(n):
        env.reset(seed=seed + i)
        for t in range(cap):
            _obs, _r, terminated, truncated, _info = env.step(action)
            steps += 1
            if terminated or truncated:
                break
    return perf_counter() - start, steps


def library(n: int, seed: int) -> tuple[float, int]:
    from fasteval.run.api import Evaluator

    evaluator = Evaluator(env=ENV, policy="zero", batch_size=BATCH, n_episodes=n, seed=seed, device="cpu")
    evaluator.evaluate(n_episodes=min(n, 64))  # build + dry run, untimed
    result = evaluator.evaluate()
    return result.eval_s, int(sum(e["length"] for e in result.per_episode))


def cli(n: int, seed: int) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        subprocess.run([sys.executable, "-m", "fasteval.doors.cli", "--policy", "zero", "--env", ENV, "-n", str(n),
                        "-b", str(BATCH), "--seed", str(seed), "--device", "cpu", "-o", str(out)],
                       check=True, stdout=subprocess.DEVNULL)
        info = json.loads((out / "eval_info.json").read_text())
    return float(info["overall"]["eval_s"]), int(info["overall"]["env_steps"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tiny", action="store_true", help="200 episodes, one repeat (for the test suite)")
    args = parser.parse_args(argv)
    n, repeats = (200, 1) if args.tiny else (args.episodes, args.repeats)
    rows = {"sequential loop": sequential_loop,
            "sequential loop, numpy action": lambda n, seed: sequential_loop(n, seed, np.int64(0)),
            "sequential loop, gym.make": lambda n, seed: sequential_loop(n, seed, lean=False),
            "library": library, "CLI": cli}
    seconds: dict[str, list[float]] = {name: [] for name in rows}
    steps: dict[str, int] = {}
    for _ in range(repeats):
        for name, fn in rows.items():
            s, k = fn(n, args.seed)
            seconds[name].append(s)
            steps[name] = k
    print(format_machine(machine_info()))
    print("command:", command_line())
    print(f"workload: {ENV}, zero policy, batch {BATCH}, {n} episodes, seeds {args.seed}..{args.seed + n - 1}; "
          f"medians of {repeats} interleaved repeats")
    med = {name: statistics.median(v) for name, v in seconds.items()}
    table = [[name, f"{med[name]:.3f}", f"{steps[name]}", f"{med[name] / med['sequential loop']:.3f}",
              f"{med[name] / med['library']:.3f}"] for name in rows]
    print(markdown_table(["row", "eval_s (s)", "env steps", "vs sequential loop", "vs library"], table))
    same = len(set(steps.values())) == 1
    print(f"same episodes in every row: {same} ({steps['CLI']} env steps)")
    print(check_line("CLI eval_s <= 1.1x the library's", None if args.tiny else med["CLI"] / med["library"] <= 1.1,
                     f"{med['CLI'] / med['library']:.3f}x"))
    print(check_line("CLI eval_s <= 1.15x the sequential seeded-reset loop",
                     None if args.tiny else med["CLI"] / med["sequential loop"] <= 1.15,
                     f"{med['CLI'] / med['sequential loop']:.3f}x"))
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
