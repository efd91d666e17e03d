"""The cost of serving a policy (``fasteval serve`` + ``--policy ws://``), and dynamic batching.

1. **Served vs in-process**, per step, over loopback: env steps/s of the same evaluation run
   in-process and against a ``fasteval serve`` process on 127.0.0.1 (fasteval's batched protocol:
   one request per step). Rows: CartPole MLP (the demo checkpoint) at batch 16 and 256, and PushT
   ACT (a random-init LeRobot checkpoint) at batch 10 where LeRobot is importable. Each run
   checks that the served per-episode results equal the in-process ones.
2. **Dynamic batching**: 1, 4 and 16 concurrent openpi clients (asyncio, one websocket each, one
   request in flight each, in two client processes of their own) against one server (``--max-batch 16``): requests/s and latency
   percentiles, against one in-process policy call on the same total batch (16 rows). Two policies:
   the CartPole MLP (a call costs microseconds: the round trip is everything), and
   :class:`FixedCostPolicy`, whose call costs ``FIXED_COST_MS`` whatever its batch (the regime of a
   large policy on a GPU, where batching pays), and :class:`VlaCostPolicy` at 40 ms a call (pi0 with CUDA
   graphs). See :func:`run_clients`.

3. **Memory under a burst** (``--memory``, alone): C clients (websockets' sync client, keepalive pings on, as
   openpi-client) send one large request each at once; the server's peak memory growth (``VmHWM``) against its
   documented bound (``--max-inflight-mb`` + ``--max-message-mb``), its memory growth after the burst (``VmRSS``),
   and the clients dropped by keepalive. Linux only. See :func:`memory_rows`.

Rows are interleaved per repeat and reported as medians. Timings are machine-dependent: the header
says where they were taken. On a GPU server start the server with ``--device cuda`` (CUDA graphs
per padded batch are on by default there) and pass ``--server-device cuda``.

    python benchmarks/bench_serve.py [--repeats 3] [--tiny] [--json out.json] [--server-device cpu]
    python benchmarks/bench_serve.py --memory [--tiny]   # 32 clients x 100 MB; bounds 1024 + 256 and 256 + 256 MB
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import command_line, format_machine, machine_info, markdown_table, write_json  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MLP = str(ROOT / "src" / "fasteval" / "assets" / "cartpole_mlp")


FIXED_COST_MS = 10.0


class FixedCostPolicy:
    """A call costs ``cost_ms`` of wall time whatever its batch (a sleep: a large model on a GPU, where
    one more row is nearly free); action 0. Served as ``benchmarks.bench_serve:FixedCostPolicy``."""

    cost_ms = FIXED_COST_MS

    def __init__(self, action_space=None):
        self.cost_s = self.cost_ms / 1000.0

    def select_action(self, obs):
        import torch

        time.sleep(self.cost_s)
        return torch.zeros(obs.shape[0], dtype=torch.long)


class VlaCostPolicy(FixedCostPolicy):
    """:class:`FixedCostPolicy` at 40 ms a call: pi0 with CUDA graphs on one GPU (published figures: about
    100 ms eager, 40-50 ms graphed for two views, 20-40 ms with hand-tuned kernels)."""

    cost_ms = 40.0


def start_server(policy: str, *args: str, device: str = "cpu") -> tuple[subprocess.Popen, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.Popen([sys.executable, "-m", "fasteval.doors.serve", policy, "--port", "0", "--device", device, *args],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    url = proc.stdout.readline().strip()
    if not url.startswith("ws://"):
        proc.kill()
        raise RuntimeError(f"fasteval serve did not start ({url!r})")
    return proc, url


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()


# -- 1. served vs in-process ----------------------------------------------------------------------

def serving_rows(cases: list[dict], repeats: int, server_device: str) -> tuple[list[list], list[str]]:
    from fasteval import Evaluator
    from fasteval.robot.policies.remote import connect_remote

    rows, notes = [], []
    for case in cases:
        proc, url = start_server(case["policy"], device=server_device)
        try:
            spec = dict(env=case["env"], env_kwargs=case.get("env_kwargs", {}), n_episodes=case["n"],
                        batch_size=case["batch"], max_steps=case["max_steps"], seed=1000, device="cpu",
                        observation_format=case.get("observation_format", "raw"))
            local, served = Evaluator(policy=case["policy"], **spec), Evaluator(policy=connect_remote(url), **spec)
            local.evaluate(n_episodes=min(case["batch"], case["n"]))  # warm-up: dry run, first calls
            served.evaluate(n_episodes=min(case["batch"], case["n"]))
            rates: dict[str, list[float]] = {"in-process": [], "served": []}
            same = True
            for _ in range(repeats):
                a, b = local.evaluate(), served.evaluate()
                rates["in-process"].append(a.overall()["steps_per_s"])
                rates["served"].append(b.overall()["steps_per_s"])
                same &= [r["sum_reward"] for r in a.per_episode] == [r["sum_reward"] for r in b.per_episode]
            local.close()
            served.close()
        finally:
            stop(proc)
        mid = {k: statistics.median(v) for k, v in rates.items()}
        rows.append([case["name"], case["batch"], f"{mid['in-process']:.0f}", f"{mid['served']:.0f}",
                     f"{mid['served'] / mid['in-process']:.2f}x"])
        notes.append(f"- {case['name']} b{case['batch']}: served per-episode results equal in-process: {same}")
    return rows, notes


def act_case(tiny: bool) -> dict | None:
    try:
        import lerobot  # noqa: F401
    except Exception:
        return None
    from fasteval.robot.lerobot.testing import write_act_checkpoint

    folder = write_act_checkpoint(Path(tempfile.mkdtemp(prefix="bench_serve_act_")), seed=0)
    return dict(name="PushT ACT", policy=str(folder), env="gym_pusht/PushT-v0",
                env_kwargs={"obs_type": "pixels_agent_pos", "render_mode": "rgb_array"}, observation_format="lerobot",
                batch=10, n=10, max_steps=10 if tiny else 100)


# -- 2. dynamic batching --------------------------------------------------------------------------

async def _one_client(url: str, requests: int, seed: int, ready: Any, start: Any,
                      latencies: list[float], sizes: list[int]) -> None:
    """One openpi client on its own websocket: ``requests`` observations, one in flight at a time."""
    import asyncio

    from websockets.asyncio.client import connect

    from fasteval.types.wire import pack, unpack

    rng = np.random.default_rng(seed)
    async with connect(url, compression=None, max_size=None) as ws:
        unpack(await ws.recv())
        ready.release()
        while not start.is_set():
            await asyncio.sleep(0.001)
        for _ in range(requests):
            obs = rng.normal(size=4).astype(np.float32)
            t = time.perf_counter()
            await ws.send(pack({"observation": obs}))
            reply = unpack(await ws.recv())
            latencies.append(time.perf_counter() - t)
            sizes.append(int(reply["server_timing"]["batch_size"]))


def client_process(url: str, n_clients: int, requests: int, first_seed: int, ready: Any, start: Any,
                   results: Any) -> None:
    """``n_clients`` openpi clients (asyncio, one websocket each) in this process; puts
    ``(latencies in s, batch sizes)`` on ``results`` once all are done."""
    import asyncio

    latencies: list[float] = []
    sizes: list[int] = []

    async def main() -> None:
        await asyncio.gather(*(_one_client(url, requests, first_seed + i, ready, start, latencies, sizes)
                               for i in range(n_clients)))

    asyncio.run(main())
    results.put((latencies, sizes))


CLIENT_PROCESSES = 2
"""Client processes of the batching benchmark (their clients split evenly between them)."""


def run_clients(url: str, k: int, requests: int) -> tuple[float, list[float], list[int]]:
    """K openpi clients against ``url``, started together once all are connected: (rows/s, latencies, sizes).

    The clients run as asyncio websockets in :data:`CLIENT_PROCESSES` processes of their own, not as threads of
    this one: with a thread per client, the clients' packing and websockets' reader threads share one GIL
    and the harness, not the server, sets the pace (16 client threads reached half the server's rate here)."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    ready, start, results = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    shares = [len(r) for r in np.array_split(np.arange(k), min(k, CLIENT_PROCESSES))]
    firsts = np.cumsum([0] + shares[:-1])
    procs = [ctx.Process(target=client_process, args=(url, n, requests, int(first), ready, start, results), daemon=True)
             for n, first in zip(shares, firsts)]
    for proc in procs:
        proc.start()
    for _ in range(k):
        if not ready.acquire(timeout=120):
            raise RuntimeError("a benchmark client did not connect within 120 s")
    t = time.perf_counter()
    start.set()
    gathered = [results.get(timeout=600) for _ in procs]
    elapsed = time.perf_counter() - t
    for proc in procs:
        proc.join(30)
    latencies = [x for lat, _ in gathered for x in lat]
    sizes = [x for _, size in gathered for x in size]
    return k * requests / elapsed, latencies, sizes


def local_rate(policy: str) -> float:
    """Rows/s of one in-process policy call on 16 rows, called back to back."""
    import torch

    if policy == MLP:
        from fasteval.robot.policies.checkpoint import load_checkpoint

        call = load_checkpoint(MLP).eval()
    else:  # one of this file's fixed-cost policies ("benchmarks.bench_serve:NAME" for the server)
        call = globals()[policy.rsplit(":", 1)[1]]().select_action
    batch = torch.zeros(16, 4)
    torch.set_num_threads(1)
    with torch.inference_mode():
        for _ in range(3):
            call(batch)
        t, calls = time.perf_counter(), 0
        while time.perf_counter() - t < 0.5:
            call(batch)
            calls += 1
    return 16 * calls / (time.perf_counter() - t)


def batching_rows(policy: str, name: str, clients: list[int], requests: int, repeats: int,
                  server_device: str, max_wait_ms: float) -> list[list]:
    local_rows_s = local_rate(policy)
    proc, url = start_server(policy, "--env", "CartPole-v1", "--max-batch", "16", "--max-wait-ms", f"{max_wait_ms:g}",
                             device=server_device)
    out = []
    try:
        for k in clients:
            rates, lats, sizes = [], [], []
            for _ in range(repeats):
                rate, latencies, batch_sizes = run_clients(url, k, requests)
                rates.append(rate)
                lats += latencies
                sizes += batch_sizes
            ms = np.array(lats) * 1000.0
            rate = statistics.median(rates)
            out.append([name, max_wait_ms, k, f"{rate:.0f}", f"{np.mean(sizes):.1f}", f"{np.percentile(ms, 50):.2f}",
                        f"{np.percentile(ms, 90):.2f}", f"{np.percentile(ms, 99):.2f}", f"{rate / local_rows_s:.3f}"])
    finally:
        stop(proc)
    out.append([name, "", "in-process, 1 call on 16 rows", f"{local_rows_s:.0f}", "16", "", "", "", "1.000"])
    return out


# -- 3. memory under a burst ------------------------------------------------------------------------

def _status_kib(pid: int, key: str) -> int:
    import re

    return int(re.search(rf"{key}:\s+(\d+)", Path(f"/proc/{pid}/status").read_text()).group(1))


def memory_rows(cases: list[tuple[int, float, float, float]], ping_s: float = 20.0) -> list[list]:
    """Per ``(clients, request MB, --max-message-mb, --max-inflight-mb)``: a server's peak growth, its growth after
    the burst (once it has returned memory, up to 30 s), its bound, the requests answered and dropped."""
    import threading

    from websockets.sync.client import connect

    from fasteval.types.wire import pack

    rows = []
    for clients, size_mb, message_mb, inflight_mb in cases:
        payload = pack({"observation": np.zeros(int(size_mb * 1024 * 1024) // 4, np.float32)})  # refused: wrong shape
        proc, url = start_server("zero", "--env", "CartPole-v1", "--max-message-mb", f"{message_mb:g}",
                                 "--max-inflight-mb", f"{inflight_mb:g}")
        try:
            before = _status_kib(proc.pid, "VmRSS")
            answered, dropped = [], []

            def client() -> None:
                try:
                    with connect(url, compression=None, max_size=None, open_timeout=300, ping_interval=ping_s,
                                 ping_timeout=ping_s) as ws:
                        ws.recv()
                        ws.send(payload)
                        ws.recv(timeout=1800)
                        answered.append(1)
                except Exception as exc:  # noqa: BLE001 (a keepalive timeout: counted, its reason kept)
                    dropped.append(repr(exc)[:300])

            threads = [threading.Thread(target=client) for _ in range(clients)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            peak = (_status_kib(proc.pid, "VmHWM") - before) / 1024
            after = (_status_kib(proc.pid, "VmRSS") - before) / 1024
            for _ in range(150):
                if after <= 8:
                    break
                time.sleep(0.2)
                after = (_status_kib(proc.pid, "VmRSS") - before) / 1024
        finally:
            stop(proc)
        for reason in sorted(set(dropped)):
            print(f"dropped ({dropped.count(reason)}): {reason}", file=sys.stderr)
        rows.append([clients, f"{size_mb:g}", f"{message_mb:g} + {inflight_mb:g}", f"+{peak:.0f}",
                     f"+{message_mb + inflight_mb:.0f}", f"{after:+.0f}", len(answered), len(dropped)])
    return rows


def memory_main(tiny: bool, json_path: str | None) -> int:
    cases = [(8, 4.0, 8.0, 16.0)] if tiny else [(32, 100.0, 256.0, 1024.0), (32, 100.0, 256.0, 256.0)]  # 3.2 GB sent
    info = machine_info()
    print("# fasteval serve: memory under a burst of large requests\n")
    print(format_machine(info))
    print(f"- command: `{command_line()}`; keepalive pings every 20 s (openpi-client's websockets defaults)\n")
    rows = memory_rows(cases)  # openpi's keepalive
    print(markdown_table(["clients", "request MB", "max message + inflight MB", "peak MB", "documented bound MB",
                          "after the burst MB", "answered", "dropped"], rows))
    if json_path:
        write_json(json_path, {"machine": info, "memory": rows})
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tiny", action="store_true", help="smallest sizes (a smoke test)")
    parser.add_argument("--json", default=None)
    parser.add_argument("--server-device", default="cpu")
    parser.add_argument("--no-act", action="store_true", help="skip the PushT ACT row")
    parser.add_argument("--only-batching", action="store_true", help="only the dynamic-batching table")
    parser.add_argument("--memory", action="store_true", help="only the memory of a burst of large requests")
    args = parser.parse_args()
    if args.memory:
        return memory_main(args.tiny, args.json)
    repeats = 1 if args.tiny else args.repeats
    cases = [dict(name="CartPole MLP", policy=MLP, env="CartPole-v1", batch=16, n=16, max_steps=20 if args.tiny else 200)]
    if not args.tiny:
        cases.append(dict(name="CartPole MLP", policy=MLP, env="CartPole-v1", batch=256, n=256, max_steps=100))
    act = None if args.no_act or args.only_batching else act_case(args.tiny)
    if act is not None:
        cases.append(act)
    info = machine_info()
    print("# fasteval serve: served vs in-process, dynamic batching\n")
    print(format_machine(info))
    print(f"- command: `{command_line()}`; server device {args.server_device}; loopback (127.0.0.1)\n")
    rows, notes = [], []
    if not args.only_batching:
        print("## Served vs in-process (env steps/s, sync envs, fasteval protocol)\n")
        rows, notes = serving_rows(cases, repeats, args.server_device)
        print(markdown_table(["workload", "batch", "in-process", "served", "served / in-process"], rows))
        print("\n" + "\n".join(notes) + ("\n- PushT ACT: skipped (LeRobot not importable here)" if act is None else ""))
    print("\n## Dynamic batching (openpi protocol, CartPole observations, --max-batch 16)\n")
    clients = [1, 4] if args.tiny else [1, 4, 16]
    brows = batching_rows(MLP, "CartPole MLP", clients, 20 if args.tiny else 400, repeats, args.server_device, 2.0)
    for wait in ([2.0] if args.tiny else [2.0, 8.0]):
        brows += batching_rows("benchmarks.bench_serve:FixedCostPolicy", f"fixed {FIXED_COST_MS:g} ms per call", clients,
                               5 if args.tiny else 40, repeats, args.server_device, wait)
    if not args.tiny:
        brows += batching_rows("benchmarks.bench_serve:VlaCostPolicy", f"fixed {VlaCostPolicy.cost_ms:g} ms per call",
                               clients, 20, repeats, args.server_device, 8.0)
    print(markdown_table(["policy", "max wait ms", "clients", "rows/s", "mean batch", "p50 ms", "p90 ms", "p99 ms",
                          "vs in-process b16"], brows))
    if args.json:
        write_json(args.json, {"machine": info, "serving": rows, "batching": brows, "notes": notes})
    return 0


if __name__ == "__main__":
    sys.exit(main())
