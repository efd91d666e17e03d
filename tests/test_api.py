"""The library door: Evaluator / evaluate, weight updates, side effects, async, TorchRL interop.

Every number is checked exactly against the known-answer env (``fasteval.testing``).
Policies and env factories used by ``evaluate_async`` live at module level, because the
worker process imports them by name.
"""

from __future__ import annotations

import gc
import json
import math
import os
import random
import subprocess
import sys
import tracemalloc
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from fasteval import EvalResult, EvalSpec, Evaluator, evaluate
from fasteval.types.errors import PolicyDryRunError, PolicyLoadError, UserInputError
from fasteval.robot.policies import MLPPolicy, save_checkpoint
from fasteval.testing import KNOWN_ANSWER_ID, KnownAnswerEnv, ParityPolicy, StepCounterPolicy

ROOT = Path(__file__).resolve().parents[1]
SEED = 11
N = 23


# --------------------------------------------------------------------------------------------
# Module-level policies and env factories (importable by the async worker)
# --------------------------------------------------------------------------------------------


class ThresholdPolicy(nn.Module):
    """action = [w . obs + b > 0]. With PARITY weights it acts like ParityPolicy, with ANTI the opposite.

    All the arithmetic is exact (zeros, +-2, +-1 on {0, 1} entries), so results are known answers.
    """

    def __init__(self, weights: dict[str, torch.Tensor] | None = None):
        super().__init__()
        self.lin = nn.Linear(3, 1)
        with torch.no_grad():
            for key, value in (weights or PARITY).items():
                self.state_dict(keep_vars=True)[key].copy_(value)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return (self.lin(obs) > 0).long().squeeze(-1)


PARITY = {"lin.weight": torch.tensor([[0.0, 0.0, 2.0]]), "lin.bias": torch.tensor([-1.0])}
ANTI = {"lin.weight": torch.tensor([[0.0, 0.0, -2.0]]), "lin.bias": torch.tensor([1.0])}


def anti_parity_actions():
    return lambda obs: 1 - int(round(float(obs[-1])))


class PicklableParityObject:
    """A non-module policy object (select_action), picklable."""

    def select_action(self, obs: torch.Tensor) -> torch.Tensor:
        return obs[..., -1].round().long()


FACTORY_CALLS = 0


def counting_known_answer_env(**kwargs: Any) -> KnownAnswerEnv:
    """``tests.test_api:counting_known_answer_env``: a KnownAnswerEnv factory that counts its calls."""
    global FACTORY_CALLS
    FACTORY_CALLS += 1
    return KnownAnswerEnv(**kwargs)


class DictObsKnownAnswer(gym.ObservationWrapper):
    """KnownAnswerEnv with a Dict observation: ``{"state": obs[:2], "bit": obs[2:]}``."""

    def __init__(self) -> None:
        super().__init__(KnownAnswerEnv())
        self.observation_space = gym.spaces.Dict({
            "state": gym.spaces.Box(-np.inf, np.inf, shape=(2,), dtype=np.float32),
            "bit": gym.spaces.Box(-np.inf, np.inf, shape=(1,), dtype=np.float32),
        })

    def observation(self, obs: np.ndarray) -> dict[str, np.ndarray]:
        return {"state": obs[:2], "bit": obs[2:]}


def make_dict_obs_env() -> DictObsKnownAnswer:
    return DictObsKnownAnswer()


# --------------------------------------------------------------------------------------------
# Results and the one-shot form
# --------------------------------------------------------------------------------------------


