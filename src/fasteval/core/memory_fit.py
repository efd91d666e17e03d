"""Fitting the envs to the machine's memory, said before the run (not after an OOM kill).

Heavy envs declare what one costs (``EnvKinds.memory(env, kwargs)``: bytes per env, and per process that hosts
envs: the imports of torch, a simulator, its assets). A LIBERO env measured here takes about 1.2 GiB (libero_10,
256 px, after its first reset) and a process that hosts LIBERO envs about 1.9 GiB before its first one, so a
sync batch of 5 needs about 8 GiB in one process. :func:`memory_plan` then sizes the worker pool's default
number of workers to the memory available as well as to the cores, and says what it did, or that the batch
itself does not fit (with the largest batch that does), before any env is built.
"""

from __future__ import annotations

from dataclasses import dataclass

GiB = 1024 ** 3


def available_memory() -> int | None:
    """Bytes of memory available to new processes (``MemAvailable`` of ``/proc/meminfo``), or ``None`` elsewhere."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


@dataclass(frozen=True)
class MemoryPlan:
    workers: int | None
    """The pool's workers (``None``: in-process envs, or the cores' default stands)."""
    message: str | None
    """What to tell the user before the run, or ``None``."""


def _gib(n: float) -> str:
    return f"{n / GiB:.1f} GiB"


def memory_plan(n_slots: int, vectorization: str, workers: int | None, default_workers: int,
                per_env: int, per_process: int, available: int | None, what: str = "these envs") -> MemoryPlan:
    """Fit ``n_slots`` envs (``per_env`` bytes each; ``per_process`` bytes for each process that hosts them, this one
    included) into ``available`` bytes. ``workers`` is the user's ``--workers`` (kept as given) or ``None`` (the
    default, ``default_workers`` from the cores, lowered here until it fits)."""
    if available is None:
        return MemoryPlan(workers, None)
    envs = n_slots * per_env
    if vectorization != "async":
        need = per_process + envs
        if need <= available:
            return MemoryPlan(workers, None)
        fit = max(0, (available - per_process) // per_env)
        return MemoryPlan(workers, f"{n_slots} {what} in this process need about {_gib(need)} ({_gib(per_env)} each "
                                   f"and {_gib(per_process)} for the process); {_gib(available)} of memory is available. "
                                   f"Lower --batch-size to at most {max(1, fit)}, or the kernel may kill the run.")
    chosen = workers if workers is not None else default_workers
    need = (chosen + 1) * per_process + envs
    if need <= available:
        return MemoryPlan(workers, None)
    if workers is None:
        for w in range(chosen - 1, 0, -1):
            if (w + 1) * per_process + envs <= available:
                return MemoryPlan(w, f"{n_slots} {what} in {chosen} workers would need about {_gib(need)} "
                                     f"({_gib(per_env)} each and {_gib(per_process)} per process); {_gib(available)} "
                                     f"is available, so the pool uses {w} workers (the cores allow {chosen}; "
                                     f"--workers sets it).")
    fit = max(0, (available - 2 * per_process) // per_env)
    return MemoryPlan(workers if workers is not None else 1,
                      f"{n_slots} {what} in {chosen if workers is not None else 1} worker(s) need about "
                      f"{_gib((2 if workers is None else chosen + 1) * per_process + envs)} ({_gib(per_env)} each and "
                      f"{_gib(per_process)} per process); {_gib(available)} of memory is available. Lower --batch-size "
                      f"to at most {max(1, fit)}, or the kernel may kill the run.")
