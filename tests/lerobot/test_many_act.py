"""Three LeRobot ACT checkpoints in one pass (issue 30): per seed, each equals its own run.

Three random-init ACTs (seeds 0, 1, 2; written without the hub, as the other LeRobot tests' checkpoints)
share the env slots of one run. Each keeps its own LeRobot runner: its processors, its normalization
stats and its action-chunk queues, one per slot, reset whenever a slot starts an episode of any policy.
At the same batch size every chunk is computed on a batch of the same size, so each policy's episodes are
bit for bit those of its own run (as continuous batching equals waves, tests/lerobot/test_act.py), on
PushT and on an env whose episodes last 7..19 steps (slots finish out of step, refill mid-chunk, and
take another policy's episode).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lerobot.conftest import pusht_spec

pytest.importorskip("lerobot")

from fasteval import evaluate  # noqa: E402

STEPS = 40


@pytest.fixture(scope="module")
def act_checkpoints(tmp_path_factory) -> list[str]:
    from fasteval.robot.lerobot.testing import write_act_checkpoint

    return [str(write_act_checkpoint(tmp_path_factory.mktemp(f"act{seed}"), seed=seed)) for seed in (0, 1, 2)]


def rows(result) -> list[tuple]:
    return [(r["episode_ix"], r["seed"], r["sum_reward"], r["max_reward"], r["length"], r["success"])
            for r in result.per_episode]


def test_three_act_checkpoints_on_pusht_in_one_pass_equal_three_runs(act_checkpoints):
    many = evaluate(**{**pusht_spec("", n_episodes=3, batch_size=3, max_steps=STEPS), "policy": act_checkpoints})
    assert many.meta["n_policies"] == 3 and many.meta["status"] == "complete"
    own = [rows(evaluate(**pusht_spec(p, n_episodes=3, batch_size=3, max_steps=STEPS))) for p in act_checkpoints]
    assert len({tuple(r) for r in own}) == 3  # three different policies
    assert any(r[2] > 0 for policy in own for r in policy)  # not a comparison of zeros
    for name, expected in zip(many.names, own):
        assert rows(many.policy(name)) == expected, name


def test_act_queues_stay_with_their_policy_when_slots_change_hands(act_checkpoints):
    from fasteval.robot.lerobot.testing import VARYING_ENV_REF

    base = dict(env=VARYING_ENV_REF, device="cpu", seed=0, n_episodes=8, observation_format="lerobot", batch_size=3)
    many = evaluate(**base, policy=act_checkpoints)
    assert many.meta["batching"] == "continuous"
    for name, path in zip(many.names, act_checkpoints):
        assert rows(many.policy(name)) == rows(evaluate(**base, policy=path)), name
    assert len({r["length"] for r in many.per_episode}) > 3  # episodes of many lengths: slots refill mid-chunk
    assert all(Path(p).is_dir() for p in act_checkpoints)
