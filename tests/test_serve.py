"""A served policy gives the in-process numbers, per seed: fasteval serve + the ws:// client.

One server process per served policy (module-scoped), loopback only. Each case runs the same spec
in-process and through the server and compares every episode's numbers and every step's actions.
"""

from __future__ import annotations

import pytest

pytest.importorskip("websockets")
pytest.importorskip("msgpack")

from fasteval.robot.policies.remote import connect_remote  # noqa: E402
from fasteval.run.engine import Engine  # noqa: E402
from fasteval.testing import KNOWN_ANSWER_ID  # noqa: E402
from fasteval.types.spec import EvalSpec  # noqa: E402
from tests.helpers import ActionLog  # noqa: E402
from tests.serve_helpers import REPO, ServerProcess  # noqa: E402

MLP = str(REPO / "src" / "fasteval" / "assets" / "cartpole_mlp")
NOISE = "tests.serve_helpers:episode_noise"
CHUNKS = "tests.serve_helpers:parity_chunks"


def run(policy, **fields):
    """(per-episode rows, actions of every step) of one engine run."""
    spec = EvalSpec(**fields, policy=policy)
    log = ActionLog(active_only=True)
    with Engine(spec) as engine:
        result = engine.run(observer=log)
    rows = [(r["episode_ix"], r["seed"], r["sum_reward"], r["length"], r["success"]) for r in result.per_episode]
    return rows, log.steps, result


@pytest.fixture(scope="module")
def servers():
    with ServerProcess(MLP) as mlp, ServerProcess(NOISE) as noise, ServerProcess(CHUNKS) as chunks:
        yield {MLP: mlp.url, NOISE: noise.url, CHUNKS: chunks.url}


CASES = [
    # (policy, env, n, batch, vectorization, pipeline, in-process pipeline)
    (MLP, "CartPole-v1", 4, 1, "sync", False, False),
    (MLP, "CartPole-v1", 9, 4, "sync", False, False),
    (MLP, "CartPole-v1", 8, 4, "async", True, True),
    (NOISE, KNOWN_ANSWER_ID, 30, 3, "sync", False, False),
    (NOISE, KNOWN_ANSWER_ID, 30, 8, "async", False, False),
    (NOISE, KNOWN_ANSWER_ID, 30, 6, "async", True, False),  # in-process --pipeline refuses a stateful policy
    (CHUNKS, KNOWN_ANSWER_ID, 30, 1, "sync", False, False),
    (CHUNKS, KNOWN_ANSWER_ID, 30, 7, "sync", False, False),
    (CHUNKS, KNOWN_ANSWER_ID, 30, 6, "async", True, False),  # ... and chunk queues
]


@pytest.mark.parametrize("policy,env,n,batch,vectorization,pipeline,local_pipeline", CASES,
                         ids=[f"{c[0].rsplit(':', 1)[-1].rsplit('/', 1)[-1]}-b{c[3]}-{c[4]}{'-pipeline' if c[5] else ''}"
                              for c in CASES])
def test_remote_equals_in_process_per_seed(servers, policy, env, n, batch, vectorization, pipeline, local_pipeline):
    common = dict(env=env, n_episodes=n, seed=11, device="cpu", max_steps=60 if env == "CartPole-v1" else None)
    workers = {"workers": 2} if vectorization == "async" else {}
    local_rows, local_steps, _ = run(policy, batch_size=batch, vectorization=vectorization, pipeline=local_pipeline,
                                     **workers, **common)
    remote = connect_remote(servers[policy])
    remote_rows, remote_steps, result = run(remote, batch_size=batch, vectorization=vectorization, pipeline=pipeline,
                                            **workers, **common)
    assert [r[1] for r in remote_rows] == list(range(11, 11 + n))
    assert remote_rows == local_rows
    if pipeline == local_pipeline:
        assert remote_steps == local_steps  # the very same action of every slot that stepped, step by step
    assert result.meta["policy_protocol"] == "fasteval" and result.meta["status"] == "complete"


def test_noise_and_chunks_really_depend_on_the_seed(servers):
    """The comparisons above are not between constant policies: episodes differ, and chunks cost reward
    when their queue is misaligned (an in-process run with chunks played one by one differs)."""
    rows, _steps, _ = run(NOISE, env=KNOWN_ANSWER_ID, n_episodes=30, batch_size=3, seed=11, device="cpu")
    parity, _s, _ = run("fasteval.testing:ParityPolicy", env=KNOWN_ANSWER_ID, n_episodes=30, batch_size=3, seed=11,
                        device="cpu")
    chunked, _c, _ = run(CHUNKS, env=KNOWN_ANSWER_ID, n_episodes=30, batch_size=3, seed=11, device="cpu")
    assert len({r[2] for r in rows}) > 5
    assert rows != parity and chunked != parity


