"""Where a result came from: the command line, package versions, git commit, machine and date.

:func:`collect_provenance` is called once per run (it costs a few milliseconds: package metadata
is read from the installed distributions, nothing is imported, and ``git`` runs only when
fasteval's source sits in a git checkout) and stored in the run's ``manifest.json`` under
``"provenance"``; the HTML report shows it. Every field may be ``None`` (not known here).
"""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("fasteval", "torch", "gymnasium", "numpy", "lerobot", "gym-pusht", "metaworld", "mujoco")
"""Distributions whose versions a report shows (``None`` when not installed)."""


def command_line(argv: list[str] | None = None) -> str:
    """The command as the user typed it, as one shell-quoted string: ``fasteval ...`` for the
    console script, ``python -m fasteval.doors.cli ...`` for the module, else the script and its
    arguments."""
    argv = list(sys.argv if argv is None else argv)
    if not argv:
        return ""
    first = Path(argv[0])
    if first.name == "fasteval":
        head = ["fasteval"]
    elif first.parts[-3:] == ("fasteval", "doors", "cli.py"):
        head = ["python", "-m", "fasteval.doors.cli"]
    elif first.name == "__main__.py" and first.parent.name == "fasteval":
        head = ["python", "-m", "fasteval"]
    else:
        head = [argv[0]]
    return shlex.join(head + argv[1:])


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_commit(start: str | os.PathLike | None = None) -> dict[str, Any] | None:
    """``{"commit": sha, "dirty": bool}`` of the git checkout holding fasteval's source, or
    ``None`` (an installed wheel, no git, or git failed)."""
    here = Path(start) if start is not None else Path(__file__).resolve().parent
    root = next((p for p in (here, *here.parents) if (p / ".git").exists()), None)
    if root is None:
        return None
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        if sha.returncode != 0:
            return None
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": sha.stdout.strip(), "dirty": bool(status.stdout.strip()) if status.returncode == 0 else None}


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except (OSError, ValueError):
        pass
    return None


def _gpu() -> str | None:
    torch = sys.modules.get("torch")  # never import torch for this
    try:
        if torch is not None and torch.cuda.is_available():
            return ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    except Exception:
        return None
    return None


def machine() -> dict[str, Any]:
    return {
        "hostname": platform.node() or None,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "gpu": _gpu(),
    }


def collect_provenance(argv: list[str] | None = None) -> dict[str, Any]:
    """Everything above, plus the local date and time (ISO 8601 with the UTC offset)."""
    return {
        "command": command_line(argv),
        "cwd": os.getcwd(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "versions": package_versions(),
        "git": git_commit(),
        "machine": machine(),
    }
