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
from fasteval.core.transfer import DeviceToHost, HostToDevice, pins_host

META = torch.device("meta")


@pytest.fixture
def pinnable(monkeypatch):
    """Pretend CUDA exists (a CPU-only torch cannot pin: pinned allocations become plain ones)."""
    monkeypatch.setattr(transfer, "can_pin", lambda: True)
    monkeypatch.setattr(transfer, "pinned_zeros", lambda shape, dtype: np.zeros(shape, dtype))
    monkeypatch.setattr(torch, "empty_like", _empty_like_without_pinning(torch.empty_like))


def _empty_like_without_pinning(empty_like):
    def fake(t, *args, pin_memory=False, **kwargs):  # a CPU-only torch cannot pin
        return empty_like(t, *args, **kwargs)
    return fake


def test_the_copy_path_follows_what_the_owner_of_the_host_buffers_says(pinnable, monkeypatch):
    host = {"a": np.zeros((4, 3), np.float32), "b": np.zeros((4, 2), np.uint8)}
    monkeypatch.setattr(torch.Tensor, "is_pinned", lambda self: True)  # a stale registration says "pinned"
    h2d = HostToDevice(host, META, pin_memory=True, host_pinned=False)
    assert h2d.staged == ["a", "b"]  # not pinned as far as the owner knows: staged, whatever is_pinned() reads
    monkeypatch.setattr(torch.Tensor, "is_pinned", lambda self: False)
    h2d = HostToDevice(host, META, pin_memory=True, host_pinned=True)
    assert h2d.staged == [] and h2d.staging == {"a": None, "b": None}  # pinned by its owner: one copy each


def test_pin_memory_false_stages_nothing_and_pins_no_actions(pinnable):
    h2d = HostToDevice(np.zeros((4, 3), np.float32), META, pin_memory=False)
    assert h2d.staged == [] and h2d.staging is None
    d2h = DeviceToHost(4, (), np.dtype(np.int64), META, pin_memory=False)
    assert not d2h.pinned and d2h.landed is None
    assert not pins_host(torch.device("cuda"), pin_memory=False)
    assert not pins_host(torch.device("cpu"), pin_memory=True)  # a CPU policy: no CUDA context for pinning
    assert pins_host(torch.device("cuda", 1), pin_memory=True)


# -- the action sync ----------------------------------------------------------------------------------

class _Stream:
    def __init__(self, name, log):
        self.name, self.log = name, log

    def synchronize(self):
        self.log.append(("stream.synchronize", self.name))


class _Event:
    def __init__(self, log, **kwargs):
        self.log = log

    def record(self, stream=None):
        self.log.append(("event.record", stream.name if stream is not None else None))

    def synchronize(self):
        self.log.append(("event.synchronize",))


class _OnCuda1(torch.Tensor):
    """Actions that say they live on cuda:1 (their data is on the CPU); logs the copies out of them."""

    log: list = []

    @property
    def device(self):
        return torch.device("cuda", 1)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") == "copy_":
            cls.log.append(("copy_", (kwargs or {}).get("non_blocking", False)))
        return super().__torch_function__(func, types, args, kwargs)


@pytest.fixture
def cuda_streams(monkeypatch, pinnable):
    """Fake ``current_stream(device)`` per device (switchable) and events that log where they are recorded."""
    log: list = []
    current = {torch.device("cuda", 1): _Stream("default:1", log), torch.device("cuda", 0): _Stream("default:0", log)}
    asked = []

    def current_stream(device=None):
        asked.append(None if device is None else torch.device(device))
        return current[torch.device("cuda", 0) if device is None else torch.device(device)]

    monkeypatch.setattr(torch.cuda, "current_stream", current_stream)
    monkeypatch.setattr(torch.cuda, "Event", lambda **kwargs: _Event(log, **kwargs))
    monkeypatch.setattr(torch.cuda, "device", lambda d: _Null())
    _OnCuda1.log = log
    return log, current, asked


def test_the_action_sync_waits_on_an_event_after_the_copy_on_the_stream_current_at_call_time(cuda_streams):
    log, current, _ = cuda_streams
    d2h = DeviceToHost(4, (), np.dtype(np.int64), torch.device("cuda", 1))
    current[torch.device("cuda", 1)] = _Stream("side:1", log)  # `with torch.cuda.stream(side):` around the run
    actions = torch.tensor([1, 2, 3, 4]).as_subclass(_OnCuda1)
    out = d2h.copy(actions)
    assert out.tolist() == [1, 2, 3, 4]
    # the copy, then an event on the side stream (where the copy went), then the wait on that event
    assert log == [("copy_", True), ("event.record", "side:1"), ("event.synchronize",)]


def test_actions_already_on_the_host_are_copied_without_a_wait(cuda_streams):
    log, _, _ = cuda_streams
    d2h = DeviceToHost(3, (), np.dtype(np.int64), torch.device("cuda", 1))
    assert d2h.copy(torch.tensor([5, 6, 7])).tolist() == [5, 6, 7]
    assert log == []  # no event, no stream sync


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

