"""Policy-call accelerators, chosen once per engine: CUDA graphs, autocast (AMP), torch.compile.

CUDA graphs (``--cuda-graph``, on by default where CUDA exists)
----------------------------------------------------------------
The policy step (forward pass plus action post-processing) is captured once per static
input buffer and replayed every step. The graphs belong to the engine (:class:`CudaGraphCall`
is built on the engine's dry run and kept): the engine's device observation buffers and
their group views are built once (:class:`~fasteval.core.transfer.HostToDevice`), so each
group gets exactly one graph for the life of the engine (one, two with ``--pipeline``), reused
by every run. The graphs of one engine share one memory pool (``pool=``): they are replayed one
after the other on the same stream and never concurrently, and their outputs stay alive.

How a capture runs (the recipe of tensordict's ``CudaGraphModule``):

1. everything happens inside ``torch.cuda.device(policy_device)``, so that ``--device cuda:1``
   captures on device 1 even when the thread's current device is 0;
2. warm-up calls run on a side stream created on that device (once per engine), which waits for
   the current stream first;
3. the capture runs on that same side stream (``torch.cuda.graph(..., stream=side)``);
4. warm-ups and capture run under :func:`~fasteval.core.capture_body.born_on` (policy device):
   factory calls given no device (``torch.zeros([B, D]).to(device)``, as LeRobot's ACT builds its
   latent) are born on the device, so they make no host-to-device copy, which would fail the
   capture (see :mod:`fasteval.core.capture_body` for what a capture body may not do);
5. the thread's current stream and the RNG states (CPU and the policy device) are restored
   afterwards, whether the capture worked or not: warm-up draws never shift a run's noise, and a
   failed capture leaves nothing behind;
6. a failed capture warns once and the engine runs the policy eagerly from then on;
7. the time it took (warm-ups included, synchronized) goes to :data:`capture_clock`: the engine
   keeps it out of ``eval_s`` and the ``policy`` stage, as ``meta["capture_s"]``.

Concurrency: suite tasks may run engines in threads. Captures use
``capture_error_mode="thread_local"`` (another thread may keep launching CUDA work, e.g. its own
replays and copies, while this one captures; only this thread's unsafe calls fail its capture),
and :data:`CAPTURE_LOCK` serialises captures in the process, so two threads never capture at the
same time (the default ``"global"`` mode would make any other thread's sync fail the capture).

Rules of the fast path; a policy that breaks one runs eagerly, reported as ``eager (reason)``:

* static shapes: the batch never changes shape (fasteval guarantees this);
* no host sync and no data-dependent Python control flow inside the step (``.item()``,
  ``.cpu()``, ``if tensor:`` fail capture with "operation not permitted when stream is
  capturing": reported as ``eager (capture failed: ...)``);
* no state a graph would freeze, decided once on the dry run by :func:`capture_decision` from the
  runner's declared :class:`~fasteval.core.capabilities.Capabilities` and the policy itself:
  per-slot state (``reset``, and action-chunk queues), task descriptions (``set_task`` or a
  ``"task"`` input: strings that change per episode), the policy's own ``torch.Generator`` (a graph
  replays with the generator state of capture time), and Python attributes that the policy call
  itself changes (a counter, a list of inputs: one probe call, made only when nothing else refuses);
* random ops draw fresh noise on every replay: PyTorch registers the default CUDA generator
  with the graph and advances its offset per replay (the frozen-RNG bug of pytorch/rl#3002
  does not apply to this path), and runs are reproducible because the engine seeds it;
* the output tensor is overwritten by the next replay: fasteval copies actions out at once.

What happened is reported in ``meta["policy_cuda_graph"]`` (``eval_info.json``, ``--profile``,
``fasteval bench``): ``captured``, ``eager (reason)`` or ``off`` (not asked for, or not on CUDA
with the default ``None``).

AMP (``--amp bf16|fp16``) wraps the call in ``torch.autocast``; it helps large conv/attention
policies on GPUs with tensor cores, rarely small MLPs, and changes results slightly (lower
precision). Around a call that a graph captures, autocast's cast cache is off
(``cache_enabled=False``, PyTorch's rule for graphed callables). ``--compile`` wraps it in
``torch.compile``: worth it for large policies and long evaluations; compilation (seconds to
minutes, in the first call per input, or in the graph warm-ups) is timed apart, as ``capture_s``.
"""

from __future__ import annotations

import logging
import threading
import warnings
from time import perf_counter
from typing import Any, Callable, NamedTuple, Sequence

import torch

