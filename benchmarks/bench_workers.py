"""The env worker pool (``--vectorization async --workers W``) against in-process sync envs (issue 15).

Rows, interleaved per repeat (medians of ``--repeats``), each a full fasteval evaluation:

* ``halfcheetah``: HalfCheetah-v5, batch 64, a 64x64 MLP (``--max-steps 200``): pool vs sync;
* ``cartpole``: CartPole-v1, batch 256, the built-in ``zero`` policy: pool vs sync;
* ``pusht``: PushT (fasteval's fast env, pixels + agent_pos), batch 10, a small conv policy
  (``--max-steps 100``): pool vs sync;
* ``pusht env only``: fasteval's fast PushT against gym-pusht's, env steps/s of one env
  stepped in this process with the same random actions (no policy, no engine).

A second table steps the same envs without policy or engine (sync vs pool, random actions) and
reports wall and CPU milliseconds per batch step, the CPU summed over the parent and the workers
(``/proc``): the pool's own cost, which a busy machine does not distort as much as wall time.

Per-episode results of each pool row are checked equal to its sync row (the same seeds). The
targets of issue 15 are printed as PASS/FAIL lines (SKIP with ``--tiny``, which runs a few
episodes once for the test suite). The machine is often shared: the header prints the load.

    python benchmarks/bench_workers.py [--workers 2] [--repeats 3] [--tiny] [--only cartpole,pusht]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Samples, check_line, command_line, format_machine, machine_info, markdown_table  # noqa: E402

from fasteval import Evaluator  # noqa: E402
from fasteval.core.workers import WorkerPoolEnvs  # noqa: E402
from fasteval.robot.fast_envs import FAST_PUSHT  # noqa: E402

PUSHT_KWARGS = {"obs_type": "pixels_agent_pos", "render_mode": "rgb_array"}


class MLP(nn.Module):
    """float observations [B, n] -> tanh actions [B, m]; 64x64 hidden, fixed init."""

    def __init__(self, n_in: int, n_out: int):
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(n_in, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, n_out))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(obs.float()))


class PushTConv(nn.Module):
    """PushT ``pixels`` (uint8 [B, 96, 96, 3]) + ``agent_pos`` -> a target position in [0, 512]^2."""

    def __init__(self, width: int = 16):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Sequential(nn.Conv2d(3, width, 5, stride=2), nn.ReLU(), nn.Conv2d(width, width, 5, stride=2), nn.ReLU(),
                                  nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(width + 2, 2)

    def forward(self, obs) -> torch.Tensor:
        pixels = obs["pixels"].permute(0, 3, 1, 2).float() / 255.0
        features = torch.cat([self.conv(pixels), obs["agent_pos"].float() / 512.0], dim=1)
        return torch.sigmoid(self.head(features)) * 512.0


def workloads(args) -> dict[str, dict]:
    tiny = args.tiny
    out = {
        "halfcheetah": dict(env="HalfCheetah-v5", policy=MLP(17, 6), batch_size=8 if tiny else 64,
                            max_steps=10 if tiny else 200, episodes=8 if tiny else 64, target=1.6),
        "cartpole": dict(env="CartPole-v1", policy="zero", batch_size=16 if tiny else 256, max_steps=None,
                         episodes=16 if tiny else 2048, target=0.9),
        "pusht": dict(env=FAST_PUSHT, env_kwargs=PUSHT_KWARGS, policy=PushTConv(), batch_size=4 if tiny else 10,
                      max_steps=5 if tiny else 100, episodes=4 if tiny else 20, target=1.7),
    }
    if importlib.util.find_spec("mujoco") is None:
        out.pop("halfcheetah")
    if importlib.util.find_spec("gym_pusht") is None:
        out.pop("pusht")
    return {k: v for k, v in out.items() if not args.only or k in args.only}


def pusht_env_only(steps: int, repeats: int) -> tuple[float, float]:
    """Median env steps/s of gym-pusht's PushT and fasteval's fast one (same seed and actions)."""
    from gym_pusht.envs.pusht import PushTEnv

    from fasteval.robot.fast_envs.pusht import FastPushTEnv

    envs = {"gym_pusht": PushTEnv(**PUSHT_KWARGS), "fast": FastPushTEnv(**PUSHT_KWARGS)}
    actions = np.random.default_rng(0).uniform(0, 512, size=(steps, 2)).astype(np.float32)
    samples = Samples()
    for _ in range(repeats):
        for name, env in envs.items():
            env.reset(seed=0)
            t0 = time.perf_counter()
            for action in actions:
                env.step(action)
            samples.add(name, steps / (time.perf_counter() - t0))
    return samples.median("gym_pusht"), samples.median("fast")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (Linux ``/proc``, 10 ms ticks; NaN elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def env_only(w: dict, workers: int, steps: int, repeats: int) -> list:
    """Env-only batch steps (no policy, no engine), sync vs pool: wall and CPU ms per batch step,
    the pool's CPU split into parent + workers. Fixed random actions; finished envs are reset."""
    from fasteval.core.envs import build_slot_envs, make_factory
    from fasteval.robot.env_kinds import ENV_KINDS

    b = w["batch_size"]
    built = {}
    for row, vec in (("sync", "sync"), ("pool", "async")):
        factory, probe, _cap = make_factory(w["env"], w.get("env_kwargs", {}), None, kinds=ENV_KINDS)
        built[row] = build_slot_envs(vec, factory, b, probe, 600.0, workers=workers if vec == "async" else None)
    space = built["sync"].action_space
    rng = np.random.default_rng(0)
    space.seed(0)
    actions = [np.asarray([space.sample() for _ in range(b)]) for _ in range(8)]
    samples = Samples()
    slots = list(range(b))
    try:
        for _ in range(repeats):
            for row, envs in built.items():
                workers = envs._workers if isinstance(envs, WorkerPoolEnvs) else []  # sync envs: this process only
                pids = [os.getpid()] + [wk.process.pid for wk in workers]
                envs.reset_slots(slots, slots)
                before = [cpu_seconds(pid) for pid in pids]
                t0 = time.perf_counter()
                for i in range(steps):
                    envs.step(slots, actions[i % len(actions)])
                    done = np.flatnonzero(envs.terminated | envs.truncated).tolist()
                    if done:
                        envs.reset_slots(done, [int(x) for x in rng.integers(0, 10_000, len(done))])
                wall = (time.perf_counter() - t0) / steps * 1e3
                cpu = [(cpu_seconds(pid) - c) / steps * 1e3 for pid, c in zip(pids, before)]
                samples.add((row, "wall"), wall)
                samples.add((row, "cpu"), sum(cpu))
                samples.add((row, "parent"), cpu[0])
    finally:
        for envs in built.values():
            envs.close()
    m = samples.median
    return [f"{m(('sync', 'wall')):.2f} / {m(('sync', 'cpu')):.2f}",
            f"{m(('pool', 'wall')):.2f} / {m(('pool', 'cpu')):.2f} (parent {m(('pool', 'parent')):.2f})",
            f"{m(('sync', 'wall')) / m(('pool', 'wall')):.2f}x",
            f"{m(('pool', 'cpu')) / m(('sync', 'cpu')) - 1:+.0%}" if m(("sync", "cpu")) > 0 else "n/a (too short)"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", type=lambda s: [x for x in s.split(",") if x], default=[],
                        help="comma-separated workloads: halfcheetah, cartpole, pusht, pusht-env")
    parser.add_argument("--tiny", action="store_true", help="a few episodes, one repeat (used by the test suite)")
    args = parser.parse_args(argv)
    if args.tiny:
        args.repeats = 1
    torch.set_num_threads(1)
    machine = machine_info()
    chosen = workloads(args)
    samples, rows, checks = Samples(), [], []
    for name, w in chosen.items():
        common = dict(env=w["env"], policy=w["policy"], env_kwargs=w.get("env_kwargs", {}), batch_size=w["batch_size"],
                      max_steps=w["max_steps"], device="cpu")
        evaluators = {"sync": Evaluator(**common, vectorization="sync"),
                      "pool": Evaluator(**common, vectorization="async", workers=args.workers),
                      # two groups of whole worker blocks: one group's envs step while the policy runs for the other
                      "pool+pipeline": Evaluator(**common, vectorization="async", workers=args.workers, pipeline=True)}
        results = {}
        try:
            for ev in evaluators.values():
                ev.evaluate(n_episodes=min(2, w["batch_size"]), seed=10_000)  # build and warm up outside the timings
            for _ in range(args.repeats):
                for row, ev in evaluators.items():
                    result = ev.evaluate(n_episodes=w["episodes"], seed=0)
                    samples.add((name, row), result.overall()["steps_per_s"])
                    results[row] = [(r["episode_ix"], r["sum_reward"], r["length"]) for r in result.per_episode]
        finally:
            for ev in evaluators.values():
                ev.close()
        same = results["sync"] == results["pool"]
        # --pipeline calls the policy on half batches: a conv/matmul may round differently per batch size
        same_piped = results["sync"] == results["pool+pipeline"]
        if not same and name != "halfcheetah":  # the MLP's batched matmul rounds per batch layout
            raise SystemExit(f"{name}: the pool's per-episode results differ from sync")
        sync, plain = samples.median((name, "sync")), samples.median((name, "pool"))
        piped = samples.median((name, "pool+pipeline"))
        pool = max(plain, piped)
        rows.append([name, w["batch_size"], args.workers, f"{sync:.0f}", f"{plain:.0f}", f"{piped:.0f}",
                     f"{plain / sync:.2f}x / {piped / sync:.2f}x",
                     ("identical" if same else "differ (float rounding)")
                     + (" / identical" if same_piped else " / differ (half-batch rounding)")])
        label = {"halfcheetah": "HalfCheetah b=64, 2 workers >= 1.6x sync",
                 "cartpole": "CartPole b=256, 2 workers no more than 10% slower than sync",
                 "pusht": "PushT b=10 conv policy, 2 workers >= 1.7x sync"}[name]
        best = "pool" if plain >= piped else "pool+pipeline"
        checks.append(check_line(label, None if args.tiny else pool / sync >= w["target"], f"{pool / sync:.2f}x ({best})"))
    env_rows = [[name, w["batch_size"], *env_only(w, args.workers, 5 if args.tiny else 200, args.repeats)]
                for name, w in chosen.items()]
    if (not args.only or "pusht-env" in args.only) and importlib.util.find_spec("gym_pusht") is not None:
        original, fast = pusht_env_only(20 if args.tiny else 300, args.repeats)
        rows.append(["pusht env only (gym_pusht vs fast)", 1, "-", f"{original:.0f}", f"{fast:.0f}", "-",
                     f"{fast / original:.2f}x", "bit-identical (tests/test_pusht_fast.py)"])
        checks.append(check_line("fast PushT >= 1.3x gym_pusht's step rate", None if args.tiny else fast / original >= 1.3,
                                 f"{fast / original:.2f}x"))
    print(format_machine(machine))
    print(f"command: {command_line()}")
    print(f"medians of {args.repeats} repeats, rows interleaved; env steps/s of whole evaluations (policy included)")
    print(markdown_table(["workload", "b", "workers", "sync steps/s", "pool steps/s", "pool+pipeline steps/s",
                          "vs sync (pool / pool+pipeline)", "per-episode"], rows))
    print("\nenv only (no policy): ms per batch step, wall / CPU of every process involved; medians")
    print(markdown_table(["workload", "b", "sync wall / CPU", "pool wall / CPU", "pool speed-up (wall)",
                          "pool CPU over sync"], env_rows))
    for line in checks:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
