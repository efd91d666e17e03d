"""Timeouts that fit (issue 40): ``--step-timeout`` is per env call, so a wave of resets done in turn gets one
per env (a first LIBERO reset per env is slow, not hung), and every timeout message says what happened and
which option to raise."""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np

from fasteval.core.envs import SyncSlotEnvs
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


def test_a_wave_of_resets_gets_the_step_timeout_per_env():
    expired = []
    watchdog = Watchdog(on_expire=expired.append)
    envs = SyncSlotEnvs(lambda: SlowReset(0.8), 3, step_timeout=2.0, watchdog=watchdog)
    try:
        envs.reset_slots([0, 1, 2], [0, 1, 2])  # 2.4 s in all: over one 2 s deadline, under three
        time.sleep(0.3)
        assert expired == [] and watchdog.expired is None
        assert envs.reset_guard(3)[0] == 6.0 and envs.reset_guard(1)[0] == 2.0
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
    assert pool._limit("reset", 4) == 1200.0 and pool._limit("step", 4) == 300.0
    pool.step_timeout = None
    assert pool._limit("reset", 4) is None
