"""The env worker pool (``--vectorization async``): exact against in-process envs, isolated per worker.

Each test compares the pool's shared buffers with a ``SyncSlotEnvs`` driven with the same
slots, seeds and actions, number for number, or checks which slots a fault takes with it.
"""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest
from click.testing import CliRunner

from fasteval.core.envs import build_slot_envs, make_factory
from fasteval.robot.env_kinds import ENV_KINDS  # the plugin of a namespaced id (fasteval/ -> fasteval.testing)
from fasteval.core.workers import WorkerPoolEnvs, default_workers, split_blocks, usable_cores
from fasteval.types.errors import EnvStepError, UserInputError
from fasteval.types.spec import EvalSpec
from fasteval.testing import KNOWN_ANSWER_ID

FAULTY = "fasteval.testing.faulty:make_faulty_env"


def build(env: str, n: int, vectorization: str, workers: int | None = None, step_timeout: float | None = 30.0, **kwargs):
    factory, probe, _cap = make_factory(env, kwargs, None, kinds=ENV_KINDS)
    return build_slot_envs(vectorization, factory, n, probe, step_timeout, workers=workers)


def snapshot(envs) -> tuple:
    return (envs.obs.copy(), envs.rewards.copy(), envs.terminated.copy(), envs.truncated.copy(), envs.success.copy())


def assert_same(a, b, slots):
    for x, y in zip(snapshot(a), snapshot(b)):
        np.testing.assert_array_equal(x[slots], y[slots])


@pytest.fixture
def pair():
    made = []

    def make(env: str, n: int, workers: int, **kwargs):
        pool, sync = build(env, n, "async", workers, **kwargs), build(env, n, "sync", **kwargs)
        made.extend([pool, sync])
        return pool, sync

    yield make
    for envs in made:
        envs.close()


def test_blocks_are_contiguous_and_cover_every_slot():
    assert split_blocks(5, 2) == [range(0, 3), range(3, 5)]
    assert split_blocks(3, 8) == [range(0, 1), range(1, 2), range(2, 3)]
    assert [len(b) for b in split_blocks(10, 4)] == [3, 3, 2, 2]
    assert usable_cores() >= 1
    assert default_workers(1) == 1 and default_workers(10_000) == usable_cores()


@pytest.mark.parametrize("n,workers", [(7, 1), (7, 2), (5, 3)])
def test_pool_equals_in_process_envs_step_by_step(pair, n, workers):
    """CartPole, random subsets of slots, random actions: every buffer row equal at every step."""
    pool, sync = pair("CartPole-v1", n, workers)
    assert isinstance(pool, WorkerPoolEnvs) and pool.n_workers == workers
    rng = np.random.default_rng(0)
    seeds = list(range(100, 100 + n))
    pool.reset_slots(range(n), seeds)
    sync.reset_slots(range(n), seeds)
    assert_same(pool, sync, slice(None))
    for step in range(40):
        slots = sorted(rng.choice(n, size=rng.integers(1, n + 1), replace=False).tolist())
        actions = rng.integers(0, 2, size=n)
        pool.step(slots, actions)
        sync.step(slots, actions)
        assert_same(pool, sync, slots)
        done = [s for s in slots if pool.terminated[s] or pool.truncated[s]]
        if done:
            new = [int(rng.integers(0, 1000)) for _ in done]
            pool.reset_slots(done, new)
            sync.reset_slots(done, new)
            assert_same(pool, sync, done)
    assert pool.failures == [] and sync.failures == []


def dict_known_answer(**kwargs):
    """KnownAnswerEnv with a Dict observation: the vector, plus a uint8 image of it."""
    import gymnasium as gym

    from fasteval.testing.envs import KnownAnswerEnv

    class DictObs(gym.ObservationWrapper):
        def __init__(self, env):
            super().__init__(env)
            self.observation_space = gym.spaces.Dict({
                "state": env.observation_space, "pixels": gym.spaces.Box(0, 255, (4, 4, 3), np.uint8)})

        def observation(self, obs):
            return {"state": obs, "pixels": np.full((4, 4, 3), int(obs[1] * 16 + obs[0] * 97) % 256, np.uint8)}

    return DictObs(KnownAnswerEnv(**kwargs))


