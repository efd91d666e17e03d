"""``write_json_atomic``: JSON written via a temp file and a rename, large parts streamed.

A document may hold :class:`~fasteval.types.episode_table.EpisodeTable` and NumPy arrays: they are
written chunk by chunk (one record per line), so neither per-episode dicts nor the JSON text are
ever held whole.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

import numpy as np

from fasteval.types.episode_table import _TASK_AT, CHUNK_ROWS, EPISODE_FIELDS, TASK_FIELDS, EpisodeTable
from fasteval.types.files import atomic_file


def _leaf(value: Any) -> Any:
    """``json`` ``default``: NumPy scalars become Python ones; anything else is an error."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_encode = json.JSONEncoder(default=_leaf).encode
"""``json.dumps(value, default=_leaf)``, with its encoder built once (``json.dumps`` with ``default=``
builds a new encoder per call)."""


def encoded_records(records: list[dict[str, Any]]) -> list[str]:
    """``[json.dumps(r, default=_leaf) for r in records]``, the same strings, from one call of the C
    encoder: the list is encoded at once and cut at the record boundaries (``, {"<first key>": ``, which
    cannot occur inside an encoded string, whose quotes are escaped). Records that do not all start with
    the same key, or a nested value that repeats the boundary, are encoded one by one instead."""
    n = len(records)
    first = next(iter(records[0]), None) if n else None
    if first is not None and n > 1 and all(next(iter(r), None) == first for r in records):
        head = "{" + _encode(first) + ": "
        body = _encode(records)[1:-1]
        parts = body.split(", " + head)
        if len(parts) == n:
            return [parts[0], *(head + part for part in parts[1:])]
    return [_encode(record) for record in records]


_value_text = json.JSONEncoder(check_circular=False, separators=(",", ":")).encode
"""A list of numbers or bools as compact JSON (``1,2.5,NaN,true``: no value holds a comma)."""


def record_texts(table: EpisodeTable, compact: bool = False, encode: Callable[[Any], str] | None = None,
                 start: int = 0, stop: int | None = None) -> list[str]:
    """The JSON text of rows ``start:stop`` of ``table``, one string per row: exactly
    ``encode(row)`` for each row dict :meth:`EpisodeTable.iter_chunks` gives (the same keys, order
    and values), without building the dicts. ``compact``: ``","`` and ``":"`` separators (the lines
    of ``episodes.jsonl``) instead of ``", "`` and ``": "`` (``eval_info.json``); ``encode``: the
    encoder of the task and extra values (default: ``json.dumps(value, default=_leaf)``'s), which
    must use the same separators.

    Built column by column: a numeric column is one encoder call (its values' texts hold no comma,
    so the list's text is cut at the commas), each task is encoded once, and each row is one ``%``
    format of a template holding the keys. Floats are written as ``json`` writes them (``repr``,
    ``NaN``, ``Infinity``), as are ints and bools; an extra value (``run_id``...) with ``encode``,
    once per distinct string.
    """
    stop = table.n if stop is None else min(stop, table.n)
    if stop <= start:
        return []
    encode = encode or _encode
    kv, sep = (":", ",") if compact else (": ", ", ")
    cols = table.columns
    first = [k for k in EPISODE_FIELDS[:_TASK_AT]]
    after = [k for k in EPISODE_FIELDS[_TASK_AT + len(TASK_FIELDS):]]
    values = [_value_text(cols[k][start:stop].tolist())[1:-1].split(",") for k in first]
    task_text: dict[int, str] = {}

    def task_of(code: int) -> str:
        text = task_text.get(code)
        if text is None:
            group, task_id, task = table.tasks[code]
            text = task_text[code] = sep.join(
                encode(k) + kv + encode(v) for k, v in zip(TASK_FIELDS, (group, task_id, task)))
        return text

    values.append([task_of(c) for c in table.task_codes[start:stop].tolist()])
    values += [_value_text(cols[k][start:stop].tolist())[1:-1].split(",") for k in after]
    names = [*first, None, *after]
    for name, column in table.extra.items():
        names.append(name)
        seen: dict[str, str] = {}
        texts = []
        for v in column[start:stop].tolist():
            if type(v) is str:
                text = seen.get(v)
                if text is None:
                    text = seen[v] = encode(v)
            else:
                text = encode(v)
            texts.append(text)
        values.append(texts)
    template = "{" + sep.join("%s" if name is None else (encode(name) + kv).replace("%", "%%") + "%s"
                              for name in names) + "}"
    return [template % row for row in zip(*values)]


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
    one record per line, an array a one-line list, both written ``CHUNK_ROWS`` items at a time."""
    inner = pad + "  "
    if isinstance(value, EpisodeTable):
        if not len(value):
            write("[]")
            return
        write("[")
        sep = "\n"
        for start in range(0, len(value), CHUNK_ROWS):
            write(sep + inner + (",\n" + inner).join(record_texts(value, start=start, stop=start + CHUNK_ROWS)))
            sep = ",\n"
        write("\n" + pad + "]")
    elif isinstance(value, np.ndarray):
        flat = value.reshape(-1)
        write("[")
        for start in range(0, flat.size, CHUNK_ROWS):
            text = json.dumps(flat[start:start + CHUNK_ROWS].tolist())[1:-1]
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
    """Write JSON to ``path`` via a temp file in the same folder and an atomic rename (:func:`~fasteval.types.files.atomic_file`).

    ``document`` may hold :class:`EpisodeTable` and NumPy arrays (see
    :meth:`EvalResult.eval_info_document`): they are streamed in chunks, one record per line,
    so the whole text is never built in memory. Plain data is written with ``indent=2``.
    NaN and infinities are written as ``NaN`` / ``Infinity`` (Python's ``json`` reads them back).
    """
    with atomic_file(path, buffering=1 << 16) as f:
        _stream(f.write, document, "")
        f.write("\n")
    return Path(path)
