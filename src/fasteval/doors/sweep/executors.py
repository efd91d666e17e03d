"""Executors: map the engine over jobs, here (one after another or a few processes) or on Ray.

Every executor runs the same worker function, :func:`run_job`, which builds an
:class:`~fasteval.run.engine.Engine` from the job's spec (policies travel as references, never
as live objects), runs only the job's missing episodes, and sends messages to the driver:

* ``("start", job_id)`` when the job starts (counted as an attempt);
* ``("episodes", job_id, records)`` with finished episodes, in small batches (every
  ``flush_s`` seconds or 256 episodes, and at the end);

and finally returns ``{"ok": True, "records": [...all...], "eval_s": ...}`` or ``{"ok": False,
"error": "..."}`` (after emitting the episodes that finished before the failure). The driver alone writes the store (:class:`Sink`), so the store never sees
concurrent writers, and Ray workers on other machines need no access to it. The final return
repeats every record, so a batch still in flight when the job returns is not lost.

Results never depend on the executor: each job's seeds come from the spec, and each job runs
with the same torch thread count (``options.torch_threads``) wherever it runs.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import traceback
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from time import perf_counter
from typing import Any, Callable, Protocol, Sequence

from fasteval.types.errors import FastevalError, UserInputError
from fasteval.doors.sweep.plan import Job, folder_digest

logger = logging.getLogger(__name__)

Message = tuple
WorkItem = tuple[Job, list[int]]
FLUSH_S = 0.5
FLUSH_EPISODES = 256


class Sink(Protocol):
    """What an executor reports to (the driver's store writer), and asks whether to start more jobs.

    ``stop_requested()`` true (a first SIGINT/SIGTERM, :mod:`fasteval.doors.sweep.signals`): start no
    other job and let the jobs in flight finish; a job that never started is not reported (it stays
    pending in the store). ``started_ids``: the jobs whose ``("start", job_id)`` came in."""

    started_ids: set[str]

    def message(self, msg: Message) -> None: ...
    def finished(self, job: Job, outcome: dict[str, Any]) -> None: ...
    def stop_requested(self) -> bool: ...


# -- the worker function ---------------------------------------------------------------------------

class _Batcher:
    """``on_finished`` callback: collects records (built by the run layer's one record builder from the rows
    the engine hands up), emits them every ``flush_s`` s or ``max_episodes``."""

    def __init__(self, spec: Any, job_id: str, emit: Callable[[Message], None], flush_s: float):
        from fasteval.run.record import default_label

        self.label, self.job_id, self.emit, self.flush_s = default_label(spec), job_id, emit, flush_s
        self.rows: Any = None
        self.buffer: list[dict[str, Any]] = []
        self.last = perf_counter()

    def __call__(self, ledger: Any, rows: Any) -> None:
        from fasteval.run.record import EpisodeRows

        if self.rows is None or self.rows.ledger is not ledger:
            self.rows = EpisodeRows(ledger, self.label)
        self.buffer.extend(self.rows.table(rows))
        if len(self.buffer) >= FLUSH_EPISODES or perf_counter() - self.last >= self.flush_s:
            self.flush()

    def flush(self) -> None:
        if self.buffer:
            self.emit(("episodes", self.job_id, self.buffer))
            self.buffer = []
        self.last = perf_counter()


def describe_error(exc: BaseException) -> str:
    """One readable text: the message for fasteval's own errors, plus a short traceback otherwise."""
    text = f"{type(exc).__name__}: {exc}"
    if not isinstance(exc, FastevalError):
        tail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-4:])
        text += "\n" + tail.rstrip()
    return text


