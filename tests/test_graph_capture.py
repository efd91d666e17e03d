"""CUDA-graph capture on CPU, with fake CUDA objects (:mod:`fasteval.testing.fake_cuda`): which device and
stream a capture uses, one capture per group per engine, what is reported, what blocks a graph, and the
restore after a failed capture. The real thing runs in the ``gpu`` tests and ``benchmarks/gpu_check.py``."""

from __future__ import annotations

import threading

import pytest
import torch

from fasteval import evaluate
from fasteval.core import accel
from fasteval.core.accel import CAPTURED, OFF, CudaGraphCall, capture_blockers, python_state
from fasteval.core.capabilities import Capabilities
from fasteval.run.engine import Engine
from fasteval.types.errors import UserInputError
from fasteval.types.spec import EvalSpec
from fasteval.testing import ParityPolicy, StepCounterPolicy, expected_episode
from fasteval.testing.fake_cuda import FakeCuda

KA = "fasteval/KnownAnswer-v0"


def numbers(result):
    return [(r["episode_ix"], r["sum_reward"], r["length"], r["success"]) for r in result.per_episode]


def parity_numbers(seed, n):
    out = []
    for i in range(n):
        e = expected_episode(seed + i, action_fn=lambda o: int(o[2]))
        out.append((i, e["sum_reward"], e["length"], e["success"]))
    return out


# -- where a capture runs ----------------------------------------------------------------------------

def test_capture_runs_in_the_policy_device_context_on_a_side_stream_made_there():
    device = torch.device("cuda", 1)  # a fake index: the fakes record it, nothing touches a GPU
    with FakeCuda() as fake:
        seen_streams = []

        def step(x):
            seen_streams.append(fake.current)
            return x * 2

        call = CudaGraphCall(step, device)
        x = torch.arange(4.0)
        out = call(x)
        assert torch.equal(out, x * 2)
        (capture,) = fake.captures
        assert capture["device"] == device  # inside torch.cuda.device(policy device)
        side = capture["stream"]
        assert side is call.stream and side is not fake.default
        assert capture["stream_device"] == device and capture["stream_created_in"] == device
        assert capture["capture_error_mode"] == "thread_local" and capture["pool"] is call.pool is not None
        # 2 warm-ups and the capture on the side stream; then the first replay, on the thread's stream
        assert seen_streams == [side, side, side, fake.default]
        assert side.waited == ["default"]  # the side stream waits for the current one first
        assert fake.current is fake.default  # the thread's stream is back
        x += 1
        assert torch.equal(call(x), x * 2) and fake.replays == 2  # later calls replay


def test_a_failed_capture_restores_stream_and_rng_and_reports_eager():
    with FakeCuda("fail") as fake:
        call = CudaGraphCall(lambda x: x + torch.rand(1) * 0, torch.device("cuda", 0))
        torch.manual_seed(5)
        state = torch.get_rng_state()
        with pytest.warns(RuntimeWarning, match="capture of the policy failed"):
            out = call(torch.ones(2))
        assert torch.equal(out, torch.ones(2))  # the eager result
        assert fake.current is fake.default  # the fake left its capture stream current: restored
        after = torch.get_rng_state()
        torch.set_rng_state(state)
        torch.rand(1)  # the one eager call's draw
        assert torch.equal(after, torch.get_rng_state())  # warm-up and capture draws were undone
        assert call.facts["cuda_graph"] == "eager (capture failed: RuntimeError)"
        call(torch.ones(2))
        assert len(fake.captures) == 1 and call.captures == 0  # never tried again


def test_captures_hold_the_process_wide_lock():
    held = []
    with FakeCuda():
        call = CudaGraphCall(lambda x: (held.append(accel.CAPTURE_LOCK.locked()), x)[1], torch.device("cuda", 0))
        x = torch.ones(1)  # one static input buffer: one capture
        call(x)
        call(x)
        assert held == [True, True, True, False, False]  # warm-ups and capture locked; replays (fake re-runs) not
    assert not accel.CAPTURE_LOCK.locked()


def test_threads_capture_one_at_a_time():
    inside, overlaps = [0], []
    lock = threading.Lock()

    def step(x):
        with lock:
            inside[0] += 1
            overlaps.append(inside[0])
        threading.Event().wait(0.002)
        with lock:
            inside[0] -= 1
        return x

    with FakeCuda("stale"):  # replays run nothing: every step call is a warm-up or a capture
        calls = [CudaGraphCall(step, torch.device("cuda", 0)) for _ in range(4)]
        threads = [threading.Thread(target=c, args=(torch.ones(1),)) for c in calls]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(overlaps) == 12 and max(overlaps) == 1 and all(c.captures == 1 for c in calls)


# -- graphs belong to the engine -----------------------------------------------------------------------

