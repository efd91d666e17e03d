"""Policy-call accelerators, chosen once per engine: CUDA graphs, autocast (AMP), torch.compile.

CUDA graphs (``--cuda-graph``, on by default where CUDA exists)
----------------------------------------------------------------
The policy step (forward pass plus action post-processing) is captured once per static
input buffer and replayed every step. The engine's device observation buffers are static
(allocated once), so each batch shape gets one graph (two with ``--pipeline``).

Rules of the fast path (a policy that breaks one falls back to eager, with one warning):

* static shapes: the batch never changes shape (fasteval guarantees this);
* no host sync and no data-dependent Python control flow inside the step
  (``.item()``, ``.cpu()``, ``if tensor:`` fail capture with "operation not permitted when
  stream is capturing");
* no Python-side state: a policy with ``reset`` keeps state outside the graph, so graphs are
  disabled for it (warning "policy has reset(); CUDA graphs disabled");
* random ops draw fresh noise on every replay: PyTorch registers the default CUDA generator
  with the graph and advances its offset per replay (the frozen-RNG bug of pytorch/rl#3002
  does not apply to this path), and runs are reproducible because the engine seeds it;
* the output tensor is overwritten by the next replay: fasteval copies actions out at once.

Without CUDA, asking for graphs gives one warning and a plain eager call: the same results.

AMP (``--amp bf16|fp16``) wraps the call in ``torch.autocast``; it helps large conv/attention
policies on GPUs with tensor cores, rarely small MLPs, and changes results slightly (lower
precision). ``--compile`` wraps it in ``torch.compile``: worth it for large policies and long
evaluations (compilation takes seconds to minutes, outside the timed loop only if warmed up).
"""

from __future__ import annotations

import logging
import warnings
from typing import Any, Callable

import torch

logger = logging.getLogger(__name__)

AMP_DTYPES = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def with_autocast(fn: Callable[[Any], torch.Tensor], device: torch.device, amp: str) -> Callable[[Any], torch.Tensor]:
    dtype = AMP_DTYPES[amp]
    if dtype is None:
        return fn

    def autocast_call(obs: Any) -> torch.Tensor:
        with torch.autocast(device_type=device.type, dtype=dtype):
            return fn(obs)

    return autocast_call


class CudaGraphCall:
    """Capture ``fn`` once per static input object; replay it afterwards.

    The first call with a given input object warms up on a side stream, captures, and
    replays; later calls only replay. A capture failure warns once and switches to eager.
    """

    def __init__(self, fn: Callable[[Any], torch.Tensor], device: torch.device, warmup_calls: int = 2):
        self.fn, self.device, self.warmup_calls = fn, device, warmup_calls
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor, Any]] = {}
        self.eager = False

    def __call__(self, obs: Any) -> torch.Tensor:
        if self.eager:
            return self.fn(obs)
        entry = self.graphs.get(id(obs))
        if entry is None:
            entry = self._capture(obs)
            if entry is None:
                return self.fn(obs)
        graph, out, _keepalive = entry
        graph.replay()
        return out

    def _capture(self, obs: Any):
        # Warm-up and capture must not consume the run's random draws (replays draw their own).
        with torch.random.fork_rng(devices=[self.device]):
            return self._capture_unforked(obs)

    def _capture_unforked(self, obs: Any):
        try:
            stream = torch.cuda.Stream(self.device)
            stream.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(stream):
                for _ in range(self.warmup_calls):
                    self.fn(obs)
            torch.cuda.current_stream(self.device).wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = self.fn(obs)
        except Exception as exc:  # capture is an optimisation: never crash for it
            warnings.warn(f"CUDA-graph capture of the policy failed ({type(exc).__name__}: {exc}); running it eagerly. "
                          f"See fasteval.core.accel for the rules of the graph path.", RuntimeWarning, stacklevel=3)
            self.eager = True
            return None
        entry = (graph, out, obs)
        self.graphs[id(obs)] = entry
        logger.info("captured a CUDA graph of the policy step for input of batch %s", getattr(obs, "shape", "?"))
        return entry


def accelerate(fn: Callable[[Any], torch.Tensor], *, device: torch.device, amp: str, compile: bool,
               cuda_graph: bool | None, stateful: bool) -> tuple[Callable[[Any], torch.Tensor], dict[str, Any]]:
    """Wrap the policy step. Returns ``(call, facts)``; ``facts`` says what was applied and why not.

    ``cuda_graph=None`` means "where CUDA exists". Decided here, once; the loop just calls.
    """
    facts: dict[str, Any] = {"amp": amp, "compile": compile, "cuda_graph": False}
    fn = with_autocast(fn, device, amp)
    if compile:
        fn = torch.compile(fn, dynamic=False)
    wants_graph = cuda_graph if cuda_graph is not None else device.type == "cuda"
    if not wants_graph:
        return fn, facts
    if device.type != "cuda":
        if cuda_graph:
            warnings.warn("--cuda-graph needs a CUDA policy device; running the policy eagerly on "
                          f"{device.type} (same results).", RuntimeWarning, stacklevel=2)
        facts["cuda_graph_skipped"] = "no CUDA device"
        return fn, facts
    if stateful:
        warnings.warn("the policy has reset() (Python-side state), which a CUDA graph cannot capture; "
                      "CUDA graphs disabled for it.", RuntimeWarning, stacklevel=2)
        facts["cuda_graph_skipped"] = "stateful policy"
        return fn, facts
    facts["cuda_graph"] = True
    return CudaGraphCall(fn, device), facts