from fasteval.core.capabilities import NO_RESET, Capabilities
from fasteval.core.capture_body import born_on

logger = logging.getLogger(__name__)

AMP_DTYPES = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16, "auto": "device default"}
"""``amp`` -> autocast dtype; ``auto`` takes ``torch.get_autocast_dtype(device type)`` (fp16 on CUDA, bf16
on CPU), which is what ``torch.autocast(device_type)`` without a dtype uses (LeRobot's ``use_amp``)."""

CAPTURED, OFF = "captured", "off"
CAPTURE_LOCK = threading.Lock()
"""Held while one thread warms up and captures (captures are rare: once per group per engine)."""
CAPTURE_ERROR_MODE = "thread_local"


class _CaptureClock(threading.local):
    seconds = 0.0


capture_clock = _CaptureClock()
"""Seconds this thread has spent warming up and capturing CUDA graphs (every :class:`CudaGraphCall`:
the engine's step and, say, a policy's own chunk graph) and in torch.compile's first calls. The
engine reads it around a run and keeps that time out of ``eval_s`` (``meta["capture_s"]``)."""


def eager(reason: str) -> str:
    """The ``policy_cuda_graph`` value of a policy that runs eagerly although graphs were asked for."""
    return f"eager ({reason})"


def with_autocast(fn: Callable[[Any], torch.Tensor], device: torch.device, amp: str,
                  cache_enabled: bool = True) -> Callable[[Any], torch.Tensor]:
    """``fn`` under ``torch.autocast`` for ``amp``; ``cache_enabled=False`` for a call a CUDA graph
    captures (PyTorch's rule for graphed callables: the cast-weight cache would hold tensors made
    during capture, freed or stale at replay)."""
    dtype = AMP_DTYPES[amp]
    if dtype is None:
        return fn
    if amp == "auto":
        dtype = torch.get_autocast_dtype(device.type)

    def autocast_call(obs: Any) -> torch.Tensor:
        with torch.autocast(device_type=device.type, dtype=dtype, cache_enabled=cache_enabled):
            return fn(obs)

    return autocast_call


def timed_first_calls(fn: Callable[[Any], torch.Tensor]) -> Callable[[Any], torch.Tensor]:
    """``fn`` (a ``torch.compile`` d call), with its first call per input object timed into
    :data:`capture_clock` (compilation happens then), so that it stays out of ``eval_s``."""
    seen: set[int] = set()

    def call(obs: Any) -> torch.Tensor:
        key = id(obs)
        if key in seen:
            return fn(obs)
        started = perf_counter()
        try:
            return fn(obs)
        finally:
            seen.add(key)
            capture_clock.seconds += perf_counter() - started

    return call


# -- what a graph would freeze ------------------------------------------------------------------

_PLAIN = (int, float, str, bool, bytes, type(None))
_MODULE_KEYS = frozenset(vars(torch.nn.Module()))


def _objects(policy: Any) -> list[Any]:
    """The policy and, for an ``nn.Module`` (or an object holding one), its submodules."""
    out, seen = [], set()
    stack = [policy]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        out.append(obj)
        if isinstance(obj, torch.nn.Module):
            stack.extend(obj.modules())
        else:
            stack.extend(v for v in getattr(obj, "__dict__", {}).values() if isinstance(v, torch.nn.Module))
    return out


def _attrs(obj: Any) -> dict[str, Any]:
    attrs = getattr(obj, "__dict__", None)
    if not isinstance(attrs, dict):
        return {}
    if isinstance(obj, torch.nn.Module):
        return {k: v for k, v in attrs.items() if k not in _MODULE_KEYS}
    return attrs


def python_state(policy: Any) -> tuple:
    """A fingerprint of the policy's plain Python attributes (numbers, strings, small containers).

    Compare it before and after a policy call: a difference means the call changes Python-side
    state, which a graph replay would not (the graph replays kernels only).
    """
    out = []
    for i, obj in enumerate(_objects(policy)):
        for name, value in sorted(_attrs(obj).items()):
            if isinstance(value, _PLAIN):
                out.append((i, name, value))
            elif isinstance(value, (list, tuple, dict, set)):
                out.append((i, name, type(value).__name__, len(value),
                            repr(value) if len(value) <= 32 and all(isinstance(v, _PLAIN) for v in value) else None))
    return tuple(out)


def changes_python_state(policy: Any, call: Callable[[Any], Any], obs: Any) -> bool:
    """Call ``call(obs)`` once (after the dry run: first-call initialisation is over) and say whether
    it changed the policy's :func:`python_state`."""
    before = python_state(policy)
    with torch.inference_mode():
        call(obs)
    return python_state(policy) != before


