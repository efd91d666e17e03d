"""Run an engine into a :class:`~fasteval.run.rundir.RunDirectory`: durable, interruptible, resumable.

Used by the CLI. The sequence:

1. nothing is written until the run has passed its dry run: ``manifest.json`` (status
   ``running``) is written just before the first record (a finished episode or an error), so a
   run that fails its dry run leaves the folder as it was, free for the next run. A resumed run
   checks that its spec and policy digest match the manifest, and runs only the episodes that
   are not in ``episodes.jsonl`` yet;
2. finished episodes are appended to ``episodes.jsonl`` by a group commit
   (:class:`GroupCommitLog`): the records of the episodes finished in a step are buffered
   together, and each group is encoded at once and written with one ``write``; that happens when
   the oldest unwritten record
   is :attr:`FlushPolicy.max_delay_s` (50 ms) old or :attr:`FlushPolicy.max_records` (256) are
   waiting, whichever comes first, and at the end of the run (normal exit, signal, abort).
   A kill (SIGKILL, power loss of the process) loses at most that window; ``--resume`` reruns
   exactly the episodes that are not in the log;
3. the first SIGINT/SIGTERM stops starting new episodes (in-flight ones finish and are kept);
   a second one stops at once;
4. at the end, ``eval_info.json`` is written atomically from *all* recorded episodes (earlier
   segments included), and the manifest gets its final status.

Around all of it, the folder is locked (:mod:`fasteval.run.folder_lock`): a second process on it
exits 2 naming the holder. Every record carries the run's ``run_id``; a resume refuses records of
another run (or with a seed that is not ``seed0 + episode_ix``), and a new run refuses a folder that
holds records but no manifest. A resume cuts a torn last line back before appending, and says so.
A write that fails (disk full) names its file, leaves the record files in complete lines and the
manifest ``failed`` (where it can still be written). A watchdog expiry (a hung policy or sync env,
:mod:`fasteval.core.watchdog`) flushes the records, marks the manifest ``failed`` with the cause,
prints the resume command and ends the process with exit code 1.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from fasteval.run.engine import Engine
from fasteval.run.folder_lock import FolderLock
from fasteval.run.provenance import collect_provenance
from fasteval.types.errors import EvaluationAborted, FastevalError, UserInputError
from fasteval.types.results import (STATUS_COMPLETE, STATUS_FAILED, STATUS_INTERRUPTED, STATUS_RUNNING,  # noqa: F401
                                    EarlierSegments, EpisodeTable, EvalResult)
from fasteval.run.rundir import RunDirectory, RunIdentity, check_resumable, format_records, policy_digest, resume_command
from fasteval.types.spec import EvalSpec



@dataclass
class DurableOutcome:
    """What happened: the merged result, the final status, and the signal that stopped it (if any)."""

    result: EvalResult
    status: str
    signal_number: int | None = None
    error: BaseException | None = None
    resumed_episodes: int = 0
    notes: list[str] = field(default_factory=list)


def manifest_fields(spec: EvalSpec, engine: Engine) -> dict[str, Any]:
    from fasteval.version import __version__

    return {
        "env": spec.env,
        "env_kwargs": spec.env_kwargs,
        "policy": spec.to_dict()["policy"],
        "policy_digest": policy_digest(engine.policy, spec.policy),
        "seed": spec.seed,
        "n_episodes": spec.n_episodes,
        "max_steps": engine.max_steps,
        "batch_size": spec.batch_size,
        "vectorization": spec.vectorization,
        "fasteval_version": __version__,
        # a --stop-when run: its rule must match on resume (its -n, the cap, may grow)
        **({"stop_when": spec.stop_when, "confidence": spec.confidence,
            "return_bounds": list(spec.return_bounds) if spec.return_bounds else None} if spec.stop_when else {}),
    }


@dataclass(frozen=True)
class FlushPolicy:
    """When buffered episode records must reach the file: the crash window of a run."""

    max_delay_s: float = 0.05
    """Longest time (seconds) a record may wait in memory; a kill loses at most this window."""
    max_records: int = 256
    """Most records that may wait in memory, whatever their age."""

    def due(self, pending: int, oldest_age_s: float) -> bool:
        """``pending`` records wait, the oldest for ``oldest_age_s`` seconds: write them now?"""
        return pending >= self.max_records or (pending > 0 and oldest_age_s >= self.max_delay_s)


class GroupCommitLog:
    """Buffered appends of records as JSON lines, written in groups by :class:`FlushPolicy`.

    :meth:`add` only keeps the records (the caller must not change them afterwards); a group is
    encoded at once by :func:`format_records` when it is written, and handed to ``write(text)``,
    which must append it and flush it to the OS (one ``write`` call per group). :meth:`add`
    checks the policy each time; a background thread (``background=True``) checks it every
    ``max_delay_s / 2``, so that a record never waits much longer than ``max_delay_s`` when no
    further episode finishes. :meth:`close` (or :meth:`flush`) writes whatever is left. An error
    raised by ``write`` in the thread is re-raised by the next :meth:`add`, :meth:`flush` or
    :meth:`close`. ``clock`` is injectable for tests (seconds, monotonic).

    ``render(items) -> records`` (optional) turns the buffered items into records when a group is
    written: the engine's run log buffers ledger row numbers and builds their records 256 at a
    time, column by column, instead of one small batch per step (rows are final once finished).
    """

    def __init__(self, write: Callable[[str], None], policy: FlushPolicy = FlushPolicy(),
                 clock: Callable[[], float] = time.monotonic, background: bool = True,
                 render: Callable[[list[Any]], Sequence[dict[str, Any]]] | None = None):
        self.write, self.policy, self.clock = write, policy, clock
        self.render = render
        self._records: list[Any] = []
        self._oldest = 0.0
        self._lock = threading.Lock()
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.groups_written = 0
        if background:
            self._thread = threading.Thread(target=self._run, name="fasteval-log-flush", daemon=True)
            self._thread.start()

    def add(self, records: Sequence[dict[str, Any]]) -> None:
        """Buffer ``records`` (the episodes finished in one step); write the group if it is due."""
        self._reraise()
        if not records:
            return
        with self._lock:
            now = self.clock()
            if not self._records:
                self._oldest = now
            self._records.extend(records)
            if self.policy.due(len(self._records), now - self._oldest):
                self._write_locked()

    def poll(self) -> None:
        """Write the buffered group if it is due (what the background thread calls)."""
        with self._lock:
            if self.policy.due(len(self._records), self.clock() - self._oldest):
                self._write_locked()

    def flush(self) -> None:
        """Write whatever is buffered now."""
        with self._lock:
            self._write_locked()
        self._reraise()

    def close(self) -> None:
        """Stop the thread and write the rest. Safe to call twice."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.flush()

    @property
    def pending(self) -> int:
        """Records buffered, not yet written."""
        return len(self._records)

    def _write_locked(self) -> None:
        if not self._records:
            return
        records, self._records = self._records, []
        if self.render is not None:
            records = self.render(records)
        self.write(format_records(records))
        self.groups_written += 1

    def _run(self) -> None:
        while not self._stop.wait(self.policy.max_delay_s / 2):
            try:
                self.poll()
            except BaseException as exc:  # disk full, ...: the main thread re-raises it
                self._error = exc
                return

    def _reraise(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error


class _StopOnSignal:
    """First SIGINT/SIGTERM: stop starting episodes. Second: raise KeyboardInterrupt (stop now)."""

    def __init__(self, engine: Engine, announce: Callable[[str], None]):
        self.engine, self.announce = engine, announce
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is not None:
            raise KeyboardInterrupt(f"second signal ({signal.Signals(signum).name})")
        self.received = signum
        self.engine.stop_starting()
        self.announce(f"{signal.Signals(signum).name} received: finishing the episodes in flight, starting no new ones "
                      f"(send it again to stop at once).")

    def __enter__(self) -> "_StopOnSignal":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


class _SegmentLog:
    """This segment's writes to the run folder. Nothing is written before the first record (a finished
    episode or an error: the dry run has passed); then the manifest (status ``running``), then the logs."""

    def __init__(self, engine: Engine, run_dir: RunDirectory, fields: dict[str, Any], segments: list[dict[str, Any]],
                 flush_policy: FlushPolicy, on_finished: Callable[[Any, Any], None] | None,
                 announce: Callable[[str], None] = lambda message: None):
        self.engine, self.run_dir, self.fields, self.segments = engine, run_dir, fields, segments
        self.flush_policy, self.on_finished, self.announce = flush_policy, on_finished, announce
        self.run_id = fields["run_id"]
        self.log: GroupCommitLog | None = None

    def start(self) -> GroupCommitLog:
        if self.log is None:
            for name, n in self.run_dir.cut_torn_tails().items():
                self.announce(f"{name} ended in a torn line (an interrupted write): cut {n} bytes back to its last "
                              f"complete record before appending.")
            self.run_dir.open_logs()
            self.write_manifest(STATUS_RUNNING)
            # ledger rows are buffered; the engine's one record builder turns each group into records
            self.log = GroupCommitLog(self.run_dir.append_episode_text, self.flush_policy, render=self._render)
        return self.log

    def _render(self, rows: list[int]) -> list[dict[str, Any]]:
        records = self.engine.records(self.engine.ledger, rows).to_list()
        for record in records:
            record["run_id"] = self.run_id
        return records

    def finished(self, ledger: Any, rows: Any) -> None:
        """The engine's ``on_finished``: buffer the rows (their records are built when written)."""
        self.start().add(rows.tolist())
        if self.on_finished is not None:
            self.on_finished(ledger, rows)

    def error(self, record: dict[str, Any]) -> None:
        """The engine's ``on_error``: the record (stamped with the run id, in the result's errors too) to errors.jsonl."""
        self.start()
        record["run_id"] = self.run_id
        self.run_dir.append_errors([record])

    def expire(self, cause: str) -> None:
        """The watchdog's expiry (from its thread; the engine's thread is stuck in the hung call): flush the
        records, mark the manifest ``failed`` with the cause, say how to resume, end the process (exit 1)."""
        from fasteval.core.watchdog import EXIT_CODE

        try:
            self.close()
            self.run_dir.close()
            self.write_manifest(STATUS_FAILED, TimeoutError(cause))
            self.announce(f"Error: {cause}. A hung call cannot be interrupted in its thread, so the run ends here; "
                          f"every finished episode is in {self.run_dir.path}. Resume with:\n"
                          f"  {resume_command(self.run_dir.path, self.engine.spec)}")
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(EXIT_CODE)

    def write_manifest(self, status: str, error: BaseException | None = None) -> None:
        self.run_dir.write_manifest({**self.fields, "spec": self.engine.spec.to_dict(), "status": status,
                                     "segments": self.segments,
                                     **({"error": f"{type(error).__name__}: {error}"} if error is not None else {})})

    def close(self) -> None:
        """Every buffered record reaches the file (safe to call twice)."""
        if self.log is not None:
            self.log.close()

    def undo(self, original_manifest: dict[str, Any] | None, folder_existed: bool) -> None:
        """The dry run failed: leave the folder as it was before this segment."""
        if self.log is None:
            return
        self.log.close()
        self.run_dir.close()
        if original_manifest is not None:
            self.run_dir.write_manifest(original_manifest)
        else:
            self.run_dir.remove_new_run(remove_folder=not folder_existed)


def _earlier_segments(run_dir: RunDirectory, fields: dict[str, Any], n_episodes: int,
                      resume: bool) -> tuple[dict[str, Any] | None, EarlierSegments, list[dict[str, Any]]]:
    """``(original manifest, what earlier segments recorded, their segment list)``; for a new run,
    checks that the folder holds no run yet (no manifest, no records), and gives it a run id; a resume
    takes the manifest's and refuses records of another run. Raises :class:`UserInputError` with the fix."""
    if not resume:
        if run_dir.has_manifest():
            raise UserInputError(f"{run_dir.path} already holds a fasteval run. Pass --resume {run_dir.path} to finish it, "
                                 f"or choose another --output-dir.")
        if run_dir.has_records():
            raise UserInputError(f"{run_dir.path} holds fasteval records (episodes.jsonl or errors.jsonl) but no "
                                 f"manifest.json: they belong to some other run, and a new run would mix its records "
                                 f"with theirs. Choose another --output-dir, or remove those files.")
        fields["run_id"] = uuid.uuid4().hex
        return None, EarlierSegments(EpisodeTable.empty()), []
    manifest = run_dir.read_manifest()
    check_resumable(manifest, fields, run_dir.path)
    fields["run_id"] = manifest.get("run_id")  # None: a run folder of an older fasteval, whose records carry none
    identity = RunIdentity(fields["run_id"], manifest["seed"], n_episodes)
    done = run_dir.records(identity)
    segments = list(manifest.get("segments", []))
    return manifest, EarlierSegments(EpisodeTable.from_records(done), sum(s["eval_s"] for s in segments), len(segments)), segments


def run_durable(
    engine: Engine,
    run_dir: RunDirectory,
    resume: bool = False,
    on_finished: Callable[[Any, Any], None] | None = None,
    announce: Callable[[str], None] = lambda message: print(message, file=sys.stderr),
    flush_policy: FlushPolicy = FlushPolicy(),
) -> DurableOutcome:
    """Run ``engine.spec`` into ``run_dir`` (see the module docstring).

    Loses no finished episode on a normal exit, an error or a signal, and at most
    ``flush_policy``'s window on a kill. Raises :class:`~fasteval.types.errors.UserInputError` (the
    folder holds another run, the resume does not match, the dry run failed) with the folder
    left as it was. The result is the engine's, built once: it folds in the earlier segments.
    """
    folder_existed = run_dir.path.exists()
    try:
        run_dir.path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserInputError(f"cannot create the output folder {run_dir.path}: {exc.strerror or exc}. "
                             f"Choose another --output-dir.") from None
    lock = FolderLock(run_dir.path).acquire()  # held to the last write; a second process exits 2 naming us
    try:
        return _run_locked(engine, run_dir, resume, on_finished, announce, flush_policy, folder_existed)
    except UserInputError:
        if not folder_existed or not run_dir.has_manifest():
            lock.remove()  # nothing of this run is there: leave the folder as it was
            if not folder_existed:
                try:
                    run_dir.path.rmdir()
                except OSError:
                    pass
        raise
    finally:
        lock.release()


def _run_locked(engine: Engine, run_dir: RunDirectory, resume: bool, on_finished: Callable[[Any, Any], None] | None,
                announce: Callable[[str], None], flush_policy: FlushPolicy, folder_existed: bool) -> DurableOutcome:
    spec = engine.spec
    fields = manifest_fields(spec, engine)
    original_manifest, earlier, segments = _earlier_segments(run_dir, fields, spec.n_episodes, resume)
    this_segment = collect_provenance()  # the command, versions, git commit, machine and date (the report shows them)
    fields["provenance"] = (original_manifest or {}).get("provenance") or this_segment  # the run's first segment
    done_ix = set(earlier.records.column("episode_ix").tolist())
    missing = [i for i in range(spec.n_episodes) if i not in done_ix] if done_ix else None  # None: all, no O(n) list
    log = _SegmentLog(engine, run_dir, fields, segments, flush_policy, on_finished, announce)
    engine.watchdog.on_expire = log.expire
    error: BaseException | None = None
    with _StopOnSignal(engine, announce) as stopper:
        try:
            result = engine.run(episodes=missing, on_finished=log.finished, on_error=log.error, earlier=earlier)
        except EvaluationAborted as exc:
            result, error = exc.partial, exc.__cause__ or exc
        except UserInputError:  # the dry run failed: nothing was evaluated
            log.undo(original_manifest, folder_existed)
            raise
        finally:
            error = _kept_first(error, log.close)
    error = _kept_first(error, lambda: (log.start(), log.close()))
    run_dir.close()
    status = STATUS_FAILED if isinstance(error, FastevalError) else result.meta["status"]  # a write failed
    segments.append({"episodes": len(result.per_episode) - len(earlier.records),
                     "eval_s": result.eval_s - earlier.eval_s, "status": status,
                     "command": this_segment["command"], "started_at": this_segment["date"]})
    wrote = _kept_first(None, lambda: run_dir.write_eval_info(result.eval_info_document()))  # streamed
    error, status = (error or wrote, STATUS_FAILED) if wrote is not None else (error, status)
    _kept_first(None, lambda: log.write_manifest(status, error))  # disk full: it may not be writable either
    return DurableOutcome(result, status, stopper.received, error, resumed_episodes=len(earlier.records))


def _kept_first(error: BaseException | None, write: Callable[[], Any]) -> BaseException | None:
    """Run ``write``; a write error (disk full...) becomes the run's error unless it already has one."""
    try:
        write()
    except FastevalError as exc:
        return error or exc
    return error
