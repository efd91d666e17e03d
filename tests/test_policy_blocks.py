"""The canonical policy call (fasteval.core.policy_blocks): each row's output is its own, bit for bit.

Two levels:

* **row independence, per policy family** (a property): a row's output from the runner is bitwise the same
  whatever its companions in the batch, its position, and the batch size, for fasteval's MLP, a TorchRL
  actor (deterministic and random exploration) and an SB3 policy. LeRobot's ACT and Diffusion are held to
  the same property in tests/lerobot/test_policy_blocks_lerobot.py;
* **end to end, bitwise**: HalfCheetah with an MLP gives identical per-episode results at ``-b 1, 16, 256``,
  with ``--pipeline``, in the pool and in a many-policy run; a different R is another evaluation (resume
  refuses it, compare names it).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fasteval import evaluate
from fasteval.core.policy import PolicyRunner
from fasteval.core.policy_blocks import BITWISE, TO_ROUNDING, blocked, block_indices, guarantee, n_rows, take_rows
from fasteval.robot.policies.mlp import MLPPolicy

HALF_CHEETAH_OBS, HALF_CHEETAH_ACT = 17, 6
BOX6 = gym.spaces.Box(-1.0, 1.0, (HALF_CHEETAH_ACT,), np.float32)


def cheetah_mlp(seed: int = 0, hidden=(256, 256)) -> MLPPolicy:
    torch.manual_seed(seed)
    return MLPPolicy(HALF_CHEETAH_OBS, HALF_CHEETAH_ACT, hidden, "tanh", "tanh").eval()


def save_mlp(policy: MLPPolicy, folder: Path) -> str:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(policy.config))
    save_file({k: v.contiguous() for k, v in policy.state_dict().items()}, str(folder / "model.safetensors"))
    return str(folder)


def observations(n: int, seed: int) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).normal(size=(n, HALF_CHEETAH_OBS)).astype(np.float32))


# -- the block call itself ----------------------------------------------------------------------------------
def test_take_rows_pads_with_the_last_real_row_and_keeps_views_of_whole_blocks():
    x = torch.arange(10.0).reshape(5, 2)
    whole = take_rows(x, 0, 4, 4, 5)
    assert whole.data_ptr() == x.data_ptr()  # a view: no copy for a whole block
    padded = take_rows(x, 4, 5, 4, 5)
    assert padded.shape == (4, 2) and torch.equal(padded, x[[4, 4, 4, 4]])
    batch = {"state": x, "task": ["a", "b", "c", "d", "e"], "flag": 3}
    part = take_rows(batch, 3, 5, 4, 5)
    assert part["task"] == ["d", "e", "e", "e"] and part["flag"] == 3 and torch.equal(part["state"], x[[3, 4, 4, 4]])
    assert n_rows(batch) == 5
    assert block_indices(5, 5, 4) == [[0, 1, 2, 3], [4, 4, 4, 4]]


def test_blocked_calls_the_policy_on_exactly_r_rows_and_returns_n_rows():
    seen = []

    def policy(obs, noise=None):
        seen.append((obs.shape[0], None if noise is None else noise.shape[0]))
        return obs * 2 + (0 if noise is None else noise)

    x = torch.arange(11.0).reshape(11, 1)
    out = blocked(policy, 4)(x, noise=torch.ones(11, 1))
    assert torch.equal(out, x * 2 + 1)
    assert seen == [(4, 4), (4, 4), (4, 4)]
    with pytest.raises(ValueError, match="rows >= 1"):
        blocked(policy, 0)


def test_tensordict_inputs_and_outputs_are_cut_and_joined():
    from tensordict import TensorDict

    td = TensorDict({"observation": torch.arange(6.0).reshape(6, 1)}, batch_size=[6])
    out = blocked(lambda t: t.set("action", t.get("observation") + 1), 4)(td)
    assert out.batch_size == torch.Size([6]) and torch.equal(out.get("action").flatten(), torch.arange(1.0, 7.0))


# -- row independence per policy family (property) -------------------------------------------------------------
def runner_for(policy, space, n_slots, block):
    runner = PolicyRunner(policy, space, n_slots, policy_block=block)
    return runner


def row_outputs(policy, space, block: int, obs: torch.Tensor, fresh=None) -> torch.Tensor:
    runner = runner_for(policy, space, obs.shape[0], block)
    if fresh is not None:
        fresh(runner, obs.shape[0])
    with torch.inference_mode():
        runner.dry_run(obs)
        return runner(obs).clone()


@st.composite
def companions(draw):
    """A batch size, where the probe row sits, and the seed of its companions."""
    n = draw(st.integers(min_value=1, max_value=40))
    return n, draw(st.integers(min_value=0, max_value=n - 1)), draw(st.integers(min_value=0, max_value=10_000))


def probe_batch(n: int, pos: int, seed: int, probe: torch.Tensor) -> torch.Tensor:
    obs = observations(n, seed)
    obs[pos] = probe
    return obs


@pytest.mark.parametrize("block", [4, 8, 16])
@settings(max_examples=25, deadline=None)
@given(case=companions())
def test_an_mlp_row_is_the_same_whatever_its_companions_position_and_batch(block, case):
    policy, probe = cheetah_mlp(), observations(1, 99)[0]
    reference = row_outputs(policy, BOX6, block, probe_batch(1, 0, 0, probe))[0]
    n, pos, seed = case
    got = row_outputs(policy, BOX6, block, probe_batch(n, pos, seed, probe))[pos]
    assert torch.equal(got, reference), (n, pos, (got - reference).abs().max())


def test_free_batching_is_what_blocks_fix():
    """The whole-batch call (``--policy-block 0``) is not row-independent on this machine's kernels: the
    property above would fail without blocks. Skips where this CPU happens to round every shape alike."""
    policy, probe = cheetah_mlp(), observations(1, 99)[0]
    alone = row_outputs(policy, BOX6, 0, probe_batch(1, 0, 0, probe))[0]
    moved = [row_outputs(policy, BOX6, 0, probe_batch(n, n - 1, 3, probe))[n - 1] for n in (2, 3, 5, 16, 40)]
    if all(torch.equal(m, alone) for m in moved):
        pytest.skip("this CPU's kernels round a row alike at every batch size: nothing for blocks to fix here")
    assert not all(torch.equal(m, alone) for m in moved)


def test_the_thread_count_does_not_change_a_block_on_this_cpu():
    """Why ``--cpu-threads`` is recorded in the guarantee but is not part of *what* is evaluated: a block's
    bits are the same at 1 and 2 intra-op threads (the products are split by rows, not by the summed axis)."""
    policy, obs = cheetah_mlp(hidden=(512, 512)), observations(64, 5)
    saved = torch.get_num_threads()
    try:
        outs = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            outs.append(row_outputs(policy, BOX6, 8, obs))
    finally:
        torch.set_num_threads(saved)
    assert torch.equal(outs[0], outs[1])


def _torchrl_actor(exploration_random: bool):
    pytest.importorskip("torchrl")
    from tensordict.nn import NormalParamExtractor, TensorDictModule
    from torchrl.modules import ProbabilisticActor, TanhNormal

    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Linear(HALF_CHEETAH_OBS, 64), torch.nn.Tanh(),
                              torch.nn.Linear(64, 2 * HALF_CHEETAH_ACT), NormalParamExtractor())
    module = TensorDictModule(net, in_keys=["observation"], out_keys=["loc", "scale"])
    return ProbabilisticActor(module, in_keys=["loc", "scale"], distribution_class=TanhNormal, return_log_prob=False,
                              out_keys=["action"])


@pytest.mark.parametrize("exploration", ["deterministic", "random"])
@settings(max_examples=10, deadline=None)
@given(case=companions())
def test_a_torchrl_actor_row_is_its_own(exploration, case):
    from fasteval.robot.policies.torchrl_actors import wrap_actor

    n, pos, seed = case
    probe = observations(1, 7)[0]

    def outputs(batch):
        policy = wrap_actor(_torchrl_actor(exploration == "random"), exploration, BOX6, batch.shape[0])

        def fresh(runner, slots):  # every slot starts an episode with seed 5 (per-episode noise)
            runner.start_slots(list(range(slots)), [5] * slots)

        return row_outputs(policy, BOX6, 8, batch, fresh), policy

    reference, policy = outputs(probe_batch(1, 0, 0, probe))
    got, _ = outputs(probe_batch(n, pos, seed, probe))
    assert torch.equal(got[pos], reference[0])
    runner = runner_for(policy, BOX6, 4, 8)
    assert runner.policy_call == ("one row per call (per-episode noise)" if exploration == "random" else "blocks of 8 rows")


@settings(max_examples=10, deadline=None)
@given(case=companions())
def test_an_sb3_policy_row_is_its_own(case):
    pytest.importorskip("stable_baselines3")
    from stable_baselines3 import PPO

    from fasteval.robot.policies.sb3 import adapt_sb3

    class Spaces(gym.Env):
        observation_space = gym.spaces.Box(-np.inf, np.inf, (HALF_CHEETAH_OBS,), np.float32)
        action_space = BOX6

        def reset(self, seed=None, options=None):
            return np.zeros(HALF_CHEETAH_OBS, np.float32), {}

        def step(self, action):
            return np.zeros(HALF_CHEETAH_OBS, np.float32), 0.0, True, False, {}

    model = PPO("MlpPolicy", Spaces(), seed=3, device="cpu", policy_kwargs={"net_arch": [64, 64]})
    n, pos, seed = case
    probe = observations(1, 11)[0]
    reference = row_outputs(adapt_sb3(model, True, 1), BOX6, 8, probe_batch(1, 0, 0, probe))[0]
    got = row_outputs(adapt_sb3(model, True, n), BOX6, 8, probe_batch(n, pos, seed, probe))[pos]
    assert torch.equal(got, reference)


def test_a_policy_with_per_slot_state_runs_on_the_whole_batch_and_says_so():
    from fasteval.testing.policies import StepCounterPolicy

    runner = runner_for(StepCounterPolicy(), gym.spaces.Discrete(2), 4, 8)
    assert runner.policy_call.startswith("whole batch (the policy keeps per-slot state")
    assert guarantee(runner.policy_call, device=torch.device("cpu"), threads=1).startswith(TO_ROUNDING)


def test_the_guarantee_names_its_conditions():
    cpu = torch.device("cpu")
    text = guarantee("blocks of 8 rows", device=cpu, threads=1)
    assert text.startswith(BITWISE) and "blocks of 8 rows" in text and "1 torch thread" in text
    assert torch.__version__ in text and "CPU" in text
    assert guarantee("blocks of 8 rows", device=cpu, threads=1, global_rng=True).startswith(TO_ROUNDING)
    assert guarantee("blocks of 8 rows", device=cpu, threads=1, compile=True).startswith(TO_ROUNDING)
    assert guarantee("blocks of 8 rows", device=cpu, threads=1, stacked=True).startswith(TO_ROUNDING)
    assert "not yet on cuda" in guarantee("blocks of 8 rows", device=torch.device("cuda"), threads=1)
    assert guarantee("whole batch (--policy-block 0)", device=cpu, threads=1).startswith(TO_ROUNDING)


# -- end to end: HalfCheetah with an MLP -----------------------------------------------------------------------
CHEETAH = dict(env="HalfCheetah-v5", n_episodes=24, max_steps=40, seed=3)


def episodes(result) -> list[tuple]:
    return [(r["episode_ix"], r["seed"], r["sum_reward"], r["max_reward"], r["length"]) for r in result.per_episode]


@pytest.fixture(scope="module")
def cheetah_checkpoint(tmp_path_factory):
    pytest.importorskip("mujoco")
    return save_mlp(cheetah_mlp(), tmp_path_factory.mktemp("cheetah") / "mlp")


def test_halfcheetah_mlp_is_bitwise_the_same_at_every_batch_size_pipelined_and_pooled(cheetah_checkpoint):
    base = evaluate(policy=cheetah_checkpoint, batch_size=1, **CHEETAH)
    assert base.meta["guarantee"].startswith(BITWISE) and base.meta["policy_block"] == 16
    for how in (dict(batch_size=16), dict(batch_size=24), dict(batch_size=16, pipeline=True, vectorization="async", workers=2),
                dict(batch_size=8, vectorization="async", workers=2)):
        assert episodes(evaluate(policy=cheetah_checkpoint, **how, **CHEETAH)) == episodes(base), how


def test_halfcheetah_mlp_at_batch_256(cheetah_checkpoint):
    spec = dict(CHEETAH, n_episodes=256, max_steps=12)
    one = evaluate(policy=cheetah_checkpoint, batch_size=1, **spec)
    assert episodes(evaluate(policy=cheetah_checkpoint, batch_size=256, **spec)) == episodes(one)


def test_free_batching_moves_halfcheetah_returns(cheetah_checkpoint):
    """Without blocks the same run rounds by row count: the reason blocks are the default."""
    a = evaluate(policy=cheetah_checkpoint, batch_size=1, policy_block=0, **CHEETAH)
    b = evaluate(policy=cheetah_checkpoint, batch_size=16, policy_block=0, **CHEETAH)
    assert a.meta["guarantee"].startswith(TO_ROUNDING)
    if episodes(a) == episodes(b):
        pytest.skip("this CPU rounds a row alike at batch 1 and 16 for this MLP")
    assert episodes(a) != episodes(b)


def test_a_many_policy_run_gives_each_policy_its_single_run(cheetah_checkpoint, tmp_path, monkeypatch):
    other = save_mlp(cheetah_mlp(seed=4), tmp_path / "other")
    monkeypatch.setenv("FASTEVAL_STACK_WEIGHTS", "stacked")  # the stacked path itself, whatever the timing
    for stack in (False, True):
        many = evaluate(policy=(cheetah_checkpoint, other), batch_size=5, stack_weights=stack, **CHEETAH)
        for k, ref in enumerate((cheetah_checkpoint, other)):
            alone = evaluate(policy=ref, batch_size=1, **CHEETAH)
            if stack:  # vmap's batched products are held to rounding only, and the run says so
                assert many.meta["guarantee"].startswith(TO_ROUNDING)
                got = np.array([r["sum_reward"] for r in many.policies[k].per_episode])
                want = np.array([r["sum_reward"] for r in alone.per_episode])
                np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
            else:
                assert many.meta["guarantee"].startswith(BITWISE)
                assert episodes(many.policies[k]) == episodes(alone), k


# -- R is part of what is evaluated ----------------------------------------------------------------------------
def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fasteval.doors.cli", *args], capture_output=True, text=True,
                          timeout=600, cwd=cwd)


def test_r_is_recorded_and_a_resume_with_another_r_is_refused(tmp_path):
    out = tmp_path / "run"
    policy = str(Path(__file__).resolve().parents[1] / "src" / "fasteval" / "assets" / "cartpole_mlp")
    done = run_cli("--policy", policy, "--env", "CartPole-v1", "-n", "4", "--policy-block", "4", "-o", str(out),
                   "--no-report")
    assert done.returncode == 0, done.stderr[-2000:]
    info = json.loads((out / "eval_info.json").read_text())
    assert info["meta"]["policy_block"] == 4 and info["meta"]["guarantee"].startswith(BITWISE)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["what"]["policy_block"] == 4
    refused = run_cli("--resume", str(out), "-n", "6", "--policy-block", "8")
    assert refused.returncode == 2 and "--policy-block" in refused.stderr and "4" in refused.stderr
    assert run_cli("--resume", str(out), "-n", "6").returncode == 0


def test_an_older_run_without_r_resumes_as_whole_batch(tmp_path):
    """Manifests written before policy_block existed ran the whole batch: absence means 0, not today's default."""
    from fasteval.run.record import manifest_spec
    from fasteval.run.rundir import what_differences

    saved = manifest_spec({"what": {"env": "CartPole-v1"}, "how": {}})
    assert saved["policy_block"] == 0
    assert what_differences({"env": "CartPole-v1"}, {"env": "CartPole-v1", "policy_block": 8})[0][0] == "policy_block"
    assert not what_differences({"env": "CartPole-v1"}, {"env": "CartPole-v1", "policy_block": 0})


