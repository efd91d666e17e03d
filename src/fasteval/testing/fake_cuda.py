"""Fake CUDA graph machinery, so that the graph path of :mod:`fasteval.core.accel` runs on a CPU.

``with FakeCuda(mode) as fake:`` replaces the ``torch.cuda`` calls the capture uses (``device``,
``Stream``, ``current_stream``, ``set_stream``, ``stream``, ``graph``, ``CUDAGraph``,
``graph_pool_handle``, ``get_rng_state``, ``set_rng_state``, ``synchronize``) with recording fakes, and lets a
CPU policy device take the graph path. An engine built inside the block "captures" on its first
policy call and "replays" afterwards; ``fake`` records what was used:

* ``fake.captures``: one dict per capture: ``device`` (the device context active at capture),
  ``stream`` (the ``stream=`` argument), ``stream_device`` (the device the side stream was
  created on, and in which device context), ``pool``, ``capture_error_mode``;
* ``fake.graphs``: every :class:`FakeGraph` made; ``fake.replays``: total replays;
* ``fake.born_on``: the device factory calls were born on, per warm-up-and-capture
  (:func:`fasteval.core.accel.factory_device`; the fake's tensors are born on the CPU).

In every mode the capture body runs under CUDA's rule (:class:`fasteval.core.capture_body.HostCopyGuard`):
a host-to-device copy of pageable memory (``torch.zeros(B, D).to(device)``, a host index tensor used on
a device tensor...) or a sync (``.item()``, ``.cpu()``, ``if tensor:``, ``torch.cuda.synchronize()``,
``stream.synchronize()``) raises ``RuntimeError("operation not permitted when stream is capturing ...")``,
as a real capture does. The fake's tensors all live on the CPU, so host and device are told apart by
birth (see :mod:`fasteval.core.capture_body`).

``mode`` plants the faults that :mod:`benchmarks.gpu_check` must catch:

* ``"faithful"``: a replay re-runs the captured call into the captured output (what a real
  graph does), drawing fresh noise from the current generator;
* ``"stale"``: a replay does nothing, so the output keeps the capture-time actions (an empty
  graph: what capturing on the wrong device's stream gives);
* ``"frozen-noise"``: a replay re-runs the call with the RNG state of capture time (the
  frozen-RNG bug of pytorch/rl#3002);
* ``"fail"``: the capture raises inside ``torch.cuda.graph`` (a policy that syncs), after
  switching the current stream and drawing random numbers, to test the restore.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

MODES = ("faithful", "stale", "frozen-noise", "fail")
CAPTURING = "operation not permitted when stream is capturing"


def _capture_error(what: str) -> RuntimeError:
    return RuntimeError(f"{CAPTURING} (fake CUDA: {what})")


class FakeStream:
    def __init__(self, fake: "FakeCuda", device: Any = None, name: str = "side"):
        self.fake, self.device, self.name = fake, device, name
        self.created_in = fake.device_stack[-1] if fake.device_stack else None
        self.waited: list[str] = []

    def wait_stream(self, other: "FakeStream") -> None:
        self.waited.append(other.name)

    def synchronize(self) -> None:
        self.fake.synchronize()

    def __repr__(self) -> str:
        return f"FakeStream({self.name}, device={self.device})"


class FakeGraph:
    def __init__(self, fake: "FakeCuda"):
        self.fake = fake
        self.replays = 0
        self.call: Any = None
        fake.graphs.append(self)

    def bind(self, fn: Any, obs: Any, out: torch.Tensor, rng: torch.Tensor) -> None:
        mode = self.fake.mode
        if mode == "faithful":
            self.call = lambda: out.copy_(fn(obs))
        elif mode == "frozen-noise":
            def frozen() -> None:
                with torch.random.fork_rng(devices=[]):
                    torch.set_rng_state(rng)
                    out.copy_(fn(obs))
            self.call = frozen

    def replay(self) -> None:
        self.replays += 1
        self.fake.replays += 1
        if self.call is not None:
            self.call()


class FakeCuda:
    """Context manager: install the fakes (see the module docstring); undone on exit."""

    def __init__(self, mode: str = "faithful"):
        if mode not in MODES:
            raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")
        self.mode = mode
        self.device_stack: list[Any] = []
        self.default = FakeStream(self, None, "default")
        self.current = self.default
        self.captures: list[dict[str, Any]] = []
        self.graphs: list[FakeGraph] = []
        self.replays = 0
        self.pools = 0
        self.born_on: list[Any] = []
        self.capturing = False
        self._stack = contextlib.ExitStack()

    # -- the fakes ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def device(self, device: Any):
        self.device_stack.append(device)
        try:
            yield
        finally:
            self.device_stack.pop()

    def Stream(self, device: Any = None, **kwargs: Any) -> FakeStream:  # noqa: N802 (torch's name)
        return FakeStream(self, device)

    def current_stream(self, device: Any = None) -> FakeStream:
        return self.current

    def set_stream(self, stream: FakeStream) -> None:
        self.current = stream

    @contextlib.contextmanager
    def stream(self, stream: FakeStream):
        previous, self.current = self.current, stream
        try:
            yield
        finally:
            self.current = previous

    def CUDAGraph(self) -> FakeGraph:  # noqa: N802
        return FakeGraph(self)

    def graph_pool_handle(self) -> tuple:
        self.pools += 1
        return ("pool", self.pools)

    @contextlib.contextmanager
    def graph(self, graph: FakeGraph, pool: Any = None, stream: Any = None, capture_error_mode: str = "global"):
        from fasteval.core.capture_body import HostCopyGuard

        self.captures.append({
            "device": self.device_stack[-1] if self.device_stack else None, "stream": stream,
            "stream_device": stream.device if stream is not None else None,
            "stream_created_in": stream.created_in if stream is not None else None,
            "pool": pool, "capture_error_mode": capture_error_mode,
        })
        previous, self.current = self.current, stream
        self.capturing = True
        try:  # CUDA's rule for the body: no pageable host-to-device copy, no sync
            with HostCopyGuard("cpu", pageable_only=True, syncs=True, error=_capture_error):
                yield
        finally:
            self.capturing = False
        if self.mode == "fail":  # like capture_end raising: the current stream is NOT restored here
            torch.rand(3)
            raise _capture_error("planted: the capture fails")
        self.current = previous

    def synchronize(self, device: Any = None) -> None:
        if self.capturing:
            raise _capture_error("a sync: synchronize()")

    def factory_device(self, device: Any) -> torch.device:
        self.born_on.append(device)
        return torch.device("cpu")

    def get_rng_state(self, device: Any = None) -> torch.Tensor:
        return torch.zeros(1, dtype=torch.uint8)

    def set_rng_state(self, state: torch.Tensor, device: Any = None) -> None:
        pass

    # -- install ------------------------------------------------------------------------------
    def __enter__(self) -> "FakeCuda":
        from fasteval.core import accel

        patch = self._stack.enter_context
        for name in ("device", "Stream", "current_stream", "set_stream", "stream", "CUDAGraph", "graph_pool_handle",
                     "graph", "get_rng_state", "set_rng_state", "synchronize"):
            patch(_setattr(torch.cuda, name, getattr(self, name)))
        patch(_setattr(accel, "graph_unsupported", lambda device: None))
        patch(_setattr(accel, "factory_device", self.factory_device))
        original = accel.CudaGraphCall._warm_up_and_capture

        def warm_up_and_capture(call: Any, obs: Any, previous: Any) -> tuple:
            rng = torch.get_rng_state()
            graph, out, keep = original(call, obs, previous)
            graph.bind(call.fn, obs, out, rng)
            return graph, out, keep

        patch(_setattr(accel.CudaGraphCall, "_warm_up_and_capture", warm_up_and_capture))
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stack.close()


@contextlib.contextmanager
def _setattr(obj: Any, name: str, value: Any):
    missing = object()
    old = obj.__dict__.get(name, missing) if isinstance(obj, type) else getattr(obj, name, missing)
    setattr(obj, name, value)
    try:
        yield
    finally:
        if old is missing:
            delattr(obj, name)
        else:
            setattr(obj, name, old)


class FakeHostRegistry:
    """CUDA's registry of page-locked host ranges, faked (``with FakeHostRegistry() as cudart:``).

    Installed as the worker pool's CUDA runtime (:func:`fasteval.core.shared_buffers._cudart`), it
    answers ``cudaHostRegister`` / ``cudaHostUnregister`` as CUDA does: 0 on success, 712
    (``cudaErrorHostMemoryAlreadyRegistered``) for a range that overlaps a registered one, 713
    (``cudaErrorHostMemoryNotRegistered``) for an address that is not registered. ``is_pinned(address)``
    is what ``tensor.is_pinned()`` reads on a GPU: whether CUDA still lists the address.
    ``calls`` logs ``(name, address, code)``.
    """

    ALREADY_REGISTERED, NOT_REGISTERED = 712, 713

    def __init__(self) -> None:
        self.ranges: dict[int, int] = {}
        self.calls: list[tuple[str, int, int]] = []
        self._stack = contextlib.ExitStack()

    def cudaHostRegister(self, address: int, size: int, flags: int) -> int:  # noqa: N802 (CUDA's name)
        overlaps = any(a < address + size and address < a + n for a, n in self.ranges.items())
        code = self.ALREADY_REGISTERED if overlaps else 0
        if not overlaps:
            self.ranges[address] = size
        self.calls.append(("cudaHostRegister", address, code))
        return code

    def cudaHostUnregister(self, address: int) -> int:  # noqa: N802
        code = 0 if self.ranges.pop(address, None) is not None else self.NOT_REGISTERED
        self.calls.append(("cudaHostUnregister", address, code))
        return code

    def is_pinned(self, address: int) -> bool:
        return any(a <= address < a + n for a, n in self.ranges.items())

    def __enter__(self) -> "FakeHostRegistry":
        from fasteval.core import shared_buffers

        self._stack.enter_context(_setattr(shared_buffers, "_cudart", lambda: self))
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stack.close()