def own_generator(policy: Any) -> str | None:
    """The attribute path of a ``torch.Generator`` the policy holds (one level into containers), or None."""
    for obj in _objects(policy):
        for name, value in _attrs(obj).items():
            values = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else [value]
            if any(isinstance(v, torch.Generator) for v in values):
                return f"{type(obj).__name__}.{name}"
    return None


# -- the decision -------------------------------------------------------------------------------

def graph_unsupported(device: torch.device) -> str | None:
    """Why graphs cannot run on ``device`` (None: they can). A seam for tests with fake graphs."""
    return None if device.type == "cuda" else "no CUDA device"


def factory_device(device: torch.device) -> torch.device:
    """The device factory calls are born on during warm-ups and capture: the policy's. A seam for the
    fake CUDA, whose "CUDA" tensors live on the CPU."""
    return device


class GraphDecision(NamedTuple):
    """Whether a call may be captured in a CUDA graph: ``status`` ``None`` (it may), else its
    ``policy_cuda_graph``-style status (``off`` or ``eager (reason)``); ``warning``: what to tell the user."""

    status: str | None
    warning: str | None = None


def graph_decision(cuda_graph: bool | None, device: torch.device, blockers: Sequence[str] = ()) -> GraphDecision:
    """The one "may this be captured in a CUDA graph" decision (the engine's policy step, LeRobot's chunk).

    ``cuda_graph``: ``False`` (off), ``True`` (asked for) or ``None`` (where CUDA exists); ``blockers``:
    reasons the call has state a graph would freeze (empty: none).
    """
    if cuda_graph is False:
        return GraphDecision(OFF)
    unsupported = graph_unsupported(device)
    if unsupported is not None:
        if cuda_graph is None:
            return GraphDecision(OFF)
        return GraphDecision(eager(unsupported), f"--cuda-graph needs a CUDA policy device; running the policy "
                                                 f"eagerly on {device.type} (same results).")
    if blockers:
        reasons = "; ".join(blockers)
        return GraphDecision(eager(reasons), f"the policy has state a CUDA graph would freeze ({reasons}); "
                                             f"running it eagerly.")
    return GraphDecision(None)


PER_SLOT_STATE = "per-slot policy state: reset() or action-chunk queues"
TASKS = "task descriptions: set_task or a 'task' input"
PYTHON_STATE = "Python-side state: the policy call changes its Python attributes"


def capture_blockers(caps: Capabilities, policy: Any, whole_chunks: bool = False) -> list[str]:
    """Why a step of the runner that declared ``caps`` must not be graphed, before any probe call.

    ``whole_chunks``: the step returns each row's whole chunk (``runner.chunk_step``), so the runner's
    chunk queue is not in it and only the policy's own per-slot state counts.
    """
    reasons = []
    if (caps.policy_reset_kind if whole_chunks else caps.reset_kind) != NO_RESET:
        reasons.append(PER_SLOT_STATE)
    if caps.tasks:
        reasons.append(TASKS)
    generator = own_generator(policy)
    if generator is not None:
        reasons.append(f"own torch.Generator ({generator})")
    return reasons


def capture_decision(caps: Capabilities, policy: Any, cuda_graph: bool | None, device: torch.device, *,
                     whole_chunks: bool = False, probe: tuple[Callable[[Any], Any], Any] | None = None) -> GraphDecision:
    """The one "may the policy step be captured" decision, from the runner's declared ``caps``.

    Off or unsupported first (:func:`graph_decision`), then what the runner declares and the policy
    holds (:func:`capture_blockers`); only when nothing refused, ``probe = (step, obs)`` is called once
    (:func:`changes_python_state`): a step that changes the policy's Python attributes stays eager.
    """
    decision = graph_decision(cuda_graph, device, capture_blockers(caps, policy, whole_chunks))
    if decision.status is None and probe is not None and changes_python_state(policy, *probe):
        decision = graph_decision(cuda_graph, device, [PYTHON_STATE])
    return decision


# -- capture and replay -------------------------------------------------------------------------