def test_one_engine_runs_twice_through_one_session(servers):
    """The Evaluator pattern: one engine (one server session), two runs with other seeds, both exact."""
    spec = EvalSpec(env=KNOWN_ANSWER_ID, policy=connect_remote(servers[NOISE]), n_episodes=12, batch_size=4, seed=0,
                    device="cpu")
    with Engine(spec) as engine:
        first = [r["sum_reward"] for r in engine.run(seed=5).per_episode]
        second = [r["sum_reward"] for r in engine.run(seed=40).per_episode]
    local_first, _, _ = run(NOISE, env=KNOWN_ANSWER_ID, n_episodes=12, batch_size=4, seed=5, device="cpu")
    local_second, _, _ = run(NOISE, env=KNOWN_ANSWER_ID, n_episodes=12, batch_size=4, seed=40, device="cpu")
    assert first == [r[2] for r in local_first] and second == [r[2] for r in local_second]


def test_client_device_cuda_is_refused(servers):
    """The client runs no policy: a CUDA --device on the client side is a clear error (the server has --device)."""
    from types import SimpleNamespace

    from fasteval.types.errors import UserInputError

    from fasteval.robot.policies.remote_runner import build_remote_runner

    remote = connect_remote(servers[MLP])
    with pytest.raises(UserInputError, match="runs on the server"):
        build_remote_runner(remote, SimpleNamespace(device="cuda:0"), None, None, 2)


def test_the_url_is_a_policy_reference_like_any_other(servers):
    """The library API takes the URL string (loaded by the loaders, as a folder would be), and sweeps plan it."""
    from fasteval import evaluate
    from fasteval.doors.sweep.plan import resolve_policy

    served = evaluate(env=KNOWN_ANSWER_ID, policy=servers[NOISE], n_episodes=10, batch_size=3, seed=4, device="cpu")
    local = evaluate(env=KNOWN_ANSWER_ID, policy=NOISE, n_episodes=10, batch_size=3, seed=4, device="cpu")
    assert [r["sum_reward"] for r in served.per_episode] == [r["sum_reward"] for r in local.per_episode]
    assert served.meta["policy"] == servers[NOISE]
    ref, digest = resolve_policy(servers[NOISE])
    assert ref == servers[NOISE] and digest != resolve_policy(servers[MLP])[1]


def test_a_wave_policy_is_served_in_waves():
    """A policy that can only reset the whole batch: the server says so, the client runs waves, the numbers match."""
    wave = "fasteval.testing:WaveOnlyPolicy"
    with ServerProcess(wave) as server:
        rows, _steps, result = run(connect_remote(server.url), env=KNOWN_ANSWER_ID, n_episodes=14, batch_size=4, seed=2,
                                   device="cpu")
    local, _l, local_result = run(wave, env=KNOWN_ANSWER_ID, n_episodes=14, batch_size=4, seed=2, device="cpu")
    assert result.meta["batching"] == local_result.meta["batching"] == "wave"
    assert rows == local


@pytest.mark.parametrize("pipeline", [False, True])
def test_step_requests_carry_the_active_slots_only(servers, monkeypatch, pipeline):
    """Each step request holds one observation per slot that runs an episode: over a run, the rows sent
    are exactly the env steps taken (idle slots at the tail of the ledger send nothing), and the
    numbers stay the in-process ones."""
    from fasteval.robot.policies.remote_runner import RemoteRunner

    sent: list[list[int]] = []
    request = RemoteRunner._request

    def spy(self, message, expect, what, error=None):
        if message.get("__fasteval__") == "step":
            sent.append(list(message["slots"]))
            assert len(message["obs"]) == len(message["slots"])
        return request(self, message, expect, what, **({} if error is None else {"error": error}))

    monkeypatch.setattr(RemoteRunner, "_request", spy)
    common = dict(env="CartPole-v1", n_episodes=7, batch_size=4, seed=3, device="cpu", max_steps=40)
    extra = dict(vectorization="async", workers=2, pipeline=True) if pipeline else {}
    rows, _steps, result = run(connect_remote(servers[MLP]), **common, **extra)
    local, _l, _r = run(MLP, **common, **extra)
    assert rows == local
    assert sum(len(s) for s in sent) == sum(r[3] for r in rows)  # one row per env step, none for idle slots
    assert any(len(s) < (2 if pipeline else 4) for s in sent)  # the tail's requests really were smaller


def test_accelerator_flags_travel_to_the_server_and_warn_nothing_here(servers):
    """--cuda-graph on a ws:// run is the server's to apply: the client wraps nothing and warns nothing
    (it used to warn "needs a CUDA policy device" about its own, network-bound step), and the numbers stay."""
    import warnings

    common = dict(env="CartPole-v1", n_episodes=5, batch_size=2, seed=8, device="cpu", max_steps=30)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows, _steps, result = run(connect_remote(servers[MLP]), cuda_graph=True, **common)
    assert not [w for w in caught if "cuda" in str(w.message).lower()]
    assert result.meta["policy_cuda_graph"] == "off"  # nothing graphed on this side
    local, _l, _r = run(MLP, **common)
    assert rows == local
