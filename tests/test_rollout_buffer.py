"""The rollout buffer (preallocated ``[B, T]`` TensorDict, written in place) and ``--save-episodes``."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from fasteval.doors.cli import main
from fasteval.core.protocols import StepObserver
from fasteval.robot.buffers.rollout_buffer import RolloutBuffer
from fasteval.run.engine import Engine
from fasteval.run.episode_files import load_episodes
from fasteval.types.spec import EvalSpec
from fasteval.testing import ParityPolicy, expected_episode

KA = "fasteval/KnownAnswer-v0"


def drive(ahead: bool, frames: int | None, steps: int = 5, numpy_writes: bool = True):
    """Two slots, observation ``[slot, t, 10 slot + t]``; slot 1 starts one step later. Returns the buffer.

    ``ahead``: the source holds frame t + 1 when a step is written (a CPU policy reading the host buffer);
    else frame t (a GPU device buffer, copied before the policy call).
    """
    host_obs = torch.zeros(2, 3)
    rewards, term, trunc, success = np.zeros(2), np.zeros(2, bool), np.zeros(2, bool), np.zeros(2, bool)
    actions = np.zeros(2, np.int64)
    device_obs = host_obs if ahead else torch.zeros(2, 3)
    buf = RolloutBuffer(device_obs, (rewards, term, trunc, success), (), np.dtype(np.int64), torch.device("cpu"),
                        frames, ahead=ahead, numpy_writes=numpy_writes)
    t = [0, 0]

    def observe(slot):
        host_obs[slot] = torch.tensor([slot, t[slot], 10 * slot + t[slot]], dtype=torch.float32)

    observe(0)
    buf.start(np.array([0]))
    for step in range(steps):
        if step == 1:
            observe(1)
            buf.start(np.array([1]))
        slots = np.array([0] if step == 0 else [0, 1])
        if not ahead:
            device_obs.copy_(host_obs)  # the h2d copy before the policy call
        for s in slots:
            actions[s] = 100 * s + t[s]
            rewards[s] = t[s] + 0.5
            t[s] += 1
            observe(s)  # the env step writes the next observation into the host buffer
        buf.write(slots, actions)
    return buf


@pytest.mark.parametrize("numpy_writes", [True, False])  # False: the torch index path a GPU takes
@pytest.mark.parametrize("ahead", [True, False])
def test_both_observation_sources_record_the_observation_acted_on(ahead, numpy_writes):
    buf = drive(ahead, frames=None, numpy_writes=numpy_writes)
    ep0, ep1 = buf.episode(0, 5), buf.episode(1, 4)
    assert ep0["observation"].tolist() == [[0, t, t] for t in range(5)]
    assert ep1["observation"].tolist() == [[1, t, 10 + t] for t in range(4)]
    assert ep0["action"].tolist() == list(range(5)) and ep1["action"].tolist() == [100 + t for t in range(4)]
    assert ep0["next.reward"].tolist() == [t + 0.5 for t in range(5)] and ep0["next.reward"].dtype == torch.float64


@pytest.mark.parametrize("numpy_writes", [True, False])
def test_the_buffer_grows_by_doubling_only_and_keeps_what_it_holds(numpy_writes):
    buf = drive(ahead=True, frames=2, steps=7, numpy_writes=numpy_writes)
    assert buf.frames == 8  # 2 -> 4 -> 8, two copies in 7 steps
    assert buf.episode(0, 7)["observation"][:, 1].tolist() == list(range(7))
    assert buf.episode(1, 6)["action"].tolist() == [100 + t for t in range(6)]


def test_the_torch_path_writes_a_step_with_one_index_put_for_all_step_fields():
    """The GPU path: the step fields cross as one packet and land in one ``index_put_`` (plus a gather
    and an ``index_put_`` per observation key), not one per field."""
    from torch.overrides import TorchFunctionMode

    class Count(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.calls = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.calls.append(getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))

    buf = drive(ahead=False, frames=None, steps=2, numpy_writes=False)
    rewards, term, trunc, success = buf.host
    count = Count()
    with count:
        buf.write(np.array([0, 1]), np.array([3, 4]))
    assert count.calls.count("__setitem__") == 2, count.calls  # the records; the observation
    assert buf.episode(1, 2)["action"].tolist()[-1] == 4


class BufferWatch(StepObserver):
    def __init__(self, engine):
        self.engine, self.pointers = engine, set()

    def on_step(self, active, actions, parked):
        recorder = self.engine._recorder_for_test
        self.pointers.add(tuple(v.data_ptr() for v in recorder.buffer.data.values() if isinstance(v, torch.Tensor)))


def test_nothing_is_allocated_per_step_with_a_step_cap(monkeypatch):
    from fasteval.robot import recording

    spec = EvalSpec(env=KA, policy=ParityPolicy(), n_episodes=20, batch_size=3, max_steps=4, return_episode_data=True)
    made = []
    original = recording.EpisodeDataRecorder.__init__

    def init(self, engine, *args):
        original(self, engine, *args)
        engine._recorder_for_test = self
        made.append(self)

    monkeypatch.setattr(recording.EpisodeDataRecorder, "__init__", init)
    with Engine(spec) as engine:
        watch = BufferWatch(engine)
        result = engine.run(observer=watch)
    assert len(watch.pointers) == 1 and made[0].buffer.frames == 4  # [B, T_cap], never reallocated
    data = result.episode_data
    assert len(data) == sum(r["length"] for r in result.per_episode)
    assert data["next", "done"].sum().item() == 20


def test_save_episodes_writes_exactly_n_episodes_that_load_back(tmp_path):
    out, episodes = tmp_path / "run", tmp_path / "episodes"
    args = ["--env", KA, "-n", "7", "-b", "3", "--seed", "2", "-o", str(out), "--save-episodes", str(episodes)]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert f"wrote 7 episodes" in result.output
    data = load_episodes(episodes)
    info = json.loads((out / "eval_info.json").read_text())
    assert sorted(set(data["episode"].tolist())) == list(range(7))
    for record in info["per_episode"]:
        rows = data[data["episode"] == record["episode_ix"]]
        want = expected_episode(record["seed"])
        assert len(rows) == record["length"] == want["length"]
        assert rows["step_count"].reshape(-1).tolist() == list(range(want["length"]))
        assert float(rows["next", "reward"].sum()) == record["sum_reward"] == want["sum_reward"]
        assert rows["next", "done"].reshape(-1).tolist() == [False] * (len(rows) - 1) + [True]
        assert rows["action"].tolist() == [0] * len(rows)  # the zero policy
    again = CliRunner().invoke(main, [*args[:-4], "-o", str(tmp_path / "run2"), "--save-episodes", str(episodes)])
    assert again.exit_code == 2 and "expected a new or empty folder" in again.output
