"""One-shot GPU check (issues 13, 21): checks that can fail, then timings. Under 4 minutes on one GPU.

Checks (each a FAIL line and a non-zero exit when it does not hold; on a machine without CUDA each
is a SKIP line, by name, and the script exits 0):

1. **graph really captured**: a CUDA-graph run reports ``policy_cuda_graph == "captured"``, holds
   exactly one graph per slot group, its results equal the known answers and the eager run's, and
   the captured graph, replayed on two new inputs written into its static buffer, gives what the
   eager step gives on them (an empty graph, or one that replays stale outputs, fails here even
   when a lucky run matched);
2. **fresh noise under replay**: two replays of a stochastic step differ; two runs with the same
   seed give the same actions step by step, another seed other actions, and steps do not repeat
   the previous step's noise; graph == eager step by step; a second run of one engine (replays
   only) equals its first (which captured);
3. **flat memory**: 50 runs of one pipelined engine (recording episode data) keep device memory
   (``torch.cuda.memory_stats``), pinned host memory (``torch.cuda.host_memory_stats``) and the
   number of captured graphs exactly where they were after the first run;
4. **three async engines** built and closed one after another in one process: each pinned (the
   shared buffers registered, no staging), exact on the known-answer env, and unregistered at
   close (``is_pinned()`` of a kept view turns False: no stale registration for the next one);
5. **side stream**: a slow policy (``torch.cuda._sleep``) run under ``torch.cuda.stream(side)``,
   eager and graphed, is exact (the host waits for the copy on the stream it went to);
6. **timing**: with >= 10 MB of observations per step, ``h2d`` covers at least the transfer at
   200 GB/s, and graph capture sits apart from ``eval_s`` (``meta["capture_s"]``);
7. **capture status** of the latency rows: the MLP and the ACT-size policy (which builds
   ``torch.zeros(...).to(device)`` in its step, as LeRobot's ACT does) must be ``captured``;
8. **LeRobot PushT rows** (:mod:`bench_lerobot`, small size), only when ``lerobot`` imports: it exits
   non-zero when any two fasteval rows' per-episode rewards differ, or (on CUDA) when a row's
   ``lerobot_chunk_cuda_graph`` is not ``captured``.

Timings (no pass/fail, except where a row raises): policy-step latency, eager vs CUDA-graph replay,
for a small MLP and an ACT-like chunk policy (~55M parameters); end to end on CartPole-v1 (the demo
MLP): CPU, and on CUDA eager/graph x pinned/pageable.

    python benchmarks/gpu_check.py [--json FILE] [--quick]

The check functions take the device and a few seams (memory counters, the spec, ``is_pinned``, the
sleep), so that ``tests/test_gpu_check.py`` can run each one on CPU with the fakes of
:mod:`fasteval.testing.fake_cuda` and show that it fails on a planted fault.
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

import gymnasium as gym
import numpy as np
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


def _noisy_spec(device: str, cuda_graph: bool = True) -> EvalSpec:
    return EvalSpec(env=KA, policy=Noisy(), n_episodes=60, batch_size=8, device=device, cuda_graph=cuda_graph)


def _logged_run(engine: Engine, seed: int) -> list[tuple]:
    log = _ActionLog()
    engine.run(seed=seed, observer=log)
    return log.steps


def _noisy_actions(device: str, seed: int, cuda_graph: bool = True) -> list[tuple]:
    with Engine(_noisy_spec(device, cuda_graph)) as engine:
        return _logged_run(engine, seed)


def check_fresh_noise(device: str) -> list[Check]:
    call = CudaGraphCall(lambda x: torch.rand(x.shape, device=x.device) + x * 0, torch.device(device))
    x = torch.zeros(4096, device=device)
    first, second = call(x).clone(), call(x).clone()
    _sync(device)
    a, b, c = _noisy_actions(device, 1), _noisy_actions(device, 1), _noisy_actions(device, 2)
    eager = _noisy_actions(device, 1, cuda_graph=False)
    with Engine(_noisy_spec(device)) as engine:
        run1, run2 = _logged_run(engine, 1), _logged_run(engine, 1)
        status = engine.accel_facts.get("cuda_graph")
    repeats = sum(x == y for x, y in zip(a, a[1:]))  # 8 random bits per step: a repeat is 1 in 256
    differ = next((i for i, (x, y) in enumerate(zip(a, eager)) if x != y), None)
    return [
        Check("two replays of a stochastic step differ", call.captures == 1 and not torch.equal(first, second),
              f"captures={call.captures}, replays equal: {torch.equal(first, second)}"),
        Check("same seed -> same actions, step by step, across two runs", a == b and len(a) > 0,
              f"{len(a)} steps; equal: {a == b}"),
        Check("another seed -> other actions; steps draw new noise", a != c and repeats <= max(2, len(a) // 16),
              f"{repeats} of {len(a)} steps repeat the previous step's actions"),
        Check("noisy policy: graph == eager, step by step", a == eager and len(a) == len(eager),
              f"{len(a)} graph steps, {len(eager)} eager; first difference at step {differ}"),
        Check("one engine: run 2 (replays only) == run 1 (which captured)", run1 == run2 and status == "captured",
              f"policy_cuda_graph={status!r}; {len(run1)} / {len(run2)} steps; equal: {run1 == run2}"),
    ]


# -- 3. flat memory -------------------------------------------------------------------------------------

def device_bytes() -> int:
    """Bytes held by live tensors on the GPU (``torch.cuda.memory_stats``)."""
    return int(torch.cuda.memory_stats().get("allocated_bytes.all.current", 0))


def pinned_host_bytes() -> int:
    """Bytes of pinned host blocks in use (``torch.cuda.host_memory_stats``; 0 before CUDA starts)."""
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return 0
    stats = torch.cuda.host_memory_stats()
    return int(stats.get("active_bytes.current", stats.get("allocated_bytes.current", 0)))


def check_memory_flat(device: str, runs: int = 50, memory: Callable[[], int] | None = None,
                      spec: EvalSpec | None = None, host_memory: Callable[[], int] | None = None) -> list[Check]:
    memory = memory or device_bytes
    host_memory = host_memory or pinned_host_bytes
    spec = spec or EvalSpec(env=KA, policy=ParityPolicy().to(device), n_episodes=8, batch_size=4, device=device,
                            cuda_graph=True, vectorization="async", pipeline=True, return_episode_data=True)
    with Engine(spec) as engine:
        engine.run()
        _sync(device)
        call = engine.runner._step
        graphs = lambda: len(call.graphs) if isinstance(call, CudaGraphCall) else -1  # noqa: E731
        before, host_before, graphs_before = memory(), host_memory(), graphs()
        for seed in range(1, runs):
            engine.run(seed=seed)
        _sync(device)
        after, host_after, graphs_after = memory(), host_memory(), graphs()
    return [Check(f"{runs} runs of one pipelined engine: device memory, pinned host memory and graphs flat",
                  after == before and host_after == host_before and graphs_after == graphs_before == 2,
                  f"device {before} -> {after} bytes, pinned host {host_before} -> {host_after} bytes, "
                  f"graphs {graphs_before} -> {graphs_after} (want 2 -> 2)")]


# -- 4. async engines one after another ----------------------------------------------------------------

def _known(seed: int, n: int) -> list[tuple]:
    return [(i, *(expected_episode(seed + i, action_fn=lambda o: int(o[2]))[k] for k in ("sum_reward", "length",
                                                                                             "success")))
            for i in range(n)]


def _is_pinned(array: np.ndarray) -> bool:
    return bool(torch.from_numpy(array).is_pinned())


def check_async_engines(device: str, engines: int = 3,
                        is_pinned: Callable[[np.ndarray], bool] | None = None) -> list[Check]:
    """``engines`` async engines, built, run and closed one after another in this process."""
    is_pinned = is_pinned or _is_pinned
    checks = []
    for i in range(engines):
        spec = EvalSpec(env=KA, policy=ParityPolicy().to(device), n_episodes=12, batch_size=4, device=device,
                        vectorization="async", workers=2, seed=10 * i)
        with Engine(spec) as engine:
            pinned, staged = bool(engine.envs.pinned), list(engine.h2d.staged)
            view = engine.envs.obs  # keeps the mapping alive after close
            exact = _numbers(engine.run()) == _known(10 * i, 12)
        released = not is_pinned(view)
        checks.append(Check(f"async engine {i + 1} of {engines}: pinned, exact, unregistered at close",
                            pinned and not staged and exact and released,
                            f"pinned={pinned}, staged={staged}, exact={exact}, unregistered after close={released}"))
    return checks


# -- 5. a side stream ------------------------------------------------------------------------------------

class SlowParity(nn.Module):
    """The parity policy after ``torch.cuda._sleep(cycles)`` on a GPU: its actions land late."""

    def __init__(self, cycles: int = 2_000_000):
        super().__init__()
        self.cycles = cycles

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if obs.is_cuda:
            torch.cuda._sleep(self.cycles)
        return obs[..., -1].round().long()


def check_side_stream(device: str, n: int = 24) -> list[Check]:
    """A slow policy's run under ``torch.cuda.stream(side)`` (engines built outside it), eager and graphed."""
    checks = []
    side = torch.cuda.Stream(device=torch.device(device))
    for graph in (False, True):
        spec = EvalSpec(env=KA, policy=SlowParity().to(device), n_episodes=n, batch_size=8, device=device,
                        cuda_graph=graph)
        with Engine(spec) as engine:
            with torch.cuda.stream(side):
                result = engine.run()
            _sync(device)
        got = _numbers(result)
        wrong = sum(a != b for a, b in zip(got, _known(0, n))) + abs(len(got) - n)
        checks.append(Check(f"slow policy under a side stream, {'graph' if graph else 'eager'}: exact", wrong == 0,
                            f"{wrong} of {n} episodes differ from the known answers; "
                            f"policy_cuda_graph={result.meta.get('policy_cuda_graph')!r}"))
    return checks


