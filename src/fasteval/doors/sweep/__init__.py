"""Sweeps: many (policy, env, seed block) evaluations, one engine, a resumable store, a report.

``fasteval sweep SPEC.yaml`` and ``fasteval report DIR`` are the CLI doors; the library door is
:func:`run_sweep`. See ``docs/sweeps.md`` for the spec format, the store schema and resume rules.
"""

from fasteval.doors.sweep.executors import LocalExecutor, RayExecutor, run_job
from fasteval.doors.sweep.plan import Job, plan
from fasteval.doors.sweep.runner import SweepOutcome, run_sweep
from fasteval.doors.sweep.spec import EnvEntry, PolicyEntry, SweepOptions, SweepSpec, SweepSpecError, load_sweep_file
from fasteval.doors.sweep.store import Store

__all__ = [
    "EnvEntry",
    "Job",
    "LocalExecutor",
    "PolicyEntry",
    "RayExecutor",
    "Store",
    "SweepOptions",
    "SweepOutcome",
    "SweepSpec",
    "SweepSpecError",
    "load_sweep_file",
    "plan",
    "run_job",
    "run_sweep",
]
