"""``--save-episodes DIR`` loads as a TorchRL replay buffer, in TorchRL's key layout: a sampled batch is checked
row by row against the run's own records (and the known-answer env the rows came from)."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchrl")
from click.testing import CliRunner  # noqa: E402
from torchrl.data import LazyMemmapStorage, SliceSampler, TensorDictReplayBuffer  # noqa: E402

from fasteval.doors.cli import main  # noqa: E402
from fasteval.run.episode_files import load_episodes, load_replay_buffer  # noqa: E402
from fasteval.testing import KnownAnswerEnv  # noqa: E402

KA = "fasteval/KnownAnswer-v0"
N, SEED = 9, 20


def rollout(seed: int) -> list[tuple]:
    """``(obs, action, reward, next_obs, terminated, truncated)`` per step of the zero policy's episode ``seed``."""
    env = KnownAnswerEnv()
    obs, _ = env.reset(seed=seed)
    out = []
    while True:
        nxt, reward, terminated, truncated, _ = env.step(0)
        out.append((obs, 0, reward, nxt, terminated, truncated))
        obs = nxt
        if terminated or truncated:
            return out


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("replay")
    out, episodes = root / "run", root / "episodes"
    result = CliRunner().invoke(main, ["--env", KA, "-n", str(N), "-b", "4", "--seed", str(SEED), "-o", str(out),
                                       "--save-episodes", str(episodes)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    records = {r["episode_ix"]: r for r in json.loads((out / "eval_info.json").read_text())["per_episode"]}
    return episodes, records


def check_row(row, records, flags: bool = True) -> None:
    """One sampled step against the run's record of its episode and the env's own rollout of that seed
    (``flags=False``: not its end flags, which TorchRL's SliceSampler sets at the end of every slice)."""
    episode, t = int(row["episode"]), int(row["step_count"].item())
    record = records[episode]
    assert int(row["seed"]) == record["seed"] == SEED + episode
    assert 0 <= t < record["length"]
    obs, action, reward, nxt, terminated, truncated = rollout(record["seed"])[t]
    assert np.array_equal(row["observation"].numpy(), obs)
    assert np.array_equal(row["next", "observation"].numpy(), nxt)
    assert int(row["action"]) == action
    assert row["next", "reward"].item() == reward
    assert tuple(row["next", "reward"].shape) == (1,) and tuple(row["next", "done"].shape) == (1,)  # TorchRL's [*B, 1]
    if not flags:
        return
    last = t == record["length"] - 1
    assert row["next", "done"].item() == last and row["next", "terminated"].item() == terminated
    assert row["next", "truncated"].item() == truncated
    assert not row["done"].item() and not row["terminated"].item() and not row["truncated"].item()


def test_the_folder_loads_with_torchrls_own_loads_and_a_sample_matches_the_records(saved):
    folder, records = saved
    n_steps = sum(r["length"] for r in records.values())
    buffer = TensorDictReplayBuffer(storage=LazyMemmapStorage(n_steps))
    buffer.loads(folder)
    assert len(buffer) == n_steps
    torch.manual_seed(0)
    batch = buffer.sample(32)
    assert len({int(e) for e in batch["episode"]}) > 3  # the sample spans episodes
    for row in batch:
        check_row(row, records)


def test_the_documented_loader_reads_no_pickle_and_sums_to_the_records(saved):
    folder, records = saved
    buffer = load_replay_buffer(folder)
    data = buffer[:]
    for episode, record in records.items():
        rows = data[data["episode"] == episode]
        assert len(rows) == record["length"]
        assert float(rows["next", "reward"].sum()) == record["sum_reward"]
    torch.manual_seed(1)
    for row in buffer.sample(16):
        check_row(row, records)
    assert len(load_episodes(folder)) == len(buffer)


def test_slice_sampler_reads_whole_trajectories_from_the_episode_key(saved):
    """TorchRL's SliceSampler finds trajectories under "episode" (its default traj_key): every slice is consecutive
    steps of one episode."""
    folder, records = saved
    buffer = load_replay_buffer(folder, sampler=SliceSampler(slice_len=3))  # slices of 3 steps, never across episodes
    torch.manual_seed(2)
    batch = buffer.sample(12)
    for piece in batch.split([3] * 4):
        episode = int(piece["episode"][0])
        assert (piece["episode"] == episode).all()
        steps = piece["step_count"].reshape(-1).tolist()
        assert steps == list(range(steps[0], steps[0] + len(steps)))
        for i, row in enumerate(piece):
            check_row(row, records, flags=i < len(piece) - 1)
        assert piece[-1]["next", "truncated"].item() or piece[-1]["next", "done"].item()  # TorchRL marks the slice end
