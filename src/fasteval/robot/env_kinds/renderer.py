"""The GL renderer is part of the protocol: a software renderer on a machine with a GPU is worth a warning.

``MUJOCO_GL=egl`` falls back silently to Mesa's llvmpipe (a CPU rasterizer) when NVIDIA's EGL is not found,
and a pixel env then runs tens of times slower (strands-labs/robots issue 921 measured 39x). The renderer
string is recorded where an env's protocol is (LIBERO's card: ``gl_renderer``); :func:`renderer_warning` says
when it is a software renderer although :func:`gpu_present` finds a GPU.
"""

from __future__ import annotations

import os
import shutil
from typing import Callable, Sequence

SOFTWARE_RENDERERS = ("llvmpipe", "softpipe", "swrast", "software rasterizer")
"""Substrings of GL renderer strings that name a CPU rasterizer (Mesa's, lower case)."""
NVIDIA_MARKERS = ("/proc/driver/nvidia/version", "/dev/nvidia0")


def gpu_present(paths: Sequence[str] = NVIDIA_MARKERS, which: Callable[[str], str | None] = shutil.which) -> bool:
    """Whether this machine has an NVIDIA GPU (its driver's files, or ``nvidia-smi`` on the path); the seams are
    for tests."""
    return any(os.path.exists(path) for path in paths) or which("nvidia-smi") is not None


def is_software(renderer: str) -> bool:
    """Whether GL renderer string ``renderer`` names a CPU rasterizer."""
    text = renderer.lower()
    return any(name in text for name in SOFTWARE_RENDERERS)


def renderer_warning(renderer: str, gpu: bool, backend: str | None) -> str | None:
    """The warning for renderer ``renderer`` (``MUJOCO_GL=backend``) on a machine with (``gpu``) or without a GPU,
    or ``None`` when there is nothing to say."""
    if not gpu or not is_software(renderer):
        return None
    return (f"MuJoCo renders with a software renderer ({renderer}, MUJOCO_GL={backend or 'unset'}) although this "
            f"machine has an NVIDIA GPU: pixel envs run many times slower than with NVIDIA's EGL. Install the "
            f"driver's EGL library (libnvidia-egl / libnvidia-gl matching the driver) and its glvnd vendor file "
            f"(/usr/share/glvnd/egl_vendor.d/10_nvidia.json), or pick the device with MUJOCO_EGL_DEVICE_ID; the "
            f"renderer is recorded in the run's protocol card.")
