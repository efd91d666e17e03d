"""What the canonical policy call costs: steps/s with blocks of R rows against free batching (``--policy-block 0``).

Rows (each the median of ``--repeats`` interleaved evaluations of one engine, built once, so env construction
and the dry run are out of the timing):

* CartPole-v1 with the bundled MLP at ``-b 16`` and ``-b 256`` (a tiny network: blocks cost calls);
* HalfCheetah-v5 with a 256x256 MLP at ``-b 16`` (a chaotic simulator: the reason blocks exist);
* with LeRobot importable (the LeRobot environment, scripts/lerobot_env.sh): ACT and Diffusion on PushT at
  ``-b 10`` (heavy networks: padding costs compute at small batches).

For every row the ratio blocks / free is reported. No R keeps every row within 10% of free batching (tiny networks
pay per call, heavy ones pay for padded rows); R = 16 is the default as the best trade-off (benchmarks/RESULTS.md,
"Policy blocks"). Different R give different bits on conv networks (other kernel shapes): each R is its own evaluation.

    python benchmarks/bench_policy_blocks.py [--tiny] [--repeats 5] [--blocks 4,8,16,64]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import command_line, format_machine, machine_info, markdown_table  # noqa: E402

DEMO = str(ROOT / "src" / "fasteval" / "assets" / "cartpole_mlp")


def workloads(tiny: bool, tmp: Path) -> list[tuple[str, dict]]:
    """``(label, EvalSpec fields)`` of every row this environment can run."""
    rows = [
        ("CartPole MLP, -b 16", dict(env="CartPole-v1", policy=DEMO, batch_size=16, n_episodes=16 if tiny else 160)),
        ("CartPole MLP, -b 256", dict(env="CartPole-v1", policy=DEMO, batch_size=256, n_episodes=256 if tiny else 1024)),
    ]
    try:
        import mujoco  # noqa: F401

        sys.path.insert(0, str(ROOT))
        from tests.test_policy_blocks import cheetah_mlp, save_mlp

        cheetah = save_mlp(cheetah_mlp(), tmp / "cheetah")
        rows.append(("HalfCheetah MLP 256x256, -b 16", dict(env="HalfCheetah-v5", policy=cheetah, batch_size=16,
                                                           n_episodes=16, max_steps=20 if tiny else 200)))
    except ImportError:
        pass
    try:
        import lerobot  # noqa: F401

        from fasteval.robot.lerobot.testing import write_act_checkpoint, write_diffusion_checkpoint

        pusht = dict(env="gym_pusht/PushT-v0", observation_format="lerobot", device="cpu",
                     env_kwargs={"obs_type": "pixels_agent_pos", "render_mode": "rgb_array"})
        act = write_act_checkpoint(tmp / "act", seed=0)
        rows.append(("PushT ACT (chunk 10), -b 10", dict(pusht, policy=str(act), batch_size=10, n_episodes=10,
                                                        max_steps=10 if tiny else 100)))
        diffusion = write_diffusion_checkpoint(tmp / "diffusion", seed=0, scheduler="DDIM")
        rows.append(("PushT Diffusion (executes 8), -b 10", dict(pusht, policy=str(diffusion), batch_size=10,
                                                                n_episodes=10, max_steps=8 if tiny else 48)))
    except ImportError:
        pass
    return rows


def steps_per_s(evaluator) -> float:
    started = time.perf_counter()
    result = evaluator.evaluate()
    seconds = time.perf_counter() - started
    return sum(r["length"] for r in result.per_episode) / seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="one repeat, short episodes (the test suite's smoke run)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--blocks", default="4,8,16,64", help="the R values to time beside free batching (0)")
    args = ap.parse_args(argv)
    repeats = 1 if args.tiny else args.repeats
    blocks = [0] + [int(b) for b in args.blocks.split(",")]

    from fasteval import Evaluator

    print("# Policy blocks: steps/s with blocks of R rows against free batching\n")
    print(format_machine(machine_info()))
    print(f"- command: `{command_line()}`\n")
    with tempfile.TemporaryDirectory() as tmp:
        table = []
        for label, fields in workloads(args.tiny, Path(tmp)):
            engines = {r: Evaluator(**fields, policy_block=r) for r in blocks}
            try:
                for ev in engines.values():  # warm-up: the dry run and first calls out of the timing
                    ev.evaluate(n_episodes=min(2, fields["n_episodes"]))
                times: dict[int, list[float]] = {r: [] for r in blocks}
                for _ in range(repeats):  # interleaved: background noise hits every R alike
                    for r, ev in engines.items():
                        times[r].append(steps_per_s(ev))
                same = len({tuple((e["seed"], e["sum_reward"], e["length"]) for e in ev.evaluate().per_episode)
                            for r, ev in engines.items() if r}) == 1
            finally:
                for ev in engines.values():
                    ev.close()
            free = statistics.median(times[0])
            row = [label, f"{free:,.0f}"]
            row += [f"{statistics.median(times[r]):,.0f} ({statistics.median(times[r]) / free:.2f}x)" for r in blocks[1:]]
            row.append("yes" if same else "NO")
            table.append(row)
        headers = ["workload", "free (R=0) steps/s"] + [f"R={r}" for r in blocks[1:]] + ["episodes equal across these R (one R is one evaluation)"]
        print(markdown_table(headers, table))
    print("\nRatios are blocks / free batching (1.00x: no cost). Medians of "
          f"{repeats} interleaved repeat{'s' if repeats != 1 else ''}.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
