"""ACT through fasteval: per-seed parity with LeRobot's own eval_policy_all, and mode equivalence.

The episodes are cut to ``STEPS`` steps (LeRobot: ``episode_length``; fasteval: ``max_steps``),
which both apply as a truncation at that step.

The one place LeRobot is wrong is its done mask: ``eval_policy`` sums rewards up to
``done_index + 1``, one step past an episode's end, so an episode that terminates before the
others of its batch also gets the reward of the next step (an autoreset episode's first step,
or 0 where LeRobot freezes the env). fasteval stops at the end. A random ACT never terminates
PushT early (no success), so here every episode is truncated at the same step and the numbers
must agree; an early-terminating episode would differ by exactly that one extra reward.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lerobot.conftest import pusht_spec

pytest.importorskip("lerobot")

from fasteval import evaluate  # noqa: E402

STEPS = 60
TOL = 1e-4


def rows(result) -> list[tuple[int, float, float, bool]]:
    return [(r["seed"], r["sum_reward"], r["max_reward"], r["success"]) for r in result.per_episode]


@pytest.fixture(scope="module")
def lerobot_rows(act_checkpoint: Path) -> list[dict]:
    from fasteval.lerobot.reference import lerobot_eval

    return lerobot_eval(act_checkpoint, n_episodes=6, batch_size=3, seed=1000, episode_length=STEPS)["per_episode"]


@pytest.fixture(scope="module")
def wave_rows(act_checkpoint: Path) -> list[tuple]:
    return rows(evaluate(**pusht_spec(act_checkpoint, n_episodes=6, batch_size=3, max_steps=STEPS, reset_mode="wave")))


@pytest.mark.parametrize("observation_format", ["lerobot", "raw"])
def test_wave_matches_lerobot_eval_per_seed(act_checkpoint: Path, lerobot_rows: list[dict],
                                            observation_format: str) -> None:
    result = evaluate(**pusht_spec(act_checkpoint, n_episodes=6, batch_size=3, max_steps=STEPS, reset_mode="wave",
                                   observation_format=observation_format))
    assert result.meta["batching"] == "wave"
    assert [r["seed"] for r in result.per_episode] == [r["seed"] for r in lerobot_rows] == list(range(1000, 1006))
    assert any(r["sum_reward"] > 0 for r in lerobot_rows)  # the comparison is not between zeros
    for ours, theirs in zip(result.per_episode, lerobot_rows):
        assert ours["sum_reward"] == pytest.approx(theirs["sum_reward"], abs=TOL)
        assert ours["max_reward"] == pytest.approx(theirs["max_reward"], abs=TOL)
        assert ours["success"] == theirs["success"]
        assert ours["length"] == STEPS


@pytest.mark.parametrize("batch_size", [1, 3, 10])
def test_continuous_equals_wave(act_checkpoint: Path, wave_rows: list[tuple], batch_size: int) -> None:
    result = evaluate(**pusht_spec(act_checkpoint, n_episodes=6, batch_size=batch_size, max_steps=STEPS))
    assert result.meta["batching"] == "continuous"
    assert rows(result) == wave_rows


def test_continuous_async_equals_wave(act_checkpoint: Path, wave_rows: list[tuple]) -> None:
    result = evaluate(**pusht_spec(act_checkpoint, n_episodes=6, batch_size=3, max_steps=STEPS,
                                   vectorization="async"))
    assert rows(result) == wave_rows


def test_continuous_refills_mid_chunk(act_checkpoint: Path) -> None:
    """Episodes of different lengths: freed slots restart while others are mid-chunk; each episode still
    equals its own batch-1 run (the policy runs only on the rows that need a chunk)."""
    from fasteval.lerobot.policy import LeRobotPolicy

    spec = pusht_spec(act_checkpoint, n_episodes=5, max_steps=23)  # 23: not a multiple of the 10-step chunk
    alone = rows(evaluate(**spec, batch_size=1))
    together = rows(evaluate(**spec, batch_size=2))
    assert together == alone
    assert LeRobotPolicy.__name__ in type(_loaded(act_checkpoint)).__name__


def _loaded(folder: Path):
    from fasteval.lerobot.loader import load_lerobot_policy

    return load_lerobot_policy(folder, n_slots=2, device="cpu")
