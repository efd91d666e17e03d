"""Evaluation results: the per-episode table plus aggregates, in the classic layout.

``eval_info.json`` keeps the keys LeRobot-style consumers read (``per_episode``,
``per_task``, ``per_group``, ``overall`` with ``avg_sum_reward``, ``avg_max_reward``,
``pc_success``, ``n_episodes``, ``eval_s``, ``eval_ep_s``) and adds ``env_steps``,
``steps_per_s``, ``episodes_per_s``, NaN counts, a Wilson 95% interval for success and
``has_success_signal`` (False when no env of the run ever reported ``info["is_success"]``:
``pc_success`` is then 0 by construction, not a measured rate).

NaN rewards are never dropped: an episode with a NaN reward has a NaN sum and max,
its ``nan_rewards`` count is > 0, and averages over it are NaN too (unlike ``nanmean``,
which would hide it). ``n_nan_reward_episodes`` says how many episodes are affected.

Memory: the per-episode table is columnar (:class:`EpisodeTable`: one NumPy array per field,
about 50 bytes per episode, instead of one ~410-byte dict per episode), and
:func:`write_json_atomic` streams it (and ``per_task``'s long lists) into ``eval_info.json``
chunk by chunk, so neither per-episode dicts nor the JSON text are ever held whole.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import numpy as np

from fasteval.types.stats import wilson_interval

NUMBER_FIELDS = ("episode_ix", "seed", "sum_reward", "max_reward", "length", "success", "nan_rewards")
TASK_FIELDS = ("task_group", "task_id", "task")
EPISODE_FIELDS = (*NUMBER_FIELDS, *TASK_FIELDS, "has_success_signal")
"""The fields of a per-episode record, in order. ``has_success_signal``: whether the run's envs
had reported ``info["is_success"]`` (at any step) when the episode was recorded; a record without
it (older run folders) counts as True, which keeps the old reading of ``success``."""

COLUMN_DTYPES: dict[str, Any] = {
    "episode_ix": np.int64, "seed": np.int64, "sum_reward": np.float64, "max_reward": np.float64,
    "length": np.int64, "success": np.bool_, "nan_rewards": np.int64, "has_success_signal": np.bool_,
}
"""The array dtype of every numeric per-episode field."""

_DEFAULTS = {"has_success_signal": True}
_CHUNK = 1024
"""Rows turned into Python objects at a time (iteration, JSON streaming)."""


class EpisodeTable(Sequence):
    """Per-episode results stored by column, in episode order: ``len(table) == n``.

    Storage: one array of length n per field of :data:`COLUMN_DTYPES`; the task fields as
    ``task_codes`` (int[n]) indexing ``tasks`` (a list of ``(task_group, task_id, task)``);
    any other field in ``extra`` (object arrays, ``None`` where a record had no value).

    It reads like the list of dicts it replaces: ``len``, iteration and ``table[i]`` give
    dicts with the fields of :data:`EPISODE_FIELDS` (then the extra ones) as plain Python
    values (``bool``, ``int``, ``float``, ``str``); ``table[a:b]`` and ``list + table`` give
    lists of dicts; ``table == list_of_dicts`` compares rows. Rows are built on demand and are
    copies: changing one does not change the table (use :meth:`set_task` to relabel).
    """

    def __init__(self, columns: Mapping[str, Any], task_codes: Any, tasks: Sequence[tuple[Any, Any, Any]],
                 extra: Mapping[str, Any] | None = None):
        n = None
        self.columns: dict[str, np.ndarray] = {}
        for name, dtype in COLUMN_DTYPES.items():
            if name not in columns:
                raise ValueError(f"EpisodeTable: column {name!r} is missing; expected every one of {list(COLUMN_DTYPES)}.")
            col = np.asarray(columns[name], dtype=dtype)
            if col.ndim != 1 or (n is not None and col.shape[0] != n):
                raise ValueError(f"EpisodeTable: column {name!r} has shape {col.shape}; expected ({n if n is not None else 'n'},).")
            n = col.shape[0]
            self.columns[name] = col
        self.n = int(n or 0)
        self.task_codes = np.broadcast_to(np.asarray(task_codes, dtype=np.int64), (self.n,))
        self.tasks = [tuple(t) for t in tasks]
        if self.n and (not self.tasks or int(self.task_codes.max()) >= len(self.tasks) or int(self.task_codes.min()) < 0):
            raise ValueError(f"EpisodeTable: task codes must index the {len(self.tasks)} tasks given.")
        self.extra = {k: np.asarray(v, dtype=object) for k, v in (extra or {}).items()}

    # -- building ----------------------------------------------------------------------------------
    @classmethod
    def empty(cls) -> "EpisodeTable":
        return cls({k: np.zeros(0, d) for k, d in COLUMN_DTYPES.items()}, np.zeros(0, np.int64), [])

    @classmethod
    def from_records(cls, records: Iterable[Mapping[str, Any]]) -> "EpisodeTable":
        """From per-episode dicts (``episodes.jsonl`` lines, a list made by hand). Fields missing
        from every record: ``has_success_signal`` counts as True; others raise ``ValueError``."""
        if isinstance(records, EpisodeTable):
            return records
        records = list(records)
        n = len(records)
        columns = {}
        for name, dtype in COLUMN_DTYPES.items():
            default = _DEFAULTS.get(name)
            try:
                values = [r[name] if default is None else r.get(name, default) for r in records]
            except KeyError:
                raise ValueError(f"per-episode records: a record has no {name!r}; expected the fields {list(EPISODE_FIELDS)}.") from None
            columns[name] = np.array(values, dtype=dtype) if n else np.zeros(0, dtype)
        codes: dict[tuple[Any, Any, Any], int] = {}
        task_codes = np.fromiter((codes.setdefault((r.get("task_group"), r.get("task_id"), r.get("task")), len(codes))
                                  for r in records), dtype=np.int64, count=n)
        tasks = [t for t, _ in sorted(codes.items(), key=lambda kv: kv[1])]
        names = [k for k in dict.fromkeys(k for r in records for k in r) if k not in EPISODE_FIELDS]
        extra = {}
        for name in names:
            col = np.empty(n, dtype=object)
            col[:] = [r.get(name) for r in records]
            extra[name] = col
        return cls(columns, task_codes, tasks, extra)

    @classmethod
    def concat(cls, tables: Sequence["EpisodeTable"]) -> "EpisodeTable":
        """Tables one after another (rows keep their order; tasks are merged by value)."""
        tables = [t if isinstance(t, EpisodeTable) else cls.from_records(t) for t in tables]
        tables = [t for t in tables if len(t)] or tables[:1]
        if not tables:
            return cls.empty()
        if len(tables) == 1:
            return tables[0]
        columns = {k: np.concatenate([t.columns[k] for t in tables]) for k in COLUMN_DTYPES}
        tasks: dict[tuple[Any, Any, Any], int] = {}
        codes = []
        for t in tables:
            remap = np.asarray([tasks.setdefault(task, len(tasks)) for task in t.tasks] or [0], dtype=np.int64)
            codes.append(remap[t.task_codes])
        names = list(dict.fromkeys(k for t in tables for k in t.extra))
        extra = {}
        for name in names:
            parts = []
            for t in tables:
                part = t.extra.get(name)
                if part is None:
                    part = np.empty(len(t), dtype=object)
                parts.append(part)
            extra[name] = np.concatenate(parts)
        return cls(columns, np.concatenate(codes), list(tasks), extra)

    def take(self, rows: Any) -> "EpisodeTable":
        """The table of rows ``rows`` (indices or a boolean mask), in that order."""
        rows = np.asarray(rows)
        return EpisodeTable({k: c[rows] for k, c in self.columns.items()}, self.task_codes[rows], self.tasks,
                            {k: c[rows] for k, c in self.extra.items()})

    def sorted_by_episode(self) -> "EpisodeTable":
        """Rows ordered by ``episode_ix`` (stable); ``self`` when they already are."""
        ix = self.columns["episode_ix"]
        if self.n < 2 or bool(np.all(ix[1:] >= ix[:-1])):
            return self
        return self.take(np.argsort(ix, kind="stable"))

    def set_task(self, task_group: Any, task_id: Any, task: Any) -> None:
        """Label every row with one task (a suite labels each task's table this way)."""
        self.tasks = [(task_group, task_id, task)]
        self.task_codes = np.broadcast_to(np.int64(0), (self.n,))

    # -- reading -----------------------------------------------------------------------------------
    @property
    def fields(self) -> tuple[str, ...]:
        return (*EPISODE_FIELDS, *self.extra)

    def column(self, name: str) -> np.ndarray:
        """One field as an array (numeric fields: the stored array itself, do not write to it)."""
        if name in self.columns:
            return self.columns[name]
        if name in TASK_FIELDS:
            values = np.empty(len(self.tasks), dtype=object)
            values[:] = [t[TASK_FIELDS.index(name)] for t in self.tasks]
            return values[self.task_codes] if self.n else np.zeros(0, dtype=object)
        if name in self.extra:
            return self.extra[name]
        raise KeyError(f"no per-episode field {name!r}; expected one of {list(self.fields)}.")

    def groups(self, by: str = "task") -> list[tuple[tuple[Any, ...], "EpisodeTable"]]:
        """``[(key, table)]`` in order of first appearance: ``by="task"`` keys are
        ``(str(task_group), task_id)``, ``by="group"`` keys are ``(str(task_group),)``. A group that
        holds every row is ``self`` (no copy)."""
        if self.n == 0:
            return []
        width = 2 if by == "task" else 1
        key_of_code = [(str(t[0]), *t[1:width]) for t in self.tasks]
        if len(self.tasks) == 1:
            return [(key_of_code[0], self)]
        codes, first_rows = np.unique(self.task_codes, return_index=True)
        keys: dict[tuple[Any, ...], tuple[int, list[int]]] = {}
        for code, row in zip(codes.tolist(), first_rows.tolist()):
            first, members = keys.get(key_of_code[code], (row, []))
            keys[key_of_code[code]] = (min(first, row), [*members, code])
        ordered = sorted(keys.items(), key=lambda item: item[1][0])
        if len(ordered) == 1:
            return [(ordered[0][0], self)]
        return [(key, self.take(np.flatnonzero(np.isin(self.task_codes, members)))) for key, (_, members) in ordered]

    def iter_chunks(self, chunk: int = _CHUNK) -> Iterator[list[dict[str, Any]]]:
        """Rows as dicts, ``chunk`` at a time (the cost of Python objects stays bounded)."""
        names = list(COLUMN_DTYPES)
        for start in range(0, self.n, chunk):
            stop = min(self.n, start + chunk)
            cols = [self.columns[k][start:stop].tolist() for k in names]
            tasks = [self.tasks[c] for c in self.task_codes[start:stop].tolist()]
            extras = [(k, v[start:stop].tolist()) for k, v in self.extra.items()]
            rows = []
            for j in range(stop - start):
                row = {k: cols[i][j] for i, k in enumerate(names[:7])}
                t = tasks[j]
                row["task_group"], row["task_id"], row["task"] = t
                row["has_success_signal"] = cols[7][j]
                for k, v in extras:
                    row[k] = v[j]
                rows.append(row)
            yield rows

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for rows in self.iter_chunks():
            yield from rows

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return list(self.take(np.arange(self.n)[index]))
        i = int(index)
        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError(f"episode row {index} out of range for a table of {self.n} episodes")
        return next(iter(self.take([i]).iter_chunks(1)))[0]

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, (EpisodeTable, list, tuple)):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __add__(self, other: Any) -> list[dict[str, Any]]:
        return list(self) + list(other)

    def __radd__(self, other: Any) -> list[dict[str, Any]]:
        return list(other) + list(self)

    def __repr__(self) -> str:
        return f"EpisodeTable({self.n} episodes, {len(self.tasks)} tasks)"

    def to_list(self) -> list[dict[str, Any]]:
        return list(self)

    @property
    def nbytes(self) -> int:
        """Bytes held by the arrays (broadcast columns count once)."""
        arrays = [*self.columns.values(), self.task_codes, *self.extra.values()]
        return int(sum(a.nbytes if a.strides == () or 0 not in a.strides else a.itemsize for a in arrays))


