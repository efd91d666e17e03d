"""One-shot GPU check (issue 3): correctness first, then timings. Finishes in under 5 minutes.

1. Eager and CUDA-graph evaluation agree exactly on the known-answer env (and stochastic
   policies stay reproducible per seed under replay).
2. Policy-step latency, eager vs CUDA-graph replay, for a small MLP and a small CNN at
   batch sizes 1, 16 and 256 (median of repeats, after warm-up; capture outside the timing).
3. End-to-end episodes/s on CartPole-v1 (demo MLP) and on an image env (BusyEnv images with
   the CNN), with pinned transfers (the engine's path) and with plain pageable copies.

On a machine without CUDA it still runs: the CUDA rows print as skipped, and the CPU rows run.

    python benchmarks/gpu_check.py [--json FILE] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import check_line, format_machine, machine_info, markdown_table, write_json  # noqa: E402

from fasteval import evaluate  # noqa: E402
from fasteval.engine import Engine  # noqa: E402
from fasteval.spec import EvalSpec  # noqa: E402
from fasteval.testing import ParityPolicy  # noqa: E402

KA = "fasteval/KnownAnswer-v0"
DEMO = Path(__file__).resolve().parent.parent / "src" / "fasteval" / "assets" / "cartpole_mlp"


class MLP(nn.Module):
    def __init__(self, obs_dim: int = 64, hidden: int = 256, act_dim: int = 8):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(obs_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, act_dim))

    def forward(self, x):
        return self.net(x)


class CNN(nn.Module):
    """uint8 [B, 96, 96, 3] -> float CHW on the device -> 2 logits."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 32, 8, stride=4), nn.ReLU(), nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
                                 nn.Conv2d(64, 64, 3), nn.ReLU(), nn.Flatten(), nn.LazyLinear(2))

    def forward(self, x):
        return self.net(x.permute(0, 3, 1, 2).float() / 255.0)


def correctness(device: str) -> list[str]:
    lines = []
    strip = lambda r: [(e["episode_ix"], e["sum_reward"], e["length"], e["success"]) for e in r.per_episode]  # noqa: E731
    eager = evaluate(env=KA, policy=ParityPolicy(), n_episodes=200, batch_size=16, device=device, cuda_graph=False)
    graph = evaluate(env=KA, policy=ParityPolicy(), n_episodes=200, batch_size=16, device=device, cuda_graph=True)
    lines.append(check_line("eager == CUDA graph, known-answer env, 200 episodes", strip(eager) == strip(graph),
                            f"graph captured: {graph.meta.get('policy_cuda_graph')}"))

    class Noisy(nn.Module):
        def forward(self, obs):
            return (torch.rand(obs.shape[0], device=obs.device) < 0.5).long()

    a = evaluate(env=KA, policy=Noisy(), n_episodes=100, batch_size=16, seed=3, device=device, cuda_graph=True)
    b = evaluate(env=KA, policy=Noisy(), n_episodes=100, batch_size=16, seed=3, device=device, cuda_graph=True)
    lines.append(check_line("stochastic policy under replay: same seed -> same results", strip(a) == strip(b), ""))
    return lines


def step_latency(module: nn.Module, example: torch.Tensor, graphed: bool, repeats: int) -> float:
    """Median µs of one policy step (forward + argmax) on the GPU, synchronised."""
    from fasteval.core.accel import CudaGraphCall

    def step(x):
        return module(x).argmax(-1)

    call = CudaGraphCall(step, example.device) if graphed else step
    with torch.inference_mode():
        for _ in range(5):
            call(example)
        torch.cuda.synchronize()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(50):
                call(example)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) / 50 * 1e6)
    return statistics.median(times)


def run_engine(spec: EvalSpec, pin_memory: bool):
    """Build, warm up (capture), then time one run."""
    with Engine(spec, pin_memory=pin_memory) as engine:
        engine.run(n_episodes=4, seed=99_999)
        return engine.run()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", type=Path)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    has_cuda = torch.cuda.is_available()
    print(format_machine(machine_info()))
    print(f"GPU: {torch.cuda.get_device_name(0) if has_cuda else 'none (CUDA rows skipped)'}")
    report: dict = {"machine": machine_info(), "cuda": has_cuda}

    print("\n## Correctness")
    lines = correctness("cuda") if has_cuda else [check_line("eager == CUDA graph", None, "no CUDA device")]
    print("\n".join(lines))
    report["correctness"] = lines

    print("\n## Policy step latency: eager vs CUDA-graph replay (µs, median)")
    rows, speedups = [], []
    if has_cuda:
        repeats = 3 if args.quick else 7
        for name, make, shape in (("MLP 64-256-256-8", MLP, (64,)), ("CNN 96x96x3", CNN, (96, 96, 3))):
            module = make().cuda().eval()
            for batch in (1, 16, 256):
                dtype = torch.uint8 if name.startswith("CNN") else torch.float32
                x = torch.zeros((batch, *shape), dtype=dtype, device="cuda")
                with torch.inference_mode():
                    module(x)  # materialise lazy layers
                eager = step_latency(module, x, False, repeats)
                graph = step_latency(module, x, True, repeats)
                rows.append([name, batch, f"{eager:.1f}", f"{graph:.1f}", f"{eager / graph:.2f}x"])
                if name.startswith("MLP") and batch <= 64:
                    speedups.append(eager / graph)
        print(markdown_table(["policy", "batch", "eager µs", "graph µs", "speed-up"], rows))
        print(check_line("graph replay >= 5x eager for the small MLP at batch <= 64", min(speedups) >= 5,
                         f"min {min(speedups):.2f}x"))
    else:
        print("skipped: no CUDA device")
    report["latency"] = rows

    print("\n## End to end (episodes/s)")
    e2e = []
    n = 200 if args.quick else 1000
    configs = [("cpu", False, True)] + ([("cuda", g, p) for g in (False, True) for p in (True, False)] if has_cuda else [])
    for device, graph, pin in configs:
        policy = str(DEMO) if DEMO.is_dir() else "zero"
        spec = EvalSpec(env="CartPole-v1", policy=policy, n_episodes=n, batch_size=64, device=device, cuda_graph=graph)
        r = run_engine(spec, pin)
        e2e.append(["CartPole-v1 demo MLP", device, graph, pin, f"{r.overall()['episodes_per_s']:.1f}",
                    f"{r.overall()['steps_per_s']:.0f}"])
        spec = EvalSpec(env="fasteval.testing.busy:make_busy_env", env_kwargs={"step_ms": 0.0, "image": True},
                        policy=CNN().to(device), n_episodes=max(20, n // 20), batch_size=16, device=device, cuda_graph=graph)
        r = run_engine(spec, pin)
        e2e.append(["BusyEnv 64x64 images, CNN", device, graph, pin, f"{r.overall()['episodes_per_s']:.1f}",
                    f"{r.overall()['steps_per_s']:.0f}"])
    print(markdown_table(["workload", "device", "cuda graph", "pinned", "episodes/s", "steps/s"], e2e))
    report["end_to_end"] = e2e
    if args.json:
        write_json(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
