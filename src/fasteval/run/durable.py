"""Run an engine into a :class:`~fasteval.run.rundir.RunDirectory`: durable, interruptible, resumable.

Used by the CLI. The sequence:

1. nothing is written, not even the folder, until the run has passed its dry run: the folder, its lock
   and ``manifest.json`` (status ``running``) are made just before the first record (a finished episode
   or an error), so a run that does not start (a failed dry run, a crash or a kill before its first
   episode) leaves no folder behind, and one that fails its dry run leaves an existing folder as it was.
   A resumed run takes the folder's lock first, checks that its *what* and policy digest match the
   manifest (any *how* may change; a larger ``n_episodes`` extends the run), and runs only the
   episodes that are not in ``episodes.jsonl`` yet;
2. finished episodes are appended to ``episodes.jsonl`` by a group commit
   (:class:`GroupCommitLog`): the records of the episodes finished in a step are buffered
   together, and each group is encoded at once and written with one ``write``; that happens when
   the oldest unwritten record
   is :attr:`FlushPolicy.max_delay_s` (50 ms) old or :attr:`FlushPolicy.max_records` (256) are
   waiting, whichever comes first, and at the end of the run (normal exit, signal, abort).
   A kill (SIGKILL, power loss of the process) loses at most that window; ``--resume`` reruns
   exactly the episodes that are not in the log;
3. the first SIGINT/SIGTERM stops starting new episodes (in-flight ones finish and are kept);
   a second one stops at once. The episodes in flight have ``stop_grace_s`` seconds after the first to
   finish; then the run stops as a second signal would; a call stuck in C that even that cannot
   interrupt ends the process after the records are flushed and the manifest says ``interrupted``;
4. at the end, the one record of the run is built (:func:`fasteval.run.record.build_record`, with the
   final flush's outcome: a write that failed makes the run ``failed``), ``eval_info.json`` is written
   atomically from it (earlier segments included), then the manifest with the same status. A file
   that cannot be written is not there (and a previous segment's ``eval_info.json`` is removed when a
   resumed segment starts), so the folder never holds an ``eval_info.json`` that disagrees with its
   manifest.

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

import dataclasses
import os
import signal
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from fasteval.core.capabilities import GLOBAL_RNG, POLICY_RNG
from fasteval.core.outcome import Segment, SegmentAborted
from fasteval.run.engine import Engine
from fasteval.run.folder_lock import FolderLock, LockWriteError, disk_full_text
from fasteval.run.record_file import DiskFullError
from fasteval.run.provenance import collect_provenance
from fasteval.run.record import EpisodeRows, Label, default_label, manifest_document
from fasteval.run.record_many import build_run_record
from fasteval.run.shards import Shard, check_shardable, shard_of_folder
from fasteval.types.eval_result import RESUMED_GLOBAL_RNG
from fasteval.types.errors import FastevalError, UserInputError
from fasteval.types.results import (STATUS_COMPLETE, STATUS_FAILED, STATUS_INTERRUPTED, STATUS_RUNNING,  # noqa: F401
                                    EarlierSegments, EpisodeTable, EvalResult)
from fasteval.run.rundir import (EVAL_INFO, MANIFEST, RunDirectory, RunIdentity, check_resumable, format_records,
                                  digested_lines, episode_lines, policy_digest, resume_command, what_digest)
from fasteval.types.spec import EvalSpec


@dataclass(frozen=True)
class DurableOutcome:
    """What happened: the run's record, the signal that stopped it (if any), what reached the folder."""

    result: EvalResult
    """The one record of the run (earlier segments included); its ``meta["status"]`` is the end state."""
    signal_number: int | None = None
    error: BaseException | None = None
    resumed_episodes: int = 0
    notes: list[str] = field(default_factory=list)
    logged: int = 0
    """Episodes recorded in ``episodes.jsonl`` at the end (earlier segments' included): what a resume keeps."""
    wrote: tuple[str, ...] = ()
    """The end files that were written (``eval_info.json``, ``manifest.json``); a write that failed is not here."""

    @property
    def status(self) -> str:
        """The run's end state (the record's, which the manifest and ``eval_info.json`` repeat)."""
        return self.result.meta["status"]


