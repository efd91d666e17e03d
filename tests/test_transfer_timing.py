"""Transfers (one copy from pinned host buffers, group views built once, ``pin_memory=False``) and CUDA-event
stage timing, on CPU: the ``meta`` device stands in for a GPU (copies are no-ops), and fakes stand in for
pinned memory and CUDA events."""

from __future__ import annotations

from time import perf_counter

import numpy as np
import pytest
import torch

from fasteval.core import transfer
from fasteval.core.timing import CudaStageTimers, StageTimers, make_stage_timers
from fasteval.core.transfer import DeviceToHost, HostToDevice, host_allocator

META = torch.device("meta")


@pytest.fixture
def pinnable(monkeypatch):
    """Pretend CUDA exists and that host arrays in ``pinned`` are page-locked."""
    pinned: set[int] = set()
    monkeypatch.setattr(transfer, "can_pin", lambda: True)
    monkeypatch.setattr(transfer, "is_pinned", lambda t: t.data_ptr() in pinned)
    monkeypatch.setattr(torch, "empty_like", _empty_like_without_pinning(torch.empty_like))
    return pinned


def _empty_like_without_pinning(empty_like):
    def fake(t, *args, pin_memory=False, **kwargs):  # a CPU-only torch cannot pin
        return empty_like(t, *args, **kwargs)
    return fake


def test_pinned_host_buffers_cross_in_one_copy_without_staging(pinnable):
    host = {"a": np.zeros((4, 3), np.float32), "b": np.zeros((4, 2), np.uint8)}
    pinnable.add(host["a"].ctypes.data)
    h2d = HostToDevice(host, META, pin_memory=True)
    assert h2d.staged == ["b"]  # only the unpinned buffer goes through staging
    assert h2d.staging["a"] is None and h2d.staging["b"] is not None


def test_pin_memory_false_stages_nothing_and_pins_no_actions(pinnable):
    h2d = HostToDevice(np.zeros((4, 3), np.float32), META, pin_memory=False)
    assert h2d.staged == [] and h2d.staging is None
    d2h = DeviceToHost(4, (), np.dtype(np.int64), META, pin_memory=False)
    assert not d2h.pinned and d2h.stream is None
    assert host_allocator("cuda", pin_memory=False) is None
    assert host_allocator("cpu", pin_memory=True) is None
    assert host_allocator("cuda:1", pin_memory=True) is transfer.pinned_zeros


def test_group_views_are_built_once_and_all_rows_is_the_whole_buffer():
    for device in (torch.device("cpu"), META):
        h2d = HostToDevice(np.zeros((5, 3), np.float32), device)
        view, copy = h2d.group(slice(0, 3))
        assert h2d.group(slice(0, 3))[0] is view and h2d.group(slice(0, 3))[1] is copy
        assert h2d.group(slice(0, 5))[0] is h2d.policy_input
        d2h = DeviceToHost(5, (), np.dtype(np.int64), torch.device("cpu"))
        assert d2h.group(slice(3, 5)) is d2h.group(slice(3, 5))


def test_cpu_action_copy_writes_only_its_rows():
    d2h = DeviceToHost(4, (), np.dtype(np.int64), torch.device("cpu"))
    out = d2h.group(slice(2, 4))(torch.tensor([7, 8]))
    assert out is d2h.host and out.tolist() == [0, 0, 7, 8]


# -- CUDA-event timing --------------------------------------------------------------------------------

class FakeEvent:
    gpu_ms = {"value": 0.0}

    def __init__(self):
        self.t = None

    def record(self):
        self.t = perf_counter()

    def elapsed_time(self, end):
        return FakeEvent.gpu_ms["value"]


def launch(timers, policy_wall, d2h_wall):
    """One launch's stage sequence with the given host-side seconds."""
    t = timers.add("h2d", perf_counter())
    timers.add("policy", t - policy_wall)
    timers.add("d2h", perf_counter() - d2h_wall)


def test_gpu_time_of_the_policy_moves_from_d2h_to_policy(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device", lambda d: _Null())
    timers = CudaStageTimers(torch.device("cuda", 0), event_factory=FakeEvent)
    FakeEvent.gpu_ms["value"] = 30.0  # 30 ms on the GPU; 1 ms to launch; the d2h sync waited 35 ms
    launch(timers, 0.001, 0.035)
    s = timers.as_dict()
    assert s["policy"] == pytest.approx(0.030, abs=2e-4) and s["d2h"] == pytest.approx(0.006, abs=2e-4)
    timers.reset()
    FakeEvent.gpu_ms["value"] = 100.0  # never move more than the d2h stage took
    launch(timers, 0.001, 0.010)
    s = timers.as_dict()
    assert s["d2h"] == pytest.approx(0.0, abs=1e-4) and s["policy"] == pytest.approx(0.011, abs=2e-4)
    timers.reset()
    FakeEvent.gpu_ms["value"] = 0.1  # a GPU faster than the launch: nothing moves
    launch(timers, 0.002, 0.001)
    assert timers.as_dict()["policy"] == pytest.approx(0.002, abs=2e-4)


def test_an_h2d_without_a_policy_call_moves_nothing(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device", lambda d: _Null())
    timers = CudaStageTimers(torch.device("cuda", 0), event_factory=FakeEvent)
    FakeEvent.gpu_ms["value"] = 50.0
    timers.add("h2d", perf_counter())
    timers.add("d2h", perf_counter() - 0.01)
    assert timers.as_dict()["policy"] == 0.0


def test_cpu_devices_get_plain_timers():
    assert type(make_stage_timers(torch.device("cpu"))) is StageTimers


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None
