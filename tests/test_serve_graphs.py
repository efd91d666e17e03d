"""CUDA graphs of the served policy step, on CPU with fake CUDA (fasteval.testing.fake_cuda): one capture
per padded openpi batch size and one per slot group of a fasteval session; replays give the right actions."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("msgpack")

from fasteval.core.accel import CAPTURED, CudaGraphCall  # noqa: E402
from fasteval.doors.serve_batcher import DynamicBatcher, buckets  # noqa: E402
from fasteval.doors.serve_policy import RunnerOptions, ServedRunner  # noqa: E402
from fasteval.doors.serve_sessions import Session  # noqa: E402
from fasteval.testing.fake_cuda import FakeCuda  # noqa: E402
from fasteval.types.wire import KIND, space_to_wire  # noqa: E402

PARITY = "fasteval.testing:ParityPolicy"
OBS_SPACE = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
ACTIONS = gym.spaces.Discrete(2)


def obs_rows(n: int, offset: int = 0) -> np.ndarray:
    return np.array([[0.5, 0.1, float((i + offset) % 2)] for i in range(n)], dtype=np.float32)


def test_buckets():
    assert buckets(1) == [1] and buckets(16) == [1, 2, 4, 8, 16] and buckets(10) == [1, 2, 4, 8, 10]


def test_openpi_batches_replay_one_graph_per_padded_size():
    options = RunnerOptions(policy=PARITY, device="cpu", cuda_graph=True)
    batcher = DynamicBatcher(lambda n: ServedRunner(options, OBS_SPACE, ACTIONS, n), OBS_SPACE, 4, 0.0, None)
    with FakeCuda() as fake:
        for k, offset in [(1, 0), (3, 1), (4, 0), (3, 0), (2, 1), (3, 1)]:
            batch = [(row, "", 0.0, None) for row in obs_rows(k, offset)]
            replies = batcher._run_batch(batch)
            assert [int(r["actions"][0]) for r in replies] == [(i + offset) % 2 for i in range(k)]
            assert {r["server_timing"]["padded_to"] for r in replies} == {next(s for s in (1, 2, 4) if s >= k)}
        assert sorted(batcher.runners) == [1, 2, 4]
        assert len(fake.captures) == 3 and fake.replays >= 6
    for runner in batcher.runners.values():
        assert isinstance(runner._step, CudaGraphCall) and runner.facts["cuda_graph"] == CAPTURED


def test_a_session_captures_once_per_group_and_keeps_the_rows_right():
    message = {KIND: "open", "observation_space": space_to_wire(OBS_SPACE), "action_space": space_to_wire(ACTIONS),
               "groups": [[0, 3], [3, 5]], "spec": {"cuda_graph": True}, "seed": 0}
    with FakeCuda() as fake:
        session = Session(RunnerOptions(policy=PARITY, device="cpu"), message)
        checked = session.dry_run({KIND: "dry_run", "obs": obs_rows(5)})
        assert checked["facts"]["cuda_graph"] == CAPTURED
        for seq in range(1, 4):
            for group, (start, stop) in enumerate(session.groups):
                rows = list(range(stop - start))
                reply = session.step({KIND: "step", "group": group, "seq": seq, "slots": rows,
                                      "obs": obs_rows(stop - start, seq), "events": []})
                assert reply["actions"].tolist() == [(i + seq) % 2 for i in rows]
        assert len(fake.captures) == 2
