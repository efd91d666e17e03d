"""LeRobot's own evaluation against fasteval on PushT with an ACT checkpoint (random weights, LeRobot's
default ACT size), the same seeds, no videos. Needs the ``lerobot`` extra (Python >= 3.12).

Rows, in one sitting:

* ``lerobot sync``: LeRobot's ``eval_policy_all`` (``fasteval.robot.lerobot.reference``; its async envs
  crash on PushT, so sync only), with torch's default threads and again with one thread (fasteval's
  default; the second thread stalls whenever another process holds the other core);
* ``fasteval wave|continuous x sync|async``: the same checkpoint through ``--env.type=pusht``
  (fasteval's env choice for it, observations ``lerobot``), ``--reset-mode wave`` or the default;
* ``env only``: the same episodes' seeded resets and steps with a fixed action, one env, no policy:
  the floor for a sync run on one core (and for an async run, that floor over the cores).

Each fasteval row reports its stage breakdown (``env_step``, ``h2d``, ``policy``, ``d2h``,
``bookkeeping``). Times exclude building envs and loading the policy, as LeRobot's ``eval_s`` does.

The sitting exits 1 (each problem printed as a FAIL line) when any two fasteval rows' per-episode
rewards differ, or, on CUDA, when a row's chunk graph (``lerobot_chunk_cuda_graph``) is not ``captured``.

    python benchmarks/bench_lerobot.py [--episodes 10] [--batch 10] [--steps 300] [--json out.json]
    python benchmarks/bench_lerobot.py --tiny          # the test-suite size (tiny ACT, 2 x 5 steps)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import format_machine, machine_info, write_json  # noqa: E402

PUSHT_KWARGS = {"obs_type": "pixels_agent_pos", "render_mode": "rgb_array",
                "visualization_width": 384, "visualization_height": 384}
STAGES = ("env_step", "h2d", "policy", "d2h", "bookkeeping")


def fasteval_row(folder: Path, env_id: str, n: int, batch: int, steps: int, seed: int, device: str,
                 reset_mode: str, vectorization: str, obs_format: str = "lerobot") -> dict[str, Any]:
    from fasteval import evaluate

    result = evaluate(env=env_id, env_kwargs=dict(PUSHT_KWARGS), policy=str(folder), n_episodes=n, batch_size=batch,
                      seed=seed, device=device, max_steps=steps, observation_format=obs_format, reset_mode=reset_mode,
                      vectorization=vectorization)
    return {"eval_s": result.eval_s, "timings": dict(result.timings), "batching": result.meta["batching"],
            "sum_rewards": [r["sum_reward"] for r in result.per_episode],
            "chunk_graph": result.meta.get("lerobot_chunk_cuda_graph")}


def problems(rows: dict[str, dict[str, Any]], device: str) -> list[str]:
    """What is wrong with a sitting's rows ([] if nothing): every fasteval row must give the same per-episode
    rewards, exactly (same seeds; wave, continuous, sync, async and both PushT implementations agree), and
    on CUDA a row that reports a chunk graph (``lerobot_chunk_cuda_graph``) must have ``captured`` it."""
    found = []
    ours = {name: row for name, row in rows.items() if name.startswith("fasteval")}
    first = next(iter(ours), None)
    for name, row in ours.items():
        want, got = ours[first]["sum_rewards"], row["sum_rewards"]
        if got != want:
            where = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            found.append(f"{name}: per-episode rewards differ from {first!r} (first at episode {where}: "
                         f"{got[where] if where < len(got) else None} vs {want[where] if where < len(want) else None})")
    if device.startswith("cuda"):
        for name, row in ours.items():
            status = row.get("chunk_graph")
            if status is not None and status != "captured":
                found.append(f"{name}: chunk graph {status!r} on {device} (want 'captured')")
    return found


def env_only_row(env_id: str, n: int, steps: int, seed: int) -> dict[str, Any]:
    import numpy as np

    from fasteval.core.envs import make_factory
    from fasteval.robot.env_kinds import ENV_KINDS

    _factory, env, _cap = make_factory(env_id, dict(PUSHT_KWARGS), steps, kinds=ENV_KINDS)  # the env fasteval's rows step
    action = np.full(env.action_space.shape, 256.0, dtype=env.action_space.dtype)
    start = time.perf_counter()
    for i in range(n):
        env.reset(seed=seed + i)
        for _ in range(steps):
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                break
    elapsed = time.perf_counter() - start
    env.close()
    return {"eval_s": elapsed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--steps", type=int, default=300, help="episode length (PushT's is 300)")
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--tiny", action="store_true", help="tiny ACT, 2 episodes x 5 steps (for tests)")
    parser.add_argument("--skip-lerobot", action="store_true", help="leave out LeRobot's own row")
    parser.add_argument("--obs-format", default="lerobot", choices=["lerobot", "raw"],
                        help="lerobot: what --env.type=pusht gives; raw: preprocess_observation in the policy")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.tiny:
        args.episodes, args.batch, args.steps = 2, 2, 5

    from fasteval.robot.fast_envs import pusht_env_id
    from fasteval.robot.lerobot.reference import lerobot_eval
    from fasteval.robot.lerobot.testing import ACT_DEFAULT_SIZE, write_act_checkpoint

    info = machine_info()
    env_id = pusht_env_id()
    n, b, steps, seed = args.episodes, args.batch, args.steps, args.seed
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = write_act_checkpoint(Path(tmp) / "act", **({} if args.tiny else ACT_DEFAULT_SIZE))
        if not args.skip_lerobot:
            ref = lerobot_eval(folder, n, b, seed=seed, device=args.device, episode_length=steps)
            rows["lerobot sync"] = {"eval_s": ref["eval_s"],
                                    "sum_rewards": [r["sum_reward"] for r in ref["per_episode"]]}
            import torch

            threads = torch.get_num_threads()
            torch.set_num_threads(1)  # fasteval's default (cpu_threads=1): a fairer peer on a shared box
            try:
                one = lerobot_eval(folder, n, b, seed=seed, device=args.device, episode_length=steps)
            finally:
                torch.set_num_threads(threads)
            rows["lerobot sync, 1 torch thread"] = {"eval_s": one["eval_s"]}
        for mode in ("wave", "auto"):
            for vec in ("sync", "async"):
                name = f"fasteval {'wave' if mode == 'wave' else 'continuous'} {vec}"
                rows[name] = fasteval_row(folder, env_id, n, b, steps, seed, args.device, mode, vec, args.obs_format)
        if env_id != "gym_pusht/PushT-v0":  # the env LeRobot steps: separates the env's share of the gap
            for vec in ("sync", "async"):
                rows[f"fasteval continuous {vec} (gym_pusht)"] = fasteval_row(
                    folder, "gym_pusht/PushT-v0", n, b, steps, seed, args.device, "auto", vec, args.obs_format)
        rows["env only"] = env_only_row(env_id, n, steps, seed)
        if env_id != "gym_pusht/PushT-v0":
            rows["env only (gym_pusht)"] = env_only_row("gym_pusht/PushT-v0", n, steps, seed)

    total_steps = n * steps
    base = rows.get("lerobot sync", {}).get("eval_s")
    env_floor = rows["env only"]["eval_s"]
    print(f"## bench_lerobot: PushT ({env_id}), ACT {'tiny' if args.tiny else 'default size'}, random weights, "
          f"{n} episodes x {steps} steps, batch {b}, device {args.device}, observations {args.obs_format}\n")
    print(format_machine(info) + "\n")
    print("| row | eval s | steps/s | vs LeRobot | vs env only | " + " | ".join(STAGES) + " |")
    print("|---|---:|---:|---:|---:|" + "---:|" * len(STAGES))
    for name, row in rows.items():
        t = row["eval_s"]
        vs = f"{base / t:.2f}x" if base else "n/a"
        stages = " | ".join(f"{row['timings'].get(s, 0.0):.2f}" if "timings" in row else "" for s in STAGES)
        print(f"| {name} | {t:.2f} | {total_steps / t:.0f} | {vs} | {t / env_floor:.2f} | {stages} |")
    if base:
        ref_rewards = rows["lerobot sync"]["sum_rewards"]
        wave = rows["fasteval wave sync"]["sum_rewards"]
        worst = max(abs(a - b) for a, b in zip(ref_rewards, wave))
        print(f"\nper-episode sum_reward, fasteval wave sync vs LeRobot: max |diff| = {worst:.2e}")
    found = problems(rows, args.device)
    for line in found:
        print(f"FAIL: {line}")
    if args.json:
        write_json(args.json, {"machine": info, "env": env_id, "episodes": n, "batch": b, "steps": steps, "rows": rows,
                               "problems": found})
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
