"""Exact known-answer tests of the engine on ``KnownAnswerEnv``.

Every per-episode number (sum, max, length, success, NaN count, seed, index) of a
``KnownAnswerEnv`` episode follows from its seed and the policy's actions, so each
run here is compared number by number, exactly, against ``expected_episode``.
``KnownAnswerEnv`` raises when stepped after its episode's end, so every passing run
also proves that the engine never simulates past an episode's end.

Runs are cached per configuration (``run``) so that the mode-equivalence tests reuse
the runs of the known-answer tests instead of building the envs again.
"""

from __future__ import annotations

import math
import random
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from fasteval.run.api import Evaluator, evaluate
from fasteval.types.errors import UserInputError
from fasteval.types.results import EvalResult
from fasteval.testing import (
    KNOWN_ANSWER_ID,
    KnownAnswerEnv,
    ParityPolicy,
    StepCounterPolicy,
    WaveOnlyPolicy,
    expected_episode,
)
from fasteval.testing.envs import episode_length

CALLABLE_ENV = "fasteval.testing.envs:make_known_answer_env"
SEED = 11  # not 0, so that an episode's seed and its index differ
N = 37  # not divisible by any batch size used here (1 aside)
SYNC_CASES = [(1, N), (3, N), (8, N), (64, N), (64, 101)]  # (batch_size, n_episodes)
ASYNC_CASES = [("parity", 8), ("step_counter", 3), ("zero", 5)]  # few: each builds subprocesses

POLICIES: dict[str, Any] = {
    "parity": ParityPolicy,  # torch nn.Module, row-independent
    "zero": lambda: "zero",  # built-in, by name
    "step_counter": StepCounterPolicy,  # stateful, per-env reset(env_ids)
}

_RUNS: dict[tuple, EvalResult] = {}


def run(policy: str, batch: int, vectorization: str = "sync", n: int = N, seed: int = SEED, reset_mode: str = "auto") -> EvalResult:
    """One evaluation on the registered env with a fresh policy, cached per configuration."""
    key = (policy, batch, vectorization, n, seed, reset_mode)
    if key not in _RUNS:
        _RUNS[key] = evaluate(
            env=KNOWN_ANSWER_ID, policy=POLICIES[policy](), n_episodes=n, batch_size=batch, seed=seed,
            vectorization=vectorization, device="cpu", reset_mode=reset_mode,
        )
    return _RUNS[key]


def numbers(per_episode: list[dict[str, Any]]) -> list[tuple]:
    """The per-episode numbers only (not the env name fields), NaN-safe for ``==`` via repr."""
    keys = ("episode_ix", "seed", "sum_reward", "max_reward", "length", "success", "nan_rewards")
    return [tuple(repr(r[k]) for k in keys) for r in per_episode]


# --------------------------------------------------------------------------------------------
# Known answers: every batch size, both vectorizations, three kinds of policy
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("batch,n", SYNC_CASES, ids=[f"b{b}-n{n}" for b, n in SYNC_CASES])
def test_known_answers_sync(policy, batch, n, known_answers, check_episodes):
    result = run(policy, batch, n=n)
    check_episodes(result.per_episode, known_answers(n, SEED, policy), f"{policy}, batch {batch}, sync")
    assert result.meta["batching"] == "continuous"
    assert result.meta["batch_size"] == min(batch, n)
    assert result.meta["n_episodes"] == n and result.meta["seed"] == SEED


@pytest.mark.parametrize("policy,batch", ASYNC_CASES, ids=[f"{p}-b{b}" for p, b in ASYNC_CASES])
def test_known_answers_async(policy, batch, known_answers, check_episodes):
    result = run(policy, batch, "async")
    check_episodes(result.per_episode, known_answers(N, SEED, policy), f"{policy}, batch {batch}, async")
    assert result.meta["vectorization"] == "async"


