"""Pipelined vs plain evaluation on CPU, with env and policy costs balanced (issue 3).

Workload: ``fasteval.testing.busy:make_busy_env`` (2 ms of CPU per step, 64x64x3 uint8 images)
and a small conv policy (width 32) costing about 2.2 ms per image row on one thread, so that one
env step and one policy row cost about the same; 2 async workers (batch 2). Rows, interleaved per repeat: fasteval async plain, fasteval async ``--pipeline``,
fasteval sync. Reports medians of env steps/s and the pipelined/plain ratio; checks that
all rows report identical per-episode results.

Why pipelining can win here: the plain loop runs the policy on both rows (P2 ~ 4.5-5.4 ms), then
waits for both envs (E ~ 2.1 ms with the round trip); the pipelined loop runs the policy on one
group's row (P1 ~ 2.2 ms) while the other group's env steps, so a pair of env steps costs
max(2 P1, P1 + E) instead of P2 + E: ideally ~7 ms -> ~4.4 ms (1.6x). Pipelining cannot win
when a policy call costs the same for one row as for two (tiny MLPs): then 2 P1 >= P2 + E.

    python benchmarks/bench_pipeline.py [--episodes 60] [--repeats 3] [--step-ms 1.0] [--tiny]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Samples, check_line, command_line, format_machine, machine_info, markdown_table  # noqa: E402

from fasteval import Evaluator  # noqa: E402

ENV = "fasteval.testing.busy:make_busy_env"


class ConvPolicy(nn.Module):
    """uint8 [B, 64, 64, 3] images -> 2 logits. ~2.2 ms per row on one CPU thread at width 32."""

    def __init__(self, width: int = 32):
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(
            nn.Conv2d(3, width, 5, padding=2), nn.ReLU(), nn.Conv2d(width, width, 5, padding=2), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, 2),
        )

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs.permute(0, 3, 1, 2).float() / 255.0)


ROWS = {
    "async": dict(vectorization="async", pipeline=False),
    "async --pipeline": dict(vectorization="async", pipeline=True),
    "sync": dict(vectorization="sync", pipeline=False),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--step-ms", type=float, default=2.0)
    parser.add_argument("--width", type=int, default=32, help="conv width of the policy (its cost per row)")
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--tiny", action="store_true", help="a few episodes, one repeat (used by the test suite)")
    args = parser.parse_args(argv)
    if args.tiny:
        args.episodes, args.repeats, args.step_ms, args.width = 4, 1, 0.05, 4
    torch.set_num_threads(1)
    policy = ConvPolicy(args.width)
    evaluators = {
        name: Evaluator(env=ENV, policy=policy, env_kwargs={"step_ms": args.step_ms}, batch_size=args.batch_size,
                        device="cpu", **options)
        for name, options in ROWS.items()
    }
    samples, reference = Samples(), None
    try:
        for ev in evaluators.values():
            ev.evaluate(n_episodes=2, seed=10_000)  # build and warm up outside the timings
        for _ in range(args.repeats):
            for name, ev in evaluators.items():
                result = ev.evaluate(n_episodes=args.episodes, seed=0)
                overall = result.overall()
                samples.add((name, "steps_per_s"), overall["steps_per_s"])
                samples.add((name, "episodes_per_s"), overall["episodes_per_s"])
                numbers = [(r["episode_ix"], r["sum_reward"], r["length"], r["success"]) for r in result.per_episode]
                if reference is None:
                    reference = numbers
                elif numbers != reference:
                    raise SystemExit(f"row {name!r} disagrees with the first row on per-episode results")
    finally:
        for ev in evaluators.values():
            ev.close()
    base = samples.median(("async", "steps_per_s"))
    rows = [[name, f"{samples.median((name, 'steps_per_s')):.0f}", f"{samples.median((name, 'episodes_per_s')):.1f}",
             f"{samples.median((name, 'steps_per_s')) / base:.2f}x"] for name in ROWS]
    print(format_machine(machine_info()))
    print(f"command: {command_line()}")
    print(f"workload: BusyEnv step_ms={args.step_ms}, ConvPolicy(width {args.width}), batch {args.batch_size}, "
          f"{args.episodes} episodes, medians of {args.repeats} repeats; per-episode results identical in all rows")
    print(markdown_table(["row", "env steps/s", "episodes/s", "vs async plain"], rows))
    ratio = samples.median(("async --pipeline", "steps_per_s")) / base
    print(check_line("pipelining >= 1.3x the non-pipelined async throughput", None if args.tiny else ratio >= 1.3,
                     f"{ratio:.2f}x"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
