"""Heavy envs fitted to the machine's memory, said before the run (fasteval.core.memory_fit; issue 40)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from fasteval.core.envs import EnvFactory, fit_memory
from fasteval.core.memory_fit import GiB, memory_plan
from fasteval.robot.env_kinds import ENV_KINDS, HEAVY_ENVS, LEROBOT_ENV


def test_the_pool_takes_fewer_workers_when_memory_is_short():
    plan = memory_plan(8, "async", None, 4, per_env=1 * GiB, per_process=2 * GiB, available=16 * GiB, what="LIBERO envs")
    assert plan.workers == 3  # (3 + 1) * 2 + 8 = 16 GiB; 4 workers would need 18
    assert "8 LIBERO envs in 4 workers would need about 18.0 GiB" in plan.message
    assert "so the pool uses 3 workers" in plan.message and "--workers" in plan.message


def test_a_batch_that_does_not_fit_says_which_batch_would():
    plan = memory_plan(10, "sync", None, 2, per_env=1 * GiB, per_process=2 * GiB, available=7 * GiB, what="LIBERO envs")
    assert plan.message.startswith("10 LIBERO envs in this process need about 12.0 GiB")
    assert "Lower --batch-size to at most 5" in plan.message
    pool = memory_plan(10, "async", 3, 2, per_env=1 * GiB, per_process=2 * GiB, available=7 * GiB)
    assert pool.workers == 3 and "Lower --batch-size to at most 3" in pool.message  # --workers as given


def test_nothing_is_said_when_it_fits_or_memory_is_unknown():
    assert memory_plan(2, "async", None, 2, GiB, GiB, 64 * GiB) .message is None
    assert memory_plan(2, "sync", None, 2, GiB, GiB, None).message is None


def test_libero_is_declared_heavy_and_the_warning_comes_before_the_envs():
    assert ENV_KINDS.memory(LEROBOT_ENV, {"type": "libero", "task": "libero_10"}) == HEAVY_ENVS["libero"]
    assert ENV_KINDS.memory(LEROBOT_ENV, {"type": "pusht"}) is None
    assert ENV_KINDS.memory("CartPole-v1", {}) is None

    @dataclass(frozen=True)
    class Heavy:
        def memory(self, env, kwargs):
            return (GiB, 2 * GiB, "heavy envs")

    factory = EnvFactory("CartPole-v1", {}, False, Heavy())
    with pytest.warns(RuntimeWarning, match="so the pool uses 1 workers"):
        assert fit_memory(factory, "async", 4, None, available=lambda: 9 * GiB) == 1
    assert fit_memory(EnvFactory("CartPole-v1"), "async", 4, None, available=lambda: GiB) is None