@pytest.mark.parametrize("policy,batch", [("parity", 5), ("zero", 8)])
def test_pipelined_loop_matches_known_answers(policy, batch, known_answers, check_episodes, check_same_results):
    """``pipeline=True`` (two double-buffered slot groups, async, stateless policies only): same episodes."""
    result = evaluate(env=KNOWN_ANSWER_ID, policy=POLICIES[policy](), n_episodes=N, batch_size=batch, seed=SEED,
                      vectorization="async", pipeline=True, device="cpu")
    check_episodes(result.per_episode, known_answers(N, SEED, policy), f"{policy}, batch {batch}, pipeline")
    check_same_results(result.per_episode, run(policy, 1).per_episode, "pipeline vs batch 1 sync")


@pytest.mark.parametrize("workers,pipeline", [(1, False), (3, False), (1, True), (3, True)])
def test_worker_pool_sizes_match_known_answers(workers, pipeline, known_answers, check_episodes):
    """Batch 5 on 1 worker (one block) or 3 (blocks of 2, 2, 1; pipelined halves straddle a block): same episodes."""
    result = evaluate(env=KNOWN_ANSWER_ID, policy=ParityPolicy(), n_episodes=N, batch_size=5, seed=SEED,
                      vectorization="async", workers=workers, pipeline=pipeline, device="cpu")
    check_episodes(result.per_episode, known_answers(N, SEED, "parity"), f"{workers} workers, pipeline={pipeline}")


def test_policies_are_told_apart(known_answers):
    """The three policies earn different rewards, so a run with the wrong actions cannot pass."""
    tables = {name: numbers(known_answers(N, SEED, name)) for name in POLICIES}
    assert tables["parity"] != tables["zero"] != tables["step_counter"] != tables["parity"]


@pytest.mark.parametrize("policy", list(POLICIES))
def test_mode_equivalence(policy, check_same_results):
    """Every episode's record is identical whatever the batch size or vectorization."""
    baseline = run(policy, 1)
    configs = [(b, "sync") for b, n in SYNC_CASES if n == N] + [(b, "async") for p, b in ASYNC_CASES if p == policy]
    for batch, vectorization in configs:
        check_same_results(run(policy, batch, vectorization).per_episode, baseline.per_episode, f"batch {batch}, {vectorization}")


@pytest.mark.parametrize("batch", [1, 8, 64])
@pytest.mark.parametrize("n", [1, 7, 8, 9, 17, 63, 65])
def test_exactly_n_episodes_reported(batch, n, known_answers, check_episodes):
    result = evaluate(env=KNOWN_ANSWER_ID, policy=ParityPolicy(), n_episodes=n, batch_size=batch, seed=SEED, device="cpu")
    assert [r["episode_ix"] for r in result.per_episode] == list(range(n))
    assert [r["seed"] for r in result.per_episode] == list(range(SEED, SEED + n))
    assert result.overall()["n_episodes"] == n
    check_episodes(result.per_episode, known_answers(n, SEED, "parity"))


def test_same_seed_same_episode_whatever_its_index(check_same_results):
    """Episode results depend on the seed only: seeds 20..47 from two runs with different start seeds agree."""
    a = run("step_counter", 3, n=N, seed=SEED)  # seeds 11..47
    b = run("step_counter", 8, n=28, seed=20)  # seeds 20..47
    tail = [dict(r, episode_ix=r["episode_ix"] - 9) for r in a.per_episode[9:]]
    check_same_results(tail, b.per_episode)


# --------------------------------------------------------------------------------------------
# Env references
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["parity", "step_counter"])
def test_callable_env_matches_registered_id(policy, known_answers, check_episodes):
    result = evaluate(env=CALLABLE_ENV, policy=POLICIES[policy](), n_episodes=N, batch_size=8, seed=SEED, device="cpu")
    check_episodes(result.per_episode, known_answers(N, SEED, policy), "module:callable env")
    assert numbers(result.per_episode) == numbers(run(policy, 8).per_episode)
    assert {r["task"] for r in result.per_episode} == {CALLABLE_ENV}