@pytest.mark.parametrize("pipeline", [False, True])
def test_fifty_runs_of_one_engine_capture_once_per_group(pipeline):
    spec = EvalSpec(env=KA, policy=ParityPolicy(), n_episodes=6, batch_size=4, device="cpu", cuda_graph=True,
                    vectorization="async" if pipeline else "sync", pipeline=pipeline)
    with FakeCuda() as fake:
        with Engine(spec) as engine:
            results = [engine.run(seed=run) for run in range(50)]
            call = engine.runner._step
            assert isinstance(call, CudaGraphCall)
            groups = 2 if pipeline else 1
            assert call.captures == len(call.graphs) == len(fake.captures) == groups
            assert fake.pools == 1 and len({id(c["pool"]) for c in fake.captures}) == 1  # one shared pool
            assert fake.replays > 50
    for run, result in enumerate(results):
        assert result.meta["policy_cuda_graph"] == CAPTURED
        assert numbers(result) == parity_numbers(run, 6)


def test_a_stale_graph_gives_wrong_results_that_the_known_answers_catch():
    """The fault an empty graph (captured on the wrong device's stream) would cause."""
    with FakeCuda("stale"):
        result = evaluate(env=KA, policy=ParityPolicy(), n_episodes=12, batch_size=4, device="cpu", cuda_graph=True)
    assert result.meta["policy_cuda_graph"] == CAPTURED
    assert numbers(result) != parity_numbers(0, 12)


# -- what is reported -------------------------------------------------------------------------------

def test_meta_reports_off_eager_or_captured():
    common = dict(env=KA, policy=ParityPolicy(), n_episodes=4, batch_size=2, device="cpu")
    assert evaluate(**common).meta["policy_cuda_graph"] == OFF  # default: graphs where CUDA exists
    assert evaluate(**common, cuda_graph=False).meta["policy_cuda_graph"] == OFF
    with pytest.warns(RuntimeWarning, match="cuda-graph"):
        assert evaluate(**common, cuda_graph=True).meta["policy_cuda_graph"] == "eager (no CUDA device)"
    with FakeCuda():
        assert evaluate(**common, cuda_graph=True).meta["policy_cuda_graph"] == CAPTURED
    with FakeCuda("fail"), pytest.warns(RuntimeWarning, match="capture of the policy failed"):
        result = evaluate(**common, cuda_graph=True)
    assert result.meta["policy_cuda_graph"] == "eager (capture failed: RuntimeError)"
    assert numbers(result) == parity_numbers(0, 4)


# -- state a graph would freeze ---------------------------------------------------------------------

class TaskSetter(ParityPolicy):
    def set_task(self, env_ids, descriptions):
        pass


class OwnGenerator(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gen = torch.Generator().manual_seed(0)

    def forward(self, obs):
        return (torch.rand(obs.shape[0], generator=self.gen) < 0.5).long()


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, obs):
        self.calls += 1
        return obs[:, 2].long()


@pytest.mark.parametrize("policy,reason", [
    (TaskSetter(), "task descriptions"),
    (OwnGenerator(), "own torch.Generator (OwnGenerator.gen)"),
    (Counter(), "Python-side state"),
    (StepCounterPolicy(), "per-slot policy state"),
])
def test_state_a_graph_would_freeze_keeps_the_policy_eager(policy, reason):
    with FakeCuda() as fake, pytest.warns(RuntimeWarning, match="would freeze"):
        result = evaluate(env=KA, policy=policy, n_episodes=4, batch_size=2, device="cpu", cuda_graph=True)
    assert result.meta["policy_cuda_graph"].startswith(f"eager ({reason}")
    assert fake.captures == []


class LazyInit(ParityPolicy):
    """Sets a Python flag on its first call only: nothing a graph would freeze afterwards."""

    def __init__(self):
        super().__init__()
        self.ready = False

    def forward(self, obs):
        self.ready = True
        return super().forward(obs)


def test_first_call_initialisation_does_not_block_graphs():
    with FakeCuda() as fake:
        result = evaluate(env=KA, policy=LazyInit(), n_episodes=4, batch_size=2, device="cpu", cuda_graph=True)
    assert result.meta["policy_cuda_graph"] == CAPTURED and len(fake.captures) == 1


def test_plain_policies_have_no_blockers():
    policy = ParityPolicy()
    state = python_state(policy)
    policy(torch.zeros(2, 3))
    assert python_state(policy) == state
    assert capture_blockers(Capabilities(), policy) == []
    assert capture_blockers(Capabilities(reset_kind="per-env"), policy) == [accel.PER_SLOT_STATE]
    # a step that returns whole chunks carries only the policy's own per-slot state, not the runner's queue
    assert capture_blockers(Capabilities(reset_kind="per-env", chunks=True), policy, whole_chunks=True) == []