@dataclass
class EvalResult:
    """Per-episode results (``per_episode``, an :class:`EpisodeTable` in episode order) plus run facts.

    Attributes:
        per_episode: the per-episode table; a list of dicts with ``EPISODE_FIELDS`` is accepted and
            converted. It reads like a list of dicts (see :class:`EpisodeTable`).
        eval_s: engine wall time in seconds (env building and start-up excluded).
        timings: seconds per stage (see ``fasteval.core.timing``).
        meta: free-form run facts (spec, kernel backend, batch size, fasteval version).
    """

    per_episode: EpisodeTable
    eval_s: float
    timings: dict[str, float] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    video_paths: list[str] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    """Fault records (env raised/hung/died, non-finite actions), retried ones included."""
    n_failed: int = 0
    """Episodes that failed for good; they are not in ``per_episode`` nor in any average."""
    episode_data: Any = None
    """With ``return_episode_data``: the rollouts of exactly these episodes, cut at their ends."""

    def __post_init__(self) -> None:
        if not isinstance(self.per_episode, EpisodeTable):
            self.per_episode = EpisodeTable.from_records(self.per_episode)

    # -- aggregates ---------------------------------------------------------------------------
    @property
    def aggregated(self) -> dict[str, Any]:
        """What the CLI writes under ``overall``."""
        return self.overall()

    def overall(self) -> dict[str, Any]:
        out = aggregate(self.per_episode)
        n = out["n_episodes"]
        steps = out["env_steps"]
        out.update(
            eval_s=self.eval_s,
            eval_ep_s=self.eval_s / n if n else math.nan,
            steps_per_s=steps / self.eval_s if self.eval_s > 0 else math.nan,
            episodes_per_s=n / self.eval_s if self.eval_s > 0 else math.nan,
            n_failed_episodes=self.n_failed,
            n_env_errors=len(self.errors),
            video_paths=list(self.video_paths),
        )
        return out

    def per_group(self) -> dict[str, dict[str, Any]]:
        table = self.per_episode
        out = {}
        for (name,), part in table.groups("group"):
            agg = aggregate(part)
            agg["video_paths"] = [p for p in self.video_paths if f"/{name}_" in p or p.startswith(f"{name}_")]
            out[name] = agg
        return out

    def per_task(self) -> list[dict[str, Any]]:
        return [_plain_task(t) for t in self._per_task_columns()]

    def _per_task_columns(self) -> list[dict[str, Any]]:
        """``per_task`` with the long per-episode lists as arrays (streamed by the JSON writer)."""
        table = self.per_episode
        out = []
        for (group, task_id), part in table.groups("task"):
            out.append({
                "task_group": group,
                "task_id": task_id,
                "task": part.tasks[int(part.task_codes[0])][2],
                "metrics": {
                    "sum_rewards": part.columns["sum_reward"],
                    "max_rewards": part.columns["max_reward"],
                    "successes": part.columns["success"],
                    "lengths": part.columns["length"],
                    "seeds": part.columns["seed"],
                    "video_paths": [],
                },
                "aggregated": aggregate(part),
            })
        return out

    # -- export --------------------------------------------------------------------------------
    def to_eval_info(self) -> dict[str, Any]:
        """The full ``eval_info.json`` document as plain data (lists of dicts; O(n) Python objects).
        To write it, use :meth:`to_json`, which streams instead."""
        doc = self.eval_info_document()
        doc["per_episode"] = self.per_episode.to_list()
        doc["per_task"] = [_plain_task(t) for t in doc["per_task"]]
        return doc

    def eval_info_document(self) -> dict[str, Any]:
        """The ``eval_info.json`` document with the per-episode table and ``per_task``'s lists left
        columnar (an :class:`EpisodeTable` and arrays): pass it to :func:`write_json_atomic`."""
        return {
            "per_episode": self.per_episode,
            "per_task": self._per_task_columns(),
            "per_group": self.per_group(),
            "overall": self.overall(),
            "timings": self.timings,
            "errors": self.errors,
            "meta": self.meta,
        }

    def to_dict(self, prefix: str = "") -> dict[str, float]:
        """Flat scalars (``{prefix}avg_sum_reward`` ...), ready for TensorBoard or W&B."""
        out = {}
        for key, value in self.overall().items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            out[f"{prefix}{key}"] = float(value)
        lo, hi = self.overall()["pc_success_ci95"]
        out[f"{prefix}pc_success_ci95_low"], out[f"{prefix}pc_success_ci95_high"] = lo, hi
        return out

    def to_json(self, path: str | os.PathLike) -> Path:
        """Write ``eval_info.json`` atomically (temp file + rename), streamed; return the path."""
        return write_json_atomic(path, self.eval_info_document())

    def column(self, name: str) -> np.ndarray:
        """One per-episode field as an array, in episode order."""
        return np.asarray(self.per_episode.column(name))


