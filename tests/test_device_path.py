"""Device fast path: static buffers, pipelining, CUDA-graph/AMP fallbacks. GPU-only parts skip without CUDA."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from fasteval import evaluate
from fasteval.run.engine import Engine
from fasteval.core.protocols import StepObserver
from fasteval.types.errors import UserInputError
from fasteval.types.spec import EvalSpec
from fasteval.testing import ParityPolicy, StepCounterPolicy, expected_episode

KA = "fasteval/KnownAnswer-v0"
FAULTY = "fasteval.testing.faulty:make_faulty_env"
_needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def cuda(test):
    """GPU-only: marked ``gpu`` and skipped without a CUDA device."""
    return pytest.mark.gpu(_needs_cuda(test))


def parity_expected(seed0, n):
    return [expected_episode(seed0 + i, action_fn=lambda o: int(o[2])) for i in range(n)]


def strip(records):
    keys = ("episode_ix", "seed", "sum_reward", "max_reward", "length", "success", "nan_rewards")
    return [{k: r[k] for k in keys} for r in records]


def exp_strip(expected):
    return [{"episode_ix": i, **{k: e[k] for k in ("seed", "sum_reward", "max_reward", "length", "success", "nan_rewards")}}
            for i, e in enumerate(expected)]


# -- pipelining ---------------------------------------------------------------------------------

@pytest.mark.parametrize("batch_size", [2, 5, 8])
def test_pipelined_run_equals_plain_run_exactly(batch_size):
    plain = evaluate(env=KA, policy=ParityPolicy(), n_episodes=29, batch_size=3, seed=7)
    piped = evaluate(env=KA, policy=ParityPolicy(), n_episodes=29, batch_size=batch_size, seed=7,
                     vectorization="async", pipeline=True)
    assert strip(piped.per_episode) == strip(plain.per_episode) == exp_strip(parity_expected(7, 29))
    assert piped.meta["pipeline"] is True


def test_pipelined_run_survives_a_dead_worker_with_exact_results(tmp_path):
    kwargs = dict(fault="die", fault_seeds=[5], fault_step=2, once_dir=str(tmp_path))
    piped = evaluate(env=FAULTY, env_kwargs=kwargs, policy=ParityPolicy(), n_episodes=14, batch_size=4,
                     vectorization="async", pipeline=True)
    assert strip(piped.per_episode) == exp_strip(parity_expected(0, 14))
    assert [e["episode_ix"] for e in piped.errors] == [5]


def test_pipeline_refuses_sync_envs_and_stateful_policies():
    with pytest.raises(UserInputError, match="async"):
        evaluate(env=KA, n_episodes=4, batch_size=4, pipeline=True)
    with pytest.raises(UserInputError, match="stateless"):
        evaluate(env=KA, policy=StepCounterPolicy(), n_episodes=4, batch_size=4, vectorization="async", pipeline=True)


# -- static buffers -----------------------------------------------------------------------------

class PointerWatch(StepObserver):
    """Records the data pointers of every buffer the hot loop touches, at every step."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self.seen: set[tuple] = set()

    def pointers(self) -> tuple:
        e = self.engine
        L = e.ledger
        arrays = [e.envs.obs, e.envs.rewards, e.envs.terminated, e.envs.truncated, e.envs.success, e.d2h.host,
                  L.slot_episode, L.acc_sum, L.acc_max, L.acc_len, L.sum_reward]
        return tuple(a.ctypes.data for a in arrays) + (e.h2d.policy_input.data_ptr(),)

    def on_step(self, active, actions, parked):
        self.seen.add(self.pointers())


@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_hot_loop_buffers_never_move(vectorization):
    engine = Engine(EvalSpec(env=KA, policy=ParityPolicy(), n_episodes=40, batch_size=4, vectorization=vectorization))
    try:
        watch = PointerWatch(engine)
        engine.run(observer=watch)
        assert len(watch.seen) == 1  # the same buffers at every step of the run
        host_obs_ptr = engine.envs.obs.ctypes.data
        engine.run(n_episodes=10, seed=3, observer=watch)
        assert engine.envs.obs.ctypes.data == host_obs_ptr
    finally:
        engine.close()


def test_cpu_policy_reads_the_host_buffer_without_a_copy():
    engine = Engine(EvalSpec(env=KA, n_episodes=2, batch_size=2, device="cpu"))
    try:
        assert engine.h2d.policy_input.data_ptr() == engine.envs.obs.ctypes.data
    finally:
        engine.close()


# -- CUDA graphs, AMP, compile: CPU fallbacks ---------------------------------------------------