def test_evaluate_returns_result_with_aggregates_table_and_exports(tmp_path, known_answers, check_episodes):
    with Evaluator(KNOWN_ANSWER_ID, policy=ParityPolicy(), batch_size=4, device="cpu") as ev:
        result = ev.evaluate(n_episodes=N, seed=SEED)
    assert isinstance(result, EvalResult)
    expected = known_answers(N, SEED, "parity")
    check_episodes(result.per_episode, expected)
    agg = result.overall()
    assert agg["avg_sum_reward"] == math.fsum(e["sum_reward"] for e in expected) / N
    assert agg["pc_success"] == 100.0 * sum(e["success"] for e in expected) / N
    assert agg["n_episodes"] == N and agg["env_steps"] == sum(e["length"] for e in expected)

    flat = result.to_dict(prefix="eval/")
    assert flat and all(k.startswith("eval/") for k in flat)
    assert all(type(v) is float for v in flat.values()), "to_dict must give flat float scalars"
    assert flat["eval/avg_sum_reward"] == agg["avg_sum_reward"]
    assert flat["eval/pc_success"] == agg["pc_success"]
    assert flat["eval/n_episodes"] == float(N)
    assert (flat["eval/pc_success_ci95_low"], flat["eval/pc_success_ci95_high"]) == tuple(agg["pc_success_ci95"])
    assert set(result.to_dict()) == {k[len("eval/"):] for k in flat}

    path = result.to_json(tmp_path / "out" / "eval_info.json")
    doc = json.loads(path.read_text())
    assert doc["overall"]["avg_sum_reward"] == agg["avg_sum_reward"]
    assert [r["seed"] for r in doc["per_episode"]] == list(range(SEED, SEED + N))


def test_one_shot_equals_evaluator_and_accepts_a_spec(check_same_results):
    spec = EvalSpec(env=KNOWN_ANSWER_ID, policy=StepCounterPolicy(), n_episodes=N, batch_size=5, seed=SEED, device="cpu")
    one_shot = evaluate(spec)
    with Evaluator(spec) as ev:
        assert ev.spec == spec
        check_same_results(ev.evaluate().per_episode, one_shot.per_episode)
    kwargs = evaluate(env=KNOWN_ANSWER_ID, policy=StepCounterPolicy(), n_episodes=N, batch_size=5, seed=SEED, device="cpu")
    check_same_results(kwargs.per_episode, one_shot.per_episode)
    with Evaluator(spec, batch_size=2) as ev:
        assert ev.spec.batch_size == 2
        check_same_results(ev.evaluate().per_episode, one_shot.per_episode, "another batch size, same episodes")


# --------------------------------------------------------------------------------------------
# Reuse: built once
# --------------------------------------------------------------------------------------------


def test_second_evaluate_does_not_rebuild_envs_or_buffers(known_answers, check_episodes):
    global FACTORY_CALLS
    FACTORY_CALLS = 0
    batch = 6
    ev = Evaluator("tests.test_api:counting_known_answer_env", policy=ParityPolicy(), batch_size=batch, device="cpu")
    try:
        assert FACTORY_CALLS == 0, "nothing is built before the first evaluate"
        first = ev.evaluate(n_episodes=N, seed=SEED)
        built = FACTORY_CALLS
        assert built == batch  # one env per slot (the probe becomes slot 0)
        engine, envs, obs, policy_input, actions = (
            ev.engine, ev.engine.envs, ev.engine.envs.obs, ev.engine.h2d.policy_input, ev.engine.d2h.host)
        for n, seed in [(N, SEED), (3, 0), (40, 7)]:
            result = ev.evaluate(n_episodes=n, seed=seed)
            check_episodes(result.per_episode, known_answers(n, seed, "parity"), f"n={n}, seed={seed}")
        assert FACTORY_CALLS == built, "a later evaluate rebuilt the envs"
        assert ev.engine is engine and ev.engine.envs is envs
        assert ev.engine.envs.obs is obs and ev.engine.h2d.policy_input is policy_input and ev.engine.d2h.host is actions
        assert engine.runs == 4
    finally:
        ev.close()
    check_episodes(first.per_episode, known_answers(N, SEED, "parity"))


def test_close_and_context_manager():
    ev = Evaluator(KNOWN_ANSWER_ID, policy="zero", batch_size=2, device="cpu")
    with ev as same:
        assert same is ev
        ev.evaluate(n_episodes=3)
        assert ev._engine is not None
    assert ev._engine is None
    ev.close()  # idempotent


# --------------------------------------------------------------------------------------------
# Weights
# --------------------------------------------------------------------------------------------


