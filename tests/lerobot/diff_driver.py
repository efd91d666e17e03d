"""Run a list of command lines through ``lerobot-eval`` or ``fasteval``, in one process (the differential test).

``python -m tests.lerobot.diff_driver {lerobot-eval|fasteval} CASES.json RESULTS.json``

``CASES.json`` is ``[{"name": ..., "argv": [...], "environ": {...}}, ...]`` (``environ``: variables set for that
case only). Each command line runs through the function
the console script of that name calls (looked up in the installed entry points, so it is exactly what
``lerobot-eval ...`` / ``fasteval ...`` run), with ``sys.argv`` set to it, one after the other: the
imports are paid once, not once per case. torch runs on one thread (``torch.set_num_threads(1)``, set
before any case; fasteval is also given ``--cpu-threads 1``). ``RESULTS.json`` gets
``{name: {"rc": exit code, "seconds": wall time}}``; a case's output and log are in its output folder's
parent (``<name>.log``).

:mod:`tests.lerobot.diff_envs` is imported first, so ``--env.type=fasteval_varying`` exists on both sides.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
import traceback
from importlib.metadata import entry_points
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def console_script(name: str):
    """The callable behind the console script ``name`` (``lerobot.scripts.lerobot_eval:main``, ...): the
    installed entry point, else (fasteval run from its checkout) the one this repository's pyproject.toml
    declares."""
    found = [ep for ep in entry_points(group="console_scripts") if ep.name == name]
    if found:
        return found[0].load()
    import importlib
    import tomllib

    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    if name not in scripts:
        raise SystemExit(f"no console script {name!r} in this Python ({sys.executable}) nor in pyproject.toml")
    module, _, attr = scripts[name].partition(":")
    return getattr(importlib.import_module(module), attr)


@contextlib.contextmanager
def case_environ(environ: dict[str, str]):
    """``environ`` set in ``os.environ`` for one case, and the earlier values put back after it."""
    import os

    saved = {key: os.environ.get(key) for key in environ}
    os.environ.update(environ)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def run_case(name: str, command, argv: list[str], log: Path) -> int:
    sys.argv = [name, *argv]
    with open(log, "w") as out, contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        import logging

        for handler in list(logging.root.handlers):  # LeRobot's init_logging adds a handler per call
            logging.root.removeHandler(handler)
        logging.basicConfig(stream=out, level=logging.INFO, force=True)
        try:
            command()
            return 0
        except SystemExit as exc:
            return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:
            traceback.print_exc(file=out)
            return 1


def main(argv: list[str]) -> int:
    name, cases_file, results_file = argv
    import torch

    torch.set_num_threads(1)
    import tests.lerobot.diff_envs  # noqa: F401  (registers --env.type=fasteval_varying)

    command = console_script(name)
    results = {}
    for case in json.loads(Path(cases_file).read_text()):
        log = Path(case["log"])
        log.parent.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        with case_environ(case.get("environ", {})):
            rc = run_case(name, command, case["argv"], log)
        results[case["name"]] = {"rc": rc, "seconds": time.perf_counter() - start}
        Path(results_file).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