def run_identity(spec: EvalSpec, engine: Engine) -> dict[str, Any]:
    """What the manifest holds besides the spec and must match on resume: the engine's
    :meth:`~fasteval.run.engine.Engine.identity_facts` (the policy's weight digest, the resolved step cap, the
    env's protocol card where it has one)."""
    return dict(engine.identity_facts())


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
    checks the policy each time; a background thread (``background=True``) wakes when the oldest
    buffered record is ``max_delay_s`` old (and every ``max_delay_s / 2`` while nothing is buffered),
    so that a record never waits much longer than ``max_delay_s`` when no further episode finishes. :meth:`close` (or :meth:`flush`) writes whatever is left. An error
    raised by ``write`` in the thread is re-raised by the next :meth:`add`, :meth:`flush` or
    :meth:`close`. ``clock`` is injectable for tests (seconds, monotonic).

    ``render(items) -> text`` (optional) turns the buffered items (one per record) into their JSON
    lines when a group is written: the engine's run log buffers ledger row numbers and encodes their
    records a group at a time, column by column, instead of one small batch per step (rows are final
    once finished).
    """

    def __init__(self, write: Callable[[str], None], policy: FlushPolicy = FlushPolicy(),
                 clock: Callable[[], float] = time.monotonic, background: bool = True,
                 render: Callable[[list[Any]], str] | None = None):
        self.write, self.policy, self.clock = write, policy, clock
        self.render = render
        self._records: list[Any] = []
        self._oldest = 0.0
        self._lock = threading.Lock()
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.groups_written = 0
        self.records_written = 0
        """Records that reached the file (a group whose write failed is not counted: it is not there)."""
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
        self.write(format_records(records) if self.render is None else self.render(records))
        self.groups_written += 1
        self.records_written += len(records)

    def _run(self) -> None:
        wait = self.policy.max_delay_s / 2
        while not self._stop.wait(wait):
            try:
                wait = self._poll_until_due()
            except BaseException as exc:  # disk full, ...: the main thread re-raises it
                self._error = exc
                return

    def _poll_until_due(self) -> float:
        """:meth:`poll`, then the seconds until the buffered group is due (``max_delay_s / 2`` when none
        is buffered): the thread wakes at the group's deadline, not on a fixed beat (a group that
        :meth:`add` writes first costs the thread no extra wake-up)."""
        with self._lock:
            now = self.clock()
            if self.policy.due(len(self._records), now - self._oldest):
                self._write_locked()
            if self._records:
                return max(0.0, self._oldest + self.policy.max_delay_s - now)
            return self.policy.max_delay_s / 2

    def _reraise(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error


HARD_STOP_S = 5.0
"""Seconds the grace's second signal may take to stop the run before the process is ended instead (a call
stuck in C never returns to Python, so it never sees the signal)."""


class _StopOnSignal:
    """First SIGINT/SIGTERM: stop starting episodes. Second: raise KeyboardInterrupt (stop now). After the
    first, a thread gives the episodes in flight ``grace_s`` seconds to finish; then it sends the second signal
    itself (a LIBERO episode on a CPU takes many minutes, while its steps keep landing: a rule on quiet time let
    the first signal wait for all of them, issue 42); if the run has not ended :data:`HARD_STOP_S` later (a call
    stuck in C), ``hard_stop(signum)`` ends the process (the records flushed, the manifest ``interrupted``)."""

    def __init__(self, engine: Engine, announce: Callable[[str], None], grace_s: float,
                 hard_stop: Callable[[int], None]):
        self.engine, self.announce, self.grace_s, self.hard_stop = engine, announce, float(grace_s), hard_stop
        self.received: int | None = None
        self._previous: dict[int, Any] = {}
        self._ended = threading.Event()
        self._main = threading.main_thread().ident

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is not None:
            raise KeyboardInterrupt(f"second signal ({signal.Signals(signum).name})")
        self.received = signum
        self.engine.stop_starting()
        self.announce(f"{signal.Signals(signum).name} received: finishing the episodes in flight, starting no new ones "
                      f"(send it again to stop at once; the episodes in flight have {self.grace_s:g} s to finish, "
                      f"--stop-grace).")
        threading.Thread(target=self._watch, args=(signum,), name="fasteval-stop-grace", daemon=True).start()

    def _watch(self, signum: int) -> None:
        if self._ended.wait(self.grace_s):
            return
        self.announce(f"{self.grace_s:g} s after {signal.Signals(signum).name} (--stop-grace) episodes are still in "
                      f"flight (long episodes, or a slow or hung policy or env call): stopping as a second signal "
                      f"would. Every finished episode is kept; --resume runs the rest.")
        signal.pthread_kill(self._main, signum)
        if not self._ended.wait(HARD_STOP_S):
            self.hard_stop(signum)

    def __enter__(self) -> "_StopOnSignal":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._ended.set()
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


class FolderUnavailable(FastevalError, RuntimeError):
    """The run folder could not be set up at the first record (another process holds it, it is unusable):
    raised through the engine, which keeps what finished; the durable run then writes nothing and reports
    the cause (:attr:`_SegmentLog.unavailable`, exit 2)."""


class _SegmentLog:
    """This segment's writes to the run folder. Nothing is written before the first record (a finished
    episode or an error: the dry run has passed); then the folder (with its lock), the manifest (status
    ``running``), then the logs."""

    def __init__(self, engine: Engine, run_dir: RunDirectory, identity: dict[str, Any], segments: list[dict[str, Any]],
                 flush_policy: FlushPolicy, on_finished: Callable[[Any, Any], None] | None,
                 announce: Callable[[str], None], lock: FolderLock, resume: bool, label: Label):
        self.engine, self.run_dir, self.identity, self.segments = engine, run_dir, identity, segments
        self.flush_policy, self.on_finished, self.announce = flush_policy, on_finished, announce
        self.lock, self.resume, self.label = lock, resume, label
        self.run_id = identity["run_id"]
        self.log: GroupCommitLog | None = None
        self.rows: EpisodeRows | None = None
        self.created_folder = False
        self.owns_folder = False
        """A new run's folder, once locked and found free: what :meth:`undo` may clean up."""
        self.unavailable: UserInputError | None = None
        """Why the folder could not be set up at the first record (held by another process...): nothing is written."""

    @property
    def started(self) -> bool:
        return self.log is not None

    @property
    def written(self) -> int:
        """Records of this segment in ``episodes.jsonl``."""
        return self.log.records_written if self.log is not None else 0

    def start(self) -> GroupCommitLog:
        if self.log is None:
            if self.unavailable is not None:
                raise FolderUnavailable(str(self.unavailable))
            try:
                self._open()
            except UserInputError as exc:  # the folder is another process's, or unusable: this run writes nothing
                self.unavailable = exc
                raise FolderUnavailable(str(exc)) from None
        return self.log

    def _open(self) -> None:
        """The folder (a new run's, with its lock), the record files, the manifest (status ``running``)."""
        if not self.resume:  # a new run: its folder and lock now (a run that never got here left nothing)
            self.created_folder = not self.run_dir.path.exists()
            try:
                self.run_dir.path.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise UserInputError(f"cannot create the output folder {self.run_dir.path}: "
                                     f"{exc.strerror or exc}. Choose another --output-dir.") from None
            try:
                self.lock.acquire()  # a second process on the folder exits 2 naming us
            except LockWriteError:  # a full disk: the lock file (ours) and the folder this run made go
                self.run_dir.remove_new_run(remove_folder=self.created_folder)
                raise
            check_new_folder(self.run_dir)  # again, under the lock
            self.owns_folder = True
        for name, n in self.run_dir.cut_torn_tails().items():
            self.announce(f"{name} ended in a torn line (an interrupted write): cut {n} bytes back to its last "
                          f"complete record before appending.")
        try:
            self.run_dir.open_logs()
            self.run_dir.remove_eval_info()  # an earlier segment's end: this segment is running now
            self.write_manifest(STATUS_RUNNING)
        except DiskFullError as exc:
            if self.resume:
                raise
            # a new run on a full disk: nothing of it is kept (its folder, its lock file), and it says so (exit 2)
            self.run_dir.remove_new_run(remove_folder=self.created_folder)
            self.lock.release()
            self.owns_folder = False
            raise UserInputError(disk_full_text(self.run_dir.path, exc, "its manifest")) from None
        # ledger rows are buffered; the run layer's one record builder turns each group into records
        self.log = GroupCommitLog(self.run_dir.append_episode_text, self.flush_policy, render=self._render)

    def _render(self, rows: list[int]) -> str:
        return digested_lines(episode_lines(self.rows, rows, self.run_id), self.identity["what_digest"])

    def finished(self, ledger: Any, rows: Any) -> None:
        """The engine's ``on_finished``: buffer the rows (their records are built when written)."""
        if self.rows is None or self.rows.ledger is not ledger:
            self.rows = EpisodeRows(ledger, self.label)
        self.start().add(rows.tolist())
        if self.on_finished is not None:
            self.on_finished(ledger, rows)

    def error(self, record: dict[str, Any]) -> None:
        """The engine's ``on_error``: the fault record, stamped with the run id, to errors.jsonl."""
        self.start()
        self.run_dir.append_errors([{**record, "run_id": self.run_id}])

    def expire(self, cause: str) -> None:
        """The watchdog's expiry (from its thread; the engine's thread is stuck in the hung call): flush the
        records, mark the manifest ``failed`` with the cause, say how to resume, end the process (exit 1)."""
        from fasteval.core.watchdog import EXIT_CODE

        self.end_now(STATUS_FAILED, TimeoutError(cause),
                     f"Error: {cause}. A hung call cannot be interrupted in its thread, so the run ends here", EXIT_CODE)

    def hard_stop(self, signum: int) -> None:
        """The stop grace's last resort (from its thread; the engine's thread is stuck in a call that did not
        see the signal): as :meth:`expire`, with the manifest ``interrupted`` and exit code 128 + ``signum``."""
        name = signal.Signals(signum).name
        self.end_now(STATUS_INTERRUPTED, KeyboardInterrupt(f"{name}: a call did not return within the stop grace"),
                     f"{name}: a call did not return after the stop grace and the second signal, so the run ends "
                     f"here", 128 + signum)

    def end_now(self, status: str, error: BaseException, message: str, exit_code: int) -> None:
        """Flush the records, write the manifest with ``status``, print ``message`` and the resume command,
        end the process with ``exit_code`` (the engine's thread is stuck: nothing else can end the run)."""
        try:
            if self.log is not None:
                self.close()
                self.run_dir.close()
                self.write_manifest(status, error)
            where = (f"every finished episode is in {self.run_dir.path}. Resume with:\n"
                     f"  {resume_command(self.run_dir.path, self.engine.spec)}") if self.log is not None else \
                "no episode had finished, so nothing was written."
            self.announce(f"{message}; {where}")
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(exit_code)

    def write_manifest(self, status: str, error: BaseException | None = None) -> None:
        self.run_dir.write_manifest(manifest_document(self.engine.spec, self.identity, status, self.segments, error))

    def close(self) -> None:
        """Every buffered record reaches the file (safe to call twice)."""
        if self.log is not None:
            self.log.close()

    def undo(self, original_manifest: dict[str, Any] | None) -> None:
        """The run did not start (its dry run failed, its folder could not be set up): leave the folder as it
        was before this segment, and a new run's folder not there at all."""
        if self.log is not None:
            self.log.close()
        self.run_dir.close()
        if self.resume:
            if self.log is not None and original_manifest is not None:
                self.run_dir.write_manifest(original_manifest)
        elif self.owns_folder:
            self.run_dir.remove_new_run(remove_folder=self.created_folder)