# -- 6. timing: h2d and capture --------------------------------------------------------------------------

class BigObsEnv(gym.Env):
    """``length`` steps of reward 1 with a constant uint8 observation of ``shape`` (no per-step allocation)."""

    def __init__(self, shape: tuple = (3, 256, 256), length: int = 10):
        self.observation_space = gym.spaces.Box(0, 255, tuple(shape), dtype=np.uint8)
        self.action_space = gym.spaces.Discrete(2)
        self._obs = np.zeros(tuple(shape), dtype=np.uint8)
        self.length, self._t = int(length), 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._t = 0
        return self._obs, {}

    def step(self, action: Any):
        self._t += 1
        return self._obs, 1.0, False, self._t >= self.length, {}


BIG_OBS = "fasteval-gpu-check/BigObs-v0"
if BIG_OBS not in gym.registry:
    gym.register(BIG_OBS, entry_point=BigObsEnv)


class SlowEager(nn.Module):
    """Sleeps ``seconds`` on the host in every eager call (a graph replay runs no Python): warm-ups and
    capture take ``3 * seconds``, replays nothing. Actions: zeros."""

    def __init__(self, seconds: float, sleep: Callable[[float], None] = time.sleep):
        super().__init__()
        self.seconds, self.sleep = seconds, sleep

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        self.sleep(self.seconds)
        return torch.zeros(obs.shape[0], dtype=torch.long, device=obs.device)