def test_dict_observations_live_in_shared_memory(pair):
    """Every Dict key is a view of the one shared mapping, written by the workers (no copy)."""
    pool, sync = pair("tests.test_workers:dict_known_answer", 4, 2)
    assert set(pool.obs) == {"state", "pixels"}
    for envs in (pool, sync):
        envs.reset_slots(range(4), [3, 4, 5, 6])
        envs.step([0, 2, 3], np.ones(4, dtype=np.int64))
    for key in pool.obs:
        assert not pool.obs[key].flags.owndata
        np.testing.assert_array_equal(pool.obs[key], sync.obs[key])
    np.testing.assert_array_equal(pool.rewards[[0, 2, 3]], sync.rewards[[0, 2, 3]])


def test_two_groups_in_flight_on_one_worker_are_matched_by_sequence(pair):
    """Groups that straddle a worker block: both steps queue on the shared worker, plus a reset
    in between, and every result still lands in the right rows."""
    pool, sync = pair("CartPole-v1", 5, 3)  # blocks [0,1] [2,3] [4]; halves [0..2] [3..4] share worker 1
    seeds = [1, 2, 3, 4, 5]
    for envs in (pool, sync):
        envs.reset_slots(range(5), seeds)
    actions = np.array([0, 1, 1, 0, 1])
    a = pool.step_send([0, 1, 2], actions)
    b = pool.step_send([3, 4], actions)
    pool.reset_slots([0], [77])  # worker 0 answers the step of group A, then this reset
    pool.step_recv(a)
    pool.step_recv(b)
    sync.step([0, 1, 2, 3, 4], actions)
    sync.reset_slots([0], [77])
    assert_same(pool, sync, slice(None))
    assert all(not w.pending and not w.stash for w in pool._workers)


def test_groups_are_whole_worker_blocks(pair):
    pool, _ = pair("CartPole-v1", 8, 4)
    assert pool.groups(2) == [slice(0, 4), slice(4, 8)]
    pool3, _ = pair("CartPole-v1", 5, 1)
    assert pool3.groups(2) == [slice(0, 3), slice(3, 5)]  # fewer blocks than groups: even halves


def test_env_that_raises_is_restarted_inside_its_worker(pair, tmp_path):
    pool, _ = pair(FAULTY, 4, 2, fault="raise", fault_seeds=[12], fault_step=1, once_dir=str(tmp_path))
    pool.reset_slots(range(4), [10, 11, 12, 13])
    pids = [w.process.pid for w in pool._workers]
    pool.step([0, 1, 2, 3], np.zeros(4, dtype=np.int64))
    (failure,) = pool.failures
    assert failure.slot == 2 and failure.stage == "step" and "planted" in failure.error and failure.traceback
    assert pool.rebuild(2) == [2]  # only that env: nothing else restarts
    assert [w.process.pid for w in pool._workers] == pids


@pytest.mark.parametrize("fault", ["die", "hang"])
def test_dead_or_hung_worker_is_replaced_and_only_its_block_restarts(pair, tmp_path, fault):
    pool, sync = pair(FAULTY, 6, 3, fault=fault, fault_seeds=[23], fault_step=2, once_dir=str(tmp_path))
    if fault == "hang":
        pool.step_timeout = 1.0
    seeds = [20, 21, 22, 23, 24, 25]  # seed 23 sits in slot 3: worker 1 (slots 2, 3)
    pool.reset_slots(range(6), seeds)
    sync.reset_slots(range(6), seeds)
    zeros = np.zeros(6, dtype=np.int64)
    pool.step(range(6), zeros)
    sync.step(range(6), zeros)
    old = [w.process.pid for w in pool._workers]
    pool.step([0, 1, 2, 3, 4, 5], zeros)  # slot 3 dies or hangs at its second step
    (failure,) = pool.failures
    assert failure.slot == 3 and failure.stage == "step"
    if fault == "die":
        assert failure.exit_code == -signal.SIGKILL and "signal 9" in failure.error
    else:
        assert "timed out" in failure.error and "within 1 s (--step-timeout 1 s per env call)" in failure.error
        assert "raise --step-timeout" in failure.error  # what happened, and which option to raise
    assert pool.rebuild(3) == [2, 3]
    new = [w.process.pid for w in pool._workers]
    assert new[0] == old[0] and new[2] == old[2] and new[1] != old[1]
    # the other blocks went on: their second step is the same as in-process
    sync.step([0, 1, 4, 5], zeros)
    assert_same(pool, sync, [0, 1, 4, 5])
    # the replaced block restarts from its seeds, and runs exactly as in-process envs do
    pool.failures.clear()
    for envs in (pool, sync):
        envs.reset_slots([2, 3], [22, 23])
        envs.step([2, 3], zeros)
    assert_same(pool, sync, [2, 3])


