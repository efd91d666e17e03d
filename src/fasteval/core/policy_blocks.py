"""The canonical policy call: the network runs on blocks of a fixed number of rows.

Why. Float matrix products round differently at different row counts: on this project's CPUs a
float32 ``Linear`` on 1, 2 or 3 rows takes other kernels than on 4 or more, and a GPU library picks
its kernel from the whole problem shape. A chaotic simulator turns that 1e-7 into another episode,
so a policy called on "whatever rows are active" gives results that move with ``-b``, the pool,
pipelining or the finishing order. Calling it on blocks of exactly ``R`` rows, padded with inert
rows, gives every row the same kernel whatever the batch: its output then depends on its own
inputs only, provided the kernels never mix rows and a row's position in its block does not
matter. Both are checked by test (``tests/test_policy_blocks.py``), per policy family, not assumed.

What a block call does, for an input of ``n`` rows (the first dimension of every tensor in it):

1. rows ``[0, R)``, ``[R, 2R)``, ... are taken as views (no copy) while a whole block remains;
2. the last, partial block is padded to ``R`` rows with copies of its last real row (inert: the
   input is valid, and its output is dropped);
3. the policy runs once per block; the outputs' first ``n`` rows are concatenated.

Inputs may be a ``Tensor``, a ``TensorDict``, a ``dict`` of them (LeRobot's batch) or a list with one
entry per row (LeRobot's ``"task"`` strings); anything else (a scalar, ``None``) is passed to every
block as it is. Outputs may be a ``Tensor``, a ``TensorDict``, a ``dict`` or a tuple of them.

Where blocks cannot apply, the runner says so (:func:`guarantee`): a policy that keeps per-slot
state indexed by the batch row (its own ``reset(env_ids)``) must see the whole batch, and a policy
that draws from torch's global RNG draws in batch order.
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

from fasteval.types.spec import DEFAULT_POLICY_BLOCK, WHOLE_BATCH  # noqa: F401  (0: the whole batch)

BITWISE = "bitwise per episode"
TO_ROUNDING = "per episode to rounding"


def n_rows(batch: Any) -> int:
    """The number of rows of a policy input (the first dimension of its first tensor)."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0])
    if isinstance(batch, dict):
        for value in batch.values():
            if isinstance(value, (torch.Tensor, dict)) or _is_tensordict(value):
                return n_rows(value)
        raise TypeError("a policy input dict with no tensor in it: its rows cannot be counted")
    if _is_tensordict(batch):
        return int(batch.batch_size[0])
    raise TypeError(f"a policy input of type {type(batch).__name__}: expected a Tensor, a TensorDict or a dict of them")


def _is_tensordict(value: Any) -> bool:
    td = sys.modules.get("tensordict")  # never imported: value cannot be a TensorDict
    return td is not None and isinstance(value, td.TensorDictBase)


def take_rows(batch: Any, start: int, stop: int, rows: int, n: int) -> Any:
    """Rows ``[start, stop)`` of ``batch`` (``n`` rows), padded to ``rows`` rows with copies of row
    ``stop - 1``; a view when no padding is needed. Non-row entries are passed as they are."""
    if isinstance(batch, torch.Tensor) or _is_tensordict(batch):
        if stop - start == rows:
            return batch[start:stop]
        index = torch.arange(start, start + rows, device=batch.device).clamp_(max=stop - 1)
        return batch[index]
    if isinstance(batch, dict):
        return {key: take_rows(value, start, stop, rows, n) for key, value in batch.items()}
    if isinstance(batch, (list, tuple)) and len(batch) == n:  # one entry per row (LeRobot's "task" strings)
        part = list(batch[start:stop]) + [batch[stop - 1]] * (rows - (stop - start))
        return type(batch)(part) if isinstance(batch, tuple) else part
    return batch


def _first_rows(out: Any, k: int) -> Any:
    if isinstance(out, dict):
        return {key: _first_rows(value, k) for key, value in out.items()}
    if isinstance(out, tuple):
        return tuple(_first_rows(value, k) for value in out)
    return out[:k]


def _concat(parts: list[Any]) -> Any:
    first = parts[0]
    if isinstance(first, dict):
        return {key: _concat([p[key] for p in parts]) for key in first}
    if isinstance(first, tuple):
        return tuple(_concat([p[i] for p in parts]) for i in range(len(first)))
    return torch.cat(parts)


def blocked(fn: Callable[..., Any], rows: int) -> Callable[..., Any]:
    """``fn`` called on blocks of exactly ``rows`` rows (see the module docstring). Keyword arguments with
    one row per input row (a per-row ``noise`` tensor) are split the same way; ``rows`` must be >= 1."""
    if rows < 1:
        raise ValueError(f"blocked: expected rows >= 1, got {rows}")

    def block_call(batch: Any, **kwargs: Any) -> Any:
        n = n_rows(batch)
        if n == rows:
            return fn(batch, **kwargs)
        parts = []
        for start in range(0, n, rows):
            stop = min(start + rows, n)
            block = take_rows(batch, start, stop, rows, n)
            block_kwargs = {key: take_rows(value, start, stop, rows, n) for key, value in kwargs.items()}
            out = fn(block, **block_kwargs)
            parts.append(out if stop - start == rows else _first_rows(out, stop - start))
        return _concat(parts) if len(parts) > 1 else parts[0]

    block_call.__wrapped__ = fn  # type: ignore[attr-defined]
    block_call.block_rows = rows  # type: ignore[attr-defined]
    return block_call