H2D_MAX_BYTES_PER_S = 200e9
"""More than any host-to-device link moves (PCIe 5 x16: ~64 GB/s; NVLink-C2C: ~450 GB/s each way is the
exception, and a Grace machine would need this raised): h2d can never read less than bytes / this."""


def h2d_check(h2d_s: float, nbytes: int, device: str) -> Check:
    floor = nbytes / H2D_MAX_BYTES_PER_S
    if torch.device(device).type != "cuda":
        return Check("h2d covers the observation transfer", None, f"no transfer on {device}")
    return Check("h2d covers the observation transfer (>= bytes / 200 GB/s)", h2d_s >= floor,
                 f"h2d {h2d_s * 1e3:.3f} ms for {nbytes / 1e6:.0f} MB (floor {floor * 1e3:.3f} ms)")


def check_timing(device: str, shape: tuple = (3, 256, 256), batch: int = 64, length: int = 10,
                 seconds: float = 0.5, sleep: Callable[[float], None] = time.sleep) -> list[Check]:
    """``batch`` x ``shape`` uint8 observations (12.6 MB per step by default) with a policy that is slow only
    when it runs eagerly (warm-ups, capture): ``h2d`` covers the transfer, and capture sits apart from ``eval_s``."""
    spec = EvalSpec(env=BIG_OBS, env_kwargs={"shape": list(shape), "length": length},
                    policy=SlowEager(seconds, sleep).to(device), n_episodes=batch, batch_size=batch, device=device,
                    cuda_graph=True, max_steps=length)
    with Engine(spec) as engine:
        first, second = engine.run(), engine.run(seed=1)
    captured = first.meta.get("capture_s", 0.0)
    nbytes = length * batch * int(np.prod(shape))  # every launch copies the whole batch
    return [
        h2d_check(first.timings["h2d"], nbytes, device),
        Check("capture time sits apart from eval_s", captured >= 3 * seconds and first.eval_s < captured
              and second.meta.get("capture_s") == 0.0 and first.meta.get("policy_cuda_graph") == "captured",
              f"run 1: capture_s={captured:.3f} (>= {3 * seconds:.3f}), eval_s={first.eval_s:.3f} (< capture_s); "
              f"run 2: capture_s={second.meta.get('capture_s')}; policy_cuda_graph={first.meta.get('policy_cuda_graph')!r}"),
    ]


