"""eval_info.json's per-episode records are encoded by one call of the C encoder per chunk, cut at the record
boundaries: the strings must be exactly ``json.dumps(record, default=_leaf)``'s, whatever the records hold."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fasteval.types.json_writer import _leaf, encoded_records

values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True), st.text(max_size=12),
              st.sampled_from([', {"episode_ix": ', '{"episode_ix": 1}', "\\", '"']),
              st.integers(-5, 5).map(np.int64), st.floats(-2, 2).map(np.float32)),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.sampled_from(["episode_ix", "a", "b"]), inner, max_size=2)),
    max_leaves=6)
records = st.lists(st.fixed_dictionaries({"episode_ix": st.integers(0, 99)}, optional={"x": values, "y": values}),
                   min_size=0, max_size=6)


@settings(max_examples=300, deadline=None)
@given(records)
def test_the_same_strings_as_one_dumps_per_record(rows):
    assert encoded_records(rows) == [json.dumps(r, default=_leaf) for r in rows]


def test_records_with_other_first_keys_and_nested_boundaries():
    rows = [{"episode_ix": 0, "x": [{"episode_ix": 1}, {"episode_ix": 2}]}, {"seed": 1}, {"episode_ix": 2, "x": math.nan}]
    assert encoded_records(rows) == [json.dumps(r, default=_leaf) for r in rows]
    with pytest.raises(TypeError, match="not JSON serializable"):
        encoded_records([{"episode_ix": 0, "x": object()}, {"episode_ix": 1}])
