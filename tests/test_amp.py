"""``amp="auto"``: autocast with the device's default dtype (LeRobot's ``--policy.use_amp``)."""

from __future__ import annotations

import pytest
import torch

from fasteval.core.accel import with_autocast


@pytest.mark.parametrize("amp, dtype", [("auto", torch.bfloat16), ("bf16", torch.bfloat16), ("none", torch.float32)])
def test_autocast_dtype_on_cpu(amp, dtype):
    weight = torch.randn(4, 4)
    call = with_autocast(lambda x: x @ weight, torch.device("cpu"), amp)
    assert call(torch.randn(2, 4)).dtype == dtype


def test_auto_is_what_torch_autocast_uses_without_a_dtype():
    weight = torch.randn(4, 4)
    with torch.autocast(device_type="cpu"):
        expected = (torch.ones(2, 4) @ weight).dtype
    assert with_autocast(lambda x: x @ weight, torch.device("cpu"), "auto")(torch.ones(2, 4)).dtype == expected


_CACHE_SEEN: list = []


class _AutocastCacheProbe(torch.nn.Module):
    """Records whether autocast's cast cache is on during each call (in a module-level list: a list
    attribute would be Python-side state that keeps the policy out of a graph)."""

    def forward(self, obs):
        _CACHE_SEEN.append(torch.is_autocast_cache_enabled())
        return obs[..., -1].round().long()


@pytest.mark.parametrize("cuda_graph, cache", [(True, False), (False, True)])
def test_autocast_cache_is_off_around_a_captured_call_only(cuda_graph, cache):
    from fasteval import evaluate
    from fasteval.testing.fake_cuda import FakeCuda

    _CACHE_SEEN.clear()
    with FakeCuda():
        result = evaluate(env="fasteval/KnownAnswer-v0", policy=_AutocastCacheProbe(), n_episodes=4, batch_size=2,
                          device="cpu", amp="bf16", cuda_graph=cuda_graph)
    assert result.meta["policy_cuda_graph"] == ("captured" if cuda_graph else "off")
    calls = _CACHE_SEEN[2:]  # after the dry run's two plain calls
    assert calls and set(calls) == {cache}