def test_pipeline_with_a_set_task_policy_is_a_clear_error_not_an_index_error():
    class SetTask:
        def set_task(self, env_ids, descriptions):
            pass

        def select_action(self, obs):
            return torch.zeros(obs.batch_size[0], 2)

    with pytest.raises(UserInputError, match="set_task.*Drop --pipeline"):
        evaluate(env="tests.test_robot:make_pixel_env", policy=SetTask(), n_episodes=5, batch_size=4,
                 vectorization="async", pipeline=True)


def test_task_table_is_indexed_by_slot_for_every_slot():
    from fasteval.robot.policies.task_descriptions import TaskDescriptions

    class Envs:
        n_slots, failures = 6, []

        def call(self, slots, name):
            return [f"t{s}" for s in slots]

        def has_attr(self, name):
            return True

    tasks = TaskDescriptions(Envs(), object(), 3, in_observation=False)  # 3: one group's rows
    tasks.update([4, 5])
    assert tasks.descriptions == ["", "", "", "", "t4", "t5"]


# -- fresh noise --------------------------------------------------------------------------------------

from tests.helpers import ActionLog, NoisyPolicy as Noisy  # noqa: E402


def action_log(seed, **kwargs):
    log = ActionLog()
    with Engine(EvalSpec(env=KA, policy=Noisy(), n_episodes=40, batch_size=4, device="cpu", **kwargs)) as engine:
        engine.run(seed=seed, observer=log)
    return log.steps


def fresh_noise_problems(a, b, other_seed):
    """What is wrong with two same-seed action logs ``a``, ``b`` (and one of another seed); [] if nothing."""
    problems = []
    if a != b:
        problems.append("same seed, different actions")
    repeats = sum(x == y for x, y in zip(a, a[1:]))  # fresh noise: a step repeats the last one's 4 bits 1 time in 16
    if repeats > len(a) // 2:
        problems.append(f"{repeats} of {len(a)} steps repeat the previous step's actions: frozen noise")
    if a == other_seed:
        problems.append("another seed gave the same actions")
    return problems


@pytest.mark.parametrize("mode", [None, "faithful"])
def test_stochastic_policy_draws_fresh_noise_every_step_and_is_reproducible(mode):
    kwargs = {} if mode is None else {"cuda_graph": True}
    ctx = FakeCuda(mode) if mode else _nothing()
    with ctx:
        a, b, c = action_log(1, **kwargs), action_log(1, **kwargs), action_log(2, **kwargs)
    assert fresh_noise_problems(a, b, c) == []
    if mode == "faithful":  # replay draws exactly what eager draws
        assert a == action_log(1)


def test_frozen_noise_is_caught():
    with FakeCuda("frozen-noise"):
        a, b, c = action_log(1, cuda_graph=True), action_log(1, cuda_graph=True), action_log(2, cuda_graph=True)
    assert any("frozen noise" in p for p in fresh_noise_problems(a, b, c))


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return None


# -- reported by every door ------------------------------------------------------------------------

