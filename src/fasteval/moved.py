"""Old import paths of modules that moved into one folder per layer, kept working.

``import fasteval.results`` (or a ``"fasteval.suites:make_metaworld_env"`` reference) returns the
module at its new home, ``fasteval.types.results``: the same module object, never a second copy,
so classes, registries and isinstance checks stay one. New code imports the new paths.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

#: old dotted path (a module or a package) -> its home now
MOVED: dict[str, str] = {
    "fasteval.api": "fasteval.run.api",
    "fasteval.config": "fasteval.run.config",
    "fasteval.durable": "fasteval.run.durable",
    "fasteval.engine": "fasteval.run.engine",
    "fasteval.episode_files": "fasteval.run.episode_files",
    "fasteval.paths": "fasteval.run.paths",
    "fasteval.rundir": "fasteval.run.rundir",
    "fasteval.sinks": "fasteval.run.sinks",
    "fasteval.cli": "fasteval.doors.cli",
    "fasteval.compat": "fasteval.doors.compat",
    "fasteval.suites": "fasteval.doors.suites",
    "fasteval.bench": "fasteval.doors.bench",
    "fasteval.sweep": "fasteval.doors.sweep",
    "fasteval.errors": "fasteval.types.errors",
    "fasteval.mapping_files": "fasteval.types.mapping_files",
    "fasteval.refs": "fasteval.types.refs",
    "fasteval.results": "fasteval.types.results",
    "fasteval.spec": "fasteval.types.spec",
    "fasteval.stats": "fasteval.types.stats",
    "fasteval.recording": "fasteval.robot.recording",
    "fasteval.policies.chunk_queue": "fasteval.robot.buffers.chunk_queue",
    "fasteval.robot.policies.chunk_queue": "fasteval.robot.buffers.chunk_queue",
    "fasteval.policies": "fasteval.robot.policies",
    "fasteval.lerobot": "fasteval.robot.lerobot",
    "fasteval.fast_envs": "fasteval.robot.fast_envs",
}


def new_home(name: str) -> str | None:
    """The current dotted path of ``name`` if it (or a package above it) moved, else None."""
    head = name
    while "." in head:
        if head in MOVED:
            return MOVED[head] + name[len(head):]
        head = head.rsplit(".", 1)[0]
    return None


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):  # a throwaway module; exec_module swaps in the real one
        return None

    def exec_module(self, module) -> None:
        # The import system returns whatever sys.modules holds under the name after exec.
        sys.modules[module.__name__] = importlib.import_module(self.target)


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        home = new_home(fullname) if fullname.startswith("fasteval.") else None
        if home is None:
            return None
        return importlib.util.spec_from_loader(fullname, _Alias(home))


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once), ahead of the path finder."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())
