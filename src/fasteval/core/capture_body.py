"""What a CUDA-graph capture body may do, and the two tools that keep it so.

CUDA's rule: while a stream captures, anything that makes the host wait for the device fails the
capture with "operation not permitted when stream is capturing". That includes

* a host-to-device copy out of **pageable** memory: ``torch.zeros(B, D).to(device)`` (LeRobot's ACT
  does this in eval), ``torch.tensor(data, device=device)``, a host index tensor used on a device
  tensor (``chunks[torch.from_numpy(rows)]``: the index is uploaded first);
* a sync: ``.item()``, ``.tolist()``, ``.cpu()``, ``.numpy()``, ``if tensor:``, ``nonzero``,
  ``torch.cuda.synchronize()``.

(A copy out of pinned memory is legal: the graph records it as a memcpy node.)

Two tools:

* :func:`born_on` (``with born_on(device):``): factory calls that are given no device (``torch.zeros``,
  ``ones``, ``empty``, ``full``, ``arange``, ``rand``...) are born on ``device``, as under
  ``with torch.device(device):``, so that ``torch.zeros(B, D).to(device)`` makes no copy at all.
  Data-carrying constructors (``torch.tensor``, ``as_tensor``, ``asarray``, sparse and nested
  tensors) are left alone: their data comes from the host either way, and ``torch.tensor(2.0)``
  stays a CPU scalar, which CUDA ops read by value (on the device it would be an upload).
  :class:`fasteval.core.accel.CudaGraphCall` runs its warm-ups and its capture under it.
* :func:`no_host_copies` (``with no_host_copies(device):``): raises :class:`HostCopyError` on any
  host-to-device copy inside the block, naming the op and the line. Tests run capture bodies and
  per-step code under it; the fake CUDA (:mod:`fasteval.testing.fake_cuda`) runs every fake capture
  body under the same :class:`HostCopyGuard`, with CUDA's own rule (pageable copies and syncs).

Host or device? For a CUDA ``device``, a tensor is on the host when it is a CPU tensor. For a CPU
``device`` (tests, the fake CUDA) every tensor is a CPU tensor, so the guard tells them apart by
birth: a tensor made inside the block by a factory call with no device (outside :func:`born_on`),
by ``torch.from_numpy``, or computed from such tensors only, is on the host; every other tensor
(parameters, the static inputs, tensors born with ``device=`` or under :func:`born_on`) is on the
device. Pass ``host=[...]`` to declare tensors made before the block as host tensors.
"""

from __future__ import annotations

import contextlib
import traceback
import weakref
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import torch
from torch.overrides import TorchFunctionMode, _get_current_function_mode_stack
from torch.utils import _pytree
from torch.utils._device import DeviceContext, _device_constructors

_DATA_CONSTRUCTORS = {torch.tensor, torch.as_tensor, torch.asarray}
"""Constructors whose values come from their data argument (host data, unless it is a device tensor)."""

Tensor = torch.Tensor
_SYNCS = {Tensor.item, Tensor.tolist, Tensor.numpy, Tensor.cpu, Tensor.__bool__, Tensor.__int__, Tensor.__float__,
          Tensor.__index__, Tensor.__array__, Tensor.nonzero, torch.nonzero, Tensor.unique, torch.unique}
"""Calls that read a device tensor on the host: each waits for the device."""
_MOVES = {Tensor.to, Tensor.cuda, Tensor.copy_}
_INDEXING = {Tensor.__getitem__, Tensor.__setitem__}


def _host_index(index: Any) -> bool:
    """Whether an index is host data that indexing uploads first (a NumPy array or a list; in a tuple too)."""
    parts = index if isinstance(index, tuple) else (index,)
    return any(isinstance(p, list) or isinstance(p, np.ndarray) and p.ndim > 0 for p in parts)


def _no_data_constructors() -> set:
    return {f for f in _device_constructors()
            if f not in _DATA_CONSTRUCTORS and "sparse" not in getattr(f, "__name__", "")
            and "nested" not in getattr(f, "__name__", "")}


