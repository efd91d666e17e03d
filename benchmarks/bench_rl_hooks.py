"""What evaluation costs inside an SB3 training run: SB3's ``EvalCallback`` against fasteval's, same episodes.

Usage: ``python benchmarks/bench_rl_hooks.py [--timesteps 100000] [--eval-freq 10000] [--episodes 50]
[--batch 16] [--tiny] [--json out.json]``

One ``PPO("MlpPolicy", "CartPole-v1")`` run (CPU). One callback drives four evaluators side by side, each
called on every training step (so each keeps its own ``n_calls``), and on every ``eval_freq``-th call each
evaluates the same weights (the order rotates from one evaluation to the next, so that no row always goes
first):

* ``SB3 EvalCallback``: SB3's own, as its docs use it (``eval_env`` a ``Monitor``-wrapped env, one at a time,
  continuing from wherever the last evaluation left it: not seeded per episode);
* ``SB3 EvalCallback, N envs``: the same with a ``DummyVecEnv`` of ``--batch`` Monitor-wrapped envs (SB3's
  batched evaluation: ``evaluate_policy`` splits the episodes evenly over the envs; not seeded per episode);
* ``SB3 evaluate_policy, seeded``: SB3's ``evaluate_policy`` on ``--episodes`` single-env ``DummyVecEnv`` s,
  env ``i`` seeded ``seed + i`` before each evaluation (built once): the same episodes as fasteval's, SB3's
  way;
* ``fasteval EvalCallback``: ``fasteval.integrations.sb3.EvalCallback`` (engine built once, ``--batch`` envs,
  episode ``i`` seeded ``seed + i``).

Each evaluator's time is the wall time of its ``on_step`` calls that evaluated (logging to SB3's logger
included, the same for all; env building is outside, as SB3 builds its eval env at construction). The
report gives the median seconds per evaluation, the total, the ratio to SB3's ``EvalCallback``, the share of
the run's wall time spent evaluating, the mean returns, and whether the two seeded rows saw the same
episodes (per-episode returns and lengths equal at every evaluation).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import command_line, format_machine, machine_info, markdown_table, write_json  # noqa: E402

ENV = "CartPole-v1"
SEED = 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timesteps", type=int, default=100_000)
    parser.add_argument("--eval-freq", type=int, default=10_000, help="evaluate every N training steps (n_envs=1)")
    parser.add_argument("--episodes", type=int, default=50, help="episodes per evaluation")
    parser.add_argument("--batch", type=int, default=16, help="fasteval's env slots")
    parser.add_argument("--tiny", action="store_true", help="2,048 steps, evaluation every 1,024, 4 episodes (CI)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if args.tiny:
        args.timesteps, args.eval_freq, args.episodes = 2048, 1024, 4
    torch.set_num_threads(1)

    import gymnasium as gym
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback, EvalCallback as SB3EvalCallback
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    from fasteval.integrations.sb3 import EvalCallback as FastevalEvalCallback

    class SeededEvaluatePolicy(BaseCallback):
        """``evaluate_policy`` on one single-env DummyVecEnv per episode, env i seeded seed + i at every evaluation."""

        def __init__(self, n: int, eval_freq: int):
            super().__init__()
            self.n, self.eval_freq = n, eval_freq
            self.venvs = [DummyVecEnv([lambda: gym.make(ENV)]) for _ in range(n)]
            self.last: list[tuple[float, int]] = []

        def _on_step(self) -> bool:
            if self.n_calls % self.eval_freq == 0:
                out = []
                for i, venv in enumerate(self.venvs):
                    venv.seed(SEED + i)
                    rewards, lengths = evaluate_policy(self.model, venv, n_eval_episodes=1, return_episode_rewards=True,
                                                       warn=False)
                    out.append((float(rewards[0]), int(lengths[0])))
                self.last = out
                self.logger.record("eval/mean_reward", statistics.fmean(r for r, _ in out))
                self.logger.dump(self.num_timesteps)
            return True

    sb3 = SB3EvalCallback(Monitor(gym.make(ENV)), n_eval_episodes=args.episodes, eval_freq=args.eval_freq, verbose=0)
    batch = min(args.batch, args.episodes)
    sb3_vec = SB3EvalCallback(DummyVecEnv([lambda: Monitor(gym.make(ENV)) for _ in range(batch)]),
                              n_eval_episodes=args.episodes, eval_freq=args.eval_freq, verbose=0, warn=False)
    seeded = SeededEvaluatePolicy(args.episodes, args.eval_freq)
    ours = FastevalEvalCallback(ENV, n_eval_episodes=args.episodes, eval_freq=args.eval_freq, seed=SEED,
                                batch_size=batch, verbose=0)
    rows = {"SB3 EvalCallback": sb3, f"SB3 EvalCallback, {batch} envs": sb3_vec, "SB3 evaluate_policy, seeded": seeded,
            "fasteval EvalCallback": ours}
    seconds: dict[str, list[float]] = {name: [] for name in rows}
    returns: dict[str, list[float]] = {name: [] for name in rows}
    same: list[bool] = []

    class SideBySide(BaseCallback):
        def _init_callback(self) -> None:
            for cb in rows.values():
                cb.init_callback(self.model)

        def _on_step(self) -> bool:
            due = self.n_calls % args.eval_freq == 0
            names = list(rows)
            if due:
                k = (self.n_calls // args.eval_freq) % len(names)
                names = names[k:] + names[:k]
            for name in names:
                cb = rows[name]
                cb.update_locals(self.locals)
                start = time.perf_counter()
                cb.on_step()
                if due:
                    seconds[name].append(time.perf_counter() - start)
            if due:
                returns["SB3 EvalCallback"].append(float(sb3.last_mean_reward))
                returns[f"SB3 EvalCallback, {batch} envs"].append(float(sb3_vec.last_mean_reward))
                returns["SB3 evaluate_policy, seeded"].append(statistics.fmean(r for r, _ in seeded.last))
                returns["fasteval EvalCallback"].append(float(ours.last_mean_reward))
                mine = [(float(r["sum_reward"]), int(r["length"])) for r in ours.last_result.per_episode]
                same.append(mine == seeded.last)
            return True

        def _on_training_end(self) -> None:
            ours.on_training_end()

    info = machine_info()
    model = PPO("MlpPolicy", ENV, seed=0, device="cpu", verbose=0)
    start = time.perf_counter()
    model.learn(total_timesteps=args.timesteps, callback=SideBySide())
    wall = time.perf_counter() - start

    base = statistics.median(seconds["SB3 EvalCallback"])
    base_vec = statistics.median(seconds[f"SB3 EvalCallback, {batch} envs"])
    table = []
    for name in rows:
        med, total = statistics.median(seconds[name]), sum(seconds[name])
        table.append([name, f"{med:.3f}", f"{total:.2f}", f"{base / med:.2f}x", f"{base_vec / med:.2f}x",
                      f"{100 * total / wall:.1f}%", f"{statistics.fmean(returns[name]):.1f}"])
    print(f"# SB3 PPO on {ENV}: evaluation cost, {args.episodes} episodes every {args.eval_freq} steps\n")
    print(format_machine(info))
    print(f"\ncommand: {command_line()}")
    print(f"run: {args.timesteps} steps, {len(seconds['SB3 EvalCallback'])} evaluations each, {wall:.1f} s wall in "
          f"all ({len(rows)} evaluators side by side), fasteval batch {batch}\n")
    print(markdown_table(["evaluator", "median s / eval", "total s", "speed vs SB3 EvalCallback",
                          f"vs SB3, {batch} envs", "share of run wall", "mean return (over evals)"], table))
    print(f"\nsame episodes in the two seeded rows at every evaluation: {all(same)} ({sum(same)}/{len(same)})")
    if args.json:
        write_json(args.json, {"machine": info, "args": vars(args), "seconds": seconds, "returns": returns,
                               "same_episodes": same, "wall_s": wall})
    return 0 if all(same) else 1


if __name__ == "__main__":
    sys.exit(main())