def test_callable_env_async(known_answers, check_episodes):
    result = evaluate(env=CALLABLE_ENV, policy=ParityPolicy(), n_episodes=N, batch_size=4, seed=SEED,
                      device="cpu", vectorization="async")
    check_episodes(result.per_episode, known_answers(N, SEED, "parity"), "module:callable env, async")


# --------------------------------------------------------------------------------------------
# Wave mode vs continuous batching
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("batch", [3, 8])
def test_wave_mode_matches_continuous(batch, known_answers, check_episodes, check_same_results):
    wave = run("parity", batch, reset_mode="wave")
    assert wave.meta["batching"] == "wave"
    check_episodes(wave.per_episode, known_answers(N, SEED, "parity"), "wave")
    check_same_results(wave.per_episode, run("parity", batch).per_episode)


@pytest.mark.parametrize("reset_mode,batching", [("wave", "wave"), ("per-env", "continuous")])
def test_step_counter_reset_modes(reset_mode, batching, known_answers, check_episodes):
    result = run("step_counter", 8, reset_mode=reset_mode)
    assert result.meta["batching"] == batching
    check_episodes(result.per_episode, known_answers(N, SEED, "step_counter"), reset_mode)


@pytest.mark.parametrize(
    "batch,vectorization", [(1, "sync"), (3, "sync"), (8, "sync"), (64, "sync"), (3, "async")],
)
def test_wave_only_policy_runs_in_waves(batch, vectorization, known_answers, check_episodes):
    result = evaluate(env=KNOWN_ANSWER_ID, policy=WaveOnlyPolicy(), n_episodes=N, batch_size=batch, seed=SEED,
                      vectorization=vectorization, device="cpu")
    assert result.meta["batching"] == "wave"
    check_episodes(result.per_episode, known_answers(N, SEED, "step_counter"), f"WaveOnlyPolicy, batch {batch}")


def test_wave_only_policy_refuses_per_env_mode():
    with pytest.raises(UserInputError, match="per-env"):
        evaluate(env=KNOWN_ANSWER_ID, policy=WaveOnlyPolicy(), n_episodes=5, batch_size=2, device="cpu", reset_mode="per-env")


def test_wave_mode_waits_for_the_whole_wave():
    """In wave mode no slot starts a new episode before every slot of its wave has finished."""
    starts: list[list[int]] = []

    class RecordingWavePolicy(WaveOnlyPolicy):
        def reset(self) -> None:
            starts.append([])
            super().reset()

    resets: list[int] = []

    class Spy(KnownAnswerEnv):
        def reset(self, *, seed=None, options=None):
            resets.append(seed)
            return super().reset(seed=seed, options=options)

    _register_once("FastevalTestWaveSpy-v0", Spy)
    evaluate(env="FastevalTestWaveSpy-v0", policy=RecordingWavePolicy(), n_episodes=10, batch_size=4, seed=SEED, device="cpu")
    assert len(starts) == 3  # waves of 4, 4 and 2 episodes
    assert resets == list(range(SEED, SEED + 10))


# --------------------------------------------------------------------------------------------
# The random policy
# --------------------------------------------------------------------------------------------


def _random_run(batch: int, **kw: Any) -> EvalResult:
    return evaluate(env=KNOWN_ANSWER_ID, policy="random", n_episodes=N, batch_size=batch, seed=SEED, device="cpu", **kw)


def test_random_policy_is_batch_invariant(check_same_results):
    one = _random_run(1)
    check_same_results(_random_run(7).per_episode, one.per_episode, "batch 7")
    check_same_results(_random_run(7, reset_mode="wave").per_episode, one.per_episode, "batch 7, wave")
    check_same_results(_random_run(1).per_episode, one.per_episode, "same run again")


def test_random_policy_is_random(known_answers):
    """Not secretly constant: its rewards differ from both constant-action policies' somewhere."""
    table = numbers(_random_run(7).per_episode)
    for constant in (lambda: (lambda obs: 0)), (lambda: (lambda obs: 1)):
        assert table != numbers(known_answers(N, SEED, constant))


