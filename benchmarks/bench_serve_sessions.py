"""Cross-session batching (``fasteval serve --batch-sessions``): K client engines against one server, with and
without merged calls.

Each client is an in-process engine (run once untimed to warm up, then timed) (a thread of this process) evaluating CartPole through ``ws://`` against one
``fasteval serve`` process. The policy is :class:`FixedCostMLP`: a small MLP whose every call (every block of R
rows) also costs ``FIXED_COST_MS`` of wall time, the regime of a large network on a GPU, where one call on more
rows costs about the same. Without batching the server makes one call per client request; with it, one call per
round of requests (rows of all K clients, in blocks of R = 16). Rows: K = 1, 2, 4 clients at batch 4, env
steps/s of all clients together, and the server's policy calls per client step. Each row checks that every
client's per-episode results equal its run without batching.

    python benchmarks/bench_serve_sessions.py [--repeats 3] [--tiny] [--json out.json]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_serve import start_server, stop  # noqa: E402
from common import command_line, format_machine, machine_info, markdown_table, write_json  # noqa: E402

FIXED_COST_MS = 5.0


class FixedCostMLP(nn.Module):
    """CartPole MLP (4 -> 16 -> 2, argmax) whose forward also sleeps ``FIXED_COST_MS`` (per call, any rows).
    Served as ``benchmarks.bench_serve_sessions:FixedCostMLP`` (stateless: mergeable)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        time.sleep(FIXED_COST_MS / 1000.0)
        return self.net(obs.float()).argmax(dim=-1)


def clients(url: str, k: int, n: int, batch: int) -> tuple[float, int, list, list[str]]:
    """K engines at once against ``url``: (seconds, env steps, per-episode rows per client, their batching facts)."""
    from fasteval.robot.policies.remote import connect_remote
    from fasteval.run.engine import Engine
    from fasteval.types.spec import EvalSpec

    engines = [Engine(EvalSpec(env="CartPole-v1", policy=connect_remote(url), n_episodes=n, seed=1000 * i,
                               batch_size=batch, device="cpu", max_steps=100)) for i in range(k)]
    results: list = [None] * k
    barrier = threading.Barrier(k + 1)

    def run(i: int) -> None:
        engines[i].run()  # warm-up (loading, dry runs, first calls), untimed; the timed run repeats it
        barrier.wait()
        results[i] = engines[i].run()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(k)]
    for t in threads:
        t.start()
    barrier.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - started
    for engine in engines:
        engine.close()
    steps = sum(int(sum(r["length"] for r in res.per_episode)) for res in results)
    rows = [[(r["seed"], r["sum_reward"], r["length"]) for r in res.per_episode] for res in results]
    facts = [str(res.meta.get("server_policy_batch_sessions", "off")) for res in results]
    return seconds, steps, rows, facts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tiny", action="store_true", help="smallest sizes (a smoke test)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    ks, n, repeats = ((1, 2), 4, 1) if args.tiny else ((1, 2, 4), 16, args.repeats)
    policy = "benchmarks.bench_serve_sessions:FixedCostMLP"
    table, equal = [], True
    for k in ks:
        rates: dict[str, list[float]] = {"off": [], "on": []}
        rows_by: dict[str, list] = {}
        facts_on: list[str] = []
        for _ in range(repeats):  # interleaved: off, on
            for mode, extra in (("off", ()), ("on", ("--batch-sessions", "20"))):
                proc, url = start_server(policy, "--trust-remote-code", *extra)
                try:
                    seconds, steps, rows, facts = clients(url, k, n, 4)
                finally:
                    stop(proc)
                rates[mode].append(steps / seconds)
                rows_by.setdefault(mode, rows)
                equal = equal and rows == rows_by[mode]
                if mode == "on":
                    facts_on = facts
        equal = equal and rows_by["on"] == rows_by["off"]
        off, on = statistics.median(rates["off"]), statistics.median(rates["on"])
        table.append([k, 4, off, on, on / off, facts_on[0].split(" (")[0]])
    print(format_machine(machine_info()))
    print(f"\n{command_line()}; policy call cost {FIXED_COST_MS:g} ms; CartPole, {n} episodes per client, max 100 steps\n")
    print(markdown_table(["clients", "batch", "env steps/s, per-session calls", "env steps/s, --batch-sessions",
                          "ratio", "server says"], table))
    print(f"\nper-episode results with and without batching equal: {equal}")
    if args.json:
        write_json(args.json, {"machine": machine_info(), "rows": table, "equal": equal})
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())
