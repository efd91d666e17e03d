"""The machine header of a benchmark report: what makes its numbers comparable."""

from __future__ import annotations

import datetime as _dt
import os
import platform
from typing import Any


def cpu_model() -> str:
    """The CPU model name from ``/proc/cpuinfo`` (Linux), else ``platform.processor()``."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def gpu_names() -> list[str]:
    """Names of the CUDA devices torch sees (empty without CUDA)."""
    import torch

    if not torch.cuda.is_available():
        return []
    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]


def _version(module: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:  # not installed
        return None


def machine_info() -> dict[str, Any]:
    """CPU, cores, GPU, load, OS, Python, and the versions of torch, gymnasium, numpy and fasteval
    (plus the kernel backend fasteval chose). Keys are stable; the JSON report embeds this dict."""
    import gymnasium
    import numpy
    import torch

    from fasteval.version import __version__
    from fasteval import kernels

    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable = os.cpu_count()
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        load = None
    gpus = gpu_names()
    return {
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "load_avg": load,
        "gpu": ", ".join(gpus) if gpus else "none",
        "cuda": torch.version.cuda,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),  # the process default; runs set their own (spec.cpu_threads)
        "gymnasium": gymnasium.__version__,
        "numpy": numpy.__version__,
        "numba": _version("numba"),
        "fasteval": __version__,
        "kernel_backend": kernels.BACKEND,
    }