def test_cuda_graph_status_in_eval_info_profile_and_bench(tmp_path):
    import json

    from click.testing import CliRunner

    from fasteval.doors.cli import main

    result = CliRunner().invoke(main, ["--env", KA, "-n", "4", "-b", "2", "--device", "cpu", "--profile",
                                       "-o", str(tmp_path)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert any(line.split() == ["cuda_graph", "off"] for line in result.output.splitlines())
    info = json.loads((tmp_path / "eval_info.json").read_text())
    assert info["meta"]["policy_cuda_graph"] == "off"
    bench = CliRunner().invoke(main, ["bench", "--env", KA, "-n", "4", "-b", "2", "--repeats", "1", "--device", "cpu",
                                      "--cuda-graph"], catch_exceptions=False)
    assert bench.exit_code == 0, bench.output
    assert "CUDA graph eager (no CUDA device)" in bench.output


# -- CUDA's rule for the capture body, in the fake ------------------------------------------------------

import numpy as np  # noqa: E402

from fasteval.core.capture_body import HostCopyError, born_on, no_host_copies  # noqa: E402


def _upload(x):
    return x + torch.from_numpy(np.ones(x.shape, dtype=np.float32)).to(x.device)


def _item(x):
    return x * x.sum().item()


def _branch(x):
    return x if bool(x.sum() > 0) else -x


def _index_upload(x):
    return x[torch.from_numpy(np.arange(x.shape[0]))]


def _synchronize(x):
    torch.cuda.synchronize()
    return x


class Uncapturable(ParityPolicy):
    """ParityPolicy's actions, after a step CUDA cannot capture (the ``step``'s result is multiplied by 0)."""

    def __init__(self, step):
        super().__init__()
        self.step = step

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return super().forward(obs + 0 * self.step(obs.float()))


@pytest.mark.parametrize("step", [_upload, _item, _branch, _index_upload, _synchronize])
def test_a_policy_step_cuda_cannot_capture_runs_eager_with_the_same_numbers(step):
    """A pageable upload, a host read, a data-dependent branch, a host index or a sync in the policy: the
    capture fails as CUDA's would, the run warns once, says ``eager (capture failed: ...)`` in meta and
    gives the known answers; the policy was called eagerly (its step ran every time, not replayed)."""
    policy = Uncapturable(step)
    with FakeCuda() as fake, pytest.warns(RuntimeWarning, match="operation not permitted when stream is capturing") as seen:
        result = evaluate(env=KA, policy=policy, n_episodes=6, batch_size=3, device="cpu", cuda_graph=True)
    assert len([w for w in seen if "capture of the policy failed" in str(w.message)]) == 1
    assert result.meta["policy_cuda_graph"] == "eager (capture failed: RuntimeError)"
    assert len(fake.captures) == 1 and fake.replays == 0
    assert numbers(result) == parity_numbers(0, 6)


def _act_latent(x):
    """LeRobot ACT's eval path: ``torch.zeros([B, latent_dim]).to(device)`` (a pageable upload on a GPU)."""
    latent = torch.zeros([x.shape[0], 2]).to(x.device)
    return x[:, :2] + latent


def test_factory_calls_in_a_captured_step_are_born_on_the_policy_device(monkeypatch):
    """Defect 1 (generic half): the capture runs with the policy device as the factory default."""
    x = torch.ones(3, 4)
    with FakeCuda() as fake:
        call = CudaGraphCall(_act_latent, torch.device("cuda", 1))
        assert torch.equal(call(x), x[:, :2]) and call.facts["cuda_graph"] == CAPTURED
        assert fake.born_on == [torch.device("cuda", 1)]
    # without it, the fake (like CUDA) refuses the upload: the test above can fail
    monkeypatch.setattr(accel, "born_on", lambda device: _nothing())
    with FakeCuda(), pytest.warns(RuntimeWarning, match="capture of the policy failed"):
        call = CudaGraphCall(_act_latent, torch.device("cuda", 1))
        call(x)
    assert call.facts["cuda_graph"] == "eager (capture failed: RuntimeError)"


def test_born_on_leaves_data_constructors_on_the_host():
    with born_on("meta"):
        assert torch.zeros(2).device.type == "meta" and torch.arange(3).device.type == "meta"
        assert torch.zeros(2, device="cpu").device.type == "cpu"  # an explicit device wins
        assert torch.tensor(2.0).device.type == "cpu" and torch.as_tensor([1, 2]).device.type == "cpu"


def test_no_host_copies_names_each_kind_of_upload_and_allows_device_work():
    x = torch.ones(4)
    with torch.inference_mode():
        with no_host_copies("cpu"):
            with born_on("cpu"):
                y = torch.zeros(4).to(x.device) + x  # born on the device: no copy
            y = y * torch.tensor(2.0)  # a host scalar read by value: no copy
            y.sum().item()  # a sync, allowed unless syncs=True
        for body, what in [(lambda: torch.zeros(4).to(x.device), "Tensor.to of a host tensor"),
                           (lambda: x.copy_(torch.zeros(4)), "copy_ from a host tensor"),
                           (lambda: torch.tensor([1.0, 2.0], device="cpu"), r"tensor\(host data"),
                           (lambda: x[np.array([0, 1])], "a host index"),
                           (lambda: x + torch.from_numpy(np.ones(4, np.float32)), "a host tensor in")]:
            with pytest.raises(HostCopyError, match=what) as caught, no_host_copies("cpu"):
                body()
            assert "test_graph_capture.py:" in str(caught.value)  # the line that did it
        with pytest.raises(HostCopyError, match="a sync"), no_host_copies("cpu", syncs=True):
            x.sum().item()
        host = torch.zeros(4)
        with pytest.raises(HostCopyError), no_host_copies("cpu", host=[host]):
            host.to(x.device)


# -- capture time is timed apart ------------------------------------------------------------------------

def test_warm_ups_and_capture_are_timed_into_the_capture_clock(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(accel, "perf_counter", lambda: clock[0])

    def step(x):
        clock[0] += 1.0  # each eager call (2 warm-ups, the capture) "takes" 1 s; the fake replay re-runs it
        return x * 2

    before, x = accel.capture_clock.seconds, torch.ones(2)
    with FakeCuda():
        call = CudaGraphCall(step, torch.device("cuda", 0))
        call(x)
        assert accel.capture_clock.seconds - before == 3.0
        call(x)  # a replay: not capture time
        assert accel.capture_clock.seconds - before == 3.0
    first = accel.timed_first_calls(step)
    first(x), first(x), first(x)
    assert accel.capture_clock.seconds - before == 4.0  # compile's first call per input only