def test_cuda_graph_request_on_cpu_warns_once_and_gives_identical_results():
    eager = evaluate(env=KA, policy=ParityPolicy(), n_episodes=12, batch_size=4, device="cpu", cuda_graph=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        graphed = evaluate(env=KA, policy=ParityPolicy(), n_episodes=12, batch_size=4, device="cpu", cuda_graph=True)
    assert sum("cuda-graph" in str(w.message).lower() for w in caught) == 1
    assert strip(graphed.per_episode) == strip(eager.per_episode)
    assert graphed.meta["policy_cuda_graph"] == "eager (no CUDA device)"  # what happened, not what was asked


def test_amp_bf16_on_cpu_runs_and_keeps_exact_results_for_an_integer_policy():
    result = evaluate(env=KA, policy=ParityPolicy(), n_episodes=9, batch_size=3, device="cpu", amp="bf16")
    assert strip(result.per_episode) == exp_strip(parity_expected(0, 9))
    assert result.meta["policy_amp"] == "bf16"


from tests.helpers import ActionLog, NoisyPolicy  # noqa: E402


def noisy_actions(seed, device="cpu", **kwargs):
    log = ActionLog()
    with Engine(EvalSpec(env=KA, policy=NoisyPolicy().to(device), n_episodes=30, batch_size=4, device=device, **kwargs)) as e:
        result = e.run(seed=seed, observer=log)
    return log.steps, result


def check_fresh_noise(device="cpu", **kwargs):
    (a, ra), (b, rb), (c, _) = (noisy_actions(1, device, **kwargs), noisy_actions(1, device, **kwargs),
                                noisy_actions(2, device, **kwargs))
    assert a == b and strip(ra.per_episode) == strip(rb.per_episode)  # same seed: same draws, step by step
    assert a != c  # another seed: other draws
    # Fresh noise: a step repeats the previous step's 4 random bits 1 time in 16; frozen noise: always.
    assert sum(x == y for x, y in zip(a, a[1:])) < len(a) // 4
    return ra


def test_stochastic_policy_is_reproducible_for_a_seed_and_draws_fresh_noise():
    check_fresh_noise()


# -- GPU-only -----------------------------------------------------------------------------------

@cuda
def test_gpu_graph_and_eager_agree_exactly():
    eager = evaluate(env=KA, policy=ParityPolicy(), n_episodes=40, batch_size=8, device="cuda", cuda_graph=False)
    graphed = evaluate(env=KA, policy=ParityPolicy(), n_episodes=40, batch_size=8, device="cuda", cuda_graph=True)
    assert graphed.meta["policy_cuda_graph"] == "captured" and eager.meta["policy_cuda_graph"] == "off"
    assert strip(graphed.per_episode) == strip(eager.per_episode) == exp_strip(parity_expected(0, 40))


@cuda
def test_gpu_graph_replays_fresh_noise_and_is_reproducible():
    result = check_fresh_noise("cuda", cuda_graph=True)
    assert result.meta["policy_cuda_graph"] == "captured"


@cuda
def test_gpu_memory_stays_flat_across_steps_and_runs():
    engine = Engine(EvalSpec(env=KA, policy=ParityPolicy().cuda(), n_episodes=50, batch_size=8, device="cuda"))
    try:
        engine.run()
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        for seed in range(3):
            engine.run(seed=seed)
        torch.cuda.synchronize()
        assert torch.cuda.memory_allocated() == before
    finally:
        engine.close()


@cuda
def test_gpu_one_copy_observation_path_and_graphs_reused_across_pipelined_runs():
    spec = EvalSpec(env=KA, policy=ParityPolicy().cuda(), n_episodes=12, batch_size=4, device="cuda",
                    cuda_graph=True, vectorization="sync")
    with Engine(spec) as engine:
        assert engine.envs.obs.ctypes.data == engine.h2d.host.data_ptr() and engine.h2d.host.is_pinned()
        assert engine.h2d.staged == [] and engine.d2h.pinned
        engine.run()
    spec = EvalSpec(env=KA, policy=ParityPolicy().cuda(), n_episodes=12, batch_size=4, device="cuda",
                    cuda_graph=True, vectorization="async", pipeline=True)
    with Engine(spec) as engine:
        assert engine.envs.pinned and engine.h2d.staged == []  # the pool's shared buffers, registered: one copy
        for seed in range(5):
            result = engine.run(seed=seed)
            assert strip(result.per_episode) == exp_strip(parity_expected(seed, 12))
        assert engine.runner._step.captures == len(engine.runner._step.graphs) == 2


@cuda
def test_gpu_pin_memory_false_pins_nothing():
    spec = EvalSpec(env=KA, policy=ParityPolicy().cuda(), n_episodes=8, batch_size=4, device="cuda")
    with Engine(spec, pin_memory=False) as engine:
        assert not engine.h2d.host.is_pinned() and not engine.d2h.pinned and engine.h2d.staged == []
        assert strip(engine.run().per_episode) == exp_strip(parity_expected(0, 8))


# -- observation copies a chunk policy will not read --------------------------------------------------

class ChunksOfTwo:
    """Acts in chunks of two steps per slot (action 0): reads the observation only when a slot's chunk is used up."""

    def __init__(self):
        self.left = None

    def reset(self, env_ids):
        if self.left is not None:
            self.left[env_ids.numpy()] = 0

    def reads_observation(self, rows):
        return self.left is None or bool((self.left[rows] == 0).any())

    def select_action(self, obs):
        if self.left is None:
            self.left = np.zeros(obs.shape[0], dtype=np.int64)
        self.left[self.left == 0] = 2
        self.left -= 1
        return torch.zeros(obs.shape[0], dtype=torch.long)


def _counted_copies(monkeypatch):
    from fasteval.core import transfer

    counts = {"copies": 0}
    original = transfer.HostToDevice.group

    def group(self, rows):
        view, copy = original(self, rows)

        def counted():
            counts["copies"] += 1
            copy()

        return view, counted

    monkeypatch.setattr(transfer.HostToDevice, "group", group)
    return counts


def test_observation_copies_a_chunk_policy_will_not_read_are_skipped(monkeypatch):
    counts = _counted_copies(monkeypatch)
    want = exp_strip([expected_episode(i) for i in range(12)])
    log = ActionLog()
    with Engine(EvalSpec(env=KA, policy=ChunksOfTwo(), n_episodes=12, batch_size=1)) as engine:
        result = engine.run()
        skipping = counts["copies"]
        launches = sum(r["length"] for r in result.per_episode)
        assert strip(result.per_episode) == want
        counts["copies"] = 0
        assert strip(engine.run(observer=log).per_episode) == want
    assert skipping <= launches // 2 + 12 + 1  # one copy per chunk (plus the dry run's), not one per step
    assert counts["copies"] == launches  # an observer (a recorder may read the device buffer): every step copies