def test_update_weights_copies_in_place_and_results_follow(known_answers, check_episodes):
    policy = ThresholdPolicy(PARITY)
    ptrs = {k: v.data_ptr() for k, v in policy.state_dict().items()}
    params = list(policy.parameters())
    with Evaluator(KNOWN_ANSWER_ID, policy=policy, batch_size=4, device="cpu") as ev:
        check_episodes(ev.evaluate(n_episodes=N, seed=SEED).per_episode, known_answers(N, SEED, "parity"))
        engine = ev.engine
        ev.update_weights({k: v.clone() for k, v in ANTI.items()})
        assert {k: v.data_ptr() for k, v in policy.state_dict().items()} == ptrs, "update_weights reallocated a tensor"
        assert all(a is b for a, b in zip(policy.parameters(), params)), "update_weights replaced a parameter"
        assert all(p.requires_grad for p in policy.parameters())
        check_episodes(ev.evaluate(n_episodes=N, seed=SEED).per_episode, known_answers(N, SEED, anti_parity_actions))
        ev.update_weights(ThresholdPolicy(PARITY))  # a module of the same architecture works too
        check_episodes(ev.evaluate(n_episodes=N, seed=SEED).per_episode, known_answers(N, SEED, "parity"))
        assert ev.engine is engine and engine.runs == 3
    assert {k: v.data_ptr() for k, v in policy.state_dict().items()} == ptrs


def test_update_weights_casts_dtype_and_device_into_existing_storage():
    policy = ThresholdPolicy(PARITY)
    with Evaluator(KNOWN_ANSWER_ID, policy=policy, batch_size=2, device="cpu") as ev:
        ptr = policy.lin.weight.data_ptr()
        ev.update_weights({k: v.double() for k, v in ANTI.items()})
        assert policy.lin.weight.dtype == torch.float32 and policy.lin.weight.data_ptr() == ptr
        assert torch.equal(policy.lin.weight, ANTI["lin.weight"])


def test_update_weights_errors_name_the_problem_and_change_nothing():
    policy = ThresholdPolicy(PARITY)
    with Evaluator(KNOWN_ANSWER_ID, policy=policy, batch_size=2, device="cpu") as ev:
        with pytest.raises(PolicyLoadError, match=r"missing keys \['lin.bias'\]"):
            ev.update_weights({"lin.weight": ANTI["lin.weight"]})
        with pytest.raises(PolicyLoadError, match=r"unexpected keys \['head.weight'\]"):
            ev.update_weights({**ANTI, "head.weight": torch.zeros(1)})
        with pytest.raises(PolicyLoadError, match=r"shape mismatches: lin.weight: got \(2, 3\), the policy has \(1, 3\)"):
            ev.update_weights({**ANTI, "lin.weight": torch.zeros(2, 3)})
        with pytest.raises(PolicyLoadError, match="not tensors"):
            ev.update_weights({**ANTI, "lin.bias": [1.0]})
        with pytest.raises(UserInputError, match="expected a state dict"):
            ev.update_weights([1, 2, 3])  # type: ignore[arg-type]
        # all or nothing: a bad dict whose good entries come first copies none of them
        with pytest.raises(PolicyLoadError):
            ev.update_weights({"lin.bias": ANTI["lin.bias"], "lin.weight": torch.zeros(5)})
        assert torch.equal(policy.lin.weight, PARITY["lin.weight"]) and torch.equal(policy.lin.bias, PARITY["lin.bias"])
        ev.update_weights({"lin.bias": torch.tensor([7.0]), "extra": torch.zeros(1)}, strict=False)
        assert policy.lin.bias.item() == 7.0
        with pytest.raises(PolicyLoadError, match="shape mismatches"):
            ev.update_weights({"lin.bias": torch.zeros(3)}, strict=False)


def test_update_weights_needs_a_module():
    with Evaluator(KNOWN_ANSWER_ID, policy=PicklableParityObject(), batch_size=2, device="cpu") as ev:
        with pytest.raises(UserInputError, match="needs an nn.Module policy.*PicklableParityObject"):
            ev.update_weights(PARITY)


