"""``benchmarks/gpu_check.py`` can say "wrong": each check runs on CPU with fake CUDA graphs
(:mod:`fasteval.testing.fake_cuda`), passes on a faithful fake, and fails on a planted fault. The script
itself runs on CPU, skips the CUDA rows and exits 0."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest
import torch

from fasteval.core import transfer
from fasteval.testing.fake_cuda import FakeCuda

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import gpu_check  # noqa: E402


def oks(checks):
    """The checks' outcomes; each device row's name is one the CPU run skips by name."""
    for check in checks:
        if check.ok is not None:
            assert check.name in gpu_check.DEVICE_ROWS, check.name
    return [c.ok for c in checks]


def test_graph_check_passes_on_a_faithful_graph():
    with FakeCuda("faithful"):
        checks = gpu_check.check_graph_captured("cpu", n=40, batch=8)
    assert oks(checks) == [True, True, True], [c.line() for c in checks]


def test_graph_check_fails_on_a_graph_that_replays_stale_outputs():
    with FakeCuda("stale"):
        checks = gpu_check.check_graph_captured("cpu", n=40, batch=8)
    assert oks(checks) == [True, False, False], [c.line() for c in checks]  # "captured", but wrong


def test_graph_check_fails_when_nothing_was_captured():
    with FakeCuda("fail"), pytest.warns(RuntimeWarning):
        checks = gpu_check.check_graph_captured("cpu", n=40, batch=8)
    assert oks(checks) == [False, True, False], [c.line() for c in checks]  # eager-equal is not enough


def test_fresh_noise_check_passes_on_a_faithful_graph_and_fails_on_frozen_noise():
    with FakeCuda("faithful"):
        checks = gpu_check.check_fresh_noise("cpu")
    assert oks(checks) == [True] * 5, [c.line() for c in checks]
    with FakeCuda("frozen-noise"):
        checks = gpu_check.check_fresh_noise("cpu")
    assert oks(checks)[:4] == [False, True, False, False], [c.line() for c in checks]  # graph != eager too


def test_run_two_equals_run_one_fails_when_the_capture_leaks_rng_draws(monkeypatch):
    """Planted: warm-ups that shift the run's noise (the RNG is not restored after capture)."""
    from fasteval.core import accel

    original = accel.CudaGraphCall._capture_locked

    def leaky(self, obs):
        entry = original(self, obs)
        torch.rand(7)  # a draw that a restore would have undone
        return entry

    monkeypatch.setattr(accel.CudaGraphCall, "_capture_locked", leaky)
    with FakeCuda("faithful"):
        checks = gpu_check.check_fresh_noise("cpu")
    assert oks(checks)[4] is False, checks[4].line()


def test_memory_check_passes_with_engine_owned_graphs_and_fails_on_a_leaking_cache(monkeypatch):
    with FakeCuda() as fake:
        (check,) = gpu_check.check_memory_flat("cpu", runs=12, memory=lambda: 1000 * len(fake.graphs))
    assert check.ok, check.line()

    def fresh_group_views(self, rows):  # the old behaviour: new views (and so new graphs) every run
        self._groups.clear()
        return original(self, rows)

    original = transfer.HostToDevice.group
    monkeypatch.setattr(transfer.HostToDevice, "group", fresh_group_views)
    with FakeCuda() as fake:
        (check,) = gpu_check.check_memory_flat("cpu", runs=12, memory=lambda: 1000 * len(fake.graphs))
    assert check.ok is False and "graphs 2 -> 24" in check.detail, check.line()


def test_memory_check_fails_when_pinned_host_memory_grows_per_run(monkeypatch):
    """Planted: a run that keeps a pinned host buffer alive (counted as the host allocator would)."""
    from fasteval.robot.buffers.rollout_buffer import RolloutBuffer

    kept = []
    original = RolloutBuffer.__init__

    def keeping(self, *args, **kwargs):
        original(self, *args, **kwargs)
        kept.append(self.packet)  # never released: the leak

    host = lambda: sum(p.nbytes for p in kept)  # noqa: E731
    with FakeCuda():
        (check,) = gpu_check.check_memory_flat("cpu", runs=6, memory=lambda: 0, host_memory=host)
    assert check.ok, check.line()  # each run's packet is released: nothing kept
    monkeypatch.setattr(RolloutBuffer, "__init__", keeping)
    with FakeCuda():
        (check,) = gpu_check.check_memory_flat("cpu", runs=6, memory=lambda: 0, host_memory=host)
    assert check.ok is False and "pinned host" in check.detail, check.line()


