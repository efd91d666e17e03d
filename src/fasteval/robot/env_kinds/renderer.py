"""The GL renderer is part of the protocol: a software renderer on a machine with a GPU is worth a warning.

``MUJOCO_GL=egl`` falls back silently to Mesa's llvmpipe (a CPU rasterizer) when NVIDIA's EGL is not found,
and a pixel env then runs tens of times slower (strands-labs/robots issue 921 measured 39x). The renderer
string is recorded where an env's protocol is (LIBERO's card: ``gl_renderer``), and for every process that hosts
envs rendering through MuJoCo (:func:`process_renderer`: the main process of a sync run, each env worker of a pool:
``meta["gl_renderers"]``, and the card's ``gl_renderers``); :func:`renderer_warning` says when it is a software
renderer although :func:`gpu_present` finds a GPU.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from typing import Callable, Mapping, Sequence

SOFTWARE_RENDERERS = ("llvmpipe", "softpipe", "swrast", "software rasterizer")
"""Substrings of GL renderer strings that name a CPU rasterizer (Mesa's, lower case)."""
NVIDIA_MARKERS = ("/proc/driver/nvidia/version", "/dev/nvidia0")


_GL_PROBE = """
from mujoco import GLContext
ctx = GLContext(16, 16)
ctx.make_current()
from OpenGL import GL
for name in (GL.GL_RENDERER, GL.GL_VERSION, GL.GL_VENDOR):
    print(GL.glGetString(name).decode())
ctx.free()
"""
PROBE_TIMEOUT_S = 60.0
"""How long the GL probe's child process may take (importing MuJoCo and PyOpenGL, making one context)."""


@functools.lru_cache(maxsize=4)
def gl_renderer(backend: str | None) -> str:
    """The GL renderer string of MuJoCo's ``backend`` (``MUJOCO_GL``) in this process's environment, with its
    OpenGL version and vendor (``"llvmpipe (LLVM 15.0.7, 256 bits) (OpenGL 4.5 (Core Profile) Mesa 23.2.1; vendor
    Mesa)"``), read from a context made in a child process (so the renderers of this process's envs are not
    touched), once per process. ``"unknown (...)"`` when no context could be made."""
    env = {**os.environ, **({"MUJOCO_GL": backend} if backend else {})}
    try:
        out = subprocess.run([sys.executable, "-c", _GL_PROBE], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                             env=env, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown (the probe failed: {type(exc).__name__})"
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1][:200]
        return f"unknown (no {backend or 'default'} GL context: {tail})"
    text = f"{lines[0]} (OpenGL {lines[1]}" if len(lines) > 1 else lines[0]
    return text + (f"; vendor {lines[2]})" if len(lines) > 2 else ")" if len(lines) > 1 else "")


def process_renderer(renders: bool) -> str | None:
    """The GL renderer this process's MuJoCo envs render with (:func:`gl_renderer` of ``MUJOCO_GL`` as this process
    has it), or ``None`` when its envs do not render (``renders`` False: nothing to record)."""
    return gl_renderer(os.environ.get("MUJOCO_GL")) if renders else None


def renderers_warning(renderers: Mapping[str, str], gpu: bool, backend: str | None) -> str | None:
    """:func:`renderer_warning` for the processes of a run (``{"main" or "worker i": renderer}``): the warning of the
    first software renderer, naming the processes that render with it; ``None`` when none warns."""
    for renderer in dict.fromkeys(renderers.values()):
        warning = renderer_warning(renderer, gpu, backend)
        if warning is not None:
            where = ", ".join(name for name, value in renderers.items() if value == renderer)
            return f"{where}: {warning}"
    return None


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