def test_watched_calls_come_back_in_the_step_reply(pair):
    """After one ``call(slots, "render")``, frames of those slots ride on the step replies:
    a step plus a render is one message per worker, not two."""
    pool, sync = pair(KNOWN_ANSWER_ID, 4, 2)
    for envs in (pool, sync):
        envs.reset_slots(range(4), [5, 6, 7, 8])
    assert [f.tolist() for f in pool.call([1, 2], "render")] == [f.tolist() for f in sync.call([1, 2], "render")]
    zeros = np.zeros(4, dtype=np.int64)
    for _ in range(2):
        before = [w.seq for w in pool._workers]
        pool.step(range(4), zeros)
        sync.step(range(4), zeros)
        frames = pool.call([1, 2], "render")
        assert [w.seq for w in pool._workers] == [b + 1 for b in before]  # the step only
        assert [f.tolist() for f in frames] == [f.tolist() for f in sync.call([1, 2], "render")]
    pool.step(range(4), zeros)  # nobody asks: the watch ends after this one unread frame
    pool.step(range(4), zeros)
    assert not any(pool._watch.values())


def env_reading_environ(**kwargs):
    from fasteval.testing.envs import KnownAnswerEnv

    env = KnownAnswerEnv(**kwargs)
    env.marker = os.environ.get("FASTEVAL_TEST_MARKER")
    return env


def test_workers_see_the_parents_current_environment(pair, monkeypatch):
    """Variables set after the forkserver started (as fasteval sets MUJOCO_GL) reach the workers."""
    first, _ = pair(KNOWN_ANSWER_ID, 1, 1)  # the forkserver runs by now
    monkeypatch.setenv("FASTEVAL_TEST_MARKER", "set-late")
    pool, _ = pair("tests.test_workers:env_reading_environ", 2, 2)
    assert pool.call([0, 1], "marker") == ["set-late", "set-late"]


def test_call_errors_and_has_attr(pair):
    pool, _ = pair(KNOWN_ANSWER_ID, 2, 2)
    pool.reset_slots([0, 1], [1, 2])
    assert pool.has_attr("render") and not pool.has_attr("no_such_attribute")
    with pytest.raises(EnvStepError, match="no_such_attribute"):
        pool.call([1], "no_such_attribute")


def test_buffers_survive_close_and_worker_replacement(pair):
    pool, _ = pair("CartPole-v1", 2, 2)
    obs = pool.obs
    pool.reset_slots([0, 1], [3, 4])
    first = obs.copy()
    pool.close()
    np.testing.assert_array_equal(obs, first)  # still mapped: the engine's tensor views stay valid


def test_workers_option_is_validated():
    with pytest.raises(UserInputError, match="workers"):
        EvalSpec(env="CartPole-v1", workers=0)
    from fasteval.doors.cli import main

    result = CliRunner().invoke(main, ["--env", KNOWN_ANSWER_ID, "--vectorization", "async", "--workers", "0", "-n", "2"])
    assert result.exit_code == 2 and "--workers" in result.output


@pytest.mark.gpu
def test_shared_buffers_are_pinned_for_a_cuda_policy_and_unpinned_at_close():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    factory, probe, _cap = make_factory("CartPole-v1", {}, None)
    pool = build_slot_envs("async", factory, 4, probe, 30.0, workers=2)
    view = torch.from_numpy(pool.obs)
    try:
        assert not pool.pinned and not view.is_pinned()  # nothing registered before the policy device is known
        assert pool.pin_host_buffers() and pool.pinned and view.is_pinned()
    finally:
        pool.close()
    assert not pool.pinned and not view.is_pinned()  # CUDA's registry forgot it too


def test_shared_buffers_are_not_pinned_without_cuda_or_request(pair):
    pool, _ = pair("CartPole-v1", 2, 2)
    assert pool.pinned is False