class CudaGraphCall:
    """Capture ``fn`` once per static input object; replay it afterwards. Owned by one engine.

    The first call with a given input object captures (see the module docstring); later calls
    replay. ``graphs`` maps ``id(input)`` to ``(graph, output, input)`` (the input is kept alive
    so that its id stays unique). ``captures`` counts successful captures. ``facts`` (the
    engine's ``accel_facts``) gets ``cuda_graph`` = ``captured`` or ``eager (capture failed: ...)``;
    ``refused`` (a :func:`graph_decision` status) makes it eager from the start.

    ``copy_inputs=True`` (a dict input whose tensors are not static buffers, LeRobot's chunk batch):
    the wrapper owns the static inputs, as tensordict's ``CudaGraphModule`` does (see :meth:`_into_static`);
    ``name`` names the call in the reason given when the input layout changes.

    As in ``CudaGraphModule``, the call path is bound in ``__init__`` (eager, replay, or copy into the
    static inputs and replay) and rebound once if the call goes eager (a failed capture, a changed
    input layout): a call tests no flag.
    """

    def __init__(self, fn: Callable[[Any], torch.Tensor], device: torch.device, warmup_calls: int = 2,
                 facts: dict[str, Any] | None = None, copy_inputs: bool = False, name: str = "the policy step",
                 refused: str | None = None):
        self.eager_fn, self.device, self.warmup_calls, self.name = fn, device, warmup_calls, name
        self.fn = self._with_others if copy_inputs else fn
        """What is captured and replayed (with ``copy_inputs``: ``fn`` on the static inputs and the kept
        non-tensor entries); ``eager_fn`` is ``fn`` itself, for calls that run eagerly."""
        self.graphs: dict[int, tuple[Any, torch.Tensor, Any]] = {}
        self.eager = refused is not None
        self.captures = 0
        self.facts = facts if facts is not None else {}
        self.facts["cuda_graph"] = eager("not called yet") if refused is None else refused
        self.stream: Any = None
        self.pool: Any = None
        self.copy_inputs = copy_inputs
        self.static: dict[str, torch.Tensor] | None = None
        """With ``copy_inputs``: the graph's own input tensors (clones of the first call's), as in
        tensordict's ``CudaGraphModule``; later calls are copied into them before each replay."""
        self.others: dict[str, Any] = {}
        self.layout: dict[str, tuple] = {}
        self._call: Callable[[Any], torch.Tensor] = (
            fn if self.eager else self._copy_and_replay if copy_inputs else self._replay)

    def __call__(self, obs: Any) -> torch.Tensor:
        return self._call(obs)

    def _go_eager(self, status: str) -> None:
        """Eager from now on, reported as ``status``."""
        self.eager, self.facts["cuda_graph"], self._call = True, status, self.eager_fn

    def _replay(self, obs: Any) -> torch.Tensor:
        entry = self.graphs.get(id(obs))
        if entry is None:
            entry = self._capture(obs)
            if entry is None:
                return self.fn(obs)
        graph, out, _keepalive = entry
        graph.replay()
        return out

    def _copy_and_replay(self, obs: Any) -> torch.Tensor:
        static = self._into_static(obs)
        if static is None:
            return self.eager_fn(obs)
        return self._replay(static)

    def _with_others(self, static: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.eager_fn({**self.others, **static})

    def _into_static(self, batch: dict[str, Any]) -> dict[str, torch.Tensor] | None:
        """Copy the tensors of ``batch`` into the static inputs (made on the first call; its non-tensor
        entries are kept). ``None`` (and eager from now on) when the tensor layout changed."""
        tensors = {k: v for k, v in batch.items() if isinstance(v, torch.Tensor)}
        layout = {k: (tuple(v.shape), v.dtype, v.device) for k, v in tensors.items()}
        if self.static is None:
            self.static = {k: v.clone() for k, v in tensors.items()}
            self.others = {k: v for k, v in batch.items() if k not in tensors}
            self.layout = layout
        elif layout != self.layout:
            self._go_eager(eager(f"{self.name}'s input shapes changed"))
            return None
        else:
            for key, value in tensors.items():
                self.static[key].copy_(value)
        return self.static

    def _capture(self, obs: Any) -> tuple | None:
        started = perf_counter()
        try:
            with CAPTURE_LOCK, torch.cuda.device(self.device):
                return self._capture_locked(obs)
        finally:
            capture_clock.seconds += perf_counter() - started

    def _capture_locked(self, obs: Any) -> tuple | None:
        if self.stream is None:  # created on the policy device, inside its device context
            self.stream = torch.cuda.Stream(device=self.device)
            self.pool = torch.cuda.graph_pool_handle()
        previous = torch.cuda.current_stream(self.device)
        cpu_rng, cuda_rng = torch.get_rng_state(), torch.cuda.get_rng_state(self.device)
        try:
            with born_on(factory_device(self.device)):  # torch.zeros(...) in the step is born on the device
                entry = self._warm_up_and_capture(obs, previous)
            previous.synchronize()  # the warm-ups' GPU work counts as capture time, not as the first step's
        except Exception as exc:  # capture is an optimisation: never crash for it
            warnings.warn(f"CUDA-graph capture of the policy failed ({type(exc).__name__}: {exc}); running it "
                          f"eagerly. See fasteval.core.accel for the rules of the graph path.",
                          RuntimeWarning, stacklevel=4)
            self._go_eager(eager(f"capture failed: {type(exc).__name__}"))
            return None
        finally:
            if torch.cuda.current_stream(self.device) != previous:
                torch.cuda.set_stream(previous)
            torch.set_rng_state(cpu_rng)
            torch.cuda.set_rng_state(cuda_rng, self.device)
        self.graphs[id(obs)] = entry
        self.captures += 1
        self.facts["cuda_graph"] = CAPTURED
        logger.info("captured a CUDA graph of %s on %s for input of batch %s", self.name, self.device,
                    tuple(obs.shape) if isinstance(obs, torch.Tensor) else type(obs).__name__)
        return entry

    def _warm_up_and_capture(self, obs: Any, previous: Any) -> tuple:
        side = self.stream
        side.wait_stream(previous)
        with torch.cuda.stream(side):
            for _ in range(self.warmup_calls):
                self.fn(obs)
        previous.wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool, stream=side, capture_error_mode=CAPTURE_ERROR_MODE):
            out = self.fn(obs)
        return graph, out, obs