# -- async engines one after another ----------------------------------------------------------------------

def test_async_engine_check_passes_when_each_pool_unregisters_and_fails_when_registrations_outlive_it(monkeypatch):
    from fasteval.core import engine as core_engine
    from fasteval.core import shared_buffers
    from fasteval.testing.fake_cuda import FakeHostRegistry

    monkeypatch.setattr(core_engine, "pins_host", lambda device, pin_memory: pin_memory)  # pin for the CPU "GPU"
    with FakeHostRegistry() as cudart:
        checks = gpu_check.check_async_engines("cpu", is_pinned=lambda a: cudart.is_pinned(a.ctypes.data))
    assert oks(checks) == [True, True, True], [c.line() for c in checks]
    monkeypatch.setattr(shared_buffers.SharedBuffers, "unregister", lambda self: None)  # the leak of defect 2
    with FakeHostRegistry() as cudart:
        checks = gpu_check.check_async_engines("cpu", is_pinned=lambda a: cudart.is_pinned(a.ctypes.data))
    assert oks(checks) == [False, False, False] and "unregistered after close=False" in checks[0].detail, checks[0].line()


# -- a side stream ---------------------------------------------------------------------------------------------

def test_side_stream_check_passes_and_fails_when_the_host_reads_actions_before_they_land(monkeypatch):
    with FakeCuda():
        checks = gpu_check.check_side_stream("cpu", n=12)
    assert oks(checks) == [True, True], [c.line() for c in checks]

    original = transfer.DeviceToHost.group

    def early_reads(self, rows):  # the host sees the previous step's actions: the copy had not landed
        copy, previous = original(self, rows), []

        def read_early(actions):
            out = copy(previous[-1] if previous else torch.zeros_like(actions))
            previous.append(actions.clone())
            return out

        return read_early

    monkeypatch.setattr(transfer.DeviceToHost, "group", early_reads)
    with FakeCuda():
        checks = gpu_check.check_side_stream("cpu", n=12)
    assert oks(checks) == [False, False], [c.line() for c in checks]


# -- timing ------------------------------------------------------------------------------------------------------

def test_h2d_check_fails_when_the_transfer_reads_as_about_zero():
    nbytes = 10 * 64 * 3 * 256 * 256  # 10 steps of 12.6 MB
    assert gpu_check.h2d_check(0.005, nbytes, "cuda").ok  # ~25 GB/s: what the events now measure
    assert gpu_check.h2d_check(0.0002, nbytes, "cuda").ok is False  # only the enqueue time: the old attribution
    assert gpu_check.h2d_check(0.0, nbytes, "cpu").ok is None  # no transfer on a CPU device