def test_random_policy_same_seed_same_episode(check_same_results):
    """A random episode depends only on its seed, not on its index or slot."""
    a = _random_run(7)  # seeds 11..47
    b = evaluate(env=KNOWN_ANSWER_ID, policy="random", n_episodes=28, batch_size=5, seed=20, device="cpu")
    tail = [dict(r, episode_ix=r["episode_ix"] - 9) for r in a.per_episode[9:]]
    check_same_results(tail, b.per_episode)


# --------------------------------------------------------------------------------------------
# NaN rewards
# --------------------------------------------------------------------------------------------

NAN_SEEDS = [SEED + 2, SEED + 5, SEED + 17]  # 13 has length 1: the NaN is its only reward


@pytest.mark.filterwarnings("ignore:.*The reward is a NaN value:UserWarning")  # gymnasium's env checker
@pytest.mark.parametrize("env,batch", [(KNOWN_ANSWER_ID, 3), (CALLABLE_ENV, 8)])
def test_nan_rewards_are_kept_and_counted(env, batch, known_answers, check_episodes):
    assert episode_length(SEED + 2) == 1
    n = 20
    result = evaluate(env=env, policy=ParityPolicy(), n_episodes=n, batch_size=batch, seed=SEED, device="cpu",
                      env_kwargs={"nan_reward_seeds": NAN_SEEDS})
    check_episodes(result.per_episode, known_answers(n, SEED, "parity", nan_reward_seeds=NAN_SEEDS), "NaN rewards")
    clean = known_answers(n, SEED, "parity")
    for record, clean_record in zip(result.per_episode, clean):
        if record["seed"] in NAN_SEEDS:
            assert math.isnan(record["sum_reward"]) and math.isnan(record["max_reward"])
            assert record["nan_rewards"] == 1
        else:
            assert record["nan_rewards"] == 0
            assert record["sum_reward"] == clean_record["sum_reward"]
            assert record["max_reward"] == clean_record["max_reward"]
            assert record["length"] == clean_record["length"] and record["success"] == clean_record["success"]
    overall = result.overall()
    assert overall["n_nan_reward_episodes"] == len(NAN_SEEDS)
    assert math.isnan(overall["avg_sum_reward"]) and math.isnan(overall["avg_max_reward"])
    assert overall["n_episodes"] == n
    assert overall["env_steps"] == sum(r["length"] for r in clean)


# --------------------------------------------------------------------------------------------
# Step cap
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("env", [KNOWN_ANSWER_ID, CALLABLE_ENV])
@pytest.mark.parametrize("policy,batch", [("parity", 3), ("step_counter", 8), ("zero", 1)])
@pytest.mark.parametrize("max_steps", [1, 3])
def test_max_steps_caps_lengths(env, policy, batch, max_steps, known_answers, check_episodes):
    result = evaluate(env=env, policy=POLICIES[policy](), n_episodes=N, batch_size=batch, seed=SEED, device="cpu",
                      max_steps=max_steps)
    expected = known_answers(N, SEED, policy, max_steps=max_steps)
    check_episodes(result.per_episode, expected, f"max_steps={max_steps}")
    assert max(r["length"] for r in result.per_episode) == max_steps
    assert result.meta["max_steps"] == max_steps
    # the cap really cut some episodes short
    assert any(episode_length(r["seed"]) > max_steps for r in result.per_episode)


def test_max_steps_async(known_answers, check_episodes):
    result = evaluate(env=KNOWN_ANSWER_ID, policy=StepCounterPolicy(), n_episodes=N, batch_size=4, seed=SEED,
                      device="cpu", max_steps=3, vectorization="async")
    check_episodes(result.per_episode, known_answers(N, SEED, "step_counter", max_steps=3), "max_steps=3, async")


# --------------------------------------------------------------------------------------------
# Nothing simulated beyond the n episodes and their ends
# --------------------------------------------------------------------------------------------


class CountingEnv(KnownAnswerEnv):
    """KnownAnswerEnv that records every reset's seed and counts steps (class-wide)."""

    reset_seeds: list[int] = []
    steps = 0

    @classmethod
    def clear(cls) -> None:
        cls.reset_seeds = []
        cls.steps = 0

    def reset(self, *, seed=None, options=None):
        CountingEnv.reset_seeds.append(seed)
        return super().reset(seed=seed, options=options)

    def step(self, action):
        CountingEnv.steps += 1
        return super().step(action)


