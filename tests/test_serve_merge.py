"""Cross-session batching (``fasteval serve --batch-sessions``): several client engines against one server give
the per-episode results of local runs, and the server really ran rows of several sessions in one call.

The server runs in this process (a thread with its own event loop, as a Ray policy actor runs it), so the test
reads its counters; each client engine runs in a thread of its own, so their requests meet at the server.
"""

from __future__ import annotations

import asyncio
import threading

import pytest
import torch

pytest.importorskip("websockets")
pytest.importorskip("msgpack")

from fasteval.doors.serve_merge import MERGED  # noqa: E402
from fasteval.doors.serve_policy import RunnerOptions  # noqa: E402
from fasteval.robot.policies.remote import connect_remote  # noqa: E402
from fasteval.run.engine import Engine  # noqa: E402
from fasteval.testing import KNOWN_ANSWER_ID  # noqa: E402
from fasteval.types.spec import EvalSpec  # noqa: E402
from tests.helpers import ActionLog  # noqa: E402
from tests.serve_helpers import REPO, ServerProcess, ThreadServer  # noqa: E402

MLP = str(REPO / "src" / "fasteval" / "assets" / "cartpole_mlp")
CHUNKS = "tests.serve_helpers:parity_chunks"
NOISE = "tests.serve_helpers:episode_noise"


def rows_of(result, log):
    """Per-episode numbers, and the action of every slot that stepped, step by step."""
    return [(r["episode_ix"], r["seed"], r["sum_reward"], r["length"], r["success"]) for r in result.per_episode], log.steps


def run_local(policy, **fields):
    log = ActionLog(active_only=True)
    with Engine(EvalSpec(policy=policy, **fields)) as engine:
        return rows_of(engine.run(observer=log), log)