def test_the_owner_of_the_shared_buffers_unregisters_them_at_close_and_logs_the_codes(caplog):
    """Defect 2: the registration outlived the pool; a later mapping at the same address then failed to
    register while ``is_pinned()`` still said True (DMA out of freed pages)."""
    import logging

    from fasteval.testing.fake_cuda import FakeHostRegistry

    caplog.set_level(logging.DEBUG, logger="fasteval.core.shared_buffers")
    with FakeHostRegistry() as cudart:
        pools = []
        for _ in range(3):  # three pools, one after another, as suites and repeated evaluate() calls build them
            pool = build(KNOWN_ANSWER_ID, 2, "async", workers=1)
            address = pool.buffers.address()
            assert not pool.pinned and not cudart.is_pinned(address)  # nothing until the device is known
            assert pool.pin_host_buffers() and pool.pinned and cudart.is_pinned(address)
            pool.close()
            assert not pool.pinned and not cudart.is_pinned(address)  # CUDA's registry forgot it
            pools.append(pool)
        assert [c[0] for c in cudart.calls] == ["cudaHostRegister", "cudaHostUnregister"] * 3
        assert all(code == 0 for _, _, code in cudart.calls) and cudart.ranges == {}
    assert caplog.text.count("returned 0") == 6


def test_a_failed_registration_leaves_the_pool_unpinned_and_logs_the_code(caplog):
    from fasteval.testing.fake_cuda import FakeHostRegistry

    with FakeHostRegistry() as cudart:
        pool = build(KNOWN_ANSWER_ID, 2, "async", workers=1)
        try:
            cudart.ranges[pool.buffers.address()] = 64  # a stale registration of the same range
            assert pool.pin_host_buffers() is False and pool.pinned is False
        finally:
            pool.close()
    assert "returned 712" in caplog.text


def test_videos_from_the_pool_equal_in_process_videos(tmp_path):
    """Frames come back in the step replies (watched ``render``): the mp4 files are byte-identical."""
    from fasteval import evaluate

    digests = {}
    for vectorization in ("sync", "async"):
        folder = tmp_path / vectorization
        result = evaluate(env=KNOWN_ANSWER_ID, env_kwargs={"render_mode": "rgb_array"}, n_episodes=6, batch_size=3,
                          vectorization=vectorization, max_episodes_rendered=4, videos_dir=str(folder), policy="zero")
        assert len(result.video_paths) == 4
        digests[vectorization] = {p.name: p.read_bytes() for p in sorted(folder.rglob("*.mp4"))}
    assert len(digests["sync"]) == 4 and digests["sync"] == digests["async"]


def test_a_suite_callable_env_in_workers_is_a_clear_user_error():
    """Env callables exist only in the parent; a worker (forkserver/spawn) cannot see them: the
    user gets the suite's own UserInputError, raised as it is, not a generic worker failure."""
    from fasteval.core.envs import EnvFactory
    from fasteval.doors.suites import as_task
    from fasteval.testing import KnownAnswerEnv

    task = as_task(lambda **kwargs: KnownAnswerEnv(**kwargs))
    probe = KnownAnswerEnv()
    with pytest.raises(UserInputError, match="module:callable"):
        WorkerPoolEnvs(EnvFactory(task.env, dict(task.env_kwargs), kinds=ENV_KINDS), 2, probe.observation_space, probe.action_space,
                       n_workers=1, step_timeout=30.0)


def test_sync_envs_move_their_observations_into_pinned_buffers_when_asked(monkeypatch):
    """Pinning waits until the policy device is known to be a GPU; the envs then write the new buffers."""
    from fasteval.core import transfer

    made = []
    monkeypatch.setattr(transfer, "pinned_zeros", lambda shape, dtype: made.append(shape) or np.zeros(shape, dtype))
    envs = build(KNOWN_ANSWER_ID, 2, "sync")
    try:
        assert not envs.pinned and made == []  # nothing pinned at build time: no CUDA context for a CPU policy
        envs.reset_slots([0, 1], [3, 4])
        before = envs.obs.copy()
        assert envs.pin_host_buffers() and envs.pinned and made == [(2, 3)]
        np.testing.assert_array_equal(envs.obs, before)  # contents carried over
        envs.step([0], np.zeros(2, np.int64))
        assert envs.obs[0, 1] == 1 / 16  # the env wrote its next observation into the new buffer
    finally:
        envs.close()
