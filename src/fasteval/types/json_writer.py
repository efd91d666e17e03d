"""``write_json_atomic``: JSON written via a temp file and a rename, large parts streamed.

A document may hold :class:`~fasteval.types.episode_table.EpisodeTable` and NumPy arrays: they are
written chunk by chunk (one record per line), so neither per-episode dicts nor the JSON text are
ever held whole.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Callable, Sequence

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


_BOOL_TEXT = {False: "false", True: "true"}
_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def column_texts(column: np.ndarray) -> list[Any]:
    """A numeric column's values, each of whose ``%s`` is its JSON text: ints and finite floats as
    ``tolist()`` gives them (``str`` of a Python int or float is what ``json`` writes), bools as
    ``"true"``/``"false"``, NaN and infinities as ``json`` writes them (``NaN``, ``Infinity``)."""
    values = column.tolist()
    kind = column.dtype.kind
    if kind == "b":
        return list(map(_BOOL_TEXT.__getitem__, values))
    if kind == "f" and not all(map(math.isfinite, values)):  # (a ufunc costs more than this on a few rows)
        values = [v if math.isfinite(v) else _NON_FINITE[repr(v)] for v in values]
    return values


def scalar_text(value: Any, encode: Callable[[Any], str]) -> str:
    """``encode(value)``, without the encoder's per-call set-up for the plain scalars (a str, int,
    float, bool, None: the same text); anything else goes to ``encode`` (its ``default`` or its error)."""
    kind = type(value)
    if kind is str:
        return encode(value)
    if kind is bool or value is None:
        return "null" if value is None else _BOOL_TEXT[value]
    if kind is int:
        return int.__repr__(value)
    if kind is float:
        text = float.__repr__(value)
        return _NON_FINITE.get(text, text)
    return encode(value)


def row_texts(numbers: dict[str, list[Any]], n: int, task: tuple[Any, Any, Any] | None = None,
              task_rows: list[str] | None = None, extra: dict[str, list[str]] | None = None,
              constants: dict[str, Any] | None = None, compact: bool = False,
              encode: Callable[[Any], str] | None = None, template: str | None = None) -> list[str]:
    """``n`` records' JSON texts, from their fields' texts (the low level of :func:`record_texts`):
    ``numbers``: the fields of :data:`~fasteval.types.episode_table.COLUMN_DTYPES` as
    :func:`column_texts` gives them; the task fields: one ``task`` for every row, or each row's text
    of them (``task_rows``); ``extra``: further fields' texts per row; ``constants``: fields whose
    value is the same in every row (one of ``COLUMN_DTYPES``'s instead of its column, or a further
    field, after the extra ones). Keys in :data:`EPISODE_FIELDS` order, then the further ones in
    order. Each row is one ``%`` format of :func:`row_template`'s template (``template``: that
    template for these arguments, made earlier)."""
    constants = constants or {}
    extra = extra or {}
    if template is None:
        template = row_template(task, tuple(extra), constants, compact, encode)
    slots = [numbers[name] for name in EPISODE_FIELDS[:_TASK_AT] if name not in constants]
    if task is None:
        slots.append(task_rows)
    slots += [numbers[name] for name in EPISODE_FIELDS[_TASK_AT + len(TASK_FIELDS):] if name not in constants]
    slots += extra.values()
    return [template % row for row in zip(*slots)] if slots else [template] * n


def row_template(task: tuple[Any, Any, Any] | None, extra: Sequence[str], constants: dict[str, Any], compact: bool,
                 encode: Callable[[Any], str] | None = None) -> str:
    """:func:`row_texts`'s ``%`` template for records of ``task`` (``None``: a slot per row), with the
    ``extra`` fields' slots and the ``constants``: ``%s`` where a row's text goes, the rest literal."""
    encode = encode or _encode
    kv, sep = (":", ",") if compact else (": ", ", ")

    def field(name: str) -> str:
        head = encode(name) + kv
        return (head + scalar_text(constants[name], encode)).replace("%", "%%") if name in constants else \
            head.replace("%", "%%") + "%s"

    parts = [field(name) for name in EPISODE_FIELDS[:_TASK_AT]]
    parts.append("%s" if task is None else sep.join(encode(k) + kv + scalar_text(v, encode)
                                                    for k, v in zip(TASK_FIELDS, task)).replace("%", "%%"))
    parts += [field(name) for name in EPISODE_FIELDS[_TASK_AT + len(TASK_FIELDS):]]
    parts += [(encode(name) + kv).replace("%", "%%") + "%s" for name in extra]
    parts += [field(name) for name in constants if name not in EPISODE_FIELDS]
    return "{" + sep.join(parts) + "}"


def record_texts(table: EpisodeTable, compact: bool = False, encode: Callable[[Any], str] | None = None,
                 start: int = 0, stop: int | None = None) -> list[str]:
    """The JSON text of rows ``start:stop`` of ``table``, one string per row: exactly
    ``encode(row)`` for each row dict :meth:`EpisodeTable.iter_chunks` gives (the same keys, order
    and values), without building the dicts. ``compact``: ``","`` and ``":"`` separators (the lines
    of ``episodes.jsonl``) instead of ``", "`` and ``": "`` (``eval_info.json``); ``encode``: the
    encoder of the task and extra values (default: ``json.dumps(value, default=_leaf)``'s), which
    must use the same separators.

    Built column by column (:func:`row_texts`): a numeric column is one ``tolist()``, each task is
    encoded once, each distinct string of an extra field once, and each row is one ``%`` format.
    Floats are written as ``json`` writes them (``repr``, ``NaN``, ``Infinity``), as are ints, bools
    and the plain scalars; any other value with ``encode``.
    """
    stop = table.n if stop is None else min(stop, table.n)
    if stop <= start:
        return []
    encode = encode or _encode
    numbers = {k: column_texts(c[start:stop]) for k, c in table.columns.items()}
    codes = table.task_codes[start:stop]
    task, task_rows = None, None
    if len(table.tasks) == 1:
        task = table.tasks[0]
    else:
        kv, sep = (":", ",") if compact else (": ", ", ")
        texts: dict[int, str] = {}
        task_rows = []
        for c in codes.tolist():
            text = texts.get(c)
            if text is None:
                text = texts[c] = sep.join(encode(k) + kv + scalar_text(v, encode)
                                           for k, v in zip(TASK_FIELDS, table.tasks[c]))
            task_rows.append(text)
    extra = {}
    for name, column in table.extra.items():
        seen: dict[str, str] = {}
        out = []
        for v in column[start:stop].tolist():
            if type(v) is str:
                text = seen.get(v)
                if text is None:
                    text = seen[v] = encode(v)
            else:
                text = scalar_text(v, encode)
            out.append(text)
        extra[name] = out
    return row_texts(numbers, stop - start, task, task_rows, extra, compact=compact, encode=encode)


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
