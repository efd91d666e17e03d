"""LIBERO's hard reset with the compiled model and render context reused (fasteval.robot.env_kinds.model_reuse):
with and without the reuse, every observation the policy reads, every reward, success and length are bitwise equal,
in process at batch sizes 1 and 2 and in the pool. Each env runs at least two episodes (the first hard reset
compiles, the later ones reuse). 32 px, few steps: LIBERO resets are slow."""

from __future__ import annotations

import pytest

pytest.importorskip("lerobot")
from fasteval.robot.env_kinds.model_reuse import DEFAULT_OFF, OFF_VARIABLE, ON, ON_VARIABLE, kept_model_of  # noqa: E402
from tests.lerobot.test_unread_lerobot import TASK0, LiberoChunks, _outcomes, libero_home, needs_libero  # noqa: E402,F401


def _run(batch: int, vectorization: str):
    from fasteval.robot.lerobot.envs import ENV_REF
    from fasteval.run.engine import Engine
    from fasteval.types.spec import EvalSpec

    policy = LiberoChunks(3)
    spec = EvalSpec(env=ENV_REF, env_kwargs=dict(TASK0), policy=policy, n_episodes=3, seed=1000, max_steps=5,
                    batch_size=batch, vectorization=vectorization, device="cpu")
    with Engine(spec) as engine:
        result = engine.run()
        local = engine.envs.local_envs or []
        kept = [kept_model_of(env.unwrapped) for env in local]
        reused = sum(k.reused for k in kept if k is not None)
    return result, policy, reused


@needs_libero
def test_libero_reuses_the_compiled_model_exactly(libero_home, monkeypatch):
    for batch, vectorization in [(1, "sync"), (2, "sync"), (2, "async")]:
        monkeypatch.setenv(OFF_VARIABLE, "1")
        reference, ref_policy, ref_reused = _run(batch, vectorization)
        assert reference.meta["reset_reuse"] == f"off ({OFF_VARIABLE}=1)" and ref_reused == 0
        monkeypatch.delenv(OFF_VARIABLE)
        monkeypatch.setenv(ON_VARIABLE, "1")  # off by default (module docstring)
        result, policy, reused = _run(batch, vectorization)
        monkeypatch.delenv(ON_VARIABLE)
        assert result.meta["reset_reuse"] == ON
        if vectorization == "sync":
            assert reused >= 1  # some hard reset did reuse (the pool's envs are in its workers)
        assert _outcomes(result) == _outcomes(reference), (batch, vectorization)
        assert not any(r.get("error") for r in result.per_episode)
        assert len(policy.calls) == len(ref_policy.calls), (batch, vectorization)
        for got, ref in zip(policy.calls, ref_policy.calls):  # every observation read, bit for bit
            for key in ref:
                assert got[key].tobytes() == ref[key].tobytes(), (batch, vectorization, key)