def accelerate(fn: Callable[[Any], torch.Tensor], *, device: torch.device, amp: str, compile: bool,
               decision: GraphDecision) -> tuple[Callable[[Any], torch.Tensor], dict[str, Any]]:
    """Wrap the policy step as ``decision`` (:func:`capture_decision`) says. Returns ``(call, facts)``;
    ``facts["cuda_graph"]`` is ``captured``, ``eager (reason)`` or ``off``, and stays live: a
    :class:`CudaGraphCall` updates it on capture. Decided here, once; the loop just calls.
    """
    facts: dict[str, Any] = {"amp": amp, "compile": compile, "cuda_graph": OFF}
    graphed = decision.status is None
    fn = with_autocast(fn, device, amp, cache_enabled=not graphed)
    if compile:
        fn = torch.compile(fn, dynamic=False)
    if not graphed:
        if decision.warning is not None:
            warnings.warn(decision.warning, RuntimeWarning, stacklevel=2)
        facts["cuda_graph"] = decision.status
        return (timed_first_calls(fn) if compile else fn), facts
    return CudaGraphCall(fn, device, facts=facts), facts  # compilation then happens in the warm-ups: capture time


def dry_run_and_accelerate(runner: Any, policy: Any, policy_input: Any, device: torch.device, *, amp: str,
                           compile: bool, cuda_graph: bool | None, chunks: bool = False,
                           guard: Callable[[], Any] | None = None) -> tuple[Callable[[Any], torch.Tensor], dict[str, Any]]:
    """The one dry run of a policy runner, and the choice of its accelerators: what an engine does
    before its first episodes, and what ``fasteval serve`` does per served runner.

    Runs ``runner.dry_run(policy_input)`` (which chooses the output mapping and finds action chunks),
    then decides from the runner's :class:`~fasteval.core.capabilities.Capabilities`, as declared after
    its dry run (:func:`capture_decision`, whose probe call is made only where a graph may be
    captured); both in a fork of the torch RNG, so that the dry run draws nothing from the run's
    noise. Returns :func:`accelerate`'s ``(step, facts)`` for the runner's plain step.

    ``chunks``: the step returns each row's whole chunk (``runner.chunk_step``, openpi's reply), so the
    chunk queue is not in it and is no reason to stay eager. ``guard``: a context manager factory
    around the dry-run call (the engine's watchdog deadline). A runner that is ``accelerated_elsewhere``
    (a served policy: its server applies the flags) gets its plain step back, wrapped in nothing.
    Raises what the dry run raises.
    """
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        if guard is None:
            runner.dry_run(policy_input)
        else:
            with guard():
                runner.dry_run(policy_input)
        caps: Capabilities = runner.capabilities
        if caps.accelerated_elsewhere:
            amp, compile, cuda_graph = "none", False, False
        whole_chunks = chunks and caps.chunks
        plain = runner.chunk_step if whole_chunks else runner.plain_step
        decision = capture_decision(caps, policy, cuda_graph, device, whole_chunks=whole_chunks,
                                    probe=(plain, policy_input))
    return accelerate(plain, device=device, amp=amp, compile=compile, decision=decision)