# -- 7. policy-step latency, and the capture status of each row --------------------------------------------

class MLP(nn.Module):
    def __init__(self, obs_dim: int = 64, hidden: int = 256, act_dim: int = 8):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(obs_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, act_dim))

    def forward(self, x):
        return self.net(x)


class ACTLike(nn.Module):
    """An ACT-sized chunk policy (~55M parameters): the state and 8 "image" tokens through a 4-layer
    encoder, 100 action queries through a 7-layer decoder (d_model 512, 8 heads, FFN 3200), -> [B, 100, 14].
    Like LeRobot's ACT in eval, it builds its latent as ``torch.zeros([B, latent]).to(device)``: a
    pageable upload on a GPU, unless the capture makes factory calls on the device."""

    def __init__(self, obs_dim: int = 64, chunk: int = 100, act_dim: int = 14, d: int = 512, heads: int = 8,
                 layers: tuple = (4, 7), ffn: int = 3200):
        super().__init__()
        self.tokens = nn.Linear(obs_dim, 8 * d)
        self.latent = nn.Linear(32, d)
        self.queries = nn.Parameter(torch.zeros(chunk, d))
        self.transformer = nn.Transformer(d, heads, num_encoder_layers=layers[0], num_decoder_layers=layers[1],
                                          dim_feedforward=ffn, dropout=0.0, batch_first=True)
        self.head = nn.Linear(d, act_dim)
        self.d = d

    def forward(self, x):
        latent = torch.zeros([x.shape[0], 32], dtype=torch.float32).to(x.device)  # LeRobot ACT's eval latent
        src = torch.cat([self.latent(latent).unsqueeze(1), self.tokens(x).view(x.shape[0], 8, self.d)], dim=1)
        tgt = self.queries.unsqueeze(0).expand(x.shape[0], -1, -1)
        return self.head(self.transformer(src, tgt))


LATENCY_MODELS = (("MLP 64-256-256-8", MLP, (1, 16, 256), 200), ("ACT-like chunk policy", ACTLike, (1, 8), 20))


def step_latency_us(module: nn.Module, x: torch.Tensor, graphed: bool, repeats: int, calls: int) -> tuple[float, str]:
    """Median us of one policy step on the device (synchronised), and the graph status."""
    call = CudaGraphCall(module, x.device) if graphed else module
    device = str(x.device)
    with torch.inference_mode():
        for _ in range(3):
            call(x)
        _sync(device)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(calls):
                call(x)
            _sync(device)
            times.append((time.perf_counter() - t0) / calls * 1e6)
    status = call.facts.get("cuda_graph", "?") if graphed else "eager"
    return statistics.median(times), status


