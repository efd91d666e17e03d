"""``benchmarks/gpu_check.py`` can say "wrong": each check runs on CPU with fake CUDA graphs
(:mod:`fasteval.testing.fake_cuda`), passes on a faithful fake, and fails on a planted fault. The script
itself runs on CPU, skips the CUDA rows and exits 0."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from fasteval.core import transfer
from fasteval.testing.fake_cuda import FakeCuda

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import gpu_check  # noqa: E402


def oks(checks):
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
        assert oks(gpu_check.check_fresh_noise("cpu")) == [True, True, True]
    with FakeCuda("frozen-noise"):
        checks = gpu_check.check_fresh_noise("cpu")
    assert oks(checks) == [False, True, False], [c.line() for c in checks]


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


def test_the_script_runs_on_cpu_skips_cuda_rows_and_exits_0(capsys):
    start = time.perf_counter()
    code = gpu_check.main(["--quick"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "SKIP: graph really captured -- no CUDA device" in out and "FAIL" not in out
    assert "LeRobot PushT" in out
    assert time.perf_counter() - start < 240


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