def check_new_folder(run_dir: RunDirectory) -> None:
    """A new run's folder must hold no run (no manifest, no records): UserInputError with the fix."""
    if run_dir.has_manifest():
        raise UserInputError(f"{run_dir.path} already holds a fasteval run. Pass --resume {run_dir.path} to finish it, "
                             f"or choose another --output-dir.")
    if run_dir.has_records():
        raise UserInputError(f"{run_dir.path} holds fasteval records (episodes.jsonl or errors.jsonl) but no "
                             f"manifest.json: they belong to some other run, and a new run would mix its records "
                             f"with theirs. Choose another --output-dir, or remove those files.")


def _earlier_segments(run_dir: RunDirectory, spec: EvalSpec, identity: dict[str, Any], resume: bool,
                      notes: list[str] | None = None) -> tuple[dict[str, Any] | None, EarlierSegments, list[dict[str, Any]]]:
    """``(original manifest, what earlier segments recorded, their segment list)``; for a new run,
    checks that the folder holds no run yet (no manifest, no records), and gives it a run id and a what digest
    (:func:`~fasteval.run.rundir.what_digest`); a resume takes the manifest's, refuses an edited manifest (its what
    no longer gives its what digest) and records of another run, and drops records that do not match their digest,
    garbage lines and repeats, saying so in ``notes``. Raises :class:`UserInputError` with the fix."""
    digest = what_digest(spec.what.to_dict(), identity)
    if not resume:
        if run_dir.path.exists():
            check_new_folder(run_dir)
        identity["run_id"] = uuid.uuid4().hex
        identity["what_digest"] = digest
        return None, EarlierSegments(EpisodeTable.empty()), []
    manifest = run_dir.read_manifest()
    check_resumable(manifest, spec, identity, run_dir.path)
    identity["run_id"] = manifest.get("run_id")  # None: a run folder of an older fasteval, whose records carry none
    stored = manifest.get("what_digest")  # None: an older fasteval's run (its records carry no digest)
    if stored is not None and stored != digest:
        raise UserInputError(
            f"refusing to resume {run_dir.path}: manifest.json's what (env_kwargs, seed, ...) no longer gives the what "
            f"digest its records were written under ({stored}; now {digest}): it was edited after the run started, and "
            f"resuming would mix two configurations in one run. Restore manifest.json, or start a new run with "
            f"another --output-dir.")
    identity["what_digest"] = stored or digest
    seed = manifest["what"]["seed"] if "what" in manifest else manifest["seed"]
    names = spec.names if spec.n_policies > 1 else None
    done = run_dir.records(RunIdentity(identity["run_id"], seed, spec.n_episodes, names), what=identity["what_digest"],
                           notes=notes)
    segments = list(manifest.get("segments", []))
    earlier = EarlierSegments(EpisodeTable.from_records(done), sum(s["eval_s"] for s in segments), len(segments),
                              n_cancelled=sum(int(s.get("n_cancelled", 0)) for s in segments),
                              resumed_global_rng=_resumed_global_rng(segments, len(done)))
    return manifest, earlier, segments


