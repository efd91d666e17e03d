"""The slot block writes a step's answers with one assignment per buffer; the values are the ones the
per-slot writes give (the specification, :meth:`SlotBlock._write_step`), whatever the envs return."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fasteval.core.slot_block import SlotBlock

B = 6

rewards = st.one_of(st.floats(allow_nan=True, width=64), st.integers(-5, 5), st.booleans(),
                    st.floats(width=32, allow_nan=False).map(np.float32),
                    st.floats(-3, 3).map(lambda r: np.array([r])))  # a shape-(1,) reward (some envs return one)
flags = st.one_of(st.booleans(), st.integers(0, 1), st.booleans().map(np.bool_))
success = st.one_of(st.none(), st.booleans(), st.booleans().map(np.bool_))
obs = st.one_of(st.lists(st.floats(-2, 2, width=32), min_size=3, max_size=3).map(lambda v: np.array(v, np.float32)),
                st.lists(st.floats(-2, 2), min_size=3, max_size=3),  # a list of float64 values
                st.lists(st.floats(-2, 2), min_size=4, max_size=4).map(np.array))  # does not fit: that slot fails


class Scripted:
    """An env whose every step answers ``answer``."""

    def __init__(self, answer):
        self.answer = answer

    def step(self, action):
        return self.answer


def buffers():
    return np.zeros((B, 3), np.float32), np.zeros(B), np.zeros(B, bool), np.zeros(B, bool), np.ones(B, bool)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(obs, rewards, flags, flags, success), min_size=1, max_size=B // 2), st.booleans())
def test_batched_writes_equal_the_per_slot_writes(answers, contiguous):
    slots = list(range(len(answers))) if contiguous else [2 * i + 1 for i in range(len(answers))]
    full = [(o, r, te, tr, {} if s is None else {"is_success": s}) for o, r, te, tr, s in answers]
    envs = {slot: Scripted(answer) for slot, answer in zip(slots, full)}

    fast_bufs = buffers()
    fast = SlotBlock(None, envs, slots[0], *fast_bufs)
    failures: list = []
    ref_bufs = buffers()
    ref = SlotBlock(None, envs, slots[0], *ref_bufs)
    want_failures: list = []
    try:  # the specification: slot by slot (a value the buffers cannot take raises, as it always did)
        for slot, answer in zip(slots, full):
            ref._write_step(slot, answer, want_failures)
    except Exception as exc:
        with pytest.raises(type(exc)):
            fast.step(slots, np.zeros(B, np.int64), failures)
        return
    for slot, answer in zip(slots, full):
        flag = answer[4].get("is_success")
        ref_bufs[4][slot] = False if flag is None else flag
    fast.step(slots, np.zeros(B, np.int64), failures)

    assert [f.slot for f in failures] == [f.slot for f in want_failures]
    assert all("does not fit" in f.error for f in failures)
    failed = {f.slot for f in failures}
    ok = [s for s in slots if s not in failed]
    for name, got, want in zip(("obs", "rewards", "terminated", "truncated", "success"), fast_bufs, ref_bufs):
        np.testing.assert_array_equal(got[ok], want[ok], err_msg=name)
    assert fast.has_success_signal == any(a[4] is not None for a in answers)


def test_a_raising_env_is_that_slots_failure_and_the_others_are_written():
    class Raises:
        def step(self, action):
            raise RuntimeError("boom")

    answer = (np.ones(3, np.float32), 2.0, True, False, {})
    envs = {0: Scripted(answer), 1: Raises(), 2: Scripted(answer)}
    bufs = buffers()
    failures: list = []
    SlotBlock(None, envs, 0, *bufs).step([0, 1, 2], np.zeros(B, np.int64), failures)
    assert [(f.slot, f.stage) for f in failures] == [(1, "step")] and "boom" in failures[0].error
    assert bufs[1].tolist()[:3] == [2.0, 0.0, 2.0] and bufs[2].tolist()[:3] == [True, False, True]
