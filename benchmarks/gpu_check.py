"""One-shot GPU check (issue 13): checks that can fail, then timings. Under 4 minutes on one GPU.

Checks (each a FAIL line and a non-zero exit when it does not hold):

1. **graph really captured**: a CUDA-graph run reports ``policy_cuda_graph == "captured"``, holds
   exactly one graph per slot group, its results equal the known answers and the eager run's, and
   the captured graph, replayed on two new inputs written into its static buffer, gives what the
   eager step gives on them (an empty graph, or one that replays stale outputs, fails here even
   when a lucky run matched);
2. **fresh noise under replay**: two replays of a stochastic step differ; two runs with the same
   seed give the same actions step by step, another seed other actions, and steps do not repeat
   the previous step's noise;
3. **flat memory**: 50 runs of one pipelined engine keep ``torch.cuda.memory_allocated`` and the
   number of captured graphs exactly where they were after the first run.

Timings (no pass/fail, except where a row raises):

4. policy-step latency, eager vs CUDA-graph replay, for a small MLP and an ACT-like chunk policy
   (~50M parameters: a transformer encoder-decoder that returns a chunk of 100 actions);
5. end to end on CartPole-v1 (the demo MLP): CPU, and on CUDA eager/graph x pinned/pageable;
6. LeRobot PushT rows (:mod:`bench_lerobot`, small size), only when ``lerobot`` imports.

On a machine without CUDA it still runs: the CUDA rows print as SKIP and it exits 0.

    python benchmarks/gpu_check.py [--json FILE] [--quick]

The check functions take the device and a few seams (the memory counter, the spec), so that
``tests/test_gpu_check.py`` can run each one on CPU with fake graphs (``fasteval.testing.fake_cuda``)
and show that it fails on a planted fault.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import format_machine, machine_info, markdown_table, write_json  # noqa: E402

from fasteval import evaluate  # noqa: E402
from fasteval.core.accel import CudaGraphCall  # noqa: E402
from fasteval.core.protocols import StepObserver  # noqa: E402
from fasteval.run.engine import Engine  # noqa: E402
from fasteval.types.spec import EvalSpec  # noqa: E402
from fasteval.testing import ParityPolicy, expected_episode  # noqa: E402

KA = "fasteval/KnownAnswer-v0"
DEMO = Path(__file__).resolve().parent.parent / "src" / "fasteval" / "assets" / "cartpole_mlp"


@dataclass
class Check:
    name: str
    ok: bool | None  # None: skipped
    detail: str

    def line(self) -> str:
        tag = "SKIP" if self.ok is None else ("PASS" if self.ok else "FAIL")
        return f"{tag}: {self.name} -- {self.detail}"


def _sync(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def _numbers(result: Any) -> list[tuple]:
    return [(e["episode_ix"], e["sum_reward"], e["length"], e["success"]) for e in result.per_episode]


# -- 1. graph really captured ---------------------------------------------------------------------

def check_graph_captured(device: str, n: int = 200, batch: int = 16) -> list[Check]:
    want = [(i, *(expected_episode(i, action_fn=lambda o: int(o[2]))[k] for k in ("sum_reward", "length", "success")))
            for i in range(n)]
    eager = evaluate(env=KA, policy=ParityPolicy().to(device), n_episodes=n, batch_size=batch, device=device,
                     cuda_graph=False)
    spec = EvalSpec(env=KA, policy=ParityPolicy().to(device), n_episodes=n, batch_size=batch, device=device,
                    cuda_graph=True)
    with Engine(spec) as engine:
        graphed = engine.run()
        call = engine.runner._step
        status = graphed.meta.get("policy_cuda_graph")
        n_graphs = len(call.graphs) if isinstance(call, CudaGraphCall) else 0
        probe = _probe_replay(call, device) if n_graphs else "no graph to replay"
    return [
        Check("CUDA graph run reports a capture", status == "captured" and n_graphs == 1,
              f"policy_cuda_graph={status!r}, graphs held: {n_graphs} (want 'captured', 1)"),
        Check("graph == eager == known answers, 200 episodes", _numbers(graphed) == _numbers(eager) == want,
              f"{sum(a != b for a, b in zip(_numbers(graphed), want))} episodes differ from the known answers"),
        Check("a replay on new inputs computes them (not stale outputs)", probe == "", probe or "2 inputs, exact"),
    ]


def _probe_replay(call: CudaGraphCall, device: str) -> str:
    """Write two new inputs into the captured graph's static buffer, replay, compare with eager. '' if right."""
    graph, out, static = next(iter(call.graphs.values()))
    problems = []
    with torch.inference_mode():  # the engine's buffers are inference tensors
        saved = static.clone()
        try:
            for trial in range(2):
                gen = torch.Generator().manual_seed(100 + trial)
                new = (torch.rand(static.shape, generator=gen) * 4 - 2).to(static.dtype).to(static.device)
                static.copy_(new)
                graph.replay()
                _sync(device)
                want = call.fn(static.clone())
                if not torch.equal(out, want):
                    problems.append(f"trial {trial}: replay output != eager output")
        finally:
            static.copy_(saved)
    return "; ".join(problems)


