"""The results store: one SQLite file (WAL mode) per sweep folder, written by the sweep's driver only.

Schema (``SCHEMA`` below is the source of truth):

* ``episodes``: one row per finished episode, ``UNIQUE(policy_digest, env_id, env_kwargs, task,
  seed)``, so an episode can never be stored twice. Rewards are REAL; SQLite keeps NaN as NULL,
  and :meth:`Store.episodes` turns NULL rewards back into NaN. ``has_success_signal`` (1/0) says
  whether the run's envs had reported ``info["is_success"]``; NULL (stores made before it, added
  to them by ``ALTER TABLE`` on open) means unknown and reads as ``None``.
* ``jobs``: one row per (policy, env, seed block) with ``status`` (``pending``, ``running``,
  ``done``, ``failed``), ``attempts`` (starts seen), ``error`` (last failure's text), engine
  seconds, labels and references.
* ``runs``: one row per sweep invocation (start, last commit, finish), for wall time.
* ``meta``: schema version and the result-affecting settings (``max_steps``) the store was made
  with; resuming with other settings is refused.

Each batch of finished episodes is committed in one transaction, so a killed sweep loses at
most the episodes that had not been committed yet.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sqlite3
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

from fasteval.types.errors import UserInputError
from fasteval.doors.sweep.plan import Job

logger = logging.getLogger(__name__)

STORE_NAME = "results.sqlite"
LOCK_NAME = ".sweep.lock"
SCHEMA_VERSION = 1
STATUSES = ("pending", "running", "done", "failed")
NUMBER_FIELDS = ("sum_reward", "max_reward", "length", "success", "nan_rewards")

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS jobs (
    job_id        TEXT PRIMARY KEY,
    policy_name   TEXT NOT NULL,
    policy_ref    TEXT NOT NULL,
    policy_digest TEXT NOT NULL,
    env_name      TEXT NOT NULL,
    env_id        TEXT NOT NULL,
    env_kwargs    TEXT NOT NULL,
    task          TEXT NOT NULL,
    seed          INTEGER NOT NULL,
    n_episodes    INTEGER NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('pending', 'running', 'done', 'failed')),
    attempts      INTEGER NOT NULL DEFAULT 0,
    error         TEXT,
    eval_s        REAL NOT NULL DEFAULT 0,
    updated_at    REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS episodes (
    policy_digest TEXT NOT NULL,
    env_id        TEXT NOT NULL,
    env_kwargs    TEXT NOT NULL,
    task          TEXT NOT NULL,
    seed          INTEGER NOT NULL,
    job_id        TEXT NOT NULL REFERENCES jobs(job_id),
    episode_ix    INTEGER NOT NULL,
    sum_reward    REAL,
    max_reward    REAL,
    length        INTEGER NOT NULL,
    success       INTEGER NOT NULL CHECK (success IN (0, 1)),
    nan_rewards   INTEGER NOT NULL,
    task_group    TEXT NOT NULL,
    task_id       INTEGER NOT NULL,
    stored_at     REAL NOT NULL,
    has_success_signal INTEGER,
    UNIQUE (policy_digest, env_id, env_kwargs, task, seed)
);
CREATE TABLE IF NOT EXISTS runs (
    run_id         INTEGER PRIMARY KEY AUTOINCREMENT,
    started_at     REAL NOT NULL,
    last_commit_at REAL NOT NULL,
    finished_at    REAL,
    backend        TEXT NOT NULL,
    workers        INTEGER NOT NULL,
    spec           TEXT NOT NULL
);
"""


def store_path(folder_or_file: str | Path) -> Path:
    """``DIR`` -> ``DIR/results.sqlite``; a path to the file itself is kept."""
    p = Path(folder_or_file)
    return p if p.suffix == ".sqlite" else p / STORE_NAME


def _nan_to_none(x: float) -> float | None:
    return None if isinstance(x, float) and math.isnan(x) else x