def _resumed_global_rng(segments: list[dict[str, Any]], n_recorded: int) -> bool:
    """Whether episodes of this run were drawn after a resume from torch's global RNG: a segment's record
    said so, or a global-RNG segment that recorded episodes was followed by one killed after recording
    more (a killed segment leaves its records, ``n_recorded`` in all, but no entry)."""
    if any(segment.get(RESUMED_GLOBAL_RNG) for segment in segments):
        return True
    entered = sum(int(segment.get("episodes", 0)) for segment in segments)
    return n_recorded > entered > 0 and any(segment.get(POLICY_RNG) == GLOBAL_RNG for segment in segments)


def missing_episodes(spec: EvalSpec, done: EpisodeTable, shard: Shard | None = None) -> list[Any] | None:
    """What a (resumed) run still has to run: ``None`` (everything), the missing episode indices, or for a
    many-policy run the missing ``(policy, episode)`` pairs (the engine's race drops those it no longer needs).
    ``shard``: a run over shard K of N (:mod:`fasteval.run.shards`): only its episode indices."""
    wanted = shard.episodes(spec.n_episodes) if shard is not None else range(spec.n_episodes)
    if not len(done):
        return list(wanted) if shard is not None else None
    ixs = done.column("episode_ix").tolist()
    if spec.n_policies == 1:
        done_ix = set(ixs)
        return [i for i in wanted if i not in done_ix]
    index = {name: k for k, name in enumerate(spec.names)}
    have = {(index[name], i) for name, i in zip(done.column("policy").tolist(), ixs) if name in index}
    return [(p, i) for i in wanted for p in range(spec.n_policies) if (p, i) not in have]