def _fake_clock(monkeypatch):
    """The engine's and the capture's clocks advance only when the policy "sleeps"."""
    from fasteval.core import accel
    from fasteval.core import engine as core_engine

    clock = [0.0]
    monkeypatch.setattr(core_engine, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(accel, "perf_counter", lambda: clock[0])
    return lambda seconds: clock.__setitem__(0, clock[0] + seconds)


def test_capture_timing_check_passes_when_capture_is_timed_apart_and_fails_when_eval_s_counts_it(monkeypatch):
    sleep = _fake_clock(monkeypatch)
    with FakeCuda("stale"):  # replays run no Python, as a real graph's
        checks = gpu_check.check_timing("cpu", shape=(4,), batch=4, seconds=1.0, sleep=sleep)
    assert oks(checks) == [None, True], [c.line() for c in checks]
    assert "capture_s=3.000" in checks[1].detail and "eval_s=0.000" in checks[1].detail

    from fasteval.core import accel

    class Stopped:  # planted: nothing reaches the capture clock, so eval_s keeps the capture
        seconds = property(lambda self: 0.0, lambda self, value: None)

    monkeypatch.setattr(accel, "capture_clock", Stopped())
    with FakeCuda("stale"):
        checks = gpu_check.check_timing("cpu", shape=(4,), batch=4, seconds=1.0, sleep=sleep)
    assert oks(checks) == [None, False], [c.line() for c in checks]


# -- capture status of the latency rows ------------------------------------------------------------------------

TINY_MODELS = (("MLP 64-256-256-8", lambda: gpu_check.MLP(hidden=8), (1,), 2),  # the rows' names, tiny sizes
               ("ACT-like chunk policy", lambda: gpu_check.ACTLike(chunk=3, d=16, heads=2, layers=(1, 1), ffn=16), (1,), 2))


def test_capture_status_rows_pass_when_captured_and_fail_when_act_s_upload_breaks_the_capture(monkeypatch):
    from fasteval.core import accel

    with FakeCuda():
        rows = gpu_check.latency_rows(True, device="cpu", models=TINY_MODELS)
    assert oks(gpu_check.capture_checks(rows)) == [True, True]
    monkeypatch.setattr(accel, "born_on", lambda device: contextlib.nullcontext())  # defect 1: factory calls on the host
    with FakeCuda(), pytest.warns(RuntimeWarning, match="operation not permitted when stream is capturing"):
        rows = gpu_check.latency_rows(True, device="cpu", models=TINY_MODELS)
    checks = gpu_check.capture_checks(rows)
    assert oks(checks) == [True, False] and "capture failed" in checks[1].detail, [c.line() for c in checks]


# -- bench_lerobot's own checks -----------------------------------------------------------------------------------

def test_bench_lerobot_problems_name_rows_whose_rewards_differ_and_uncaptured_chunk_graphs():
    import bench_lerobot

    rows = {"lerobot sync": {"sum_rewards": [1.0, 2.0]},  # LeRobot's own row: compared within a tolerance elsewhere
            "fasteval wave sync": {"sum_rewards": [1.5, 2.5]},
            "fasteval continuous sync": {"sum_rewards": [1.5, 2.5], "chunk_graph": "captured"},
            "env only": {"eval_s": 1.0}}
    assert bench_lerobot.problems(rows, "cuda") == []
    rows["fasteval continuous async"] = {"sum_rewards": [1.5, 2.25], "chunk_graph": "eager (capture failed: RuntimeError)"}
    found = bench_lerobot.problems(rows, "cuda")
    assert len(found) == 2 and "fasteval continuous async" in found[0] and "episode 1" in found[0]
    assert "chunk graph" in found[1]
    assert len(bench_lerobot.problems(rows, "cpu")) == 1  # no graph on a CPU device


def test_the_script_runs_on_cpu_skips_every_device_row_by_name_and_exits_0(capsys):
    code = gpu_check.main(["--quick"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "FAIL" not in out and "LeRobot PushT" in out
    for name in gpu_check.DEVICE_ROWS:
        assert f"SKIP: {name} -- no CUDA device" in out, name
    assert len(gpu_check.DEVICE_ROWS) == len(set(gpu_check.DEVICE_ROWS)) >= 20


def test_a_failing_check_makes_the_script_exit_non_zero(monkeypatch, capsys):
    monkeypatch.setattr(gpu_check.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(gpu_check.torch.cuda, "get_device_name", lambda i=0: "fake GPU")
    monkeypatch.setattr(gpu_check, "run_checks", lambda device: [gpu_check.Check("planted", False, "fault")])
    monkeypatch.setattr(gpu_check, "latency_rows", lambda quick: [])
    monkeypatch.setattr(gpu_check, "end_to_end_rows", lambda has_cuda, quick: [])
    monkeypatch.setattr(gpu_check, "lerobot_rows", lambda has_cuda: gpu_check.Check("LeRobot PushT rows", None, "x"))
    assert gpu_check.main(["--quick"]) == 1
    assert "FAIL: planted -- fault" in capsys.readouterr().out


def test_lerobot_rows_run_bench_lerobot_only_when_lerobot_imports(monkeypatch):
    import types

    real_find_spec = gpu_check.importlib.util.find_spec
    monkeypatch.setattr(gpu_check.importlib.util, "find_spec", lambda name: None if name == "lerobot" else real_find_spec(name))
    assert gpu_check.lerobot_rows(False).ok is None  # skipped, with the reason
    calls = []
    fake = types.ModuleType("bench_lerobot")
    fake.main = lambda argv: calls.append(argv) or 0
    monkeypatch.setitem(sys.modules, "bench_lerobot", fake)
    monkeypatch.setattr(gpu_check.importlib.util, "find_spec", lambda name: object())
    check = gpu_check.lerobot_rows(True)
    assert check.ok is True and calls and calls[0][:2] == ["--device", "cuda"]

    def broken(argv):
        raise RuntimeError("no PushT")

    fake.main = broken
    check = gpu_check.lerobot_rows(True)
    assert check.ok is False and "no PushT" in check.detail
