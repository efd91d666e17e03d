"""The sweep door: plan the jobs, skip what the store already has, map the engine over the rest.

:func:`run_sweep` is what ``fasteval sweep`` calls; it is also the library entry point::

    from fasteval.doors.sweep import SweepSpec, LocalExecutor, run_sweep
    outcome = run_sweep(SweepSpec.from_dict(data), "outputs/sweeps/demo", executor=LocalExecutor(2))

Resume: re-running the same sweep on the same folder runs only the missing episodes of each job
(``engine.run(episodes=...)`` gives them exactly the numbers a full run would), retries failed
jobs, and leaves complete jobs alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from fasteval.doors.sweep.executors import LocalExecutor, Message
from fasteval.doors.sweep.plan import Job, plan
from fasteval.doors.sweep.spec import SweepSpec
from fasteval.doors.sweep.store import Store, SweepLock
from fasteval.render.words import progress_outcome


@dataclass
class SweepOutcome:
    """What one sweep invocation did."""

    out_dir: Path
    n_jobs: int
    skipped: int = 0
    """Jobs already complete in the store."""
    done: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    """(job label, error text) of the jobs that failed in this invocation."""
    episodes_added: int = 0
    """Episodes written to the store by this invocation."""
    episodes_stored: int = 0
    """Episodes the store holds after this invocation (earlier runs included)."""
    not_started: int = 0
    """Jobs this invocation did not start because ``stop`` asked it to (they stay pending)."""
    report: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return not self.failed


class StoreSink:
    """The driver's end of an executor: writes every batch of episodes in one transaction."""

    def __init__(self, store: Store, jobs: Sequence[Job], run_id: int, outcome: SweepOutcome,
                 progress: Callable[[str], None], total: int, stop: Callable[[], bool] | None = None):
        self.store, self.run_id, self.outcome, self.progress, self.total = store, run_id, outcome, progress, total
        self.jobs = {job.job_id: job for job in jobs}
        self.finished_ids: set[str] = set()
        self.started_ids: set[str] = set()
        self.stop = stop

    def stop_requested(self) -> bool:
        return self.stop is not None and self.stop()

    def message(self, msg: Message) -> None:
        kind, job_id = msg[0], msg[1]
        if kind == "start":
            self.started_ids.add(job_id)
            if job_id not in self.finished_ids:  # a late "start" must not undo a finished job
                self.store.job_started(job_id)
        elif kind == "episodes":
            self.outcome.episodes_added += self.store.add_episodes(self.jobs[job_id], msg[2], self.run_id)
        else:
            raise ValueError(f"unknown executor message {kind!r}")

    def finished(self, job: Job, outcome: dict[str, Any]) -> None:
        self.finished_ids.add(job.job_id)
        n = len(self.finished_ids)
        if outcome["ok"]:
            self.outcome.episodes_added += self.store.add_episodes(job, outcome["records"], self.run_id)
            self.store.job_done(job.job_id, outcome["eval_s"])
            self.outcome.done += 1
            records = outcome["records"]
            wins = sum(bool(r["success"]) for r in records)
            signal = any(r.get("has_success_signal") is not False for r in records)  # a record says (None: unknown)
            known = (f"{wins} successes" if signal else
                     progress_outcome(len(records), wins, sum(float(r["sum_reward"]) for r in records), False))
            self.progress(f"[{n}/{self.total}] done   {job.label}: {len(records)} episodes, {known}")
        else:
            self.outcome.episodes_added += self.store.add_episodes(job, outcome.get("records", []), self.run_id)
            self.store.job_failed(job.job_id, outcome["error"], outcome.get("eval_s", 0.0))
            self.outcome.failed.append((job.label, outcome["error"]))
            first_line = outcome["error"].splitlines()[0] if outcome["error"] else ""
            self.progress(f"[{n}/{self.total}] FAILED {job.label}: {first_line}")


def run_sweep(
    spec: SweepSpec,
    out_dir: str | Path,
    executor: Any = None,
    base_dir: str | Path | None = None,
    report: bool = True,
    progress: Callable[[str], None] = lambda line: None,
    stop: Callable[[], bool] | None = None,
) -> SweepOutcome:
    """Run (or resume) ``spec`` into ``out_dir/results.sqlite`` and, with ``report``, write the report.

    ``stop``: once it returns true, no other job starts and the jobs in flight finish
    (:mod:`fasteval.doors.sweep.signals`); ``outcome.not_started`` counts the others (still pending).
    ``base_dir`` resolves relative checkpoint folders (the sweep file's folder). Raises
    :class:`~fasteval.types.errors.UserInputError` for a bad spec, a locked folder, or a store made with
    other result-affecting settings; job failures are recorded and returned, not raised.
    """
    executor = executor or LocalExecutor()
    out_dir = Path(out_dir)
    jobs = plan(spec, base_dir)
    outcome = SweepOutcome(out_dir=out_dir, n_jobs=len(jobs))
    with SweepLock(out_dir), Store(out_dir) as store:
        store.check_settings(spec.options.result_settings())
        missing = store.sync_jobs(jobs, done_is_final=spec.options.stop_when is not None)
        store.set_plan([job.job_id for job in jobs])  # the report shows this spec's cells only
        items = [(job, missing[job.job_id]) for job in jobs if missing[job.job_id]]
        outcome.skipped = len(jobs) - len(items)
        if outcome.skipped:
            progress(f"{outcome.skipped} of {len(jobs)} jobs already complete in {store.path}; skipping them")
        run_id = store.start_run(executor.name, executor.workers, {**spec.to_dict(), "provenance": run_provenance()})
        sink = StoreSink(store, jobs, run_id, outcome, progress, len(items), stop)
        try:
            if items:
                executor.run(items, sink)
        finally:  # also on Ctrl-C: the run's wall time counts; unfinished jobs stay "running" until resumed
            store.finish_run(run_id)
            outcome.episodes_stored = store.count_episodes()
        outcome.not_started = len(items) - len(sink.finished_ids)
    if report:
        from fasteval.doors.sweep.report import write_report

        outcome.report = write_report(out_dir)
    return outcome


def run_provenance() -> dict:
    """What a sweep run records beside its spec (the report's provenance): fasteval's version and git commit."""
    from fasteval.run.provenance import git_commit
    from fasteval.version import __version__

    return {"fasteval_version": __version__, "git": git_commit()}