class GpuClock:
    """A fake GPU: work queued on it takes ``ms`` each; an event recorded on a stream stamps when the
    work queued before it ends. ``events`` logs the stream each event was recorded on."""

    def __init__(self):
        self.queue_end = 0.0
        self.events = []

    def run(self, ms):
        self.queue_end += ms

    def event(self):
        return _TimedEvent(self)


class _TimedEvent:
    def __init__(self, gpu):
        self.gpu, self.stamp = gpu, None

    def record(self, stream=None):
        self.gpu.events.append(stream)
        self.stamp = self.gpu.queue_end

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return end.stamp - self.stamp


def launch(timers, gpu, h2d=(0.0, 0.0), policy=(0.0, 0.0), d2h_wall=0.0):
    """The loop's launch: ``(host seconds, GPU ms)`` of the observation copy and the policy; the d2h
    stage's host seconds (its sync waited for everything queued)."""
    timers.start_h2d()
    gpu.run(h2d[1])
    timers.add("h2d", perf_counter() - h2d[0])
    gpu.run(policy[1])
    timers.add("policy", perf_counter() - policy[0])
    timers.add("d2h", perf_counter() - d2h_wall)


@pytest.fixture
def cuda1(monkeypatch):
    """A fake current stream per device, so that records can be checked; returns the streams."""
    streams = {torch.device("cuda", 0): "stream of cuda:0", torch.device("cuda", 1): "stream of cuda:1"}
    monkeypatch.setattr(torch.cuda, "device", lambda d: _Null())
    monkeypatch.setattr(torch.cuda, "current_stream",
                        lambda device=None: streams[torch.device("cuda", 0) if device is None else torch.device(device)])
    return streams


def test_gpu_time_of_the_policy_moves_from_d2h_to_policy(cuda1):
    gpu = GpuClock()
    timers = CudaStageTimers(torch.device("cuda", 0), event_factory=gpu.event)
    launch(timers, gpu, policy=(0.001, 30.0), d2h_wall=0.035)  # 30 ms on the GPU; 1 ms to launch; the sync waited 35
    s = timers.as_dict()
    assert s["policy"] == pytest.approx(0.030, abs=2e-4) and s["d2h"] == pytest.approx(0.006, abs=2e-4)
    timers.reset()
    launch(timers, gpu, policy=(0.001, 100.0), d2h_wall=0.010)  # never move more than the d2h stage took
    s = timers.as_dict()
    assert s["d2h"] == pytest.approx(0.0, abs=1e-4) and s["policy"] == pytest.approx(0.011, abs=2e-4)
    timers.reset()
    launch(timers, gpu, policy=(0.002, 0.1), d2h_wall=0.001)  # a GPU faster than the launch: nothing moves
    assert timers.as_dict()["policy"] == pytest.approx(0.002, abs=2e-4)


def test_gpu_time_of_the_observation_copy_moves_from_d2h_to_h2d(cuda1):
    """Defect 5: the copy is only queued in the h2d stage; its GPU time showed up as d2h, and h2d read ~0."""
    gpu = GpuClock()
    timers = CudaStageTimers(torch.device("cuda", 0), event_factory=gpu.event)
    # 10 MB of images: 4 ms on the GPU, 20 us to queue; the policy 2 ms there; the sync waited 6.5 ms
    launch(timers, gpu, h2d=(0.00002, 4.0), policy=(0.0001, 2.0), d2h_wall=0.0065)
    s = timers.as_dict()
    assert s["h2d"] == pytest.approx(0.004, abs=2e-4)
    assert s["policy"] == pytest.approx(0.002, abs=2e-4)
    assert s["d2h"] == pytest.approx(0.0006, abs=2e-4)


def test_events_are_recorded_on_the_current_stream_of_the_policy_device(cuda1):
    """Defect 4: ``record()`` without a stream records on the current *device's* stream (cuda:0's for cuda:1)."""
    gpu = GpuClock()
    timers = CudaStageTimers(torch.device("cuda", 1), event_factory=gpu.event)
    launch(timers, gpu, policy=(0.001, 1.0))
    assert gpu.events == ["stream of cuda:1"] * 3


def test_an_h2d_without_a_policy_call_moves_nothing(cuda1):
    gpu = GpuClock()
    timers = CudaStageTimers(torch.device("cuda", 0), event_factory=gpu.event)
    timers.start_h2d()
    gpu.run(50.0)
    timers.add("h2d", perf_counter())
    timers.add("d2h", perf_counter() - 0.01)
    assert timers.as_dict()["policy"] == 0.0 and timers.as_dict()["h2d"] < 0.001


def test_time_timed_apart_comes_out_of_its_stage_never_below_zero():
    timers = StageTimers()
    timers.seconds["policy"] = 2.0
    timers.take_out("policy", 1.5)
    assert timers.seconds["policy"] == pytest.approx(0.5)
    timers.take_out("policy", 9.0)
    assert timers.seconds["policy"] == 0.0


def test_cpu_devices_get_plain_timers():
    assert type(make_stage_timers(torch.device("cpu"))) is StageTimers


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None