def latency_rows(quick: bool, device: str = "cuda", models: tuple = LATENCY_MODELS) -> list[list[Any]]:
    rows = []
    for name, make, batches, calls in models:
        module = make().to(device).eval()
        params = sum(p.numel() for p in module.parameters()) / 1e6
        for batch in batches:
            x = torch.zeros((batch, 64), device=device)
            eager, _ = step_latency_us(module, x, False, 3 if quick else 5, calls)
            graph, status = step_latency_us(module, x, True, 3 if quick else 5, calls)
            rows.append([name, f"{params:.1f}M", batch, f"{eager:.1f}", f"{graph:.1f}", f"{eager / graph:.2f}x", status])
        del module
        if torch.device(device).type == "cuda":
            torch.cuda.empty_cache()
    return rows


def capture_checks(rows: list[list[Any]]) -> list[Check]:
    """Each latency row's graph must be ``captured`` (an ``eager (capture failed: ...)`` row is a FAIL)."""
    return [Check(f"{row[0]}, batch {row[2]}: graph captured", row[-1] == "captured", f"status {row[-1]!r}")
            for row in rows]


# -- 8. end to end ---------------------------------------------------------------------------------------

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


# -- 9. LeRobot PushT ---------------------------------------------------------------------------------------

LEROBOT_ROW = "LeRobot PushT rows: fasteval rows agree, chunk graph captured on CUDA"


def lerobot_rows(has_cuda: bool) -> Check:
    script = Path(__file__).resolve().parent / "bench_lerobot.py"
    if importlib.util.find_spec("lerobot") is None or not script.is_file():
        why = "lerobot is not importable" if script.is_file() else "benchmarks/bench_lerobot.py is missing"
        return Check(LEROBOT_ROW, None, why)
    import bench_lerobot

    try:
        code = bench_lerobot.main(["--device", "cuda" if has_cuda else "cpu", "--episodes", "4", "--batch", "4",
                                   "--steps", "50"])
    except Exception as exc:  # a row that raises is a failure, not a skip
        return Check(LEROBOT_ROW, False, f"{type(exc).__name__}: {exc}")
    return Check(LEROBOT_ROW, code == 0, f"bench_lerobot exit code {code} (its problems are printed above)")


# -- main -----------------------------------------------------------------------------------------------------

CHECKS = (("graph captured", check_graph_captured), ("fresh noise", check_fresh_noise),
          ("flat memory", check_memory_flat), ("async engines", check_async_engines),
          ("side stream", check_side_stream), ("timing", check_timing))

DEVICE_ROWS = (
    "CUDA graph run reports a capture", "graph == eager == known answers, 200 episodes",
    "a replay on new inputs computes them (not stale outputs)", "two replays of a stochastic step differ",
    "same seed -> same actions, step by step, across two runs", "another seed -> other actions; steps draw new noise",
    "noisy policy: graph == eager, step by step", "one engine: run 2 (replays only) == run 1 (which captured)",
    "50 runs of one pipelined engine: device memory, pinned host memory and graphs flat",
    *(f"async engine {i} of 3: pinned, exact, unregistered at close" for i in (1, 2, 3)),
    "slow policy under a side stream, eager: exact", "slow policy under a side stream, graph: exact",
    "h2d covers the observation transfer (>= bytes / 200 GB/s)", "capture time sits apart from eval_s",
    *(f"{name}, batch {b}: graph captured" for name, _make, batches, _calls in LATENCY_MODELS for b in batches),
)
"""Every row that needs a GPU, by name: a CPU run prints each as SKIP."""


def run_checks(device: str) -> list[Check]:
    checks = []
    for name, fn in CHECKS:
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
    checks = run_checks("cuda") if has_cuda else [Check(n, None, "no CUDA device") for n in DEVICE_ROWS]
    print("\n".join(c.line() for c in checks))

    print("\n## Policy step latency: eager vs CUDA-graph replay (us, median)")
    try:
        latency = latency_rows(args.quick) if has_cuda else []
    except Exception as exc:  # a row that raises is a failure
        latency = []
        checks.append(Check("policy step latency rows", False, f"raised {type(exc).__name__}: {exc}"))
    print(markdown_table(["policy", "params", "batch", "eager us", "graph us", "speed-up", "graph"], latency)
          if latency else "SKIP: no CUDA device")
    status = capture_checks(latency)
    print("\n".join(c.line() for c in status))
    checks += status

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