def run_clients(url, specs):
    """Each spec's engine in its own thread against ``url``, all at once: (rows, meta) per spec."""
    out: list = [None] * len(specs)
    errors: list = []
    barrier = threading.Barrier(len(specs))

    def client(i, fields):
        try:
            log = ActionLog(active_only=True)
            with Engine(EvalSpec(policy=connect_remote(url), **fields)) as engine:
                barrier.wait(60)
                result = engine.run(observer=log)
            out[i] = (rows_of(result, log), result.meta)
        except BaseException as exc:  # noqa: BLE001 -- raised in the test below
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=client, args=(i, f)) for i, f in enumerate(specs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    if errors:
        raise errors[0]
    return out


def client_specs(env, seeds, batches, n, max_steps=None):
    return [dict(env=env, n_episodes=n, seed=seed, batch_size=b, device="cpu", max_steps=max_steps)
            for seed, b in zip(seeds, batches)]


def test_three_cartpole_clients_share_calls_and_match_local_runs():
    specs = client_specs("CartPole-v1", [11, 111, 211], [4, 3, 5], 9, max_steps=60)
    local = [run_local(MLP, **s) for s in specs]
    server = ThreadServer(MLP, batch_sessions_ms=100.0)
    try:
        remote = run_clients(server.url, specs)
    finally:
        server.close()
    assert [rows for rows, _ in remote] == local
    assert all(len({str(step) for step in steps}) > 1 for _, steps in local)  # the actions vary, step to step
    stats = server.server.merger.stats
    assert stats["merged_calls"] > 0 and stats["max_sessions"] >= 2, stats
    for _, meta in remote:
        assert meta["server_policy_batch_sessions"].startswith(MERGED)


def test_merged_calls_on_the_compute_thread_match_too():
    """``threaded_compute``: the merged call runs on the server's compute thread; replies are still answered on the
    event loop, and the clients get their local runs' numbers."""
    specs = client_specs("CartPole-v1", [21, 121], [4, 2], 5, max_steps=40)
    server = ThreadServer(MLP, batch_sessions_ms=50.0, threaded_compute=True)
    try:
        remote = run_clients(server.url, specs)
    finally:
        server.close()
    assert [rows for rows, _ in remote] == [run_local(MLP, **s) for s in specs]
    assert server.server.merger.stats["merged_calls"] > 0


def test_batching_off_makes_no_merged_calls():
    """The same clients without --batch-sessions: no merger, each session its own call (the counters above are
    not counting something that always happens)."""
    specs = client_specs("CartPole-v1", [11, 111], [4, 3], 4, max_steps=30)
    server = ThreadServer(MLP, batch_sessions_ms=None)
    try:
        remote = run_clients(server.url, specs)
    finally:
        server.close()
    assert server.server.merger is None
    assert [rows for rows, _ in remote] == [run_local(MLP, **s) for s in specs]
    assert "server_policy_batch_sessions" not in remote[0][1]


@pytest.mark.parametrize("policy,reason", [(CHUNKS, "per-slot state"), (NOISE, "per-slot state")])
def test_stateful_policies_fall_back_per_session_and_say_so(policy, reason):
    specs = client_specs(KNOWN_ANSWER_ID, [11, 50, 90], [3, 2, 4], 12)
    local = [run_local(policy, **s) for s in specs]
    server = ThreadServer(policy, batch_sessions_ms=20.0)
    try:
        remote = run_clients(server.url, specs)
    finally:
        server.close()
    assert [rows for rows, _ in remote] == local
    assert server.server.merger.stats["calls"] == 0
    for _, meta in remote:
        assert meta["server_policy_batch_sessions"].startswith("per-session call") and reason in \
            meta["server_policy_batch_sessions"]


def test_the_cli_option_turns_batching_on():
    """``fasteval serve --batch-sessions MS``: the option reaches the server (its metadata, and the client's meta
    names the merged call), and a client gets the local run's numbers."""
    spec = client_specs("CartPole-v1", [7], [3], 3, max_steps=30)[0]
    with ServerProcess(MLP, "--batch-sessions", "5") as server:
        remote = connect_remote(server.url)
        assert remote.connection.metadata["batch_sessions_ms"] == 5.0
        ((rows, meta),) = run_clients(server.url, [spec])
    assert rows == run_local(MLP, **spec)
    assert meta["server_policy_batch_sessions"].startswith(MERGED)


def test_pipelined_clients_merge_with_plain_ones():
    """A ``--pipeline`` client (two slot groups, async envs) and a plain one: every group's requests are merged
    with the others', and each client gets its local run's numbers and actions."""
    specs = [dict(env="CartPole-v1", n_episodes=8, seed=11, batch_size=4, device="cpu", max_steps=40,
                  vectorization="async", workers=2, pipeline=True),
             dict(env="CartPole-v1", n_episodes=5, seed=300, batch_size=3, device="cpu", max_steps=40)]
    local = [run_local(MLP, **s) for s in specs]
    server = ThreadServer(MLP, batch_sessions_ms=50.0)
    try:
        remote = run_clients(server.url, specs)
    finally:
        server.close()
    assert [rows for rows, _ in remote] == local
    assert server.server.merger.stats["merged_calls"] > 0


class GlobalNoise(torch.nn.Module):
    """Stateless, but its forward draws from torch's global RNG: merging would hand its draws to other rows."""

    def forward(self, obs):
        return (torch.rand(obs.shape[0]) < 0.5).long()


def global_noise() -> GlobalNoise:
    return GlobalNoise()


def test_a_forward_that_draws_from_the_global_rng_is_not_merged():
    specs = client_specs(KNOWN_ANSWER_ID, [11, 50], [3, 2], 6)
    server = ThreadServer("tests.test_serve_merge:global_noise", batch_sessions_ms=20.0)
    try:
        remote = run_clients(server.url, specs)
    finally:
        server.close()
    assert server.server.merger.stats["calls"] == 0
    for _, meta in remote:
        assert meta["server_policy_batch_sessions"] == ("per-session call (the policy's forward drew from torch's "
                                                        "global RNG)")


@pytest.mark.parametrize("env", ["CartPole-v1", "Pendulum-v1"])
def test_a_merged_call_gives_each_request_the_rows_of_its_own_call(env, tmp_path):
    """Sessions driven directly (no network): requests with all rows, some rows and no row, merged into one call
    (blocks of 2 rows, padded), get bitwise the actions a twin session's own step gives for the same messages:
    discrete (argmax) and continuous (tanh) actions of an MLP."""
    import gymnasium as gym
    import numpy as np

    from fasteval.doors.serve_merge import MergeItem, SessionMerger
    from fasteval.doors.serve_sessions import Session
    from fasteval.robot.policies.checkpoint import save_checkpoint
    from fasteval.robot.policies.mlp import MLPPolicy
    from fasteval.types.wire import space_to_wire

    probe = gym.make(env)
    obs_space, act_space = probe.observation_space, probe.action_space
    policy = MLP
    if env == "Pendulum-v1":
        torch.manual_seed(0)
        policy = str(save_checkpoint(MLPPolicy(3, 1, (32, 32), action_head="tanh"), tmp_path / "pendulum_mlp"))
    dim = obs_space.shape[0]
    rng = np.random.default_rng(0)
    sizes, slots = (5, 3, 4), ([0, 1, 2, 3, 4], [0, 2], [])

    def session(n):
        one = Session(RunnerOptions(policy=policy, device="cpu"), {
            "observation_space": space_to_wire(obs_space), "action_space": space_to_wire(act_space),
            "groups": [[0, n]], "spec": {"policy_block": 2}, "seed": 3})
        one.dry_run({"obs": rng.normal(size=(n, dim)).astype(np.float32)})
        return one

    merged, solo = [session(n) for n in sizes], [session(n) for n in sizes]
    for each in merged:
        assert each.plan_merges().startswith(MERGED)
    messages = [{"group": 0, "seq": 1, "slots": s, "obs": rng.normal(size=(len(s), dim)).astype(np.float32) * 0.3,
                 "events": []} for s in slots]

    async def merge():
        loop = asyncio.get_running_loop()
        items = [MergeItem(m, msg, loop.create_future()) for m, msg in zip(merged, messages)]

        async def run_now(fn, *args):
            return fn(*args)

        merger = SessionMerger(1.0, run_now, lambda: merged)
        await merger._run(items)
        return [item.future.result() for item in items], merger.stats

    replies, stats = asyncio.run(merge())
    assert stats["calls"] == 1 and stats["max_sessions"] == 3
    for reply, twin, msg in zip(replies, solo, messages):
        expected = twin.step(msg)["actions"]
        assert reply["actions"].shape == expected.shape and reply["actions"].dtype == expected.dtype
        assert np.array_equal(reply["actions"], expected)
        assert reply["server_timing"]["merged_sessions"] == 3


def test_bench_serve_sessions_tiny_runs_and_prints_its_table():
    """Smoke run of benchmarks/bench_serve_sessions.py --tiny: it runs, prints its table, the server merged, and
    the results with and without batching are equal. Never asserts on timings."""
    import subprocess
    import sys

    from tests.serve_helpers import repo_env

    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_serve_sessions.py"), "--tiny"],
                          capture_output=True, text=True, timeout=600, cwd=REPO, env=repo_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| clients " in proc.stdout and "| 2       |     4 |" in proc.stdout
    assert MERGED in proc.stdout
    assert "per-episode results with and without batching equal: True" in proc.stdout
