"""The chunk prediction of LeRobotPolicy in a CUDA graph, run on a CPU with fasteval's fake CUDA machinery.

``FakeCuda`` (fasteval.testing.fake_cuda) lets a CPU device take fasteval's graph path: the capture runs
``predict_action_chunk`` (warm-up, then "capture"), and each later full-batch call is a replay. In the
``faithful`` mode a replay re-runs the captured call on the static input buffers, as a real graph does, so
the numbers must equal the eager run's exactly; in the ``stale`` mode a replay does nothing (the output
keeps the capture's chunk), which the comparison must catch; ``fail`` makes the capture raise: the policy
then runs eagerly, with the same numbers, and says why. ``run_meta()["lerobot_chunk_cuda_graph"]`` reports
``captured`` / ``eager (reason)`` / ``off``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lerobot.test_act import rows, varying_spec

pytest.importorskip("lerobot")

from fasteval import evaluate  # noqa: E402
from fasteval.testing.fake_cuda import FakeCuda  # noqa: E402

KEY = "lerobot_chunk_cuda_graph"


def run(folder: Path, **fields):
    return evaluate(**varying_spec(folder, batch_size=3, n_episodes=8, **fields))


@pytest.fixture(scope="module")
def eager_rows(act_checkpoint: Path) -> list[tuple]:
    result = run(act_checkpoint)
    assert result.meta[KEY] == "off"  # a CPU device: no graph, and not asked for
    return rows(result)


def test_act_chunk_is_captured_once_and_replayed_with_the_same_numbers(act_checkpoint: Path,
                                                                     eager_rows: list[tuple]) -> None:
    with FakeCuda() as fake, pytest.warns(RuntimeWarning, match="would freeze"):  # the engine's own step stays eager
        result = run(act_checkpoint)
    assert result.meta[KEY] == "captured"
    assert len(fake.captures) == 1 and fake.captures[0]["capture_error_mode"] == "thread_local"
    assert fake.captures[0]["stream"] is not fake.default  # on fasteval's side stream
    assert fake.replays >= 5  # every later chunk came from the graph
    assert rows(result) == eager_rows


def test_a_stale_graph_is_caught_by_the_comparison(act_checkpoint: Path, eager_rows: list[tuple]) -> None:
    """The test above can fail: replays that ignore the new inputs give other numbers."""
    with FakeCuda("stale"), pytest.warns(RuntimeWarning):
        result = run(act_checkpoint)
    assert result.meta[KEY] == "captured"
    assert rows(result) != eager_rows


def test_a_failed_capture_falls_back_to_eager_and_says_why(act_checkpoint: Path, eager_rows: list[tuple]) -> None:
    with FakeCuda("fail") as fake, pytest.warns(RuntimeWarning, match="capture of the policy failed"):
        result = run(act_checkpoint)
    assert result.meta[KEY] == "eager (capture failed: RuntimeError)"
    assert len(fake.captures) == 1 and fake.replays == 0
    assert rows(result) == eager_rows


def test_cuda_graph_false_is_off(act_checkpoint: Path) -> None:
    from fasteval.robot.lerobot.loader import load_lerobot_policy

    with FakeCuda():
        policy = load_lerobot_policy(act_checkpoint, n_slots=2, device="cpu", cuda_graph=False)
        assert policy.run_meta()[KEY] == "off"
        asked = load_lerobot_policy(act_checkpoint, n_slots=2, device="cpu")
        assert asked.run_meta()[KEY] == "eager (not called yet)"
    asked_off_cuda = load_lerobot_policy(act_checkpoint, n_slots=2, device="cpu", cuda_graph=True)
    assert asked_off_cuda.run_meta()[KEY] == "eager (no CUDA device)"


def test_diffusion_with_per_episode_generators_is_not_graphed(diffusion_checkpoint: Path) -> None:
    pytest.importorskip("diffusers")
    with FakeCuda() as fake, pytest.warns(RuntimeWarning):
        result = evaluate(**varying_spec(diffusion_checkpoint, batch_size=2, n_episodes=2))
    assert result.meta[KEY].startswith("eager (per-episode noise generators")
    assert fake.captures == []


def test_the_capture_fails_without_factory_calls_born_on_the_device(act_checkpoint: Path, eager_rows: list[tuple],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A planted fault: without born_on, ACT's eval-time ``torch.zeros([B, latent_dim]).to(device)`` is a pageable
    host-to-device copy, which the strict fake capture refuses as CUDA does. So the test above sees the fix."""
    import contextlib

    from fasteval.core import accel

    monkeypatch.setattr(accel, "born_on", lambda device: contextlib.nullcontext())
    with FakeCuda(), pytest.warns(RuntimeWarning, match="capture of the policy failed"):
        result = run(act_checkpoint)
    assert result.meta[KEY] == "eager (capture failed: RuntimeError)"
    assert rows(result) == eager_rows


def test_acts_chunk_prediction_makes_no_host_copy_when_born_on_the_device(act_checkpoint: Path) -> None:
    """The capture body itself, on CPU: LeRobot's ACT predict_action_chunk under born_on(device) makes no
    host-to-device copy; without born_on the guard names ACT's own line (modeling_act.py)."""
    import torch

    from fasteval.core.capture_body import HostCopyError, born_on, no_host_copies
    from fasteval.robot.lerobot.loader import load_lerobot_policy
    from fasteval.robot.lerobot.testing import IMAGE_SHAPE, STATE_DIM

    wrapper = load_lerobot_policy(act_checkpoint, n_slots=2, device="cpu")
    batch = {"observation.image": torch.rand(2, *IMAGE_SHAPE), "observation.state": torch.rand(2, STATE_DIM)}
    batch = wrapper.pipelines.pre({**batch, "task": ["", ""]})
    device = torch.device("cpu")
    with no_host_copies(device), born_on(device), torch.no_grad():
        chunk = wrapper.policy.predict_action_chunk(batch)
    assert chunk.shape[:2] == (2, wrapper.n_action_steps)
    with pytest.raises(HostCopyError, match="modeling_act"), no_host_copies(device), torch.no_grad():
        wrapper.policy.predict_action_chunk(batch)


def test_a_queue_step_without_a_refill_copies_nothing_to_the_device(act_checkpoint: Path) -> None:
    """Steps served from the per-slot queues (the shared ChunkQueue) upload nothing: no positions, no index."""
    import torch
    from tensordict import TensorDict

    from fasteval.core.capture_body import no_host_copies
    from fasteval.robot.lerobot.loader import load_lerobot_policy
    from fasteval.robot.lerobot.testing import IMAGE_SHAPE, STATE_DIM

    wrapper = load_lerobot_policy(act_checkpoint, n_slots=2, device="cpu")
    wrapper.reset(torch.tensor([0, 1]))
    obs = TensorDict({"observation.image": torch.rand(2, *IMAGE_SHAPE), "observation.state": torch.rand(2, STATE_DIM)},
                     batch_size=[2])
    first = wrapper.select_action(obs)  # a refill
    with no_host_copies(torch.device("cpu"), syncs=True):
        second = wrapper.select_action(obs)
    assert first.shape == second.shape == (2, 2) and not torch.equal(first, second)