def _linear_checkpoint(folder: Path, parity: bool) -> Path:
    """An MLPPolicy with no hidden layer: logits = W obs; argmax picks the parity bit (or its opposite)."""
    mlp = MLPPolicy(obs_dim=3, action_dim=2, hidden_sizes=(), action_head="argmax")
    mlp.load_state_dict(LINEAR_PARITY if parity else LINEAR_ANTI)
    return save_checkpoint(mlp, folder)


# logits = W obs + b: with LINEAR_PARITY, bit 1 -> (-0.5, 0.5), bit 0 -> (0.5, -0.5); LINEAR_ANTI is its negation
LINEAR_PARITY = {"net.0.weight": torch.tensor([[0.0, 0.0, -1.0], [0.0, 0.0, 1.0]]), "net.0.bias": torch.tensor([0.5, -0.5])}
LINEAR_ANTI = {k: -v for k, v in LINEAR_PARITY.items()}


def test_update_weights_on_a_checkpoint_reference(tmp_path, known_answers, check_episodes):
    folder = _linear_checkpoint(tmp_path / "ckpt", parity=False)
    with Evaluator(KNOWN_ANSWER_ID, policy=str(folder), batch_size=3, device="cpu") as ev:
        check_episodes(ev.evaluate(n_episodes=N, seed=SEED).per_episode, known_answers(N, SEED, anti_parity_actions))
        loaded = ev.policy
        ptr = loaded.net[0].weight.data_ptr()
        ev.update_weights(LINEAR_PARITY)
        assert ev.policy is loaded and loaded.net[0].weight.data_ptr() == ptr
        check_episodes(ev.evaluate(n_episodes=N, seed=SEED).per_episode, known_answers(N, SEED, "parity"))


def test_live_module_results_follow_the_training_updates(known_answers, check_episodes):
    """The module training updates is passed as is: each evaluation sees its current weights."""
    live = ThresholdPolicy(PARITY)
    optimizer = torch.optim.SGD(live.parameters(), lr=1.0)
    with Evaluator(KNOWN_ANSWER_ID, policy=live, batch_size=4, device="cpu") as ev:
        check_episodes(ev.evaluate(n_episodes=N, seed=SEED).per_episode, known_answers(N, SEED, "parity"))
        # one SGD step whose gradient is exactly PARITY - ANTI: lr=1 moves the weights to ANTI
        optimizer.zero_grad()
        loss = sum(((p - ANTI[k]) ** 2).sum() / 2 for k, p in live.named_parameters())
        loss.backward()  # d/dp (p - a)^2 / 2 = p - a, exactly
        optimizer.step()
        assert torch.equal(live.lin.weight, ANTI["lin.weight"]) and torch.equal(live.lin.bias, ANTI["lin.bias"])
        check_episodes(ev.evaluate(n_episodes=N, seed=SEED).per_episode, known_answers(N, SEED, anti_parity_actions))


# --------------------------------------------------------------------------------------------
# No side effects on training
# --------------------------------------------------------------------------------------------


class NoisyModule(nn.Module):
    """Draws from the global torch, NumPy and ``random`` RNGs each step (and uses dropout)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 2)
        self.drop = nn.Dropout(0.5)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        np.random.random()
        random.random()
        return self.drop(self.lin(obs)) + torch.rand(obs.shape[0], 2)


def test_global_rng_states_equal_before_and_after(rng_snapshot, check_same_results):
    module = NoisyModule()
    torch.manual_seed(2024)
    np.random.seed(2024)
    random.seed(2024)
    snap = rng_snapshot()
    with Evaluator(KNOWN_ANSWER_ID, policy=module, batch_size=4, device="cpu") as ev:
        a = ev.evaluate(n_episodes=N, seed=SEED)
        snap.assert_unchanged()
        torch.rand(5)  # training draws in between: the next evaluation is still reproducible
        snap = rng_snapshot()
        b = ev.evaluate(n_episodes=N, seed=SEED)
        snap.assert_unchanged()
    check_same_results(a.per_episode, b.per_episode, "a stochastic policy, same seed: first call (with its dry run) and later calls")
    check_same_results(evaluate(env=KNOWN_ANSWER_ID, policy=module, n_episodes=N, batch_size=4, seed=SEED, device="cpu").per_episode,
                       a.per_episode, "one-shot vs Evaluator")
    snap = rng_snapshot()
    evaluate(env=KNOWN_ANSWER_ID, policy=module, n_episodes=5, batch_size=2, seed=0, device="cpu")
    snap.assert_unchanged()


class ModeRecorder(nn.Module):
    """Records every submodule's ``training`` flag and the grad mode at each call."""

    def __init__(self, fail_at: int | None = None) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(3, 4), nn.Dropout(0.1))
        self.head = nn.Linear(4, 2)
        self.norm = nn.BatchNorm1d(4)
        self.seen_modes: set[tuple[bool, ...]] = set()
        self.seen_grad: set[bool] = set()
        self.calls = 0
        self.fail_at = fail_at

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.fail_at is not None and self.calls >= self.fail_at:
            raise RuntimeError("boom")
        self.seen_modes.add(tuple(m.training for m in self.modules()))
        self.seen_grad.add(torch.is_grad_enabled())
        return self.head(self.norm(self.encoder(obs)))