def test_bad_policy_block_values_get_one_clear_line(tmp_path):
    done = run_cli("--env", "CartPole-v1", "--policy-block", "-3", "-n", "1", "-o", str(tmp_path / "x"))
    assert done.returncode == 2 and "expected a row count R" in done.stderr


def test_compare_names_a_different_r(tmp_path):
    policy = str(Path(__file__).resolve().parents[1] / "src" / "fasteval" / "assets" / "cartpole_mlp")
    for name, block in (("a", "8"), ("b", "0")):
        done = run_cli("--policy", policy, "--env", "CartPole-v1", "-n", "6", "--policy-block", block,
                       "-o", str(tmp_path / name), "--no-report")
        assert done.returncode == 0, done.stderr[-2000:]
    done = run_cli("compare", str(tmp_path / "a"), str(tmp_path / "b"), "-o", str(tmp_path / "cmp"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "blocks of 8 rows (--policy-block 8), B on the whole batch (--policy-block 0)" in done.stderr
    doc = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert doc["a"]["policy_block"] == 8 and doc["b"]["policy_block"] == 0 and len(doc["notes"]) == 1


def test_deterministic_kernels_on_cuda_only_and_restored():
    """The GPU rule (deterministic algorithms, no TF32, no cuDNN benchmark) is set on a CUDA device with blocks and
    restored after; on the CPU nothing changes. (Set and restored without a GPU: these are process flags.)"""
    from fasteval.core.policy_blocks import deterministic_kernels

    before = (torch.are_deterministic_algorithms_enabled(), torch.backends.cuda.matmul.allow_tf32,
              torch.backends.cudnn.benchmark)
    with deterministic_kernels(torch.device("cpu"), True):
        assert torch.are_deterministic_algorithms_enabled() == before[0]
    with deterministic_kernels(torch.device("cuda"), False):
        assert torch.are_deterministic_algorithms_enabled() == before[0]
    with deterministic_kernels(torch.device("cuda"), True):
        assert torch.are_deterministic_algorithms_enabled() and not torch.backends.cuda.matmul.allow_tf32
        assert not torch.backends.cudnn.benchmark and torch.backends.cudnn.deterministic
    assert (torch.are_deterministic_algorithms_enabled(), torch.backends.cuda.matmul.allow_tf32,
            torch.backends.cudnn.benchmark) == before


def _sb3_cheetah():
    pytest.importorskip("stable_baselines3")
    from stable_baselines3 import PPO

    return PPO("MlpPolicy", "HalfCheetah-v5", seed=3, device="cpu", policy_kwargs={"net_arch": [64, 64]})


@pytest.mark.parametrize("family", ["torchrl", "sb3"])
@pytest.mark.parametrize("exploration", ["deterministic", "random"])
def test_torchrl_and_sb3_policies_on_halfcheetah_are_bitwise_the_same_at_every_batch_size(family, exploration):
    pytest.importorskip("mujoco")
    policy = _torchrl_actor(False) if family == "torchrl" else _sb3_cheetah()
    spec = dict(CHEETAH, n_episodes=12, max_steps=30, exploration=exploration)
    one = evaluate(policy=policy, batch_size=1, **spec)
    assert one.meta["guarantee"].startswith(BITWISE), one.meta["guarantee"]
    for how in (dict(batch_size=5), dict(batch_size=12)):
        assert episodes(evaluate(policy=policy, **how, **spec)) == episodes(one), (family, exploration, how)


def test_an_env_that_is_not_bit_reproducible_by_itself_is_named_in_the_guarantee():
    """PushT's physics (pymunk) differs in the last bit from run to run, and LeRobot's Meta-World shows an episode's
    first frame as the env's previous episode left it: their runs say so, whatever the policy call."""
    from fasteval.robot.reproducible import physics_rounding
    from fasteval.robot.fast_envs import FAST_PUSHT
    from fasteval.robot.lerobot.envs import ENV_REF

    assert "pymunk" in physics_rounding("gym_pusht/PushT-v0", {}) and physics_rounding(FAST_PUSHT, {})
    assert physics_rounding(ENV_REF, {"type": "pusht"}) and physics_rounding(ENV_REF, {"type": "libero"}) is None
    assert "previous" in physics_rounding(ENV_REF, {"type": "metaworld"})  # its reset frame: the slot's last episode
    assert physics_rounding("HalfCheetah-v5", {}) is None and physics_rounding(object(), {}) is None
    text = guarantee("blocks of 16 rows", device=torch.device("cpu"), threads=1, env_rounding="pymunk, say")
    assert text.startswith(TO_ROUNDING) and "pymunk, say" in text
    pytest.importorskip("gym_pusht")
    result = evaluate(env="gym_pusht/PushT-v0", env_kwargs={"obs_type": "state"}, policy="zero", n_episodes=1,
                      max_steps=2)
    assert result.meta["guarantee"].startswith(TO_ROUNDING) and "pymunk" in result.meta["env_rounding"]