def run_durable(
    engine: Engine,
    run_dir: RunDirectory,
    resume: bool = False,
    on_finished: Callable[[Any, Any], None] | None = None,
    announce: Callable[[str], None] = lambda message: print(message, file=sys.stderr),
    flush_policy: FlushPolicy = FlushPolicy(),
    task: Label | None = None,
    shard: Shard | None = None,
) -> DurableOutcome:
    """Run ``engine.spec`` into ``run_dir`` (see the module docstring); ``task``: the label of its records
    (a suite's task; default: the env's names); ``shard``: run only shard K of N's episodes
    (:mod:`fasteval.run.shards`; a resumed run's is its manifest's).

    Loses no finished episode on a normal exit, an error or a signal, and at most
    ``flush_policy``'s window on a kill. Raises :class:`~fasteval.types.errors.UserInputError` (the
    folder holds another run, the resume does not match, the dry run failed) with the folder
    left as it was (a new run's folder not made at all). The record is built once, from the engine's
    segment, the earlier segments and the final flush (:func:`fasteval.run.record_many.build_run_record`).
    """
    lock = FolderLock(run_dir.path)
    try:
        if resume:
            if not run_dir.path.is_dir():
                run_dir.read_manifest()  # raises: "no manifest.json there"
            lock.acquire()  # before anything is read: a second process on the folder exits 2 naming us
        return _run(engine, run_dir, resume, on_finished, announce, flush_policy, lock, task, shard)
    finally:
        lock.release()