COUNTING_ID = "FastevalTestCounting-v0"


def _register_once(env_id: str, entry_point: Any) -> None:
    if env_id not in gym.registry:
        gym.register(id=env_id, entry_point=entry_point)


@pytest.fixture
def counting_env():
    _register_once(COUNTING_ID, CountingEnv)
    CountingEnv.clear()
    yield CountingEnv
    CountingEnv.clear()


@pytest.mark.parametrize(
    "policy,batch,n,reset_mode,max_steps",
    [
        ("parity", 1, N, "auto", None),
        ("parity", 8, N, "auto", None),
        ("parity", 8, N, "wave", None),
        ("step_counter", 8, N, "auto", 3),
        ("wave_only", 8, N, "auto", 3),
        ("wave_only", 3, N, "auto", None),
        ("zero", 64, 101, "auto", None),
        ("zero", 64, 5, "auto", None),
    ],
)
def test_exactly_n_resets_and_the_expected_steps(counting_env, policy, batch, n, reset_mode, max_steps, known_answers, check_episodes):
    make_policy = {**POLICIES, "wave_only": WaveOnlyPolicy}[policy]
    result = evaluate(env=COUNTING_ID, policy=make_policy(), n_episodes=n, batch_size=batch, seed=SEED,
                      device="cpu", reset_mode=reset_mode, max_steps=max_steps)
    expected = known_answers(n, SEED, "step_counter" if policy == "wave_only" else policy, max_steps=max_steps)
    check_episodes(result.per_episode, expected)
    # every episode is reset exactly once, with its own seed, in episode order
    assert counting_env.reset_seeds == list(range(SEED, SEED + n))
    # and stepped exactly its length: no step after an end, none for episodes beyond n
    assert counting_env.steps == sum(r["length"] for r in expected) == result.overall()["env_steps"]


def test_evaluator_with_more_slots_than_episodes(counting_env, known_answers, check_episodes):
    with Evaluator(COUNTING_ID, policy=StepCounterPolicy(), batch_size=16, device="cpu") as ev:
        result = ev.evaluate(n_episodes=5, seed=SEED)
        check_episodes(result.per_episode, known_answers(5, SEED, "step_counter"))
        assert counting_env.reset_seeds == list(range(SEED, SEED + 5))
        assert counting_env.steps == sum(episode_length(s) for s in range(SEED, SEED + 5))
        # slots 5..15 were never used; a later, larger call uses them all
        counting_env.clear()
        result = ev.evaluate(n_episodes=40, seed=2)
        check_episodes(result.per_episode, known_answers(40, 2, "step_counter"))
        assert counting_env.reset_seeds == list(range(2, 42))
        assert counting_env.steps == sum(episode_length(s) for s in range(2, 42))


# --------------------------------------------------------------------------------------------
# Aggregates
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy,batch", [("parity", 8), ("step_counter", 3), ("zero", 64)])
def test_aggregates_match_expected_episodes(policy, batch, known_answers):
    result = run(policy, batch)
    expected = known_answers(N, SEED, policy)
    overall = result.overall()
    sums = [e["sum_reward"] for e in expected]
    maxes = [e["max_reward"] for e in expected]
    k = sum(e["success"] for e in expected)
    # rewards are multiples of 0.5, so these sums are exact in any order
    assert overall["avg_sum_reward"] == math.fsum(sums) / N
    assert overall["avg_max_reward"] == math.fsum(maxes) / N
    assert overall["pc_success"] == 100.0 * k / N
    assert overall["n_success"] == k
    assert overall["n_episodes"] == N
    assert overall["env_steps"] == sum(e["length"] for e in expected)
    assert overall["avg_length"] == sum(e["length"] for e in expected) / N
    assert overall["n_nan_reward_episodes"] == 0
    assert result.to_dict()["avg_sum_reward"] == overall["avg_sum_reward"]


