"""Episodes per hour against the number of workers: Ray workers (``--backend ray``) against the local env
worker pool (``--vectorization async --workers W``) at equal workers (issue 43).

The env is the known-answer env with a fixed CPU cost per step (``fasteval/BusyKnownAnswer-v0``: ``work``
64-element dot products per step, calibrated here to about ``--step-ms`` milliseconds and passed to every
worker as a count, so each step does the same work in every process), and the ``zero`` policy: the env
is the cost, as in a simulator-bound evaluation. For each W:

* ``local pool``: one engine, ``--vectorization async --workers W``, ``2 W`` slots;
* ``ray``: W Ray worker actors (a local Ray instance with this machine's usable cores), each an engine of
  2 sync slots, leasing blocks of ``--block`` episodes.

Engine and actor start-up are outside the timings (Ray's ``ray.init`` and the actors' import of torch cost
seconds), and so is a warm-up run of each engine (the dry runs, the kernels' first calls; for Ray, about a
block per actor). Each row reports wall seconds, episodes per hour, and the speed-up over
its own W = 1; the last column is Ray's episodes per hour over the pool's at the same W (the cost of the
engine: leases, the object store, a process per actor). The per-episode results of every row are checked
equal to the first row's.

Per-worker figures follow: each row's episodes per hour per worker, its seconds per episode per worker, and
Ray's cost per episode over the pool's at equal W (``ray s/ep - pool s/ep``, per worker: what leases, the
object store and the block's tail add to each episode). From them, **an estimate for LIBERO on N nodes**:
a LIBERO episode costs a worker ``--libero-steps`` steps of ``--libero-step-s`` seconds (its env dominates:
99% of a LIBERO run is ``env_step``, RESULTS.md "LIBERO"), plus Ray's per-episode cost measured here at the
largest W; N nodes of ``--cores-per-node`` workers give ``N c 3600 / T`` episodes per hour, and the table
says how long ``--libero-episodes`` take. An estimate from per-worker figures, not a measurement.

    python benchmarks/bench_distributed.py [--episodes 96] [--step-ms 1] [--workers 1,2] [--block 4]
        [--nodes 1,4,16] [--cores-per-node 32] [--libero-step-s 0.3] [--libero-steps 520] [--tiny]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import command_line, format_machine, machine_info, markdown_table  # noqa: E402

import fasteval.testing  # noqa: E402,F401  (registers the known-answer envs)
from fasteval.core.workers import usable_cores  # noqa: E402
from fasteval.run.engine import Engine  # noqa: E402
from fasteval.testing.busy import work_per_ms  # noqa: E402
from fasteval.testing.envs import BUSY_KNOWN_ANSWER_ID  # noqa: E402
from fasteval.types.spec import EvalSpec  # noqa: E402


def spec_for(args: argparse.Namespace, work: int, **how) -> EvalSpec:
    return EvalSpec(env=BUSY_KNOWN_ANSWER_ID, env_kwargs={"work": work}, policy="zero", n_episodes=args.episodes,
                    seed=0, device="cpu", **how)


def run_local(args: argparse.Namespace, work: int, workers: int) -> tuple[float, list]:
    engine = Engine(spec_for(args, work, batch_size=2 * workers, vectorization="async", workers=workers))
    try:
        engine.run_segment(n_episodes=2 * workers)  # warm-up: the dry run, the kernels' first calls
        started = time.perf_counter()
        segment = engine.run_segment()
        wall = time.perf_counter() - started
    finally:
        engine.close()
    return wall, _rows(segment)


def run_ray(args: argparse.Namespace, work: int, workers: int, cores: int) -> tuple[float, list]:
    from fasteval.run.ray_engine import RayEngine, RayOptions

    engine = RayEngine(spec_for(args, work, batch_size=2),
                       RayOptions(workers=workers, num_cpus=min(1.0, cores / workers), block=args.block))
    try:
        engine.run_segment(n_episodes=workers * args.block)  # warm-up: a block per actor (its dry run, first calls)
        started = time.perf_counter()
        segment = engine.run_segment()
        wall = time.perf_counter() - started
    finally:
        engine.close()
    return wall, _rows(segment)


def _rows(segment) -> list:
    ledger = segment.ledger
    assert ledger.finished.all(), "every episode finishes"
    return list(zip(ledger.episode_ids.tolist(), ledger.sum_reward.tolist(), ledger.length.tolist(),
                    ledger.success.tolist()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=96)
    parser.add_argument("--step-ms", type=float, default=1.0)
    parser.add_argument("--workers", default=None, help="comma-separated W values [default: 1, 2, ... usable cores]")
    parser.add_argument("--block", type=int, default=4, help="Ray: episodes per lease")
    parser.add_argument("--nodes", default="1,4,16", help="LIBERO estimate: comma-separated node counts")
    parser.add_argument("--cores-per-node", type=int, default=32, help="LIBERO estimate: env workers per node")
    parser.add_argument("--libero-step-s", type=float, default=0.3,
                        help="LIBERO estimate: seconds per env step on one worker core (RESULTS.md: fasteval sync, "
                             "128 px, llvmpipe, about 0.3 s per env step per core)")
    parser.add_argument("--libero-steps", type=int, default=520, help="LIBERO estimate: steps per episode (LIBERO-10)")
    parser.add_argument("--libero-episodes", type=int, default=500, help="LIBERO estimate: the evaluation's episodes")
    parser.add_argument("--tiny", action="store_true", help="8 episodes, W = 1 and 2, 0.2 ms steps (the test suite)")
    args = parser.parse_args()
    cores = usable_cores()
    if args.tiny:
        args.episodes, args.step_ms, args.workers = 8, 0.2, args.workers or "1,2"
    ws = [int(w) for w in args.workers.split(",")] if args.workers else sorted({1, 2, *range(2, cores + 1, 2), cores})
    work = max(1, int(args.step_ms * work_per_ms()))

    import ray

    ray.init(address="local", num_cpus=cores, include_dashboard=False, log_to_driver=False)
    try:
        results = {}
        for w in ws:
            results[("local pool", w)] = run_local(args, work, w)
            results[("ray", w)] = run_ray(args, work, w, cores)
    finally:
        ray.shutdown()

    reference = next(iter(results.values()))[1]
    identical = all(rows == reference for _, rows in results.values())
    per_hour = {key: args.episodes / wall * 3600 for key, (wall, _) in results.items()}
    rows = []
    for (backend, w), (wall, _) in results.items():
        rows.append([backend, w, args.episodes, f"{wall:.2f}", f"{per_hour[(backend, w)]:,.0f}",
                     f"{per_hour[(backend, w)] / per_hour[(backend, ws[0])]:.2f}x",
                     f"{per_hour[('ray', w)] / per_hour[('local pool', w)]:.2f}" if backend == "ray" else ""])
    print("# One evaluation over workers: Ray against the local pool\n")
    print(format_machine(machine_info()))
    print(f"- command: `{command_line()}`")
    print(f"- env: {BUSY_KNOWN_ANSWER_ID}, {work} dot products per step (~{args.step_ms:g} ms here), 1-13 steps per "
          f"episode; policy zero; Ray block {args.block} episodes\n")
    print(markdown_table(["backend", "workers", "episodes", "wall s", "episodes/h", f"vs W={ws[0]}", "ray / pool"],
                         rows))
    print(f"\nper-episode results identical in every row: {identical}")
    print_per_worker(args, ws, results, per_hour)
    if not identical:
        sys.exit(1)


def per_worker(results: dict, per_hour: dict) -> dict:
    """``{(backend, W): (episodes/h per worker, seconds per episode per worker)}``."""
    return {(b, w): (per_hour[(b, w)] / w, w * wall / n) for (b, w), (wall, rows) in results.items()
            for n in [len(rows)]}


def print_per_worker(args: argparse.Namespace, ws: list[int], results: dict, per_hour: dict) -> None:
    """The per-worker table, then the LIBERO-on-N-nodes estimate built from Ray's per-episode cost at the largest W."""
    figures = per_worker(results, per_hour)
    rows = []
    for w in ws:
        pool, ray_ = figures[("local pool", w)], figures[("ray", w)]
        rows.append([w, f"{pool[0]:,.0f}", f"{ray_[0]:,.0f}", f"{pool[1] * 1000:.1f}", f"{ray_[1] * 1000:.1f}",
                     f"{(ray_[1] - pool[1]) * 1000:+.1f}"])
    print("\n## Per worker\n")
    print(markdown_table(["workers", "pool episodes/h per worker", "ray episodes/h per worker", "pool ms/episode/worker",
                          "ray ms/episode/worker", "ray cost ms/episode"], rows))
    top = ws[-1]
    overhead = max(0.0, figures[("ray", top)][1] - figures[("local pool", top)][1])
    episode_s = args.libero_steps * args.libero_step_s + overhead
    print(f"\n## LIBERO on N nodes (estimate)\n")
    print(f"- a LIBERO episode per worker: {args.libero_steps} steps x {args.libero_step_s:g} s + Ray's cost "
          f"{overhead * 1000:.1f} ms (measured above at W={top}) = {episode_s:,.1f} s\n")
    nodes = [int(n) for n in args.nodes.split(",")]
    table = []
    for n in nodes:
        workers = n * args.cores_per_node
        eph = workers * 3600 / episode_s
        table.append([n, workers, f"{eph:,.0f}", f"{args.libero_episodes / eph:.2f}"])
    print(markdown_table(["nodes", "workers", "episodes/h", f"hours for {args.libero_episodes} episodes"], table))
    print("\nAn estimate from per-worker figures (the env's steps, plus Ray's per-episode cost measured here), not "
          "a measurement; a GPU policy per worker or shared policy actors are not counted.")


if __name__ == "__main__":
    main()