def _run(engine: Engine, run_dir: RunDirectory, resume: bool, on_finished: Callable[[Any, Any], None] | None,
         announce: Callable[[str], None], flush_policy: FlushPolicy, lock: FolderLock,
         task: Label | None, shard: Shard | None = None) -> DurableOutcome:
    spec = engine.spec
    identity = run_identity(spec, engine)
    notes: list[str] = []
    original_manifest, earlier, segments = _earlier_segments(run_dir, spec, identity, resume, notes)
    for note in notes:
        announce(note)
    if resume:
        shard = shard_of_folder(original_manifest, shard, run_dir.path)
    if shard is not None:
        check_shardable(shard, spec)
        identity["shard"] = shard.to_dict()  # the manifest says which episodes this folder holds
    this_segment = collect_provenance()  # the command, versions, git commit, machine and date (the report shows them)
    identity["provenance"] = (original_manifest or {}).get("provenance") or this_segment  # the run's first segment
    missing = missing_episodes(spec, earlier.records, shard)
    if run_dir.resume_hint is None:  # a write error's hint (--trust-remote-code if needed); a suite sets its own
        run_dir.resume_hint = resume_command(run_dir.path, spec)
    log = _SegmentLog(engine, run_dir, identity, segments, flush_policy, on_finished, announce, lock, resume,
                      task if task is not None else default_label(spec))
    engine.watchdog.on_expire = log.expire
    with _StopOnSignal(engine, announce, spec.stop_grace_s, log.hard_stop) as stopper:
        try:
            segment = engine.run_segment(episodes=missing, on_finished=log.finished, on_error=log.error, earlier=earlier)
        except SegmentAborted as exc:
            segment = exc.segment
            if log.unavailable is not None:  # the folder is not this run's to write: nothing was recorded
                log.undo(original_manifest)
                raise log.unavailable from None
        except UserInputError:  # the dry run failed: nothing of this run was recorded
            _kept_first(None, log.close)
            log.undo(original_manifest)
            raise
        except BaseException:
            _kept_first(None, log.close)
            raise
        write_error = _kept_first(None, lambda: (log.start(), log.close()))  # the final flush
    run_dir.close()
    if log.unavailable is not None:  # the folder could not be set up: this run wrote nothing there
        log.undo(original_manifest)
        raise log.unavailable
    if shard is not None:  # the record says which episodes of the evaluation it holds
        segment = dataclasses.replace(segment, facts={**segment.facts, "shard": shard.to_dict()})
    return _finish(spec, segment, earlier, log, write_error, stopper.received, this_segment, task)