# -- 2. fresh noise -----------------------------------------------------------------------------------

class Noisy(nn.Module):
    """Discrete(2) actions from a fresh uniform draw per row and step."""

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return (torch.rand(obs.shape[0], device=obs.device) < 0.5).long()


class _ActionLog(StepObserver):
    def __init__(self) -> None:
        self.steps: list[tuple] = []

    def on_step(self, active, actions, parked) -> None:
        self.steps.append(tuple(actions.tolist()))


def _noisy_actions(device: str, seed: int) -> list[tuple]:
    log = _ActionLog()
    spec = EvalSpec(env=KA, policy=Noisy(), n_episodes=60, batch_size=8, device=device, cuda_graph=True)
    with Engine(spec) as engine:
        engine.run(seed=seed, observer=log)
    return log.steps


def check_fresh_noise(device: str) -> list[Check]:
    call = CudaGraphCall(lambda x: torch.rand(x.shape, device=x.device) + x * 0, torch.device(device))
    x = torch.zeros(4096, device=device)
    first, second = call(x).clone(), call(x).clone()
    _sync(device)
    a, b, c = _noisy_actions(device, 1), _noisy_actions(device, 1), _noisy_actions(device, 2)
    repeats = sum(x == y for x, y in zip(a, a[1:]))  # 8 random bits per step: a repeat is 1 in 256
    return [
        Check("two replays of a stochastic step differ", call.captures == 1 and not torch.equal(first, second),
              f"captures={call.captures}, replays equal: {torch.equal(first, second)}"),
        Check("same seed -> same actions, step by step, across two runs", a == b and len(a) > 0,
              f"{len(a)} steps; equal: {a == b}"),
        Check("another seed -> other actions; steps draw new noise", a != c and repeats <= max(2, len(a) // 16),
              f"{repeats} of {len(a)} steps repeat the previous step's actions"),
    ]


# -- 3. flat memory -------------------------------------------------------------------------------------

def check_memory_flat(device: str, runs: int = 50, memory: Callable[[], int] | None = None,
                      spec: EvalSpec | None = None) -> list[Check]:
    memory = memory or torch.cuda.memory_allocated
    spec = spec or EvalSpec(env=KA, policy=ParityPolicy().to(device), n_episodes=8, batch_size=4, device=device,
                            cuda_graph=True, vectorization="async", pipeline=True)
    with Engine(spec) as engine:
        engine.run()
        _sync(device)
        call = engine.runner._step
        graphs = lambda: len(call.graphs) if isinstance(call, CudaGraphCall) else -1  # noqa: E731
        before, graphs_before = memory(), graphs()
        for seed in range(1, runs):
            engine.run(seed=seed)
        _sync(device)
        after, graphs_after = memory(), graphs()
    return [Check(f"{runs} runs of one pipelined engine: memory and graphs flat",
                  after == before and graphs_after == graphs_before == 2,
                  f"memory {before} -> {after} bytes, graphs {graphs_before} -> {graphs_after} (want 2 -> 2)")]


# -- 4. policy-step latency -----------------------------------------------------------------------------

class MLP(nn.Module):
    def __init__(self, obs_dim: int = 64, hidden: int = 256, act_dim: int = 8):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(obs_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, act_dim))

    def forward(self, x):
        return self.net(x)


class ACTLike(nn.Module):
    """An ACT-sized chunk policy (~55M parameters): the state and 8 "image" tokens through a 4-layer
    encoder, 100 action queries through a 7-layer decoder (d_model 512, 8 heads, FFN 3200), -> [B, 100, 14]."""

    def __init__(self, obs_dim: int = 64, chunk: int = 100, act_dim: int = 14, d: int = 512):
        super().__init__()
        self.tokens = nn.Linear(obs_dim, 9 * d)
        self.queries = nn.Parameter(torch.zeros(chunk, d))
        self.transformer = nn.Transformer(d, 8, num_encoder_layers=4, num_decoder_layers=7, dim_feedforward=3200,
                                          dropout=0.0, batch_first=True)
        self.head = nn.Linear(d, act_dim)
        self.d = d

    def forward(self, x):
        src = self.tokens(x).view(x.shape[0], 9, self.d)
        tgt = self.queries.unsqueeze(0).expand(x.shape[0], -1, -1)
        return self.head(self.transformer(src, tgt))


def step_latency_us(module: nn.Module, x: torch.Tensor, graphed: bool, repeats: int, calls: int) -> tuple[float, str]:
    """Median us of one policy step on the GPU (synchronised), and the graph status."""
    call = CudaGraphCall(module, x.device) if graphed else module
    with torch.inference_mode():
        for _ in range(3):
            call(x)
        torch.cuda.synchronize()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(calls):
                call(x)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) / calls * 1e6)
    status = call.facts.get("cuda_graph", "?") if graphed else "eager"
    return statistics.median(times), status


