"""The per-episode table: one NumPy column per field, read like a list of dicts.

Memory: :class:`EpisodeTable` holds one array per field (about 50 bytes per episode, instead of
one ~410-byte dict per episode); rows become dicts only on demand, ``CHUNK_ROWS`` at a time.
NaN rewards are never dropped: an episode with a NaN reward has a NaN sum and max and a
``nan_rewards`` count > 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Iterable, Iterator, Mapping

import numpy as np

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
_TASK_AT = EPISODE_FIELDS.index(TASK_FIELDS[0])
"""Where the task fields sit among :data:`EPISODE_FIELDS` (rows are dicts in that order)."""
CHUNK_ROWS = 1024
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
    copies: changing one does not change the table (:meth:`with_task` gives a relabelled table).

    A new numeric per-episode field is one entry of :data:`COLUMN_DTYPES` (and of
    :data:`EPISODE_FIELDS`); a new label (a suite's task today, the policy of a many-policy run later) is
    a code column indexing a short list of values, as ``task_codes`` and ``tasks`` are.
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

    def with_task(self, task_group: Any, task_id: Any, task: Any) -> "EpisodeTable":
        """The same rows, every one labelled with one task (the columns are shared, not copied)."""
        return EpisodeTable(self.columns, np.zeros(1, np.int64), [(task_group, task_id, task)], self.extra)

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

    def iter_chunks(self, chunk: int = CHUNK_ROWS) -> Iterator[list[dict[str, Any]]]:
        """Rows as dicts, ``chunk`` at a time (the cost of Python objects stays bounded)."""
        first = [k for k in EPISODE_FIELDS if k in COLUMN_DTYPES and EPISODE_FIELDS.index(k) < _TASK_AT]
        after = [k for k in EPISODE_FIELDS if k in COLUMN_DTYPES and EPISODE_FIELDS.index(k) > _TASK_AT]
        for start in range(0, self.n, chunk):
            stop = min(self.n, start + chunk)
            head = [(k, self.columns[k][start:stop].tolist()) for k in first]
            tail = [(k, self.columns[k][start:stop].tolist()) for k in after]
            tail += [(k, v[start:stop].tolist()) for k, v in self.extra.items()]
            tasks = [self.tasks[c] for c in self.task_codes[start:stop].tolist()]
            rows = []
            for j in range(stop - start):
                row = {k: v[j] for k, v in head}
                row["task_group"], row["task_id"], row["task"] = tasks[j]
                for k, v in tail:
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


def merge_episodes(done: EpisodeTable | Iterable[Mapping[str, Any]], new: EpisodeTable | Iterable[Mapping[str, Any]]) -> EpisodeTable:
    """Records of earlier segments (a table or ``episodes.jsonl`` dicts) plus a new table, ordered by
    ``episode_ix`` (a resumed run's merge). Nothing is converted when ``done`` is empty."""
    done = done if isinstance(done, EpisodeTable) else list(done)
    new = new if isinstance(new, EpisodeTable) else EpisodeTable.from_records(new)
    if not len(done):
        return new.sorted_by_episode()
    return EpisodeTable.concat([EpisodeTable.from_records(done), new]).sorted_by_episode()