class born_on(TorchFunctionMode):  # noqa: N801 (used like torch.device(...) as a context manager)
    """Factory calls without a ``device`` are born on ``device`` (see the module docstring)."""

    def __init__(self, device: torch.device | str):
        super().__init__()
        self.device = torch.device(device)
        self._constructors = _no_data_constructors()

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func in self._constructors and kwargs.get("device") is None:
            kwargs["device"] = self.device
        return func(*args, **kwargs)


class HostCopyError(RuntimeError):
    """A host-to-device copy (or, when asked, a sync) inside a :func:`no_host_copies` block."""


def _factory_default() -> torch.device | None:
    """The device that a factory call without ``device=`` gets from the modes below this one (None: the CPU)."""
    for mode in reversed(_get_current_function_mode_stack()):
        if isinstance(mode, (DeviceContext, born_on)):
            return torch.device(mode.device)
    return None


def _where() -> str:
    """The innermost frame of the caller outside torch and this module, as ``file:line (function)``."""
    here = Path(__file__).resolve()
    torch_dir = Path(torch.__file__).resolve().parent
    for frame in reversed(traceback.extract_stack()[:-2]):
        path = Path(frame.filename).resolve()
        if path != here and torch_dir not in path.parents and not frame.filename.startswith("<"):
            return f"{path.name}:{frame.lineno} ({frame.name})"
    return "?"


def _name(func: Any) -> str:
    qual = getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))
    qual = qual.replace("TensorBase.", "Tensor.").replace("_VariableFunctionsClass.", "torch.")
    return qual if "." in qual else f"torch.{qual}"