def latency_rows(quick: bool) -> list[list[Any]]:
    rows = []
    for name, make, batches, calls in (("MLP 64-256-256-8", MLP, (1, 16, 256), 200),
                                       ("ACT-like chunk policy", ACTLike, (1, 8), 20)):
        module = make().cuda().eval()
        params = sum(p.numel() for p in module.parameters()) / 1e6
        for batch in batches:
            x = torch.zeros((batch, 64), device="cuda")
            eager, _ = step_latency_us(module, x, False, 3 if quick else 5, calls)
            graph, status = step_latency_us(module, x, True, 3 if quick else 5, calls)
            rows.append([name, f"{params:.1f}M", batch, f"{eager:.1f}", f"{graph:.1f}", f"{eager / graph:.2f}x", status])
        del module
        torch.cuda.empty_cache()
    return rows


# -- 5. end to end ---------------------------------------------------------------------------------------

def run_engine(spec: EvalSpec, pin_memory: bool):
    """Build, warm up (capture), then time one run."""
    with Engine(spec, pin_memory=pin_memory) as engine:
        engine.run(n_episodes=4, seed=99_999)
        return engine.run()


def end_to_end_rows(has_cuda: bool, quick: bool) -> list[list[Any]]:
    rows = []
    n = 200 if quick else 500  # the demo MLP balances the pole: long episodes; keeps the script under 4 minutes
    configs = [("cpu", False, True)] + ([("cuda", g, p) for g in (False, True) for p in (True, False)] if has_cuda else [])
    for device, graph, pin in configs:
        policy = str(DEMO) if DEMO.is_dir() else "zero"
        spec = EvalSpec(env="CartPole-v1", policy=policy, n_episodes=n, batch_size=64, device=device, cuda_graph=graph)
        r = run_engine(spec, pin)
        t = r.timings
        rows.append(["CartPole-v1 demo MLP", device, r.meta.get("policy_cuda_graph"), pin,
                     f"{r.overall()['episodes_per_s']:.1f}", f"{r.overall()['steps_per_s']:.0f}",
                     f"{t.get('policy', 0):.3f}", f"{t.get('h2d', 0) + t.get('d2h', 0):.3f}"])
    return rows


# -- 6. LeRobot PushT ---------------------------------------------------------------------------------------

def lerobot_rows(has_cuda: bool) -> Check:
    script = Path(__file__).resolve().parent / "bench_lerobot.py"
    if importlib.util.find_spec("lerobot") is None or not script.is_file():
        why = "lerobot is not importable" if script.is_file() else "benchmarks/bench_lerobot.py is missing"
        return Check("LeRobot PushT rows", None, why)
    import bench_lerobot

    try:
        code = bench_lerobot.main(["--device", "cuda" if has_cuda else "cpu", "--episodes", "4", "--batch", "4",
                                   "--steps", "50"])
    except Exception as exc:  # a row that raises is a failure, not a skip
        return Check("LeRobot PushT rows", False, f"{type(exc).__name__}: {exc}")
    return Check("LeRobot PushT rows", code == 0, f"bench_lerobot exit code {code}")


# -- main -----------------------------------------------------------------------------------------------------

def run_checks(device: str) -> list[Check]:
    checks = []
    for name, fn in (("graph captured", check_graph_captured), ("fresh noise", check_fresh_noise),
                     ("flat memory", check_memory_flat)):
        try:
            checks += fn(device)
        except Exception as exc:  # a check that crashes has failed
            checks.append(Check(name, False, f"raised {type(exc).__name__}: {exc}"))
    return checks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--quick", action="store_true", help="fewer repeats and episodes")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    has_cuda = torch.cuda.is_available()
    print(format_machine(machine_info()))
    print(f"GPU: {torch.cuda.get_device_name(0) if has_cuda else 'none (CUDA rows skipped)'}")
    report: dict[str, Any] = {"machine": machine_info(), "cuda": has_cuda}

    print("\n## Checks")
    checks = run_checks("cuda") if has_cuda else [Check(n, None, "no CUDA device") for n in (
        "graph really captured", "fresh noise under replay", "flat memory over 50 runs")]
    print("\n".join(c.line() for c in checks))

    print("\n## Policy step latency: eager vs CUDA-graph replay (us, median)")
    latency = latency_rows(args.quick) if has_cuda else []
    print(markdown_table(["policy", "params", "batch", "eager us", "graph us", "speed-up", "graph"], latency)
          if latency else "SKIP: no CUDA device")

    print("\n## End to end (episodes/s)")
    e2e = end_to_end_rows(has_cuda, args.quick)
    print(markdown_table(["workload", "device", "cuda graph", "pinned", "episodes/s", "steps/s", "policy s",
                          "transfers s"], e2e))

    print("\n## LeRobot PushT")
    lerobot = lerobot_rows(has_cuda)
    print(lerobot.line())
    checks.append(lerobot)

    failed = [c for c in checks if c.ok is False]
    elapsed = time.perf_counter() - start
    print(f"\n{len(failed)} failed, {sum(c.ok is True for c in checks)} passed, "
          f"{sum(c.ok is None for c in checks)} skipped in {elapsed:.0f} s")
    report.update(checks=[c.line() for c in checks], latency=latency, end_to_end=e2e, elapsed_s=elapsed)
    if args.json:
        write_json(args.json, report)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
