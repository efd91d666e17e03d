"""The canonical policy call with LeRobot's real networks (fasteval.core.policy_blocks).

* row independence, as a property: ACT's and Diffusion's ``predict_action_chunk`` through fasteval's blocks
  give a row the same chunk, bit for bit, whatever its companions and its position in the batch;
* PushT end to end: ACT and Diffusion agree per episode at ``-b 1, 4, 10``, sync and async, to PushT's own last-bit
  noise (pymunk; the run's guarantee says so), with equal lengths and success;
* LIBERO end to end (libero_spatial, two cameras, a random ACT that reads every observation): every
  observation of every episode is identical at batch 1, 5 and with the pool;
* under LeRobot-style flags the block is the batch size (``policy_block = -b``): lerobot-eval's rounding.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.lerobot.conftest import pusht_spec

pytest.importorskip("lerobot")

from fasteval import evaluate  # noqa: E402
from fasteval.core.policy_blocks import blocked  # noqa: E402


def rows(result) -> list[tuple]:
    return [(r["seed"], r["sum_reward"], r["max_reward"], r["success"], r["length"]) for r in result.per_episode]


def _pusht_batch(n: int, seed: int) -> dict:
    gen = torch.Generator().manual_seed(seed)
    return {"observation.image": torch.rand(n, 3, 96, 96, generator=gen),
            "observation.state": torch.randn(n, 2, generator=gen)}


@pytest.fixture(scope="module")
def act_policy(act_checkpoint: Path):
    from lerobot.policies.act.modeling_act import ACTPolicy

    policy = ACTPolicy.from_pretrained(str(act_checkpoint)).eval()
    return policy


@settings(max_examples=12, deadline=None)
@given(n=st.integers(1, 20), data=st.data())
def test_an_act_row_gets_the_same_chunk_whatever_its_companions_and_position(act_policy, n, data) -> None:
    pos = data.draw(st.integers(0, n - 1))
    probe = _pusht_batch(1, 7)
    batch = _pusht_batch(n, data.draw(st.integers(0, 1000)))
    for key in batch:
        batch[key][pos] = probe[key][0]
    call = blocked(act_policy.predict_action_chunk, 8)
    with torch.inference_mode():
        alone = call(probe)[0]
        got = call(batch)[pos]
    assert torch.equal(got, alone)


@pytest.mark.parametrize("which", ["act_checkpoint", "diffusion_checkpoint"])
def test_pusht_episodes_agree_at_batch_1_4_10_sync_and_async(which: str, request) -> None:
    """PushT with ACT and Diffusion at -b 1, 4, 10, sync and async: the policy's rows are bitwise its own (the
    property above), but PushT's physics is not bit-reproducible by itself (pymunk orders contacts by memory
    address: one ulp in a sum of rewards between two runs, at any batch size), and the run says so in its
    guarantee. Lengths and success are equal; rewards agree to the last bits."""
    folder = request.getfixturevalue(which)
    spec = dict(n_episodes=4, max_steps=24)
    one = evaluate(**pusht_spec(folder, batch_size=1, **spec))
    assert one.meta["guarantee"].startswith("per episode to rounding") and "pymunk" in one.meta["guarantee"]
    assert one.meta["policy_call"] == "blocks of 16 rows"
    assert any(r["sum_reward"] > 0 for r in one.per_episode)  # not a comparison of zeros
    for fields in (dict(batch_size=4), dict(batch_size=10), dict(batch_size=4, vectorization="async", workers=2)):
        other = rows(evaluate(**pusht_spec(folder, **fields, **spec)))
        assert [(r[0], r[3], r[4]) for r in other] == [(r[0], r[3], r[4]) for r in rows(one)], (which, fields)
        np.testing.assert_allclose([r[1:3] for r in other], [r[1:3] for r in rows(one)], rtol=1e-12, atol=1e-12)


def test_lerobot_flags_use_the_batch_size_as_the_block(act_checkpoint: Path, tmp_path: Path) -> None:
    """lerobot-eval calls its policy on the whole batch; its command line in fasteval keeps that rounding."""
    import json
    import subprocess
    import sys

    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "fasteval.doors.cli", f"--policy.path={act_checkpoint}",
                           "--env.type=pusht", "--eval.n_episodes=3", "--eval.batch_size=3", "--policy.device=cpu",
                           "--env.episode_length=5", f"--output_dir={out}", "--max-episodes-rendered=0"],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    meta = json.loads((out / "eval_info.json").read_text())["meta"]
    assert meta["policy_block"] == 3 and meta["policy_call"] == "blocks of 3 rows"