def _none_to_nan(x: Any) -> float:
    return math.nan if x is None else float(x)


class Store:
    """Access to one results store. Only the sweep's driver writes; workers send it records."""

    def __init__(self, path: str | Path, create: bool = True):
        self.path = store_path(path)
        if not create and not self.path.is_file():
            raise UserInputError(
                f"no results store at {str(self.path)!r}; expected the folder a `fasteval sweep` wrote (it holds {STORE_NAME})."
            )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.execute("PRAGMA foreign_keys=ON")
        if create:
            with self.transaction():
                for statement in SCHEMA.split(";"):
                    if statement.strip():
                        self.conn.execute(statement)
                self.conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
                columns = {row[1] for row in self.conn.execute("PRAGMA table_info(episodes)")}
                if "has_success_signal" not in columns:  # a store made before the column existed: NULL = unknown
                    self.conn.execute("ALTER TABLE episodes ADD COLUMN has_success_signal INTEGER")
        version = self.meta("schema_version")
        if version != str(SCHEMA_VERSION):
            raise UserInputError(f"results store {str(self.path)!r}: expected schema version {SCHEMA_VERSION}, got {version!r}.")

    # -- plumbing ------------------------------------------------------------------------------
    def transaction(self) -> "_Transaction":
        return _Transaction(self.conn)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def check_settings(self, settings: dict[str, Any]) -> None:
        """Remember result-affecting settings on first use; refuse a resume that changes them."""
        text = json.dumps(settings, sort_keys=True)
        with self.transaction():
            stored = self.meta("settings")
            if stored is None:
                self.conn.execute("INSERT INTO meta(key, value) VALUES ('settings', ?)", (text,))
            elif stored != text:
                raise UserInputError(
                    f"results store {str(self.path)!r} holds episodes made with {stored}, but this sweep uses {text}. "
                    "Those settings change the numbers, so the stored episodes cannot be reused: write to another "
                    "output folder (--out), or restore the old settings."
                )

    def set_plan(self, job_ids: Sequence[str]) -> None:
        """Remember the jobs of the latest sweep spec run into this store (its report shows those cells;
        the jobs and episodes of cells no longer in the spec stay stored)."""
        with self.transaction():
            self.conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('plan', ?)", (json.dumps(list(job_ids)),))

    def planned_job_ids(self) -> set[str] | None:
        """The job ids of the latest plan (:meth:`set_plan`), or ``None`` for a store written before plans were kept."""
        text = self.meta("plan")
        return None if text is None else set(json.loads(text))

    # -- jobs ------------------------------------------------------------------------------------
    def sync_jobs(self, jobs: Sequence[Job], done_is_final: bool = False) -> dict[str, list[int]]:
        """Record ``jobs`` and return ``job_id -> missing episode indices`` (empty when complete).

        New jobs start ``pending``; a ``running`` job left by a killed sweep becomes ``pending``;
        a complete job becomes ``done``; a ``failed`` job keeps its status and error until it is
        started again. ``done_is_final`` (``--stop-when`` sweeps): a ``done`` job is complete even
        though its seeds past the stop are not stored.
        """
        missing: dict[str, list[int]] = {}
        now = time.time()
        with self.transaction():
            for job in jobs:
                self.conn.execute(
                    """INSERT INTO jobs(job_id, policy_name, policy_ref, policy_digest, env_name, env_id, env_kwargs, task,
                                        seed, n_episodes, status, updated_at)
                       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?)
                       ON CONFLICT(job_id) DO UPDATE SET policy_name = excluded.policy_name,
                           policy_ref = excluded.policy_ref, env_name = excluded.env_name,
                           n_episodes = excluded.n_episodes, updated_at = excluded.updated_at""",
                    (job.job_id, job.policy_name, job.policy_ref, job.policy_digest, job.env_name, job.env_id,
                     job.env_kwargs_json, job.task, job.seed, job.n_episodes, now),
                )
                done = self.done_seeds(job)
                todo = [i for i, s in enumerate(job.seeds) if s not in done]
                if done_is_final and todo and self._status(job.job_id) == "done":
                    todo = []
                missing[job.job_id] = todo
                if not todo:
                    self.conn.execute("UPDATE jobs SET status = 'done', error = NULL WHERE job_id = ?", (job.job_id,))
                else:
                    self.conn.execute(
                        "UPDATE jobs SET status = 'pending' WHERE job_id = ? AND status IN ('running', 'done')", (job.job_id,)
                    )
        return missing

    def _status(self, job_id: str) -> str | None:
        row = self.conn.execute("SELECT status FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
        return row[0] if row else None

    def done_seeds(self, job: Job) -> set[int]:
        rows = self.conn.execute(
            """SELECT seed FROM episodes WHERE policy_digest = ? AND env_id = ? AND env_kwargs = ? AND task = ?
               AND seed >= ? AND seed < ?""",
            (job.policy_digest, job.env_id, job.env_kwargs_json, job.task, job.seed, job.seed + job.n_episodes),
        ).fetchall()
        return {r[0] for r in rows}

    def job_started(self, job_id: str) -> None:
        with self.transaction():
            self.conn.execute(
                "UPDATE jobs SET status = 'running', attempts = attempts + 1, updated_at = ? WHERE job_id = ?",
                (time.time(), job_id),
            )

    def job_done(self, job_id: str, eval_s: float) -> None:
        with self.transaction():
            self.conn.execute(
                "UPDATE jobs SET status = 'done', error = NULL, eval_s = eval_s + ?, updated_at = ? WHERE job_id = ?",
                (float(eval_s), time.time(), job_id),
            )

    def job_failed(self, job_id: str, error: str, eval_s: float = 0.0) -> None:
        with self.transaction():
            self.conn.execute(
                "UPDATE jobs SET status = 'failed', error = ?, eval_s = eval_s + ?, updated_at = ? WHERE job_id = ?",
                (error, float(eval_s), time.time(), job_id),
            )

    def jobs(self) -> list[dict[str, Any]]:
        cur = self.conn.execute("SELECT * FROM jobs ORDER BY rowid")
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row)) for row in cur.fetchall()]

    # -- episodes --------------------------------------------------------------------------------
    def add_episodes(self, job: Job, records: Iterable[dict[str, Any]], run_id: int | None = None) -> int:
        """Store finished episodes of ``job`` in one transaction; return how many were new.

        An episode already stored is left as it is; if its numbers differ from the new ones (a
        non-deterministic policy or env, or changed code) a warning is logged.
        """
        records = list(records)
        if not records:
            return 0
        now = time.time()
        added = 0
        with self.transaction():
            for r in records:
                seed = int(r["seed"])
                if not job.seed <= seed < job.seed + job.n_episodes:
                    raise ValueError(f"episode with seed {seed} does not belong to job {job.label}.")
                cur = self.conn.execute(
                    """INSERT INTO episodes(policy_digest, env_id, env_kwargs, task, seed, job_id, episode_ix, sum_reward,
                                            max_reward, length, success, nan_rewards, task_group, task_id, stored_at,
                                            has_success_signal)
                       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                       ON CONFLICT DO NOTHING""",
                    (job.policy_digest, job.env_id, job.env_kwargs_json, str(r.get("task", job.task)), seed, job.job_id,
                     seed - job.seed, _nan_to_none(float(r["sum_reward"])), _nan_to_none(float(r["max_reward"])),
                     int(r["length"]), int(bool(r["success"])), int(r["nan_rewards"]), str(r.get("task_group", job.task)),
                     int(r.get("task_id", 0)), now, _flag(r.get("has_success_signal"))),
                )
                if cur.rowcount:
                    added += 1
                else:
                    self._check_duplicate(job, r)
            if run_id is not None:
                self.conn.execute("UPDATE runs SET last_commit_at = ? WHERE run_id = ?", (now, run_id))
        return added

    def _check_duplicate(self, job: Job, record: dict[str, Any]) -> None:
        stored = self.conn.execute(
            f"""SELECT {', '.join(NUMBER_FIELDS)} FROM episodes WHERE policy_digest = ? AND env_id = ? AND env_kwargs = ?
                AND task = ? AND seed = ?""",
            (job.policy_digest, job.env_id, job.env_kwargs_json, str(record.get("task", job.task)), int(record["seed"])),
        ).fetchone()
        old = _episode_numbers(dict(zip(NUMBER_FIELDS, stored)))
        new = {k: record[k] for k in NUMBER_FIELDS}
        if not all(_same(old[k], new[k]) for k in NUMBER_FIELDS):
            logger.warning("episode seed %s of %s was stored as %s but ran again as %s; keeping the stored one "
                           "(is the policy or env non-deterministic?)", record["seed"], job.label, old, new)

    def episodes(self) -> list[dict[str, Any]]:
        """Every stored episode with its job's labels, ordered by (policy, env, task, seed)."""
        cur = self.conn.execute(
            """SELECT e.*, j.policy_name, j.policy_ref, j.env_name FROM episodes e JOIN jobs j USING (job_id)
               ORDER BY e.policy_digest, e.env_id, e.env_kwargs, e.task, e.seed"""
        )
        names = [d[0] for d in cur.description]
        return [_episode_numbers(dict(zip(names, row))) for row in cur.fetchall()]

    def count_episodes(self) -> int:
        return int(self.conn.execute("SELECT COUNT(*) FROM episodes").fetchone()[0])

    # -- runs ------------------------------------------------------------------------------------
    def start_run(self, backend: str, workers: int, spec: dict[str, Any]) -> int:
        now = time.time()
        with self.transaction():
            cur = self.conn.execute(
                "INSERT INTO runs(started_at, last_commit_at, backend, workers, spec) VALUES (?, ?, ?, ?, ?)",
                (now, now, backend, int(workers), json.dumps(spec, sort_keys=True)),
            )
        return int(cur.lastrowid)

    def finish_run(self, run_id: int) -> None:
        now = time.time()
        with self.transaction():
            self.conn.execute("UPDATE runs SET finished_at = ?, last_commit_at = ? WHERE run_id = ?", (now, now, run_id))

    def runs(self) -> list[dict[str, Any]]:
        cur = self.conn.execute("SELECT * FROM runs ORDER BY run_id")
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row)) for row in cur.fetchall()]


