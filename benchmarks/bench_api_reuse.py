"""What a repeated ``Evaluator.evaluate`` costs beyond the steps it runs.

Usage: ``python benchmarks/bench_api_reuse.py [--env CartPole-v1] [--episodes 200] [--batch 16]
[--repeats 5] [--calls 3] [--json out.json]``

Per repeat (rows interleaved, repeat loop outermost): build an ``Evaluator`` around a
64x64 MLP (fixed random init, argmax actions), time its first ``evaluate`` (which builds
the envs, buffers and policy adapter, and dry-runs the policy), then time ``--calls``
repeated ``evaluate`` calls on the same Evaluator. For each repeated call it compares the
wall time of the whole call with the engine's own ``eval_s`` (the episode loop: env steps,
policy, copies, bookkeeping). ``overhead = wall / eval_s - 1`` is what the library door
adds per call: the ledger, RNG save/restore, mode save/restore, the per-episode records.

Target: median overhead under 10% -> PASS, else FAIL. Medians over every timed call.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import check_line, format_machine, machine_info, markdown_table, write_json  # noqa: E402

from fasteval import Evaluator  # noqa: E402
from fasteval.robot.policies import MLPPolicy  # noqa: E402

TARGET = 0.10


def make_policy(obs_dim: int, n_actions: int) -> MLPPolicy:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return MLPPolicy(obs_dim, n_actions, hidden_sizes=(64, 64), action_head="argmax").eval()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--calls", type=int, default=3, help="repeated evaluate calls timed per repeat")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--json", default=None, help="write the raw samples and medians here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    import gymnasium as gym

    probe = gym.make(args.env)
    obs_dim, n_actions = int(probe.observation_space.shape[0]), int(probe.action_space.n)
    probe.close()

    first, repeat_wall, repeat_eval, overhead, steps = [], [], [], [], []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        ev = Evaluator(args.env, policy=make_policy(obs_dim, n_actions), batch_size=args.batch, device="cpu")
        result = ev.evaluate(n_episodes=args.episodes, seed=0)
        first.append(time.perf_counter() - t0)
        for _call in range(args.calls):
            t0 = time.perf_counter()
            result = ev.evaluate(n_episodes=args.episodes, seed=0)
            wall = time.perf_counter() - t0
            repeat_wall.append(wall)
            repeat_eval.append(result.eval_s)
            overhead.append(wall / result.eval_s - 1.0)
            steps.append(result.overall()["env_steps"])
        ev.close()

    med = {
        "first_call_s": statistics.median(first),
        "repeat_call_s": statistics.median(repeat_wall),
        "repeat_eval_s": statistics.median(repeat_eval),
        "overhead": statistics.median(overhead),
        "first_over_repeat": statistics.median(first) / statistics.median(repeat_wall),
        "env_steps": statistics.median(steps),
        "steps_per_s": statistics.median(steps) / statistics.median(repeat_wall),
    }
    info = machine_info()
    print(f"# Evaluator reuse: {args.env}, {args.episodes} episodes, batch {args.batch}, 64x64 MLP, "
          f"{args.repeats} repeats x {args.calls} calls (medians)\n")
    print(format_machine(info) + "\n")
    print(markdown_table(
        ["measure", "value"],
        [
            ["first evaluate (build + dry run + episodes), s", f"{med['first_call_s']:.4f}"],
            ["repeated evaluate, wall, s", f"{med['repeat_call_s']:.4f}"],
            ["repeated evaluate, engine eval_s, s", f"{med['repeat_eval_s']:.4f}"],
            ["overhead of a repeated call (wall / eval_s - 1)", f"{100 * med['overhead']:.2f}%"],
            ["first call / repeated call", f"{med['first_over_repeat']:.2f}x"],
            ["env steps per call", f"{med['env_steps']:.0f}"],
            ["env steps/s (repeated call, wall)", f"{med['steps_per_s']:.0f}"],
        ],
    ))
    ok = med["overhead"] < TARGET
    print("\n" + check_line("repeated evaluate costs < 10% more than its steps", ok,
                            f"median overhead {100 * med['overhead']:.2f}% (target < {100 * TARGET:.0f}%)"))
    if args.json:
        write_json(args.json, {"args": vars(args), "machine": info, "medians": med, "samples": {
            "first_call_s": first, "repeat_call_s": repeat_wall, "repeat_eval_s": repeat_eval, "overhead": overhead}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