def test_max_reward_of_all_negative_episode_is_negative():
    """Max starts at -inf, not 0: an episode whose rewards are all negative reports a negative max."""
    seed = next(s for s in range(100) if expected_episode(s)["max_reward"] < 0)
    result = evaluate(env=KNOWN_ANSWER_ID, policy="zero", n_episodes=1, batch_size=1, seed=seed, device="cpu")
    assert result.per_episode[0]["max_reward"] == expected_episode(seed)["max_reward"] < 0


def test_success_ci95_is_the_wilson_interval_for_7_of_20(known_answers):
    # seeds 30..49 capped at 4 steps: exactly 7 successes
    n, seed, cap = 20, 30, 4
    expected = known_answers(n, seed, "zero", max_steps=cap)
    assert sum(e["success"] for e in expected) == 7
    result = evaluate(env=KNOWN_ANSWER_ID, policy="zero", n_episodes=n, batch_size=6, seed=seed, device="cpu", max_steps=cap)
    overall = result.overall()
    assert overall["n_success"] == 7
    assert overall["pc_success"] == 35.0
    # Wilson score interval by hand: p = 0.35, n = 20, z = 1.96 (two-sided 95%)
    z, p = 1.959963984540054, 7 / 20
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    lo, hi = overall["pc_success_ci95"]
    assert lo == pytest.approx(100 * (centre - half), abs=1e-9)
    assert hi == pytest.approx(100 * (centre + half), abs=1e-9)
    assert (lo, hi) == pytest.approx((18.1192, 56.7146), abs=1e-4)  # published value for 7/20


# --------------------------------------------------------------------------------------------
# Evaluator: build once, evaluate many times
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["parity", "step_counter"])
def test_evaluator_matches_one_shot_and_does_not_rebuild(policy, known_answers, check_episodes, check_same_results):
    batch = 4
    ev = Evaluator(KNOWN_ANSWER_ID, policy=POLICIES[policy](), batch_size=batch, n_episodes=10, seed=3, device="cpu")
    try:
        before = KnownAnswerEnv.constructed
        first = ev.evaluate()  # the spec's n_episodes=10, seed=3
        built = KnownAnswerEnv.constructed - before
        assert 1 <= built <= batch + 1  # one env per slot (plus at most a probe)
        second = ev.evaluate(n_episodes=13, seed=100)
        third = ev.evaluate(n_episodes=10, seed=3)
        assert KnownAnswerEnv.constructed - before == built, "Evaluator rebuilt its envs on a later call"
    finally:
        ev.close()
    check_episodes(first.per_episode, known_answers(10, 3, policy))
    check_episodes(second.per_episode, known_answers(13, 100, policy))
    one_shot = lambda n, seed: evaluate(  # noqa: E731
        env=KNOWN_ANSWER_ID, policy=POLICIES[policy](), n_episodes=n, batch_size=batch, seed=seed, device="cpu").per_episode
    check_same_results(first.per_episode, one_shot(10, 3), "first call")
    check_same_results(second.per_episode, one_shot(13, 100), "second call")
    check_same_results(third.per_episode, first.per_episode, "third call repeats the first")
    assert second.meta["seed"] == 100 and second.meta["n_episodes"] == 13


def test_evaluator_wave_policy_many_calls(known_answers, check_episodes):
    with Evaluator(KNOWN_ANSWER_ID, policy=WaveOnlyPolicy(), batch_size=5, device="cpu") as ev:
        for n, seed in [(12, 0), (3, 50), (17, 7)]:
            result = ev.evaluate(n_episodes=n, seed=seed)
            assert result.meta["batching"] == "wave"
            check_episodes(result.per_episode, known_answers(n, seed, "step_counter"), f"n={n}, seed={seed}")