def _modes(module: nn.Module) -> list[bool]:
    return [m.training for m in module.modules()]


def test_train_eval_modes_restored_per_submodule():
    module = ModeRecorder()
    module.train()
    module.encoder.eval()        # a frozen encoder kept in eval mode...
    module.encoder[1].train()    # ...except its dropout
    before = _modes(module)
    assert len(set(before)) == 2, "the test needs mixed modes"
    with Evaluator(KNOWN_ANSWER_ID, policy=module, batch_size=3, device="cpu") as ev:
        ev.evaluate(n_episodes=7, seed=0)
        assert _modes(module) == before
        module.eval()
        ev.evaluate(n_episodes=7, seed=0)
        assert _modes(module) == [False] * len(before)
    assert module.seen_modes == {tuple([False] * len(before))}, "every submodule must be in eval mode during evaluation"
    # also when the evaluation raises
    failing = ModeRecorder(fail_at=4)
    failing.train()
    failing.head.eval()
    before = _modes(failing)
    with pytest.raises(RuntimeError, match="boom"):
        evaluate(env=KNOWN_ANSWER_ID, policy=failing, n_episodes=7, batch_size=3, device="cpu")
    assert _modes(failing) == before


def test_gradients_off_inside_and_requires_grad_untouched():
    module = ModeRecorder()
    module.encoder[0].weight.requires_grad_(False)  # a frozen layer stays frozen, the others stay trainable
    flags = [p.requires_grad for p in module.parameters()]
    with Evaluator(KNOWN_ANSWER_ID, policy=module, batch_size=3, device="cpu") as ev:
        ev.evaluate(n_episodes=7, seed=0)
    assert module.seen_grad == {False}
    assert [p.requires_grad for p in module.parameters()] == flags
    assert all(p.grad is None for p in module.parameters())
    # training still works afterwards: a normal backward pass fills the trainable grads
    module.train()
    module(torch.randn(5, 3)).sum().backward()
    assert [p.grad is not None for p in module.parameters()] == flags


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="RSS read from /proc/self/statm (Linux)")
def test_memory_stays_flat_over_50_calls():
    module = ThresholdPolicy(PARITY)
    with Evaluator(KNOWN_ANSWER_ID, policy=module, batch_size=8, device="cpu") as ev:
        for _ in range(5):  # warm-up: build, dry run, lazy imports, allocator pools
            ev.evaluate(n_episodes=40, seed=3)
        gc.collect()
        rss0, objects0 = _rss_bytes(), len(gc.get_objects())
        tracemalloc.start()
        try:
            ev.evaluate(n_episodes=40, seed=3)
            gc.collect()
            traced0 = tracemalloc.get_traced_memory()[0]
            for i in range(50):
                ev.evaluate(n_episodes=40, seed=i)
            gc.collect()
            traced1 = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        rss1, objects1 = _rss_bytes(), len(gc.get_objects())
    assert traced1 - traced0 < 1_000_000, f"python allocations grew by {traced1 - traced0} bytes over 50 calls"
    assert objects1 - objects0 < 1_000, f"{objects1 - objects0} more live objects after 50 calls"
    assert rss1 - rss0 < 16 * 2**20, f"RSS grew by {(rss1 - rss0) / 2**20:.1f} MiB over 50 calls"