def _flag(value: Any) -> int | None:
    return None if value is None else int(bool(value))


def _episode_numbers(row: dict[str, Any]) -> dict[str, Any]:
    row["sum_reward"] = _none_to_nan(row["sum_reward"])
    row["max_reward"] = _none_to_nan(row["max_reward"])
    row["success"] = bool(row["success"])
    signal = row.get("has_success_signal")
    row["has_success_signal"] = None if signal is None else bool(signal)  # None: stored before it was recorded
    return row


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on error); connections run in autocommit mode."""

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn

    def __enter__(self) -> sqlite3.Connection:
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        self.conn.execute("ROLLBACK" if exc_type is not None else "COMMIT")


class SweepLock:
    """An exclusive lock on a sweep folder (``flock``; released by the OS if the process dies)."""

    def __init__(self, folder: str | Path):
        self.path = Path(folder) / LOCK_NAME
        self.fd: int | None = None

    def __enter__(self) -> "SweepLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            import fcntl
        except ImportError:  # Windows: no lock, single use is the user's responsibility
            return self
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(self.fd, 64, 0).decode(errors="replace").strip() or "another process"
            os.close(self.fd)
            self.fd = None
            raise UserInputError(
                f"another sweep (pid {holder}) is writing to {str(self.path.parent)!r}. Wait for it to finish, "
                "or use another output folder (--out)."
            ) from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, str(os.getpid()).encode(), 0)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