def block_indices(rows_wanted: int, n_total: int, rows: int) -> list[list[int]]:
    """Row numbers ``0..rows_wanted-1`` cut into blocks of ``rows``, the last padded by repeating its last row
    (for callers that gather rows themselves, as LeRobot's chunk refill does). ``n_total`` is unused but for
    the check that ``rows_wanted <= n_total``."""
    if rows_wanted > n_total:
        raise ValueError(f"block_indices: {rows_wanted} rows wanted of {n_total}")
    out = []
    for start in range(0, rows_wanted, rows):
        stop = min(start + rows, rows_wanted)
        out.append(list(range(start, stop)) + [stop - 1] * (rows - (stop - start)))
    return out


@dataclass(frozen=True)
class PolicyCall:
    """How a run calls its policy: decided once, recorded in the run's ``meta`` and ``eval_info.json``.

    ``block``: ``R`` (rows per call) or 0 (the whole batch). ``status``: what the runner did with it (``blocks of
    R rows``, ``one row per call``, or ``whole batch (reason)``). ``guarantee``: :data:`BITWISE` (with the
    conditions it rests on) or :data:`TO_ROUNDING` (with the reason)."""

    block: int
    status: str
    guarantee: str
    threads: int
    device: str

    def facts(self) -> dict[str, Any]:
        """The ``meta`` keys of the run: ``policy_block``, ``policy_call``, ``guarantee``."""
        return {"policy_block": self.block, "policy_call": self.status, "guarantee": self.guarantee}


def fixed_shape(status: str) -> bool:
    """Whether a runner's ``policy_call`` status computes every row on one fixed shape (blocks, or one row per call)."""
    return status.startswith("blocks of") or status.startswith("one row per call")


def guarantee(status: str, *, device: torch.device, threads: int, amp: str = "none", compile: bool = False,
              global_rng: bool = False, stacked: bool = False, env_rounding: str | None = None) -> str:
    """The guarantee a run can state, from how its policy was called (``status``) and its settings.

    Bitwise per episode only when every row's output is computed on a fixed shape (blocks, or one row per
    call), on the CPU (the GPU path is not yet verified), without torch.compile (its kernels are chosen per
    input), without torch's global RNG (drawn in batch order), and not stacked (vmap's batched products are
    checked to rounding only)."""
    reasons = []
    if status.startswith("served"):
        reasons.append(status)
    elif not fixed_shape(status):
        reasons.append(f"the policy runs on the {status}" if status.startswith("whole batch") else status)
    if global_rng:
        reasons.append("the policy draws from torch's global RNG in batch order")
    if compile:
        reasons.append("torch.compile chooses its kernels per input")
    if stacked:
        reasons.append("stacked weights (vmap) are checked to rounding only")
    if device.type != "cpu":
        reasons.append(f"bitwise equality is verified on CPU only, not yet on {device.type}")
    if env_rounding:  # the env itself (its env kind declares it: fasteval.robot.reproducible)
        reasons.append(env_rounding)
    if reasons:
        return f"{TO_ROUNDING} ({'; '.join(reasons)})"
    precision = f", amp {amp}" if amp != "none" else ""
    return (f"{BITWISE} ({status}, {threads} torch thread{'s' if threads != 1 else ''}{precision}, torch "
            f"{torch.__version__}, {cpu_isa()}; other hardware or versions may round differently)")


def cpu_isa() -> str:
    """The CPU instruction set torch's kernels use (``torch.backends.cpu.get_cpu_capability()``: AVX2, AVX512...)."""
    try:
        return f"CPU {torch.backends.cpu.get_cpu_capability()}"
    except Exception:  # an old torch
        import platform

        return f"CPU {platform.machine()}"


CUBLAS_WORKSPACE = ":4096:8"
"""``CUBLAS_WORKSPACE_CONFIG`` for deterministic cuBLAS (PyTorch's reproducibility notes); it must be set before
the first cuBLAS handle is made, so the engine sets it (if unset) before it loads a policy on CUDA."""


@contextlib.contextmanager
def deterministic_kernels(device: torch.device, blocks: bool) -> Iterator[None]:
    """On a CUDA device with blocks (``blocks``): deterministic algorithms (warn-only: an op without a
    deterministic kernel warns instead of failing the run), TF32 off for matmuls and cuDNN, cuDNN's benchmark
    off (it picks kernels by timing); every setting restored afterwards. A no-op on the CPU, whose kernels
    are deterministic for a fixed shape and thread count."""
    if device.type != "cuda" or not blocks:
        yield
        return
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    saved = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
             torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark,
             torch.backends.cudnn.deterministic)
    try:
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
        yield
    finally:
        torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
        (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark,
         torch.backends.cudnn.deterministic) = saved[2:]