# --------------------------------------------------------------------------------------------
# TorchRL interop: TensorDictModule policies
# --------------------------------------------------------------------------------------------


class _BitPolicy(nn.Module):
    def forward(self, bit: torch.Tensor) -> torch.Tensor:
        return bit[..., 0].round().long()


class _TwoOutputs(nn.Module):
    """Returns (parity action, anti-parity action)."""

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        parity = obs[..., -1].round().long()
        return parity, 1 - parity


@pytest.mark.parametrize("batch", [1, 4])
def test_tensordict_module_policy_exact(batch, known_answers, check_episodes):
    from tensordict.nn import TensorDictModule

    policy = TensorDictModule(ParityPolicy(), in_keys=["observation"], out_keys=["action"])
    with Evaluator(KNOWN_ANSWER_ID, policy=policy, batch_size=batch, device="cpu") as ev:
        for seed in (SEED, 0):
            check_episodes(ev.evaluate(n_episodes=N, seed=seed).per_episode, known_answers(N, seed, "parity"))


@pytest.mark.parametrize("out_keys,actions", [
    (["action", "other"], "parity"),                  # "action" wins wherever it is
    (["other", "action"], anti_parity_actions),
    (["hidden", "act"], anti_parity_actions),         # no "action": the last out_key
    ([("nested", "a"), ("nested", "b")], anti_parity_actions),
])
def test_tensordict_module_action_key(out_keys, actions, known_answers, check_episodes):
    from tensordict.nn import TensorDictModule

    policy = TensorDictModule(_TwoOutputs(), in_keys=["observation"], out_keys=out_keys)
    result = evaluate(env=KNOWN_ANSWER_ID, policy=policy, n_episodes=N, batch_size=4, seed=SEED, device="cpu")
    check_episodes(result.per_episode, known_answers(N, SEED, actions))


def test_tensordict_module_dict_observations(known_answers, check_episodes):
    from tensordict.nn import TensorDictModule

    policy = TensorDictModule(_BitPolicy(), in_keys=["bit"], out_keys=["action"])
    with Evaluator("tests.test_api:make_dict_obs_env", policy=policy, batch_size=4, device="cpu") as ev:
        check_episodes(ev.evaluate(n_episodes=N, seed=SEED).per_episode, known_answers(N, SEED, "parity"))
        assert set(ev.engine.h2d.policy_input.keys()) == {"state", "bit"}, "the module's outputs leaked into the engine's TensorDict"
        check_episodes(ev.evaluate(n_episodes=5, seed=1).per_episode, known_answers(5, 1, "parity"))


def test_tensordict_module_with_pipeline_exact(known_answers, check_episodes):
    """``pipeline`` calls the policy with two alternating half-batch buffers."""
    from tensordict.nn import TensorDictModule

    policy = TensorDictModule(ParityPolicy(), in_keys=["observation"], out_keys=["action"])
    result = evaluate(env=KNOWN_ANSWER_ID, policy=policy, n_episodes=N, batch_size=4, seed=SEED, device="cpu",
                      vectorization="async", pipeline=True)
    check_episodes(result.per_episode, known_answers(N, SEED, "parity"))


def test_tensordict_adapter_wraps_each_buffer_once(monkeypatch):
    from tensordict.nn import TensorDictModule

    from fasteval.core.tensordict_policy import MAX_CACHED_INPUTS, TensorDictPolicyAdapter

    adapter = TensorDictPolicyAdapter(TensorDictModule(ParityPolicy(), in_keys=["observation"], out_keys=["action"]))
    wraps = []
    real_wrap = adapter._wrap
    monkeypatch.setattr(adapter, "_wrap", lambda obs: wraps.append(1) or real_wrap(obs))
    a, b = torch.zeros(4, 3), torch.ones(2, 3)
    for _ in range(5):
        assert adapter(a).tolist() == [0, 0, 0, 0]
        a[:, 2] = 1.0  # the buffer is updated in place, as the engine does: the wrapper sees it
        assert adapter(a).tolist() == [1, 1, 1, 1]
        a[:, 2] = 0.0
        assert adapter(b).tolist() == [1, 1]
    assert len(wraps) == 2
    for _ in range(3 * MAX_CACHED_INPUTS):  # fresh tensors every call: the cache stays bounded
        adapter(torch.zeros(1, 3))
    assert len(adapter._wrapped) <= MAX_CACHED_INPUTS