class HostCopyGuard(TorchFunctionMode):
    """Raises ``error(message)`` on a host-to-device copy inside the block (see the module docstring).

    Args:
        device: the device the body runs on (a CPU device: host and device told apart by birth).
        pageable_only: only copies out of pageable memory count (CUDA's capture rule); else any.
        syncs: also raise on calls that make the host wait for the device (``.item()``, ``.cpu()``...).
        host: tensors made before the block that live on the host.
        error: builds the exception from a message (default :class:`HostCopyError`).
    """

    def __init__(self, device: torch.device | str, *, pageable_only: bool = False, syncs: bool = False,
                 host: Iterable[torch.Tensor] = (), error: Callable[[str], Exception] = HostCopyError):
        super().__init__()
        self.device = torch.device(device)
        self.by_birth = self.device.type == "cpu"
        self.pageable_only, self.syncs, self.error = pageable_only, syncs, error
        self._host: dict[int, weakref.ref] = {}
        for tensor in host:
            self._mark(tensor)
        self._patch = contextlib.ExitStack()

    # -- host or device ---------------------------------------------------------------------------
    def _mark(self, tensor: torch.Tensor) -> None:
        key = id(tensor)
        self._host[key] = weakref.ref(tensor, lambda _ref, key=key, table=self._host: table.pop(key, None))

    def is_host(self, tensor: torch.Tensor) -> bool:
        if not self.by_birth:
            return tensor.device.type == "cpu"
        ref = self._host.get(id(tensor))
        return ref is not None and ref() is tensor

    def _on_device(self, device: Any) -> bool:
        """Whether a factory call's (or a move's) target ``device`` is this guard's device side."""
        if device is None:
            device = _factory_default()
        return device is not None and torch.device(device).type == self.device.type

    def _pageable(self, tensor: torch.Tensor) -> bool:
        try:
            return not tensor.is_pinned()
        except RuntimeError:
            return True

    def _copy(self, src: torch.Tensor) -> bool:
        """Whether uploading ``src`` counts (it is on the host, and pageable when only those count)."""
        return self.is_host(src) and (not self.pageable_only or self._pageable(src))

    def _fail(self, what: str) -> None:
        raise self.error(f"{what} at {_where()}")

    # -- the rule ---------------------------------------------------------------------------------
    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        tensors = [t for t in _pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        if func in _SYNCS:
            if self.syncs and tensors and not self.is_host(tensors[0]):
                self._fail(f"a sync: {_name(func)} of a device tensor")
            return self._marked(func(*args, **kwargs), host=bool(tensors) and self.is_host(tensors[0]) or
                                func is Tensor.cpu)
        if func in _MOVES:
            return self._move(func, args, kwargs)
        if not tensors:  # a constructor
            on_device = self._on_device(kwargs.get("device"))
            if func in _DATA_CONSTRUCTORS and on_device:
                self._fail(f"a host-to-device copy: {_name(func)}(host data, device={self.device.type})")
            return self._marked(func(*args, **kwargs), host=not on_device)
        host = [t for t in tensors if self.is_host(t)]
        if func in _INDEXING and len(host) < len(tensors) and _host_index(args[1]):
            self._fail(f"a host index in {_name(func)} on a device tensor (uploaded before it is used)")
        if func in _DATA_CONSTRUCTORS and host and self._on_device(kwargs.get("device")) and any(
                map(self._copy, host)):
            self._fail(f"a host-to-device copy: {_name(func)}(host tensor, device={self.device.type})")
        if host and len(host) < len(tensors) and any(t.dim() > 0 and self._copy(t) for t in host):
            self._fail(f"a host tensor in {_name(func)} on device tensors (an index upload, or a device mismatch)")
        return self._marked(func(*args, **kwargs), host=len(host) == len(tensors))

    def _move(self, func: Any, args: tuple, kwargs: dict) -> Any:
        src = args[0]
        if func is Tensor.copy_:
            dst, src = args[0], args[1]
            if self._copy(src) and not self.is_host(dst):
                self._fail("a host-to-device copy: Tensor.copy_ from a host tensor")
            if self.syncs and not self.by_birth and self.is_host(dst) and not self.is_host(src):
                self._fail("a sync: Tensor.copy_ of a device tensor into host memory")
            return func(*args, **kwargs)
        if func is Tensor.cuda:
            to_device = True
        elif len(args) > 1 and isinstance(args[1], torch.Tensor):
            to_device = not self.is_host(args[1])
        else:
            target = torch._C._nn._parse_to(*args[1:], **kwargs)[0]
            to_device = not self.is_host(src) if target is None else self._on_device(target)
        if to_device and self._copy(src):
            self._fail(f"a host-to-device copy: {_name(func)} of a host tensor")
        if not to_device and not self.is_host(src) and self.syncs:
            self._fail(f"a sync: {_name(func)} of a device tensor to the host")
        return self._marked(func(*args, **kwargs), host=not to_device)

    def _marked(self, out: Any, host: bool) -> Any:
        if host and self.by_birth:
            for leaf in _pytree.tree_leaves(out):
                if isinstance(leaf, torch.Tensor):
                    self._mark(leaf)
        return out

    # -- torch.from_numpy does not go through torch-function modes: wrapped while the block runs ---
    def __enter__(self) -> "HostCopyGuard":
        if self.by_birth:
            self._patch.enter_context(_wrapped_from_numpy(self))
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        try:
            super().__exit__(*exc)
        finally:
            self._patch.close()


@contextlib.contextmanager
def _wrapped_from_numpy(guard: HostCopyGuard) -> Iterator[None]:
    original = torch.from_numpy

    def from_numpy(array: Any) -> torch.Tensor:
        tensor = original(array)
        guard._mark(tensor)
        return tensor

    torch.from_numpy = from_numpy
    try:
        yield
    finally:
        torch.from_numpy = original


def no_host_copies(device: torch.device | str, *, syncs: bool = False,
                   host: Iterable[torch.Tensor] = ()) -> HostCopyGuard:
    """``with no_host_copies(device):`` raises :class:`HostCopyError` on any host-to-device copy in the
    block (pinned or not), and with ``syncs=True`` on syncs too. See the module docstring."""
    return HostCopyGuard(device, syncs=syncs, host=host)