def _finish(spec: EvalSpec, segment: Segment, earlier: EarlierSegments, log: _SegmentLog,
            write_error: BaseException | None, signal_number: int | None, this_segment: dict[str, Any],
            task: Label | None) -> DurableOutcome:
    """Build the record, write ``eval_info.json`` and the manifest from it, say what reached the folder."""
    run_dir = log.run_dir

    def build(write_failure: BaseException | None) -> EvalResult:
        return build_run_record(spec, segment, earlier=earlier, task=task, write_error=write_failure, run_id=log.run_id)

    record = build(write_error)
    wrote: list[str] = []
    info_error = _kept_first(None, lambda: run_dir.write_eval_info(record.eval_info_document()))  # streamed
    if info_error is None:
        wrote.append(EVAL_INFO)
    else:  # the run's results are not all kept: it ended failed (the same builder, one decision)
        record = build(write_error or info_error)
    error = segment.error or write_error or info_error
    log.segments.append({"episodes": len(record.per_episode) - len(earlier.records),
                         "eval_s": record.eval_s - earlier.eval_s, "status": record.meta["status"],
                         "n_cancelled": int(segment.ledger.n_cancelled),
                         "command": this_segment["command"], "started_at": this_segment["date"],
                         **({POLICY_RNG: GLOBAL_RNG} if record.meta.get(POLICY_RNG) == GLOBAL_RNG else {}),
                         **({RESUMED_GLOBAL_RNG: True} if record.meta.get(RESUMED_GLOBAL_RNG) else {})})
    manifest_error = _kept_first(None, lambda: log.write_manifest(record.meta["status"], error))
    if manifest_error is None:
        wrote.append(MANIFEST)
    elif info_error is None:  # eval_info.json says an end the manifest does not: take it back
        _kept_first(None, run_dir.remove_eval_info)
        wrote.remove(EVAL_INFO)
        record = build(manifest_error)
    return DurableOutcome(record, signal_number, error or manifest_error, resumed_episodes=len(earlier.records),
                          logged=len(earlier.records) + log.written, wrote=tuple(wrote))


def _kept_first(error: BaseException | None, write: Callable[[], Any]) -> BaseException | None:
    """Run ``write``; a write error (disk full...) becomes the run's error unless it already has one."""
    try:
        write()
    except FastevalError as exc:
        return error or exc
    return error