def test_tensordict_module_wrong_in_keys_is_a_clear_error():
    from tensordict.nn import TensorDictModule

    policy = TensorDictModule(ParityPolicy(), in_keys=["obs"], out_keys=["action"])
    with pytest.raises(PolicyDryRunError, match=r"reads in_keys \['obs'\].*'observation'.*in_keys=\['observation'\]"):
        evaluate(env=KNOWN_ANSWER_ID, policy=policy, n_episodes=3, batch_size=2, device="cpu")


def test_tensordict_module_weights_and_modes(known_answers, check_episodes):
    from tensordict.nn import TensorDictModule

    inner = ThresholdPolicy(PARITY)
    policy = TensorDictModule(inner, in_keys=["observation"], out_keys=["action"])
    policy.train()
    with Evaluator(KNOWN_ANSWER_ID, policy=policy, batch_size=4, device="cpu") as ev:
        check_episodes(ev.evaluate(n_episodes=N, seed=SEED).per_episode, known_answers(N, SEED, "parity"))
        ev.update_weights({f"module.{k}": v for k, v in ANTI.items()})
        check_episodes(ev.evaluate(n_episodes=N, seed=SEED).per_episode, known_answers(N, SEED, anti_parity_actions))
    assert inner.training and policy.training


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_update_weights_under_cuda_graph(known_answers, check_episodes):
    """The captured graph reads the parameters by address: in-place updates must reach it."""
    policy = ThresholdPolicy(PARITY).cuda()
    ptrs = {k: v.data_ptr() for k, v in policy.state_dict().items()}
    with Evaluator(KNOWN_ANSWER_ID, policy=policy, batch_size=8, device="cuda", cuda_graph=True) as ev:
        check_episodes(ev.evaluate(n_episodes=N, seed=SEED).per_episode, known_answers(N, SEED, "parity"))
        ev.update_weights(ANTI)  # CPU tensors, copied onto the GPU parameters
        assert {k: v.data_ptr() for k, v in policy.state_dict().items()} == ptrs
        result = ev.evaluate(n_episodes=N, seed=SEED)
        assert result.meta.get("policy_cuda_graph") == "captured"
        check_episodes(result.per_episode, known_answers(N, SEED, anti_parity_actions))
        future = ev.evaluate_async(n_episodes=N, seed=SEED)
        check_episodes(future.result(timeout=300).per_episode, known_answers(N, SEED, anti_parity_actions))


# --------------------------------------------------------------------------------------------
# Background evaluation (a worker process)
# --------------------------------------------------------------------------------------------


def _train_step(module: ThresholdPolicy, optimizer: torch.optim.Optimizer) -> None:
    optimizer.zero_grad()
    loss = module.lin(torch.randn(32, 3)).mean()  # a random, never-vanishing gradient: the weights keep moving
    loss.backward()
    optimizer.step()


