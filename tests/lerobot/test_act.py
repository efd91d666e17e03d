"""ACT through fasteval: per-seed parity with LeRobot's own eval_policy_all, and mode equivalence.

The episodes are cut to ``STEPS`` steps (LeRobot: ``episode_length``; fasteval: ``max_steps``),
which both apply as a truncation at that step.

The one place LeRobot is wrong is its done mask: ``eval_policy`` sums rewards up to
``done_index + 1``, one step past an episode's end, so an episode that terminates before the
others of its batch also gets the reward of the next step (an autoreset episode's first step,
or 0 where LeRobot freezes the env). fasteval stops at the end. A random ACT never terminates
PushT early (no success), so here every episode is truncated at the same step and the numbers
must agree; an early-terminating episode would differ by exactly that one extra reward.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.lerobot.conftest import pusht_spec

pytest.importorskip("lerobot")

from fasteval import evaluate  # noqa: E402

STEPS = 60
TOL = 1e-4


def rows(result) -> list[tuple[int, float, float, bool]]:
    return [(r["seed"], r["sum_reward"], r["max_reward"], r["success"]) for r in result.per_episode]


@pytest.fixture(scope="module")
def lerobot_rows(act_checkpoint: Path) -> list[dict]:
    from fasteval.robot.lerobot.reference import lerobot_eval

    return lerobot_eval(act_checkpoint, n_episodes=6, batch_size=3, seed=1000, episode_length=STEPS)["per_episode"]


@pytest.fixture(scope="module")
def wave_rows(act_checkpoint: Path) -> list[tuple]:
    return rows(evaluate(**pusht_spec(act_checkpoint, n_episodes=6, batch_size=3, max_steps=STEPS, reset_mode="wave")))


@pytest.mark.parametrize("observation_format", ["lerobot", "raw"])
def test_wave_matches_lerobot_eval_per_seed(act_checkpoint: Path, lerobot_rows: list[dict],
                                            observation_format: str) -> None:
    result = evaluate(**pusht_spec(act_checkpoint, n_episodes=6, batch_size=3, max_steps=STEPS, reset_mode="wave",
                                   observation_format=observation_format))
    assert result.meta["batching"] == "wave"
    assert result.meta["lerobot_policy_type"] == "act" and result.meta["lerobot_noise"].startswith("none")
    assert [r["seed"] for r in result.per_episode] == [r["seed"] for r in lerobot_rows] == list(range(1000, 1006))
    assert any(r["sum_reward"] > 0 for r in lerobot_rows)  # the comparison is not between zeros
    for ours, theirs in zip(result.per_episode, lerobot_rows):
        assert ours["sum_reward"] == pytest.approx(theirs["sum_reward"], abs=TOL)
        assert ours["max_reward"] == pytest.approx(theirs["max_reward"], abs=TOL)
        assert ours["success"] == theirs["success"]
        assert ours["length"] == STEPS


def test_use_amp_runs_under_the_devices_autocast_dtype(act_checkpoint: Path) -> None:
    """``--policy.use_amp=true`` is ``--amp auto`` (LeRobot's ``torch.autocast(device_type)``: bf16 on CPU).

    LeRobot's own ``use_amp`` eval cannot run on CPU: its bf16 actions reach ``Tensor.numpy()``, which
    has no bfloat16 (checked below, so this test notices when LeRobot fixes it and per-seed parity can
    be asked for). fasteval casts actions to the env's dtype on the way to the host.
    """
    from fasteval.robot.lerobot.reference import lerobot_eval

    result = evaluate(**pusht_spec(act_checkpoint, n_episodes=3, batch_size=3, max_steps=STEPS, reset_mode="wave",
                                   amp="auto"))
    assert result.meta["policy_amp"] == "auto"
    assert len(result.per_episode) == 3 and all(np.isfinite(r["sum_reward"]) for r in result.per_episode)
    with pytest.raises(TypeError, match="BFloat16"):
        lerobot_eval(act_checkpoint, n_episodes=1, batch_size=1, seed=1000, episode_length=STEPS, use_amp=True)


def varying_spec(policy: Path, **fields) -> dict:
    """Episodes of 7..19 steps (from the seed): slots finish out of step and refill mid-chunk."""
    from fasteval.robot.lerobot.testing import VARYING_ENV_REF

    base = dict(env=VARYING_ENV_REF, policy=str(policy), device="cpu", seed=0, n_episodes=14,
                observation_format="lerobot")
    base.update(fields)
    return base


@pytest.mark.parametrize("batch_size", [1, 3, 10])
def test_continuous_equals_wave_exactly(act_checkpoint: Path, batch_size: int) -> None:
    """Same batch size: every chunk is computed on a batch of the same size, so the numbers are identical,
    although continuous batching refills slots while the others are mid-chunk."""
    wave = evaluate(**varying_spec(act_checkpoint, batch_size=batch_size, reset_mode="wave"))
    continuous = evaluate(**varying_spec(act_checkpoint, batch_size=batch_size))
    assert (wave.meta["batching"], continuous.meta["batching"]) == ("wave", "continuous")
    assert len({r["length"] for r in continuous.per_episode}) > 5
    assert rows(continuous) == rows(wave)


def test_continuous_async_equals_sync(act_checkpoint: Path) -> None:
    sync = evaluate(**varying_spec(act_checkpoint, batch_size=3))
    async_ = evaluate(**varying_spec(act_checkpoint, batch_size=3, vectorization="async"))
    assert rows(async_) == rows(sync)


def test_batch_sizes_agree_bit_for_bit_with_policy_blocks(act_checkpoint: Path) -> None:
    """The chunk prediction runs on blocks of 16 rows (``policy_block``, fasteval.core.policy_blocks): every
    episode is identical at batch 1, 3 and 10, sync and async. Without blocks (``policy_block=0``, the whole
    batch) the matrix products round by row count and the numbers agree to TOL only."""
    one = evaluate(**varying_spec(act_checkpoint, batch_size=1))
    assert one.meta["guarantee"].startswith("bitwise per episode") and one.meta["policy_call"] == "blocks of 16 rows"
    for fields in (dict(batch_size=3), dict(batch_size=10), dict(batch_size=4, vectorization="async", workers=2)):
        assert rows(evaluate(**varying_spec(act_checkpoint, **fields))) == rows(one), fields
    free_one = rows(evaluate(**varying_spec(act_checkpoint, batch_size=1, policy_block=0)))
    free_ten = rows(evaluate(**varying_spec(act_checkpoint, batch_size=10, policy_block=0)))
    assert [r[0] for r in free_one] == [r[0] for r in free_ten]
    for a, b in zip(free_one, free_ten):
        assert a[1] == pytest.approx(b[1], abs=TOL) and a[2] == pytest.approx(b[2], abs=TOL) and a[3] == b[3]


def test_continuous_matches_wave_on_pusht(act_checkpoint: Path, wave_rows: list[tuple]) -> None:
    result = evaluate(**pusht_spec(act_checkpoint, n_episodes=6, batch_size=3, max_steps=STEPS,
                                   vectorization="async"))
    assert result.meta["batching"] == "continuous"
    assert rows(result) == wave_rows


def test_cli_policy_path_matches_lerobot_eval(act_checkpoint: Path, lerobot_rows: list[dict], tmp_path: Path) -> None:
    """The acceptance command line: LeRobot's flags, LeRobot's eval_info.json layout, LeRobot's numbers."""
    import json

    from click.testing import CliRunner

    from fasteval.doors.cli import main

    out = tmp_path / "eval"
    args = [f"--policy.path={act_checkpoint}", "--env.type=pusht", "--eval.n_episodes=6", "--eval.batch_size=3",
            "--policy.device=cpu", "--seed=1000", f"--env.episode_length={STEPS}", f"--output_dir={out}"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    info = json.loads((out / "eval_info.json").read_text())
    assert {"per_episode", "per_task", "per_group", "overall"} <= set(info)
    assert info["meta"]["batching"] == "continuous"
    for ours, theirs in zip(info["per_episode"], lerobot_rows, strict=True):
        assert ours["seed"] == theirs["seed"] and ours["success"] == theirs["success"]
        assert ours["sum_reward"] == pytest.approx(theirs["sum_reward"], abs=TOL)
        assert ours["max_reward"] == pytest.approx(theirs["max_reward"], abs=TOL)


def test_hf_ref_loads_through_lerobot(act_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """hf://org/repo whose snapshot is a LeRobot checkpoint (offline, from a local hub cache)."""
    import shutil

    from fasteval.robot.lerobot.policy import LeRobotPolicy
    from fasteval.robot.policies.loaders import load_policy

    commit = "0" * 40
    repo = tmp_path / "hub" / "models--org--act"
    shutil.copytree(act_checkpoint, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import gymnasium as gym

    space = gym.spaces.Box(0, 512, (2,))
    policy = load_policy("hf://org/act", space, space, 2)
    assert isinstance(policy, LeRobotPolicy) and policy.n_slots == 2 and policy.policy_type == "act"


def test_config_file_reaches_the_lerobot_loader(act_checkpoint: Path, tmp_path: Path) -> None:
    """--config with a LeRobot checkpoint folder next to the file (relative path), as sweep files name them."""
    import json
    import shutil

    from click.testing import CliRunner

    from fasteval.doors.cli import main

    shutil.copytree(act_checkpoint, tmp_path / "ckpt")
    config = {"env": "fasteval.robot.lerobot.testing:make_varying_env", "policy": "ckpt", "n_episodes": 3,
              "batch_size": 2, "seed": 5, "device": "cpu", "observation_format": "lerobot",
              "output_dir": str(tmp_path / "out")}
    (tmp_path / "eval.json").write_text(json.dumps(config))
    # the file names an env callable: code, which only the command line can trust (docs/security.md)
    result = CliRunner().invoke(main, ["--config", str(tmp_path / "eval.json"), "--trust-remote-code"])
    assert result.exit_code == 0, result.output
    info = json.loads((tmp_path / "out" / "eval_info.json").read_text())
    direct = evaluate(**varying_spec(act_checkpoint, n_episodes=3, batch_size=2, seed=5))
    assert [(r["seed"], r["sum_reward"]) for r in info["per_episode"]] == [(r[0], r[1]) for r in rows(direct)]


def test_temporal_ensembling_runs_lerobots_own_select_action_in_waves(tmp_path: Path) -> None:
    """ACT with temporal ensembling has no per-slot queue: LeRobot's select_action on the whole batch, wave mode."""
    from fasteval.robot.lerobot.loader import load_lerobot_policy
    from fasteval.robot.lerobot.policy import LeRobotWavePolicy
    from fasteval.robot.lerobot.testing import write_act_checkpoint

    folder = write_act_checkpoint(tmp_path / "ens", n_action_steps=1, temporal_ensemble_coeff=0.01)
    assert isinstance(load_lerobot_policy(folder, n_slots=2, device="cpu"), LeRobotWavePolicy)
    result = evaluate(**varying_spec(folder, n_episodes=3, batch_size=2))
    assert result.meta["batching"] == "wave" and len(result.per_episode) == 3


def test_rename_map_behaves_as_lerobots(tmp_path: Path) -> None:
    """A checkpoint whose camera is observation.images.top, on PushT's observation.image: LeRobot's
    --rename_map and fasteval's (--rename_map, same JSON) give the same per-seed results."""
    import json

    from click.testing import CliRunner

    from fasteval.doors.cli import main
    from fasteval.robot.lerobot.reference import lerobot_eval
    from fasteval.robot.lerobot.testing import write_act_checkpoint

    folder = write_act_checkpoint(tmp_path / "top", seed=3, image_key="observation.images.top")
    rename = {"observation.image": "observation.images.top"}
    theirs = lerobot_eval(folder, n_episodes=2, batch_size=2, seed=11, episode_length=30, rename_map=rename)
    out = tmp_path / "out"
    result = CliRunner().invoke(main, [f"--policy.path={folder}", "--env.type=pusht", "--eval.n_episodes=2",
                                       "--eval.batch_size=2", "--policy.device=cpu", "--seed=11",
                                       "--env.episode_length=30", f"--rename_map={json.dumps(rename)}",
                                       f"--output_dir={out}"])
    assert result.exit_code == 0, result.output
    ours = json.loads((out / "eval_info.json").read_text())["per_episode"]
    for a, b in zip(ours, theirs["per_episode"], strict=True):
        assert a["seed"] == b["seed"] and a["sum_reward"] == pytest.approx(b["sum_reward"], abs=TOL)
        assert a["max_reward"] == pytest.approx(b["max_reward"], abs=TOL)


def test_auto_device_falls_back_to_cpu_without_cuda() -> None:
    import torch

    from fasteval.robot.lerobot.loader import resolve_lerobot_device

    assert resolve_lerobot_device("cpu", "cuda") == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_lerobot_device("auto", "cuda").type == expected
    assert resolve_lerobot_device("auto", None).type == expected
    assert resolve_lerobot_device("auto", "cpu") == torch.device("cpu")


def test_sweep_reaches_the_lerobot_loader(act_checkpoint: Path, tmp_path: Path) -> None:
    """A sweep file naming a LeRobot checkpoint folder: the same per-seed numbers as a direct run."""
    import json
    import shutil
    import sqlite3

    from click.testing import CliRunner

    from fasteval.doors.cli import main

    shutil.copytree(act_checkpoint, tmp_path / "ckpt")
    sweep = {"name": "lr", "episodes": 3, "seeds": [5],
             "policies": [{"name": "act", "ref": "ckpt"}],
             "envs": [{"name": "varying", "id": "fasteval.robot.lerobot.testing:make_varying_env"}],
             "options": {"batch_size": 2, "device": "cpu"}}
    (tmp_path / "sweep.json").write_text(json.dumps(sweep))
    result = CliRunner().invoke(main, ["sweep", str(tmp_path / "sweep.json"), "--workers", "1",
                                       "--out", str(tmp_path / "out"), "--trust-remote-code"])  # the file names code
    assert result.exit_code == 0, result.output
    direct = evaluate(**varying_spec(act_checkpoint, n_episodes=3, batch_size=2, seed=5, observation_format="raw"))
    stores = list((tmp_path / "out").rglob("*.sqlite*")) + list((tmp_path / "out").rglob("*.db"))
    assert stores, sorted(p.name for p in (tmp_path / "out").rglob("*"))
    with sqlite3.connect(stores[0]) as db:
        tables = [r[0] for r in db.execute("select name from sqlite_master where type='table'")]
        table = next(t for t in tables if "episode" in t)
        cols = [r[1] for r in db.execute(f"pragma table_info({table})")]
        stored = sorted(db.execute(f"select seed, sum_reward from {table}").fetchall())
    assert "sum_reward" in cols
    assert stored == [(r[0], r[1]) for r in rows(direct)]


def test_lerobot_done_mask_counts_one_step_past_the_end(act_checkpoint: Path) -> None:
    """The documented difference, shown: on episodes of different lengths (7..19 steps), LeRobot's
    eval_policy (gymnasium's same-step autoreset, as LeRobot builds its vector envs) sums rewards up to
    done_index + 1. The episode that ends last in its batch has no step after its end: there the two
    agree. Every episode that ends earlier gets one more reward in LeRobot (the autoreset episode's
    first step), so the two differ exactly there, and fasteval equals its own batch-1 run."""
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode

    from fasteval.robot.lerobot.reference import lerobot_eval
    from fasteval.robot.lerobot.testing import make_varying_env

    def one() -> gym.Env:
        return gym.wrappers.TimeLimit(make_varying_env(), max_episode_steps=50)

    seed, batch = 3, 3
    vec = gym.vector.SyncVectorEnv([one] * batch, autoreset_mode=AutoresetMode.SAME_STEP)
    theirs = lerobot_eval(act_checkpoint, n_episodes=batch, batch_size=batch, seed=seed, vector_env=vec)["per_episode"]
    ours = evaluate(**varying_spec(act_checkpoint, n_episodes=batch, batch_size=batch, seed=seed, reset_mode="wave"))
    lengths = [r["length"] for r in ours.per_episode]
    assert lengths == [7 + (seed + i) % 13 for i in range(batch)] and len(set(lengths)) == batch
    last = lengths.index(max(lengths))
    for i, (a, b) in enumerate(zip(ours.per_episode, theirs)):
        if i == last:
            assert a["sum_reward"] == pytest.approx(b["sum_reward"], abs=TOL)
        else:
            assert abs(a["sum_reward"] - b["sum_reward"]) > TOL  # LeRobot's extra step past the end
    alone = rows(evaluate(**varying_spec(act_checkpoint, n_episodes=batch, batch_size=1, seed=seed)))
    assert [r[1] for r in alone] == pytest.approx([r["sum_reward"] for r in ours.per_episode], abs=TOL)
