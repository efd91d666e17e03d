"""Speed-up of the env worker pool with the number of workers, on an env of fixed CPU cost (issue 15).

The env (:class:`FixedCostEnv`, below) burns a fixed amount of NumPy arithmetic per step, about
``--step-ms`` milliseconds (calibrated once, in this process, and passed to every worker as an
iteration count, so each step does the same work whatever the worker). The pool holds
``2 * max(W)`` slots; every slot steps every time (episodes never end), so only the workers'
parallelism changes between rows. For W = 1, 2, 4, ... up to the usable cores (plus the cores
themselves when they are not a power of two), it reports env steps/s and the speed-up over W = 1.
Start-up is outside the timings. It finishes in well under 3 minutes (each row runs about
``--seconds``). Goal on a 16-core machine: >= 12x at W = 16.

    python benchmarks/scaling.py [--step-ms 1.0] [--seconds 3] [--max-workers N] [--tiny]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import command_line, format_machine, machine_info, markdown_table  # noqa: E402

from fasteval.core.envs import EnvFactory, build_slot_envs  # noqa: E402
from fasteval.core.workers import usable_cores  # noqa: E402

ENV = "scaling:FixedCostEnv"


class FixedCostEnv(gym.Env):
    """``iterations`` 64-element dot products per step; 8-float observations; never ends."""

    def __init__(self, iterations: int = 1000):
        self.iterations = int(iterations)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (8,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._a = np.linspace(-1.0, 1.0, 64)
        self._t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return np.zeros(8, np.float32), {}

    def step(self, action):
        a, total = self._a, 0.0
        for _ in range(self.iterations):
            total += a @ a
        self._t += 1
        return np.full(8, self._t % 7, np.float32), float(total > 0), False, False, {}


def calibrate(step_ms: float) -> int:
    """Iterations that take about ``step_ms`` ms here (fastest of 5 tries: the least disturbed)."""
    env = FixedCostEnv(2000)
    trials = []
    for _ in range(5):
        t0 = time.perf_counter()
        env.step(0)
        trials.append((time.perf_counter() - t0) / 2000)
    return max(1, int(step_ms * 1e-3 / min(trials)))


def worker_counts(cores: int) -> list[int]:
    counts, w = [], 1
    while w <= cores:
        counts.append(w)
        w *= 2
    if counts[-1] != cores:
        counts.append(cores)
    return counts


def measure(iterations: int, n_slots: int, workers: int, seconds: float) -> float:
    """Env steps/s of ``workers`` workers stepping all ``n_slots`` slots for about ``seconds``."""
    envs = build_slot_envs("async", EnvFactory(ENV, {"iterations": iterations}), n_slots, None, 600.0, workers=workers)
    try:
        slots = list(range(n_slots))
        envs.reset_slots(slots, slots)
        actions = np.zeros(n_slots, dtype=np.int64)
        envs.step(slots, actions)  # warm
        steps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            envs.step(slots, actions)
            steps += n_slots
        return steps / (time.perf_counter() - t0)
    finally:
        envs.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--step-ms", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=3.0, help="measuring time per row")
    parser.add_argument("--max-workers", type=int, default=None, help="default: the usable cores")
    parser.add_argument("--tiny", action="store_true", help="W = 1, 2 for a fraction of a second (used by the test suite)")
    args = parser.parse_args(argv)
    cores = args.max_workers or usable_cores()
    if args.tiny:
        args.step_ms, args.seconds, cores = 0.05, 0.3, min(cores, 2)
    machine = machine_info()
    iterations = calibrate(args.step_ms)
    counts = worker_counts(cores)
    n_slots = 2 * counts[-1]
    started = time.perf_counter()
    rates = {w: measure(iterations, n_slots, w, args.seconds) for w in counts}
    base = rates[counts[0]]
    rows = [[w, f"{rates[w]:.0f}", f"{rates[w] / base:.2f}x", f"{rates[w] / base / w:.0%}"] for w in counts]
    print(format_machine(machine))
    print(f"command: {command_line()}")
    print(f"FixedCostEnv: {iterations} iterations per step (~{args.step_ms:g} ms calibrated here), {n_slots} slots, "
          f"~{args.seconds:g} s per row; total {time.perf_counter() - started:.0f} s")
    print(markdown_table(["workers", "env steps/s", "speed-up", "efficiency"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