def _plain_task(task: dict[str, Any]) -> dict[str, Any]:
    metrics = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in task["metrics"].items()}
    return {**task, "metrics": metrics}


def aggregate(records: EpisodeTable | Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Aggregates over episodes (a table or records). Averages are plain means: a NaN episode makes
    them NaN. ``has_success_signal`` is True when any episode's env reported ``is_success``."""
    table = records if isinstance(records, EpisodeTable) else EpisodeTable.from_records(records)
    c = table.columns
    n = len(table)
    successes = int(np.count_nonzero(c["success"]))
    lo, hi = wilson_interval(successes, n)
    return {
        "avg_sum_reward": float(c["sum_reward"].mean()) if n else math.nan,
        "avg_max_reward": float(c["max_reward"].mean()) if n else math.nan,
        "pc_success": 100.0 * successes / n if n else math.nan,
        "pc_success_ci95": [100.0 * lo, 100.0 * hi],
        "n_success": successes,
        "n_episodes": n,
        "env_steps": int(c["length"].sum()),
        "avg_length": float(c["length"].mean()) if n else math.nan,
        "n_nan_reward_episodes": int(np.count_nonzero(c["nan_rewards"] > 0)),
        "has_success_signal": bool(c["has_success_signal"].any()),
    }


# -- streamed JSON ------------------------------------------------------------------------------------

def _leaf(value: Any) -> Any:
    """``json`` ``default``: NumPy scalars become Python ones; anything else is an error."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _needs_stream(value: Any) -> bool:
    if isinstance(value, (EpisodeTable, np.ndarray)):
        return True
    if isinstance(value, dict):
        return any(_needs_stream(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_needs_stream(v) for v in value)
    return False


def _dumps(value: Any, pad: str) -> str:
    """``json.dumps(value, indent=2)`` placed at indentation ``pad``."""
    return json.dumps(value, indent=2, default=_leaf).replace("\n", "\n" + pad)


def _stream(write: Any, value: Any, pad: str) -> None:
    """Write ``value`` as JSON at indentation ``pad``. An :class:`EpisodeTable` becomes a list with
    one record per line, an array a one-line list, both written ``_CHUNK`` items at a time."""
    inner = pad + "  "
    if isinstance(value, EpisodeTable):
        if not len(value):
            write("[]")
            return
        write("[")
        sep = "\n"
        for rows in value.iter_chunks():
            write(sep + inner + (",\n" + inner).join(json.dumps(r, default=_leaf) for r in rows))
            sep = ",\n"
        write("\n" + pad + "]")
    elif isinstance(value, np.ndarray):
        flat = value.reshape(-1)
        write("[")
        for start in range(0, flat.size, _CHUNK):
            text = json.dumps(flat[start:start + _CHUNK].tolist())[1:-1]
            write((", " if start else "") + text)
        write("]")
    elif isinstance(value, dict) and _needs_stream(value):
        write("{")
        for i, (k, v) in enumerate(value.items()):
            write(("," if i else "") + "\n" + inner + json.dumps(str(k)) + ": ")
            _stream(write, v, inner)
        write("\n" + pad + "}" if value else "}")
    elif isinstance(value, (list, tuple)) and _needs_stream(value):
        write("[")
        for i, v in enumerate(value):
            write(("," if i else "") + "\n" + inner)
            _stream(write, v, inner)
        write("\n" + pad + "]" if value else "]")
    else:
        write(_dumps(value, pad))


def write_json_atomic(path: str | os.PathLike, document: Any) -> Path:
    """Write JSON to ``path`` via a temp file in the same folder and an atomic rename.

    ``document`` may hold :class:`EpisodeTable` and NumPy arrays (see
    :meth:`EvalResult.eval_info_document`): they are streamed in chunks, one record per line,
    so the whole text is never built in memory. Plain data is written with ``indent=2``.
    NaN and infinities are written as ``NaN`` / ``Infinity`` (Python's ``json`` reads them back).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; results are ordinary files
        with os.fdopen(fd, "w", buffering=1 << 16) as f:
            _stream(f.write, document, "")
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def merge_episodes(done: Iterable[Mapping[str, Any]], new: EpisodeTable | Iterable[Mapping[str, Any]]) -> EpisodeTable:
    """Records of earlier segments (``episodes.jsonl`` dicts) plus a new table, ordered by
    ``episode_ix`` (a resumed run's merge). Nothing is converted when ``done`` is empty."""
    done = list(done)
    new = new if isinstance(new, EpisodeTable) else EpisodeTable.from_records(new)
    if not done:
        return new.sorted_by_episode()
    return EpisodeTable.concat([EpisodeTable.from_records(done), new]).sorted_by_episode()