def run_job(job: Job, episodes: Sequence[int], emit: Callable[[Message], None], flush_s: float = FLUSH_S) -> dict[str, Any]:
    """Run episodes ``episodes`` of ``job``; see the module docstring. Never raises for job errors."""
    import torch

    from fasteval.run.engine import Engine

    emit(("start", job.job_id))
    threads = torch.get_num_threads()
    batcher = None
    try:
        if Path(job.policy_ref).is_absolute() and folder_digest(job.policy_ref) != job.policy_digest:
            raise UserInputError(
                f"policy {job.policy_name!r}: the checkpoint at {job.policy_ref} on this worker differs from the one "
                f"the sweep was planned with (digest {job.policy_digest[:12]}). Make the same files available to every worker."
            )
        torch.set_num_threads(job.options.torch_threads)
        with Engine(job.eval_spec()) as engine:
            if job.options.stop_when is not None:  # the whole seed block; only episodes 0..k-1 are returned
                result = engine.run()
            else:
                batcher = _Batcher(engine.spec, job.job_id, emit, flush_s)
                result = engine.run(episodes=list(episodes), on_finished=batcher)
                batcher.flush()
        if result.n_failed:  # the engine gave up on some episodes (env errors past `retries`)
            return {"ok": False, "records": result.per_episode, "eval_s": result.eval_s,
                    "error": _failed_episodes_text(result.n_failed, len(episodes), result.errors)}
        return {"ok": True, "records": result.per_episode, "eval_s": result.eval_s}
    except Exception as exc:  # reported in the jobs table; the sweep goes on with other jobs
        error = describe_error(exc)
        if batcher is not None:
            try:  # episodes that finished before the failure are final: keep them
                batcher.flush()
            except Exception:
                pass
        if isinstance(exc.__cause__, KeyboardInterrupt):  # the engine wraps Ctrl-C: stop the sweep
            raise KeyboardInterrupt from exc
        return {"ok": False, "error": error}
    finally:
        torch.set_num_threads(threads)


def _failed_episodes_text(n_failed: int, n: int, errors: list[dict[str, Any]]) -> str:
    final = [e for e in errors if e.get("final")] or errors
    lines = [f"{n_failed} of {n} episodes failed after the engine's retries; the others are stored."]
    for e in final[:3]:
        lines.append(f"seed {e.get('seed')}, {e.get('stage')} at step {e.get('step')}: {e.get('error')}")
    if len(final) > 3:
        lines.append(f"... and {len(final) - 3} more")
    return "\n".join(lines)


# -- local ------------------------------------------------------------------------------------------

