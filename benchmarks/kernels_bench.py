"""Per-call cost of ``step_bookkeeping`` for each available kernel backend.

Usage: ``python benchmarks/kernels_bench.py [--repeats 7] [--budget 0.02]``

For batch sizes B = 1, 16, 256 it builds a fresh ledger (N = max(100 * B, 200k)
episodes, continuous batching, a step cap of 50) with random rewards and ~2% terminations,
warms each backend up, then times calls in a tight loop and prints the median
over ``--repeats`` timed runs of the per-call microseconds. The state keeps
evolving between calls (episodes finish and slots are refilled), so the numbers
include the retire/refill path; when the ledger runs dry it is rebuilt outside
the timed region. Runs in a few seconds.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from fasteval.kernels import IDLE, available_backends, load_backend

BATCHES = (1, 16, 256)


class Ledger:
    """Buffers for one step_bookkeeping call sequence (fresh state)."""

    def __init__(self, batch: int, n_episodes: int, rng: np.random.Generator, n_steps: int = 64):
        self.batch, self.n_episodes = batch, n_episodes
        active = min(batch, n_episodes)
        self.slot_episode = np.full(batch, IDLE, np.int64)
        self.slot_episode[:active] = np.arange(active)
        self.next_episode = active
        self.acc_sum = np.zeros(batch)
        self.acc_max = np.full(batch, -np.inf)
        self.acc_len = np.zeros(batch, np.int64)
        self.acc_success = np.zeros(batch, bool)
        self.acc_nan = np.zeros(batch, np.int64)
        self.res_sum = np.zeros(n_episodes)
        self.res_max = np.full(n_episodes, -np.inf)
        self.res_len = np.zeros(n_episodes, np.int64)
        self.res_success = np.zeros(n_episodes, bool)
        self.res_nan = np.zeros(n_episodes, np.int64)
        self.finished_out = np.zeros(batch, np.int64)
        self.reset_out = np.zeros(batch, np.int64)
        # A pool of precomputed steps, cycled through.
        self.rewards = rng.standard_normal((n_steps, batch))
        self.terminated = rng.random((n_steps, batch)) < 0.02
        self.truncated = np.zeros((n_steps, batch), bool)
        self.success = rng.random((n_steps, batch)) < 0.01


def time_backend(module, batch: int, repeats: int, budget: float, rng: np.random.Generator) -> float:
    """Median per-call microseconds of ``module.step_bookkeeping`` at batch ``batch``."""
    step = module.step_bookkeeping
    n_episodes = max(100 * batch, 200_000)
    ledger = Ledger(batch, n_episodes, rng)
    n_pool = ledger.rewards.shape[0]

    def run(calls: int) -> float:
        nonlocal ledger
        if ledger.next_episode + calls * batch // 4 > n_episodes:  # could run dry: start over, untimed
            ledger = Ledger(batch, n_episodes, rng)
        L = ledger
        rewards, terminated, truncated, success = L.rewards, L.terminated, L.truncated, L.success
        rows = [(rewards[i], terminated[i], truncated[i], success[i]) for i in range(n_pool)]
        nxt = L.next_episode
        t0 = time.perf_counter()
        for i in range(calls):
            r, te, tr, s = rows[i % n_pool]
            _, _, nxt = step(
                r, te, tr, s, L.slot_episode,
                L.acc_sum, L.acc_max, L.acc_len, L.acc_success, L.acc_nan, 50,
                L.res_sum, L.res_max, L.res_len, L.res_success, L.res_nan,
                nxt, n_episodes, True, L.finished_out, L.reset_out,
            )  # fmt: skip
        elapsed = time.perf_counter() - t0
        L.next_episode = nxt
        return elapsed

    run(10)  # warm caches (and the JIT, if warmup() did not)
    calls = 10
    while True:  # calibrate: calls per timed run ~ budget seconds
        elapsed = run(calls)
        if elapsed >= budget / 4 or calls >= 200_000:
            break
        calls *= 4
    calls = max(1, min(200_000, int(calls * budget / max(elapsed, 1e-9))))
    # Keep a timed run from exhausting the ledger (~B/32 episodes finish per step).
    calls = min(calls, max(1, n_episodes * 8 // batch))
    samples = [run(calls) / calls * 1e6 for _ in range(repeats)]
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="timed runs per cell (median reported)")
    parser.add_argument("--budget", type=float, default=0.02, help="seconds per timed run")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    backends = available_backends()
    rows = []
    for name in backends:
        module = load_backend(name)
        t0 = time.perf_counter()
        if hasattr(module, "warmup"):
            module.warmup()
        warm_s = time.perf_counter() - t0
        cells = [time_backend(module, batch, args.repeats, args.budget, rng) for batch in BATCHES]
        rows.append((name, warm_s, cells))

    header = f"{'backend':<10} {'warmup s':>9} " + " ".join(f"{'B=' + str(b) + ' us':>11}" for b in BATCHES)
    print("step_bookkeeping, per-call microseconds (median of %d runs)" % args.repeats)
    print(header)
    print("-" * len(header))
    for name, warm_s, cells in rows:
        print(f"{name:<10} {warm_s:>9.3f} " + " ".join(f"{c:>11.2f}" for c in cells))
    missing = [b for b in ("cython", "numba", "reference") if b not in backends]
    if missing:
        print("not available:", ", ".join(missing))


if __name__ == "__main__":
    main()
