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
