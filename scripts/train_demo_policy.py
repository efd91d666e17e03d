#!/usr/bin/env python
"""Train the demo CartPole-v1 policy shipped in ``src/fasteval/assets/cartpole_mlp/``.

Method: the cross-entropy method (CEM) on the flat parameter vector of a small
:class:`~fasteval.robot.policies.MLPPolicy` (hidden (16, 16), tanh, argmax head). Each generation
samples a population of parameter vectors around the current mean, scores every candidate on
the same few training episodes (all candidates stepped together in one vectorized CartPole,
one batched matmul per layer), and refits the mean and std to the elites. When the mean
scores well on its training episodes, it is checked with fasteval itself on 100 held-out
episodes (seeds ``10_000 + i``); training stops once that held-out average is >= 495.

Deterministic given ``--seed`` (one torch thread, seeded NumPy/torch generators).
Runs in well under a minute on one CPU core::

    python scripts/train_demo_policy.py            # writes src/fasteval/assets/cartpole_mlp/
    python scripts/train_demo_policy.py --seed 1 --out /tmp/cp
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv

import fasteval
from fasteval.robot.policies import MLPPolicy, save_checkpoint

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "src" / "fasteval" / "assets" / "cartpole_mlp"
HELD_OUT_SEED = 10_000
HELD_OUT_EPISODES = 100
TARGET = 495.0
MAX_STEPS = 500


def population_returns(module: MLPPolicy, flat: torch.Tensor, n_episodes: int, env_seed: int) -> torch.Tensor:
    """Mean return of each row of ``flat`` ([P, D] parameter vectors) on ``n_episodes`` episodes.

    Every candidate sees the same episodes (same reset seeds): common random numbers make
    the ranking less noisy. All P * n_episodes envs step together.
    """
    pop = flat.shape[0]
    # Slice the flat vectors into per-layer batched weights, in module.parameters() order.
    shaped, offset = [], 0
    for p in module.parameters():
        n = p.numel()
        shaped.append(flat[:, offset:offset + n].reshape(pop, *p.shape))
        offset += n
    layers = [(shaped[i], shaped[i + 1]) for i in range(0, len(shaped), 2)]  # (W [P,out,in], b [P,out])

    env = CartPoleVectorEnv(num_envs=pop * n_episodes, max_episode_steps=MAX_STEPS)
    obs, _ = env.reset(seed=env_seed)
    # The vector env draws all start states from one generator; tile one draw of n_episodes
    # starts across the population so that every candidate gets the same episodes.
    env.state = np.tile(env.state[:, :n_episodes], (1, pop))
    obs = env.state.T.astype(np.float32)
    alive = np.ones(pop * n_episodes, dtype=bool)
    total = np.zeros(pop * n_episodes, dtype=np.float64)
    with torch.no_grad():
        for _ in range(MAX_STEPS):
            h = torch.from_numpy(obs).reshape(pop, n_episodes, -1)
            for i, (w, b) in enumerate(layers):
                h = torch.baddbmm(b.unsqueeze(1), h, w.transpose(1, 2))
                if i < len(layers) - 1:
                    h = torch.tanh(h)
            action = h.argmax(-1).reshape(-1).numpy()
            obs, reward, terminated, truncated, _ = env.step(action)
            total += reward * alive
            alive &= ~(terminated | truncated)
            if not alive.any():
                break
    env.close()
    return torch.from_numpy(total.reshape(pop, n_episodes).mean(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--hidden", type=int, nargs="+", default=[16, 16])
    parser.add_argument("--population", type=int, default=64)
    parser.add_argument("--elites", type=int, default=8)
    parser.add_argument("--episodes", type=int, default=8, help="training episodes per candidate per generation")
    parser.add_argument("--max-generations", type=int, default=200)
    parser.add_argument("--target", type=float, default=TARGET,
                        help="held-out average return to stop at (a lower one checks sooner; the tests use 0)")
    args = parser.parse_args(argv)

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    rng = torch.Generator().manual_seed(args.seed)
    t0 = time.perf_counter()

    module = MLPPolicy(obs_dim=4, action_dim=2, hidden_sizes=tuple(args.hidden), activation="tanh", action_head="argmax")
    module.eval()
    mean = torch.nn.utils.parameters_to_vector(module.parameters()).detach().clone()
    std = torch.full_like(mean, 0.5)
    print(f"CEM on {mean.numel()} parameters: hidden {args.hidden}, population {args.population}, "
          f"elites {args.elites}, {args.episodes} episodes/candidate, seed {args.seed}", flush=True)

    # Held-out check with fasteval itself; the evaluator holds the live module, whose
    # parameters are overwritten in place before each check.
    evaluator = fasteval.Evaluator(env="CartPole-v1", policy=module, batch_size=HELD_OUT_EPISODES, device="cpu")
    held_out = float("nan")
    try:
        for gen in range(args.max_generations):
            noise = torch.randn(args.population, mean.numel(), generator=rng)
            pop = mean + std * noise
            pop[0] = mean  # keep the current mean in the race
            # Training episodes differ every generation, and never overlap the held-out seeds.
            scores = population_returns(module, pop, args.episodes, env_seed=args.seed * 1_000_003 + gen)
            order = torch.argsort(scores, descending=True, stable=True)
            elites = pop[order[: args.elites]]
            mean = elites.mean(0)
            std = elites.std(0) + 0.02 * max(0.0, 1.0 - gen / 50)  # a little extra noise early on
            mean_score = float(population_returns(module, mean[None], 2 * args.episodes, env_seed=10**9 + gen)[0])
            line = (f"gen {gen:3d}  best {float(scores.max()):6.1f}  pop-avg {float(scores.mean()):6.1f}  "
                    f"mean-policy {mean_score:6.1f}  std {float(std.mean()):.3f}  {time.perf_counter() - t0:5.1f}s")
            if mean_score >= min(MAX_STEPS - 1, args.target):
                torch.nn.utils.vector_to_parameters(mean, module.parameters())
                result = evaluator.evaluate(n_episodes=HELD_OUT_EPISODES, seed=HELD_OUT_SEED)
                held_out = float(result.overall()["avg_sum_reward"])
                line += f"  held-out({HELD_OUT_EPISODES} eps, seed {HELD_OUT_SEED}) {held_out:6.1f}"
            print(line, flush=True)
            if held_out >= args.target:
                break
        else:
            print(f"did not reach {args.target} on the held-out episodes in {args.max_generations} generations", flush=True)
            return 1
    finally:
        evaluator.close()

    folder = save_checkpoint(module, args.out)
    print(f"held-out average return {held_out:.1f} over {HELD_OUT_EPISODES} episodes; "
          f"trained in {time.perf_counter() - t0:.1f}s; saved to {folder}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
