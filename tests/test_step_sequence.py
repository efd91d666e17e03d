"""The one step sequence (core/loop.py): the plain and the pipelined run go through the same
``launch``/``land`` pair, and the per-step checks bound once per engine are exact."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fasteval.run.api import evaluate
from fasteval.core import loop
from fasteval.core.faults import make_action_check
from fasteval.core.pipeline import group_rows, policy_batch
from fasteval.testing import ParityPolicy

KA = "fasteval/KnownAnswer-v0"


@pytest.mark.parametrize("pipeline, vectorization, groups", [(False, "sync", 1), (False, "async", 1), (True, "async", 2)])
def test_plain_and_pipelined_runs_share_launch_and_land(monkeypatch, pipeline, vectorization, groups, known_answers,
                                                        check_episodes):
    calls = {"launch": set(), "land": set()}
    real_launch, real_land = loop.launch, loop.land

    def launch(ctx, group):
        calls["launch"].add(group.rows.start)
        return real_launch(ctx, group)

    def land(ctx, group):
        calls["land"].add(group.rows.start)
        return real_land(ctx, group)

    monkeypatch.setattr(loop, "launch", launch)
    monkeypatch.setattr(loop, "land", land)
    result = evaluate(env=KA, policy=ParityPolicy(), n_episodes=13, batch_size=4, seed=3, device="cpu",
                      vectorization=vectorization, pipeline=pipeline)
    check_episodes(result.per_episode, known_answers(13, 3, "parity"), f"pipeline={pipeline}")
    assert len(calls["launch"]) == groups and len(calls["land"]) == groups, calls


@pytest.mark.parametrize("vectorization, workers", [("sync", None), ("async", 1), ("async", 2), ("async", 3)])
def test_group_rows_cover_every_slot_once_in_whole_worker_blocks(vectorization, workers):
    from fasteval.run.engine import Engine
    from fasteval.types.spec import EvalSpec

    for n in (2, 5, 6):
        spec = EvalSpec(env=KA, policy=ParityPolicy(), n_episodes=8, batch_size=n, device="cpu",
                        vectorization=vectorization, workers=workers)
        with Engine(spec) as engine:
            for pipeline in (False, True):
                rows = group_rows(engine.envs, pipeline)
                covered = [s for r in rows for s in range(r.start, r.stop)]
                assert covered == list(range(n)) and len(rows) == (2 if pipeline else 1)
                assert policy_batch(rows) == max(r.stop - r.start for r in rows)
                if pipeline and vectorization == "async" and engine.envs.n_workers >= 2:
                    starts = {block.start for block in engine.envs.blocks} | {n}
                    assert all(r.start in starts and r.stop in starts for r in rows), (rows, engine.envs.blocks)


finite_or_not = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=32),
                          st.sampled_from([3.0e38, -3.0e38, np.nan, np.inf, -np.inf, 0.0]))


@settings(max_examples=200, deadline=None)
@given(actions=hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5),
                          elements=finite_or_not),
       data=st.data())
def test_action_check_matches_a_per_slot_isfinite(actions, data):
    """The whole-array fast path never hides a bad row of an active slot and never flags a good one."""
    n = actions.shape[0]
    active = sorted(data.draw(st.sets(st.integers(0, n - 1))))
    expected = [s for s in active if not np.isfinite(actions[s]).all()]
    assert make_action_check(actions.dtype)(actions, active) == expected


def test_action_check_for_integer_actions_is_free():
    assert make_action_check(np.dtype(np.int64))(np.zeros(4, dtype=np.int64), [0, 1, 2, 3]) == []


@settings(max_examples=60, deadline=None)
@given(n_slots=st.integers(1, 5), n_exec=st.integers(1, 4),
       script=st.lists(st.one_of(st.just("call"), st.lists(st.integers(0, 4), min_size=1, max_size=3)), max_size=25))
def test_chunk_queue_device_mirror_equals_host_positions(n_slots, n_exec, script):
    """The device-side position mirror (used on CUDA, forced here on CPU) gives the same actions."""
    import torch

    from fasteval.robot.buffers.chunk_queue import ChunkQueue

    def make_call():
        count = [0]

        def call(obs):
            count[0] += 1
            return torch.arange(n_slots * 4, dtype=torch.float32).reshape(n_slots, 4, 1) + 1000 * count[0]
        return call

    queues = [ChunkQueue(call, call(None), n_exec, mirror=m) for m, call in ((False, make_call()), (True, make_call()))]
    for q in queues:
        q.call.__closure__[0].cell_contents[0] = 0  # the sample call does not count
    for op in script:
        if op == "call":
            a, b = (q(None) for q in queues)
            assert torch.equal(a, b)
        else:
            for q in queues:
                q.drop([s for s in op if s < n_slots])


@settings(max_examples=60, deadline=None)
@given(n_slots=st.integers(1, 5), n_exec=st.integers(1, 4), mirror=st.booleans(),
       script=st.lists(st.one_of(st.just("step"), st.lists(st.integers(0, 4), min_size=1, max_size=3)), max_size=25))
def test_chunk_queue_fill_with_only_the_needed_rows_equals_a_full_fill(n_slots, n_exec, mirror, script):
    """The split API (needed / fill / pop) the LeRobot adapter drives: a chunk with a row per needing slot
    gives the same actions as a full-batch chunk whose other rows are ignored."""
    import torch

    from fasteval.robot.buffers.chunk_queue import ChunkQueue

    full, rows = (ChunkQueue(None, None, n_exec, mirror=mirror, n_slots=n_slots) for _ in range(2))
    for t, op in enumerate(script):
        if op == "step":
            need = full.needed()
            assert (need == rows.needed()).all()
            chunk = torch.arange(n_slots * 4 * 2, dtype=torch.float32).reshape(n_slots, 4, 2) + 1000 * t
            if need.any():
                full.fill(chunk, need)
                rows.fill(chunk[torch.from_numpy(need)], need)
            assert torch.equal(full.pop(), rows.pop())
        else:
            for q in (full, rows):
                q.drop([s for s in op if s < n_slots])


SLOW_FIRST_CALL_S = 1.5  # the first (dry-run) policy call's sleep


class _SlowFirstCall:
    """Argmax of nothing: action 0; its first call (the engine's dry run) sleeps 0.3 s."""

    def __init__(self):
        self.calls = 0

    def select_action(self, obs):
        import time

        import torch

        self.calls += 1
        if self.calls == 1:
            time.sleep(SLOW_FIRST_CALL_S)
        return torch.zeros(obs.shape[0], dtype=torch.long)


def test_the_dry_run_is_kept_out_of_eval_s_and_the_stages():
    from fasteval.run.engine import Engine
    from fasteval.types.spec import EvalSpec

    with Engine(EvalSpec(env=KA, policy=_SlowFirstCall(), n_episodes=4, batch_size=2, device="cpu",
                         cuda_graph=False)) as engine:
        first, second = engine.run(), engine.run()
    assert first.meta["dry_run_s"] >= SLOW_FIRST_CALL_S and second.meta["dry_run_s"] == 0.0
    # 4 short episodes take milliseconds; the margin is wide so a loaded CI box cannot reach it
    assert first.eval_s < SLOW_FIRST_CALL_S and sum(first.timings.values()) < SLOW_FIRST_CALL_S, (first.eval_s, first.timings)
