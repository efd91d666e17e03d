"""Shared fixtures: known answers for ``KnownAnswerEnv`` runs, exact comparisons, RNG snapshots.

Every per-episode number of a ``KnownAnswerEnv`` run follows from the episode's seed
and the policy's actions (see ``fasteval.testing.envs``), so the helpers here build
the full expected ``per_episode`` table and compare a result against it exactly.

Action functions (``ACTION_FNS``) are *factories*: each call returns a fresh
``obs -> action`` function for one episode, so stateful policies (a step counter)
are modelled with a closure that starts from zero at every episode, exactly as a
per-episode policy reset would.
"""

from __future__ import annotations

import itertools
import math
import random
from typing import Any, Callable, Iterable

import os

import numpy as np
import pytest
import torch
from hypothesis import settings

from fasteval.testing import StepCounterPolicy, expected_episode

# Hypothesis profiles. The default everywhere (a newcomer's first `pytest`, CI, a developer's run)
# is "ci": derandomized, so the same examples run every time and a fuzz test cannot fail a run by
# drawing a new input; no example database, so nothing is written into the tree; failing examples
# are printed as a reproduction blob. Exploration is opt-in: HYPOTHESIS_PROFILE=explore draws new,
# random examples (many more of them: EXPLORE_EXAMPLES for tests that do not set their own budget,
# and the fault campaign of tests/test_fault_model.py reads it too) and keeps the examples database
# under .hypothesis/ (gitignored), so a failure found is replayed next time. "dev" is an old name
# of "explore".
EXPLORE_EXAMPLES = 1000
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, max_examples=EXPLORE_EXAMPLES, print_blob=True)
settings.register_profile("dev", parent=settings.get_profile("explore"))
HYPOTHESIS_PROFILE = os.environ.get("HYPOTHESIS_PROFILE") or "ci"
settings.load_profile(HYPOTHESIS_PROFILE)
EXPLORING = not settings.default.derandomize
"""True under the explore profile: property tests may scale their budgets up."""

EPISODE_NUMBERS = ("seed", "sum_reward", "max_reward", "length", "success", "nan_rewards")
"""The per-episode numbers that ``expected_episode`` predicts (``episode_ix`` is checked separately)."""


def parity_actions() -> Callable[[np.ndarray], int]:
    """ParityPolicy: the observation's last entry (the parity bit)."""
    return lambda obs: int(round(float(obs[-1])))


def zero_actions() -> Callable[[np.ndarray], int]:
    """The built-in ``zero`` policy on Discrete(2): always action 0."""
    return lambda obs: 0


def step_counter_actions() -> Callable[[np.ndarray], int]:
    """StepCounterPolicy / WaveOnlyPolicy after a reset: ``t % 2`` at 0-based step ``t``.

    A stateful closure: ``expected_episode`` calls it once per step, in order.
    """
    steps = itertools.count()
    return lambda obs: StepCounterPolicy.action_for_step(next(steps))


ACTION_FNS: dict[str, Callable[[], Callable[[np.ndarray], int]]] = {
    "parity": parity_actions,
    "zero": zero_actions,
    "step_counter": step_counter_actions,
}


def expected_run(
    n: int,
    seed: int,
    actions: str | Callable[[], Callable[[np.ndarray], int]],
    nan_reward_seeds: Iterable[int] = (),
    max_steps: int | None = None,
) -> list[dict[str, Any]]:
    """The expected ``per_episode`` numbers of a run of ``n`` episodes from ``seed``, with ``episode_ix``."""
    factory = ACTION_FNS[actions] if isinstance(actions, str) else actions
    nan_reward_seeds = list(nan_reward_seeds)
    out = []
    for i in range(n):
        record = expected_episode(seed + i, factory(), nan_reward_seeds=nan_reward_seeds, max_steps=max_steps)
        record["episode_ix"] = i
        out.append(record)
    return out


def same_number(got: Any, want: Any) -> bool:
    """Exact equality, NaN equal to NaN, and the same kind (bool / int / float)."""
    if isinstance(want, bool):
        return isinstance(got, (bool, np.bool_)) and bool(got) is want
    if isinstance(want, float) and math.isnan(want):
        return isinstance(got, float) and math.isnan(got)
    if isinstance(want, int):
        return isinstance(got, (int, np.integer)) and not isinstance(got, (bool, np.bool_)) and int(got) == want
    return got == want


def assert_episodes_match(per_episode: list[dict[str, Any]], expected: list[dict[str, Any]], context: str = "") -> None:
    """Every expected episode is reported once, in order, with exactly the expected numbers."""
    where = f" ({context})" if context else ""
    assert len(per_episode) == len(expected), f"reported {len(per_episode)} episodes, expected {len(expected)}{where}"
    for got, want in zip(per_episode, expected):
        for key in ("episode_ix", *EPISODE_NUMBERS):
            assert same_number(got[key], want[key]), (
                f"episode {want['episode_ix']} (seed {want['seed']}): {key} = {got[key]!r}, expected {want[key]!r}{where}"
            )


def assert_same_results(a: list[dict[str, Any]], b: list[dict[str, Any]], context: str = "") -> None:
    """Two runs' per-episode tables are identical (NaN equal to NaN), field by field."""
    where = f" ({context})" if context else ""
    assert len(a) == len(b), f"{len(a)} vs {len(b)} episodes{where}"
    for x, y in zip(a, b):
        assert x.keys() == y.keys(), where
        for key in x:
            equal = same_number(x[key], y[key]) if isinstance(y[key], (int, float)) else x[key] == y[key]
            assert equal, f"episode {y['episode_ix']}: {key} = {x[key]!r} vs {y[key]!r}{where}"


class RngSnapshot:
    """The global torch, NumPy and ``random`` states at construction; ``assert_unchanged`` compares."""

    def __init__(self) -> None:
        self.torch = torch.get_rng_state().clone()
        self.numpy = np.random.get_state()
        self.python = random.getstate()

    def assert_unchanged(self) -> None:
        assert torch.equal(torch.get_rng_state(), self.torch), "global torch RNG state changed"
        now = np.random.get_state()
        assert now[0] == self.numpy[0] and np.array_equal(now[1], self.numpy[1]) and tuple(now[2:]) == tuple(self.numpy[2:]), (
            "global NumPy RNG state changed"
        )
        assert random.getstate() == self.python, "global python `random` state changed"


@pytest.fixture(scope="session")
def action_fns() -> dict[str, Callable[[], Callable[[np.ndarray], int]]]:
    """Name -> per-episode action-function factory (``parity``, ``zero``, ``step_counter``)."""
    return dict(ACTION_FNS)


@pytest.fixture(scope="session")
def known_answers() -> Callable[..., list[dict[str, Any]]]:
    """``known_answers(n, seed, actions, nan_reward_seeds=(), max_steps=None)`` -> expected per-episode records."""
    return expected_run


@pytest.fixture(scope="session")
def check_episodes() -> Callable[..., None]:
    """``check_episodes(result.per_episode, expected, context="")``: exact known-answer comparison."""
    return assert_episodes_match


@pytest.fixture(scope="session")
def check_same_results() -> Callable[..., None]:
    """``check_same_results(a, b, context="")``: two per-episode tables are identical."""
    return assert_same_results


@pytest.fixture
def rng_snapshot() -> Callable[[], RngSnapshot]:
    """``snap = rng_snapshot()`` ... ``snap.assert_unchanged()``."""
    return RngSnapshot