def test_evaluate_async_snapshot_while_training(rng_snapshot, known_answers, check_episodes, check_same_results):
    live = ThresholdPolicy(PARITY)
    optimizer = torch.optim.SGD(live.parameters(), lr=0.01)
    n_big = 3000
    with Evaluator(KNOWN_ANSWER_ID, policy=live, batch_size=16, device="cpu") as ev:
        torch.manual_seed(5)
        snap = rng_snapshot()
        future = ev.evaluate_async(n_episodes=N, seed=SEED)
        assert isinstance(future, Future)
        snap.assert_unchanged()  # taking the snapshot and starting the worker touched no global RNG
        # training changes the live module at once, in place, while the worker starts and runs
        with torch.no_grad():
            for key, value in ANTI.items():
                live.state_dict(keep_vars=True)[key].copy_(value)
        steps = 0
        while not future.done():
            _train_step(live, optimizer)
            steps += 1
        first = future.result(timeout=120)
        assert steps > 0
        check_episodes(first.per_episode, known_answers(N, SEED, "parity"))  # the snapshot, not the live weights

        # the worker is warm now: a long evaluation, and training proceeds during it
        snapshot = {k: v.detach().clone() for k, v in live.state_dict().items()}
        snap = rng_snapshot()
        future = ev.evaluate_async(n_episodes=n_big, seed=0)
        snap.assert_unchanged()
        steps_during = 0
        while not future.done():
            _train_step(live, optimizer)
            steps_during += 1
        background = future.result(timeout=120)
        assert steps_during > 0, "no training step ran while the evaluation ran"
        assert not torch.equal(live.lin.weight, snapshot["lin.weight"]), "training did not change the live module"
    # the background result equals a synchronous evaluation of the snapshot weights
    with Evaluator(KNOWN_ANSWER_ID, policy=ThresholdPolicy(snapshot), batch_size=16, device="cpu") as ev:
        sync = ev.evaluate(n_episodes=n_big, seed=0)
    check_same_results(background.per_episode, sync.per_episode, "async vs sync on the snapshot")
    assert background.meta["n_episodes"] == n_big


def test_evaluate_async_reference_policy_after_update_weights(tmp_path, known_answers, check_episodes):
    folder = _linear_checkpoint(tmp_path / "ckpt", parity=False)
    with Evaluator(KNOWN_ANSWER_ID, policy=str(folder), batch_size=4, device="cpu") as ev:
        before = ev.evaluate_async(n_episodes=N, seed=SEED)  # loaded in the worker, as saved
        ev.update_weights(LINEAR_PARITY)
        after = ev.evaluate_async(n_episodes=N, seed=SEED)
        check_episodes(before.result(timeout=120).per_episode, known_answers(N, SEED, anti_parity_actions))
        check_episodes(after.result(timeout=120).per_episode, known_answers(N, SEED, "parity"))


def test_evaluate_async_plain_policy_object_and_queueing(known_answers, check_episodes):
    with Evaluator(KNOWN_ANSWER_ID, policy=PicklableParityObject(), batch_size=4, device="cpu") as ev:
        futures = [ev.evaluate_async(n_episodes=n, seed=s) for n, s in [(N, SEED), (5, 0), (9, 40)]]
        for future, (n, s) in zip(futures, [(N, SEED), (5, 0), (9, 40)]):
            check_episodes(future.result(timeout=120).per_episode, known_answers(n, s, "parity"), f"n={n}, seed={s}")


def test_evaluate_async_unpicklable_policy_fails_fast():
    class LocalPolicy(nn.Module):  # defined in a function: the worker could not import it
        def forward(self, obs):
            return obs[..., -1].round().long()

    with Evaluator(KNOWN_ANSWER_ID, policy=LocalPolicy(), batch_size=2, device="cpu") as ev:
        with pytest.raises(UserInputError, match="cannot be pickled.*module level"):
            ev.evaluate_async(n_episodes=3)
        assert ev._executor is None, "no worker is started for a policy that cannot be sent"
        ev.evaluate(n_episodes=3)  # the synchronous path still works


# --------------------------------------------------------------------------------------------
# Example and benchmark run at tiny size
# --------------------------------------------------------------------------------------------


def _run_script(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_train_with_eval_example_runs(tmp_path):
    proc = _run_script("examples/train_with_eval.py", "--updates", "3", "--eval-every", "2", "--eval-episodes", "4",
                       "--episodes-per-update", "2", "--logdir", str(tmp_path / "runs"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("eval/avg_sum_reward") == 2, proc.stdout  # after update 2 and at the end (update 3)


def test_bench_api_reuse_runs_at_tiny_size(tmp_path):
    out = tmp_path / "bench.json"
    proc = _run_script("benchmarks/bench_api_reuse.py", "--episodes", "8", "--repeats", "1", "--calls", "2", "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert ("PASS" in proc.stdout) or ("FAIL" in proc.stdout)
    doc = json.loads(out.read_text())
    assert {"first_call_s", "repeat_call_s", "repeat_eval_s", "overhead"} <= set(doc["medians"])
