"""Timeouts that fit (issue 40): ``--step-timeout`` is per env call, so a wave of resets done in turn gets one
per env (a first LIBERO reset per env is slow, not hung), and every timeout message says what happened and
which option to raise."""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np

from fasteval.core.envs import SyncSlotEnvs
from fasteval.core.reset_deadline import FIRST_RESET_FACTOR, MEASURED_FACTOR, ResetDeadline
from fasteval.core.watchdog import ENV, POLICY, Watchdog, expiry_cause


class SlowReset(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, reset_s: float = 0.0):
        self.reset_s = reset_s

    def reset(self, *, seed=None, options=None):
        time.sleep(self.reset_s)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.zeros(1, np.float32), 0.0, False, False, {}


def test_a_wave_of_resets_gets_the_first_reset_limit_per_env_then_a_limit_scaled_from_it():
    expired = []
    watchdog = Watchdog(on_expire=expired.append)
    envs = SyncSlotEnvs(lambda: SlowReset(0.8), 3, step_timeout=0.5, watchdog=watchdog)
    try:
        assert envs.reset_guard(3)[0] == 3 * FIRST_RESET_FACTOR * 0.5 and envs.reset_guard(1)[0] == FIRST_RESET_FACTOR * 0.5
        assert envs.reset_guard(2)[2].startswith("the first reset of 2 env(s) in turn")
        envs.reset_slots([0, 1, 2], [0, 1, 2])  # 2.4 s in all, 0.8 s each: over the step timeout, under the first limit
        time.sleep(0.3)
        assert expired == [] and watchdog.expired is None
        measured = envs.resets.measured_s
        assert 0.8 <= measured < 2.4
        assert envs.reset_guard(3)[0] == 3 * MEASURED_FACTOR * measured  # scaled from the first wave, not 3 x 0.5 s
        assert "slowest first reset" in envs.reset_guard(3)[2]
        envs.reset_slots([1], [5])  # later waves do not move the limit
        assert envs.resets.measured_s == measured
    finally:
        watchdog.close()
        envs.close()


def test_the_reset_limit_rule():
    deadline = ResetDeadline(300.0)
    assert deadline.limit(2) == 2 * FIRST_RESET_FACTOR * 300.0
    deadline.note([(120.0, 4), (90.0, 1)])  # the slowest per env: 90 s (a worker of one env), not 30 s
    assert deadline.measured_s == 90.0 and deadline.per_env() == MEASURED_FACTOR * 90.0 and deadline.limit(2) == 1800.0
    deadline.note([(500.0, 1)])  # only the first wave counts
    assert deadline.measured_s == 90.0
    quick = ResetDeadline(300.0)
    quick.note([(0.01, 1)])
    assert quick.per_env() == 300.0  # never below --step-timeout
    assert ResetDeadline(None).limit(3) is None


def test_a_first_reset_that_hangs_ends_a_sync_run_with_a_message_naming_the_option():
    expired = []
    watchdog = Watchdog(on_expire=expired.append)
    envs = SyncSlotEnvs(lambda: SlowReset(1.5), 1, step_timeout=0.2, watchdog=watchdog)
    try:
        envs.reset_slots([0], [0])  # 1.5 s: over 4 x 0.2 s
        time.sleep(0.2)
        assert len(expired) == 1
        cause = expired[0]
        assert cause.startswith("the first reset of 1 env(s) in turn (4 x --step-timeout 0.2 s = 0.8 s each: a first "
                                "reset builds the env) did not return within 0.8 s (--step-timeout)")
        assert "raise --step-timeout" in cause
    finally:
        watchdog.close()
        envs.close()


def test_timeout_messages_say_what_happened_and_which_option_to_raise():
    env = expiry_cause(900.0, ENV, "3 env resets in turn (300 s each)")
    assert env.startswith("3 env resets in turn (300 s each) did not return within 900 s (--step-timeout)")
    assert "raise --step-timeout" in env and "slow rather than hung" in env
    policy = expiry_cause(5.0, POLICY, "the policy")
    assert policy.startswith("the policy did not return within 5 s (--policy-timeout)") and "raise --policy-timeout" in policy


def test_a_pool_reset_deadline_is_per_env_and_its_message_names_the_option():
    from fasteval.core.workers import WorkerPoolEnvs

    pool = WorkerPoolEnvs.__new__(WorkerPoolEnvs)  # only the deadline rule, no processes
    pool.step_timeout = 300.0
    pool.resets = ResetDeadline(300.0)
    assert pool._limit("reset", 4) == 4 * FIRST_RESET_FACTOR * 300.0 and pool._limit("step", 4) == 300.0
    pool.resets.note([(100.0, 2)])
    assert pool._limit("reset", 4) == 4 * 500.0 and pool._limit("step", 4) == 300.0
    pool.step_timeout = None
    pool.resets = ResetDeadline(None)
    assert pool._limit("reset", 4) is None


def test_a_pool_measures_its_first_wave_and_scales_its_reset_limit():
    from fasteval.core.workers import WorkerPoolEnvs

    space = gym.spaces.Box(-1, 1, (1,), np.float32)
    pool = WorkerPoolEnvs(_slow_reset_env, 2, space, gym.spaces.Discrete(2), n_workers=2, step_timeout=0.5)
    try:
        assert pool._limit("reset", 1) == FIRST_RESET_FACTOR * 0.5
        pool.reset_slots([0, 1], [0, 1])  # 0.8 s each, in parallel: over the step timeout, under the first limit
        assert pool.failures == []
        assert pool.resets.measured_s >= 0.8
        assert pool._limit("reset", 1) == MEASURED_FACTOR * pool.resets.measured_s
    finally:
        pool.close()


def _slow_reset_env():
    return SlowReset(0.8)
