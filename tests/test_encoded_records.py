"""episodes.jsonl's lines and eval_info.json's per-episode records are encoded column by column, from one template
per run: the strings must be exactly ``json.dumps``'s (and ``format_records``'), whatever the records hold."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fasteval.core.ledger import Ledger
from fasteval.run.record import EpisodeRows
from fasteval.run.rundir import episode_lines, format_records, table_lines
from fasteval.types.episode_table import EpisodeTable
from fasteval.types.json_writer import _leaf, record_texts

floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([-0.0, 1e300, 5e-324, 0.1]))
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), floats,
                    st.text(max_size=8), st.sampled_from(["%s", "%", '",{"episode_ix":', "é", "\n"]))
tasks = st.tuples(scalars, st.one_of(st.integers(-3, 3), st.booleans(), st.sampled_from([1.0, None, "1"])), scalars)
episode = st.fixed_dictionaries({
    "episode_ix": st.integers(0, 10**6), "seed": st.integers(-10**9, 10**9), "sum_reward": floats, "max_reward": floats,
    "length": st.integers(0, 10**6), "success": st.booleans(), "nan_rewards": st.integers(0, 9),
    "has_success_signal": st.booleans()})


@st.composite
def tables(draw):
    """EpisodeTables as runs and resumed runs hold them: one or several tasks, extra fields (run_id...) or none."""
    rows = draw(st.lists(episode, min_size=0, max_size=7))
    labels = draw(st.lists(tasks, min_size=1, max_size=3, unique_by=lambda t: tuple((type(v), v) for v in t)))
    extra_names = draw(st.lists(st.sampled_from(["run_id", "note", "x%s"]), max_size=2, unique=True))
    out = []
    for r in rows:
        group, task_id, task = draw(st.sampled_from(labels))
        record = {**r, "task_group": group, "task_id": task_id, "task": task}
        for name in extra_names:
            record[name] = draw(st.one_of(scalars, st.lists(scalars, max_size=2)))
        out.append(record)
    try:
        return EpisodeTable.from_records(out)
    except TypeError:  # NaN task values are not one task (unhashable by value): not a table a run makes
        return EpisodeTable.from_records([{**r, "task_group": "g", "task_id": 0, "task": "t"} for r in out])


@settings(max_examples=300, deadline=None)
@given(tables())
def test_record_texts_are_the_row_dicts_encoded(table):
    rows = table.to_list()
    assert record_texts(table) == [json.dumps(r, default=_leaf) for r in rows]  # eval_info.json
    assert table_lines(table) == format_records(rows)  # episodes.jsonl


@settings(max_examples=100, deadline=None)
@given(st.lists(episode, min_size=1, max_size=12), st.lists(st.integers(0, 11), max_size=8), tasks,
       st.one_of(st.none(), st.text(max_size=6)), st.booleans())
def test_a_run_logs_lines_are_its_tables_rows(eps, picks, label, run_id, signal):
    """The run log's group lines (EpisodeRows.texts, no table) equal format_records of the table's rows."""
    n = len(eps)
    ledger = Ledger(n, 2, seed=7)
    for name in ("sum_reward", "max_reward", "length", "success", "nan_rewards"):
        getattr(ledger, name)[:] = [e[name] for e in eps]
    ledger.finished[:] = True
    ledger.success_signal = signal
    rows = EpisodeRows(ledger, label)
    picks = [p for p in picks if p < n]
    for _ in range(2):  # the second time from the cached template
        assert episode_lines(rows, picks, run_id) == format_records(rows.table(picks, run_id=run_id).to_list())
