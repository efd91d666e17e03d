"""REINFORCE on CartPole-v1 (CPU), evaluated every K updates with fasteval's ``Evaluator``.

The Evaluator is built once, around the live policy module that training updates, and
called every ``--eval-every`` updates (and after the last one). Each evaluation uses the
weights as they are at that moment; the global RNGs, the module's train/eval modes and its
``requires_grad`` flags are left as they were, so training is not disturbed. With
``--async-eval`` the evaluations run in a worker process on a snapshot of the weights
while training continues.

Results are printed and, when tensorboard is installed, written with ``SummaryWriter`` into
``outputs/train_with_eval`` (gitignored, like every ``outputs/`` folder; ``--logdir`` changes it):
``tensorboard --logdir outputs/train_with_eval``.

Usage::

    python examples/train_with_eval.py                      # under 2 minutes on 2 CPU cores
    python examples/train_with_eval.py --updates 3          # smoke test
    python examples/train_with_eval.py --async-eval
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import Future

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from fasteval import EvalResult, Evaluator


class PolicyNet(nn.Module):
    """Observation ``[B, 4]`` -> logits ``[B, 2]``.

    Training samples from the logits; fasteval takes their argmax (the greedy policy).
    Defined at module level so that ``--async-eval`` can send it to the worker process.
    """

    def __init__(self, hidden: int = 64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, hidden), nn.Tanh(), nn.Linear(hidden, 2))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs.float())


def collect_episode(env: gym.Env, policy: PolicyNet, seed: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, list[float]]:
    """One episode with sampled actions (no autograd while acting); returns observations, actions, rewards."""
    obs, _ = env.reset(seed=seed)
    observations, actions, rewards = [], [], []
    done = False
    with torch.no_grad():
        while not done:
            obs_t = torch.as_tensor(obs)
            probs = torch.softmax(policy(obs_t.unsqueeze(0)), dim=-1)
            action = int(torch.multinomial(probs, 1, generator=generator))
            observations.append(obs_t)
            actions.append(action)
            obs, reward, terminated, truncated, _ = env.step(action)
            rewards.append(float(reward))
            done = terminated or truncated
    return torch.stack(observations), torch.as_tensor(actions), rewards


def returns_to_go(rewards: list[float], gamma: float) -> torch.Tensor:
    out, running = np.zeros(len(rewards), dtype=np.float32), 0.0
    for t in reversed(range(len(rewards))):
        running = rewards[t] + gamma * running
        out[t] = running
    return torch.from_numpy(out)


def make_writer(logdir: str | None):
    """A TensorBoard SummaryWriter if tensorboard is installed (and a logdir was given), else None."""
    if not logdir:
        return None
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # torch.utils.tensorboard needs the tensorboard package
        print("tensorboard is not installed: printing only")
        return None
    return SummaryWriter(logdir)


def log_eval(result: EvalResult, update: int, writer) -> None:
    scalars = result.to_dict(prefix="eval/")
    shown = ("eval/avg_sum_reward", "eval/pc_success", "eval/avg_length", "eval/eval_s")
    # CartPole reports no success signal: its eval/pc_success is absent (not a false 0%)
    print(f"update {update:4d} | " + "  ".join(f"{k}={scalars[k]:.3g}" for k in shown if k in scalars), flush=True)
    if writer is not None:
        for key, value in scalars.items():
            writer.add_scalar(key, value, update)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=100, help="policy-gradient updates")
    parser.add_argument("--episodes-per-update", type=int, default=8)
    parser.add_argument("--eval-every", type=int, default=10, help="evaluate every K updates (and after the last)")
    parser.add_argument("--eval-episodes", type=int, default=50)
    parser.add_argument("--eval-batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--gamma", type=float, default=0.99)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--async-eval", action="store_true", help="evaluate in a background process on weight snapshots")
    parser.add_argument("--logdir", default="outputs/train_with_eval",
                        help="TensorBoard folder, gitignored by default ('' to disable)")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    policy = PolicyNet()
    generator = torch.Generator().manual_seed(args.seed)  # action sampling during training
    optimizer = torch.optim.Adam(policy.parameters(), lr=args.lr)
    env = gym.make("CartPole-v1")
    writer = make_writer(args.logdir)
    pending: list[tuple[int, Future]] = []

    # Built once; every evaluation reuses its envs and buffers and reads the live weights.
    # Evaluation episodes use seeds 10_000.. (never the training seeds), the same ones every time.
    evaluator = Evaluator("CartPole-v1", policy=policy, batch_size=args.eval_batch, device="cpu",
                          n_episodes=args.eval_episodes, seed=10_000)
    start = time.perf_counter()
    with evaluator:
        for update in range(1, args.updates + 1):
            observations, actions, weights, lengths = [], [], [], []
            for i in range(args.episodes_per_update):
                obs, act, rewards = collect_episode(env, policy, args.seed * 1_000_000 + update * 1_000 + i, generator)
                ret = returns_to_go(rewards, args.gamma)
                observations.append(obs)
                actions.append(act)
                weights.append((ret - ret.mean()) / (ret.std() + 1e-8) if len(ret) > 1 else ret * 0)
                lengths.append(len(rewards))
            # one batched forward with autograd over every step of the update
            log_probs = torch.log_softmax(policy(torch.cat(observations)), dim=-1)
            taken = log_probs.gather(1, torch.cat(actions).unsqueeze(1)).squeeze(1)
            loss = -(taken * torch.cat(weights)).sum() / args.episodes_per_update
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if writer is not None:
                writer.add_scalar("train/avg_episode_length", float(np.mean(lengths)), update)

            if update % args.eval_every == 0 or update == args.updates:
                if args.async_eval:
                    pending.append((update, evaluator.evaluate_async()))  # snapshot now, result later
                else:
                    log_eval(evaluator.evaluate(), update, writer)
            while pending and pending[0][1].done():
                done_update, future = pending.pop(0)
                log_eval(future.result(), done_update, writer)
        for done_update, future in pending:
            log_eval(future.result(), done_update, writer)
    env.close()
    if writer is not None:
        writer.close()
    print(f"done: {args.updates} updates in {time.perf_counter() - start:.1f} s", flush=True)


if __name__ == "__main__":  # required: --async-eval starts a 'spawn' worker, which re-imports this file
    main()