def default_workers() -> int:
    """The CPU cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


class LocalExecutor:
    """Jobs on this machine: one after another in this process (``workers=1``), or in a pool of
    ``workers`` spawned processes. No services needed."""

    name = "local"

    def __init__(self, workers: int | None = None, flush_s: float = FLUSH_S):
        self.workers = default_workers() if workers is None else int(workers)
        if self.workers < 1:
            raise UserInputError(f"workers: expected an integer >= 1, got {workers!r}.")
        self.flush_s = flush_s

    def run(self, items: Sequence[WorkItem], sink: Sink) -> None:
        workers = min(self.workers, len(items))
        if workers <= 1:
            for job, episodes in items:
                if sink.stop_requested():
                    return
                sink.finished(job, run_job(job, episodes, sink.message, self.flush_s))
            return
        self._run_pool(items, sink, workers)

    def _run_pool(self, items: Sequence[WorkItem], sink: Sink, workers: int) -> None:
        ctx = mp.get_context("spawn")  # never fork a process that may hold torch threads
        queue = ctx.Queue()
        jobs = {job.job_id: job for job, _ in items}
        others = set(mp.active_children())  # children from before the pool: not its workers
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_init_pool_worker,
                                   initargs=(queue, os.getpid()))
        futures: dict[Any, Job] = {}
        pending: set[Any] = set()
        waiting = iter(items)

        def submit_next() -> None:  # at most `workers` jobs out: the ones in flight are the ones running
            for job, episodes in waiting:
                future = pool.submit(_pool_job, job, episodes, self.flush_s)
                futures[future] = job
                pending.add(future)
                return

        try:
            for _ in range(workers):
                submit_next()
            while pending:
                done, _ = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                pending -= done
                _drain_mp(queue, sink)
                for future in done:
                    job = futures[future]
                    try:
                        outcome = future.result()
                    except BrokenProcessPool:
                        outcome = {"ok": False, "error": "the worker process died (killed, out of memory, or crashed)."}
                    except Exception as exc:
                        outcome = {"ok": False, "error": describe_error(exc)}
                    sink.finished(jobs[job.job_id], outcome)
                    if not sink.stop_requested():  # a first signal: the jobs in flight finish, no other starts
                        submit_next()
            _drain_mp(queue, sink)
        except BaseException:  # a second signal or a store error: do not wait for the queued jobs
            pool.shutdown(wait=False, cancel_futures=True)
            for process in set(mp.active_children()) - others:  # the pool's workers (shutdown() forgets them)
                process.kill()  # they ignore SIGINT/SIGTERM (the driver's to decide)
            try:
                _drain_mp(queue, sink)  # what they sent before is stored
            except Exception:
                pass
            raise
        pool.shutdown(wait=True)


_QUEUE: Any = None
_PARENT: int | None = None


def _init_pool_worker(queue: Any, parent_pid: int) -> None:
    from fasteval.doors.sweep.signals import ignore_in_workers

    global _QUEUE, _PARENT
    _QUEUE, _PARENT = queue, parent_pid
    ignore_in_workers()


def _pool_emit(msg: Message) -> None:
    if os.getppid() != _PARENT:  # the driver died: stop instead of computing for no one
        os._exit(1)
    _QUEUE.put(msg)


def _pool_job(job: Job, episodes: list[int], flush_s: float) -> dict[str, Any]:
    return run_job(job, episodes, _pool_emit, flush_s)


def _drain_mp(queue: Any, sink: Sink) -> None:
    import queue as queue_module

    while True:
        try:
            msg = queue.get_nowait()
        except queue_module.Empty:
            return
        sink.message(msg)


# -- Ray --------------------------------------------------------------------------------------------

RAY_MISSING = "the Ray backend needs Ray: ./scripts/install.sh ray"


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UserInputError(f"--backend ray: {RAY_MISSING}.") from None
    return ray


def _ray_job(job: Job, episodes: list[int], queue: Any, flush_s: float) -> dict[str, Any]:
    return run_job(job, episodes, queue.put, flush_s)


class RayExecutor:
    """Each job is a Ray task (Ray core) asking for ``num_cpus``/``num_gpus``; a task whose worker
    dies is retried by Ray up to ``max_retries`` times. Errors raised by the job itself are not
    retried here (they would fail again); re-running the sweep retries failed jobs.

    Uses the running Ray instance when ``ray.init`` was already called, else connects to
    ``address`` (``auto``, ``ray://host:10001``, ...), else starts a local Ray (shut down after).
    Every node needs fasteval installed, and checkpoint folders at the same absolute path.
    """

    name = "ray"

    def __init__(self, address: str | None = None, num_cpus: float = 1, num_gpus: float = 0, max_retries: int = 3,
                 flush_s: float = FLUSH_S):
        self.ray = import_ray()
        if num_cpus < 0 or num_gpus < 0 or max_retries < 0:
            raise UserInputError(
                f"Ray resources: expected num_cpus >= 0, num_gpus >= 0, max_retries >= 0, got {num_cpus}, {num_gpus}, {max_retries}."
            )
        self.address, self.num_cpus, self.num_gpus, self.max_retries = address, num_cpus, num_gpus, max_retries
        self.flush_s = flush_s
        self.workers = 0

    def run(self, items: Sequence[WorkItem], sink: Sink) -> None:
        ray = self.ray
        from ray.util.queue import Queue

        started_here = not ray.is_initialized()
        if started_here:
            ray.init(address=self.address, include_dashboard=False, log_to_driver=False)
        queue = Queue(actor_options={"num_cpus": 0})
        try:
            self.workers = int(ray.cluster_resources().get("CPU", 0))
            task = ray.remote(_ray_job).options(num_cpus=self.num_cpus, num_gpus=self.num_gpus, max_retries=self.max_retries)
            refs = {task.remote(job, episodes, queue, self.flush_s): job for job, episodes in items}
            pending = list(refs)
            while pending:
                if sink.stop_requested():  # tasks that have not started are cancelled; those in flight finish
                    waiting = [ref for ref in pending if refs[ref].job_id not in sink.started_ids]
                    for ref in waiting:
                        ray.cancel(ref, force=False)
                    pending = [ref for ref in pending if ref not in waiting]
                    if not pending:
                        break
                ready, pending = ray.wait(pending, num_returns=1, timeout=0.2)
                _drain_ray(queue, sink)
                for ref in ready:
                    try:
                        outcome = ray.get(ref)
                    except ray.exceptions.RayError as exc:  # worker died past max_retries, node lost, ...
                        outcome = {"ok": False, "error": f"Ray task failed after {self.max_retries} retries: "
                                                         f"{type(exc).__name__}: {str(exc)[:2000]}"}
                    sink.finished(refs[ref], outcome)
            _drain_ray(queue, sink)
        finally:
            try:
                queue.shutdown()
            finally:
                if started_here:
                    ray.shutdown()


def _drain_ray(queue: Any, sink: Sink) -> None:
    n = queue.qsize()
    if n:
        for msg in queue.get_nowait_batch(n):
            sink.message(msg)
