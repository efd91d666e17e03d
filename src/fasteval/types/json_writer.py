"""``write_json_atomic``: JSON written via a temp file and a rename, large parts streamed.

A document may hold :class:`~fasteval.types.episode_table.EpisodeTable` and NumPy arrays: they are
written chunk by chunk (one record per line), so neither per-episode dicts nor the JSON text are
ever held whole.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from fasteval.types.episode_table import CHUNK_ROWS, EpisodeTable
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
        for rows in value.iter_chunks():
            write(sep + inner + (",\n" + inner).join(encoded_records(rows)))
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