def test_evaluator_after_a_failed_run(known_answers, check_episodes):
    """An evaluation that raises mid-run leaves envs mid-episode; the next call still gives exact answers."""

    class FailOnce(StepCounterPolicy):
        calls = 0
        fail_at = 20

        def select_action(self, obs):
            FailOnce.calls += 1
            if FailOnce.calls == FailOnce.fail_at:
                raise RuntimeError("boom")
            return super().select_action(obs)

    with Evaluator(KNOWN_ANSWER_ID, policy=FailOnce(), batch_size=4, device="cpu") as ev:
        with pytest.raises(RuntimeError, match="boom"):
            ev.evaluate(n_episodes=30, seed=SEED)
        result = ev.evaluate(n_episodes=N, seed=SEED)
    check_episodes(result.per_episode, known_answers(N, SEED, "step_counter"))


# --------------------------------------------------------------------------------------------
# Global RNG states
# --------------------------------------------------------------------------------------------


class GlobalRngPolicy:
    """Draws from the global torch, NumPy and ``random`` RNGs at every step; acts like ParityPolicy."""

    def select_action(self, obs: torch.Tensor) -> torch.Tensor:
        torch.rand(3)
        np.random.random(3)
        random.random()
        return obs[..., -1].round().long()


@pytest.mark.parametrize("policy", ["global_rng", "random", "parity"])
def test_global_rng_states_unchanged(policy, rng_snapshot, known_answers, check_episodes):
    torch.manual_seed(1234)
    np.random.seed(1234)
    random.seed(1234)
    snap = rng_snapshot()
    ref = {"global_rng": GlobalRngPolicy(), "random": "random", "parity": ParityPolicy()}[policy]
    result = evaluate(env=KNOWN_ANSWER_ID, policy=ref, n_episodes=N, batch_size=5, seed=SEED, device="cpu")
    snap.assert_unchanged()
    if policy != "random":
        check_episodes(result.per_episode, known_answers(N, SEED, "parity"))


def test_global_rng_states_unchanged_by_evaluator(rng_snapshot):
    snap = rng_snapshot()
    with Evaluator(KNOWN_ANSWER_ID, policy=GlobalRngPolicy(), batch_size=3, device="cpu") as ev:
        ev.evaluate(n_episodes=9, seed=1)
        snap.assert_unchanged()
        ev.evaluate(n_episodes=4, seed=2)
    snap.assert_unchanged()


def test_stochastic_torch_policy_is_reproducible(check_same_results):
    """torch is seeded with the run's seed inside the run: same seed, same episodes."""

    class CoinFlip:
        def select_action(self, obs: torch.Tensor) -> torch.Tensor:
            return torch.randint(0, 2, (obs.shape[0],))

    def go(seed: int) -> list[dict[str, Any]]:
        return evaluate(env=KNOWN_ANSWER_ID, policy=CoinFlip(), n_episodes=20, batch_size=4, seed=seed, device="cpu").per_episode

    torch.manual_seed(0)
    a = go(5)
    torch.manual_seed(99)  # the global state before the run must not matter
    check_same_results(go(5), a)


def test_global_rng_states_unchanged_when_the_run_raises(rng_snapshot):
    class RaisesLater(GlobalRngPolicy):
        calls = 0

        def select_action(self, obs):
            RaisesLater.calls += 1
            if RaisesLater.calls > 3:
                raise RuntimeError("boom")
            return super().select_action(obs)

    snap = rng_snapshot()
    with pytest.raises(RuntimeError, match="boom"):
        evaluate(env=KNOWN_ANSWER_ID, policy=RaisesLater(), n_episodes=10, batch_size=2, seed=SEED, device="cpu")
    snap.assert_unchanged()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_rng_state_unchanged_by_a_cpu_evaluation():
    torch.cuda.init()
    before = [torch.cuda.get_rng_state(i).clone() for i in range(torch.cuda.device_count())]
    evaluate(env=KNOWN_ANSWER_ID, policy=GlobalRngPolicy(), n_episodes=5, batch_size=2, seed=SEED, device="cpu")
    after = [torch.cuda.get_rng_state(i) for i in range(torch.cuda.device_count())]
    assert all(torch.equal(a, b) for a, b in zip(after, before)), "global CUDA RNG state changed"
