"""LeRobot-style command lines, config files, experiment logging and table exports.

The alias paths are checked through ``--print-config`` (the resolved spec, no run); the
equivalence of LeRobot-style and native flags, the sinks and the exports run the known-answer
env end to end and compare with eval_info.json.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import math
import shutil
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from fasteval.doors.cli import main
from fasteval.doors.compat import ENV_TYPES, rewrite_args
from fasteval.run.config import load_config, spec_from_config
from fasteval.robot.fast_envs import pusht_env_id
from fasteval.doors.sweep.spec import config_to_sweep_dict as to_sweep_dict
from fasteval.types.spec import EvalSpec

KA = "fasteval/KnownAnswer-v0"
PARITY = "fasteval.testing.policies:ParityPolicy"
TIME_KEYS = {"eval_s", "eval_ep_s", "steps_per_s", "episodes_per_s"}


def invoke(args, **kwargs):
    return CliRunner().invoke(main, [str(a) for a in args], **kwargs)


def resolved(args) -> dict:
    """The resolved config of a command line (``--print-config``: nothing runs)."""
    result = invoke([*args, "--print-config"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def without_timings(info: dict) -> dict:
    """eval_info.json less what measures time (and the output folder it was written to)."""
    info = json.loads(json.dumps(info))
    info.pop("timings", None)
    for key in TIME_KEYS:
        info["overall"].pop(key, None)
    info["meta"] = {k: v for k, v in info["meta"].items() if not (k.endswith("_s") or "time" in k or k.endswith("_at"))}
    return info


def eval_info(folder: Path) -> dict:
    return json.loads((folder / "eval_info.json").read_text())


# -- LeRobot-style flags run the same evaluation as the native ones ---------------------------------

def test_lerobot_flags_and_native_flags_give_the_same_eval_info(tmp_path, known_answers):
    lerobot = ["--policy.path=" + PARITY, "--env.type=known_answer", "--eval.n_episodes=13", "--eval.batch_size=4",
               "--policy.device=cpu", "--seed=1000", f"--output_dir={tmp_path / 'lerobot'}"]
    native = ["--policy", PARITY, "--env", KA, "-n", "13", "-b", "4", "--device", "cpu", "--seed", "1000",
              "--policy-block", "batch", "-o", tmp_path / "native"]  # LeRobot's flags: blocks of the batch size
    overrides = [f"policy={PARITY}", f"env={KA}", "eval.n_episodes=13", "eval.batch_size=4", "policy.device=cpu",
                 "seed=1000", f"output_dir={tmp_path / 'keys'}"]
    for args in (lerobot, native, overrides):
        result = invoke(args)
        assert result.exit_code == 0, result.output
    reference = without_timings(eval_info(tmp_path / "native"))
    assert without_timings(eval_info(tmp_path / "lerobot")) == reference
    assert without_timings(eval_info(tmp_path / "keys")) == reference
    want = known_answers(13, 1000, "parity")
    got = eval_info(tmp_path / "lerobot")["per_episode"]
    assert [(r["seed"], r["sum_reward"], r["length"], r["success"]) for r in got] == \
        [(r["seed"], r["sum_reward"], r["length"], r["success"]) for r in want]
    for folder in ("lerobot", "native", "keys"):  # the resolved config is saved next to the results
        assert (tmp_path / folder / "config.json").is_file()


# -- every alias path ------------------------------------------------------------------------------

@pytest.mark.parametrize("args, want", [
    (["--policy.path=random"], {"policy": "random"}),
    (["--policy.device=cpu"], {"device": "cpu"}),
    (["--eval.n_episodes=7"], {"n_episodes": 7}),
    (["--eval.n_episodes", "7"], {"n_episodes": 7}),
    (["--eval.batch_size=5"], {"batch_size": 5}),
    (["--eval.use_async_envs=true"], {"vectorization": "async"}),
    (["--eval.use_async_envs=False"], {"vectorization": "sync"}),
    (["--eval.use_async_envs"], {"vectorization": "async"}),
    (["--eval.use_async_envs", "false"], {"vectorization": "sync"}),
    (["--policy.use_amp=true"], {"amp": "auto"}),
    (["--policy.use_amp=false"], {"amp": "none"}),
    (["--policy.use_amp=bf16"], {"amp": "bf16"}),
    (["--policy.use_amp", "bf16", "seed=2"], {"amp": "bf16", "seed": 2}),
    (["--policy.use_amp", "seed=2"], {"amp": "auto", "seed": 2}),
    (["--env.episode_length=50"], {"max_steps": 50}),
    (["--output_dir=some/where"], {"output_dir": "some/where"}),
    (["--seed=1000"], {"seed": 1000}),
    (["--n_episodes=3", "--batch_size=2", "--max_steps=9"], {"n_episodes": 3, "batch_size": 2, "max_steps": 9}),
    (["--trust_remote_code=true"], {"trust_remote_code": True}),
    (["--trust_remote_code"], {"trust_remote_code": True}),
    (["--rename_map={\"observation.images.top\": \"observation.image\"}"],
     {"rename": {"observation.images.top": "observation.image"}}),
    (["--policy.push_to_hub=true", "--job_name=x"], {"policy": "zero"}),  # accepted, ignored with a note
    # key=value overrides after the options: LeRobot keys and native names
    (["seed=3"], {"seed": 3}),
    (["eval.batch_size=8"], {"batch_size": 8}),
    (["-n", "4", "n-episodes=5"], {"n_episodes": 5}),
    (["n_episodes=6", "policy.device=cpu"], {"n_episodes": 6, "device": "cpu"}),
    (["pipeline=true", "cuda_graph=false"], {"pipeline": True, "cuda_graph": False}),
    (["--cuda-graph", "cuda_graph=false"], {"cuda_graph": False}),
    (["env_kwarg=nan_reward_seeds=[2]"], {"env_kwargs": {"nan_reward_seeds": [2]}}),
    (["env.type=known_answer", "env.task=KnownAnswer-v0"], {"env": KA}),
    # native options keep working, also with values that look like key=value
    (["--env-kwarg", "nan_reward_seeds=[1]", "-b", "3"], {"env_kwargs": {"nan_reward_seeds": [1]}, "batch_size": 3}),
])
def test_alias_resolves_to_the_native_option(args, want):
    doc = resolved(["--env", KA, *args] if not any("env.type" in a for a in args) else args)
    assert {k: doc[k] for k in want} == want


@pytest.mark.parametrize("args, want", [
    (["--env.type=pusht"], {"env": pusht_env_id(), "max_steps": 300, "observation_format": "lerobot",
                            "env_kwargs": {"obs_type": "pixels_agent_pos", "render_mode": "rgb_array",
                                           "visualization_width": 384, "visualization_height": 384}}),
    (["--env.type=pusht", "--env.episode_length=100", "--env.obs_type=state"],
     {"max_steps": 100, "env_kwargs": {"obs_type": "state", "render_mode": "rgb_array",
                                       "visualization_width": 384, "visualization_height": 384}}),
    (["--env.type=pusht", "--env-kwarg", "obs_type=pixels", "--obs-format", "raw"],
     {"env_kwargs": {"obs_type": "pixels", "render_mode": "rgb_array", "visualization_width": 384,
                     "visualization_height": 384}, "observation_format": "raw"}),
    (["--env.type=aloha"], {"env": "gym_aloha/AlohaInsertion-v0", "max_steps": 400,
                            "env_kwargs": {"obs_type": "pixels", "render_mode": "rgb_array"}}),
    (["--env.type=aloha", "--env.task=AlohaTransferCube-v0"], {"env": "gym_aloha/AlohaTransferCube-v0"}),
    (["--env.type=metaworld", "--env.task=push-v3"], {"env": "fasteval.robot.metaworld:make_metaworld_env",
                                                       "env_kwargs": {"task": "push-v3"}}),
    (["--env.type=metaworld", "--env.task=metaworld-assembly-v3"], {"env_kwargs": {"task": "assembly-v3"}}),
    (["--env.type=metaworld", "--env.task=push-v3,metaworld-reach-v3"], {"env_kwargs": {"task": ["push-v3", "reach-v3"]}}),
    (["--env.type=mujoco", "--env.task=HalfCheetah-v5"], {"env": "HalfCheetah-v5", "env_kwargs": {}, "max_steps": None}),
    (["--env.type=gymnasium", "--env.task", "CartPole-v1"], {"env": "CartPole-v1", "observation_format": "raw"}),
    (["--env.type=known_answer"], {"env": KA, "env_kwargs": {}}),
])
def test_env_type_table(args, want):
    doc = resolved(args)
    assert {k: doc[k] for k in want} == want


def test_every_env_type_is_documented():
    doc = (Path(__file__).parents[1] / "docs" / "lerobot.md").read_text()
    for name in ENV_TYPES:
        assert f"`{name}`" in doc, name


@pytest.mark.parametrize("args, needle", [
    (["--env.type=pushtt"], "Did you mean pusht"),
    (["--env.type=libero"], "expected one of aloha"),
    (["--eval.batchsize=3"], "Did you mean --eval.batch_size"),
    (["--polcy.path=zero"], "Did you mean --policy.path"),
    (["eval.batch_sise=8"], "Did you mean eval.batch_size"),
    (["sed=3"], "Did you mean seed"),
    (["--env.task=x"], "needs --env.type"),
    (["--env.type=aloha", "--env.task=AlohaInsertion"], "Did you mean AlohaInsertion-v0"),
    (["--env.type=metaworld"], "needs --env.task"),
    (["--env.type=mujoco", "--env.task=Hopper-v5,HalfCheetah-v5"], "one task per run"),
    (["--env.type=metaworld", "--env.task=push-v3,,reach-v3"], "comma-separated list"),
    (["--env.type=metaworld", "--env.task=push-v3,push-v3"], "listed twice"),
    (["--env.type=known_answer", "--env", "CartPole-v1"], "give the env once"),
    (["--env.type=known_answer", "-e", "CartPole-v1"], "give the env once"),
    (["--eval.use_async_envs=maybe"], "expected true or false"),
    (["--trust_remote_code=maybe"], "expected true or false"),
    (["--eval.n_episodes"], "needs a value"),
    (["--eval.n_episodes=0"], "0 is not in the range"),
    (["--policy.device=tpu"], "'tpu': expected cpu, cuda, cuda:N"),
    (["--rename_map=notjson"], "JSON object"),
    (["--log", "tensorbord:runs"], "Did you mean tensorboard"),
    (["--log", "wandb:"], "wandb:PROJECT"),
    (["--export", "xlsx"], "'xlsx' is not one of"),
    (["--config", "no/such/file.yaml"], "does not exist"),
])
def test_bad_input_exits_2_with_a_message(args, needle):
    result = invoke(["--env", KA, *args] if not any("env." in a for a in args) else args)
    assert result.exit_code == 2, result.output
    assert needle in result.output
    assert "Traceback" not in result.output
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)


def test_missing_logging_package_is_reported_before_running(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    result = invoke(["--env", KA, "-n", "2", "--log", "wandb:proj", "-o", tmp_path / "run"])
    assert result.exit_code == 2, result.output
    assert "pip install wandb" in result.output
    assert not (tmp_path / "run" / "eval_info.json").exists()


# -- subcommands and positional arguments pass through ---------------------------------------------

def test_rewrite_stops_at_subcommands_and_keeps_option_values():
    params = main.params
    assert rewrite_args(["sweep", "spec.yaml", "--out", "a=b", "--eval.batch_size=3"], params) == \
        ["sweep", "spec.yaml", "--out", "a=b", "--eval.batch_size=3"]
    assert rewrite_args(["--seed", "3", "bench", "seed=4"], params) == ["--seed=3", "bench", "seed=4"]
    assert rewrite_args(["--env-kwarg", "seed=1", "-n", "2"], params) == ["--env-kwarg=seed=1", "-n", "2"]
    assert rewrite_args(["--", "seed=1"], params) == ["--", "seed=1"]
    assert rewrite_args(["--eval.batch_size", "3", "report", "dir"], params) == ["--batch-size=3", "report", "dir"]


NATIVE_PIECES = [["-n", "3"], ["--n-episodes", "4"], ["--seed=5"], ["-b", "2"], ["--env-kwarg", "a=1"],
                 ["--env-kwarg=b=[1, 2]"], ["--pipeline"], ["--no-cuda-graph"], ["--cuda-graph"], ["--device", "cpu"],
                 ["--vectorization=async"], ["-p", "random"], ["--env", KA], ["-e", "CartPole-v1"], ["--max-steps", "7"]]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(NATIVE_PIECES), min_size=1, max_size=8))
def test_native_command_lines_parse_the_same_with_and_without_the_rewrite(pieces):
    """(An empty command line prints --help: tests/test_ignored_options.py.)"""
    import click

    args = [token for piece in pieces for token in piece]
    plain = click.Context(main, info_name="fasteval")
    click.Group.parse_args(main, plain, list(args))  # click alone
    rewritten = main.make_context("fasteval", list(args))  # through the rewrite
    assert rewritten.params == plain.params


@pytest.mark.parametrize("sub", ["sweep", "report", "bench"])
def test_subcommands_still_work(sub):
    if main.get_command(None, sub) is None:
        pytest.skip(f"`fasteval {sub}` is not built yet")
    result = invoke([sub, "--help"])
    assert result.exit_code == 0, result.output
    assert f"{sub} [OPTIONS]" in result.output


# -- config files ----------------------------------------------------------------------------------

def test_config_round_trip_same_spec_and_same_results(tmp_path):
    args = ["--env", KA, "--policy", PARITY, "-n", "9", "-b", "2", "--seed", "5", "--env-kwarg", "nan_reward_seeds=[7]",
            "--eval.use_async_envs=false", "--retries", "2", "-o", tmp_path / "first"]
    printed = resolved(args)
    result = invoke(args)
    assert result.exit_code == 0, result.output
    saved = json.loads((tmp_path / "first" / "config.json").read_text())
    assert saved == printed
    # dump, reload: the same spec
    spec, out = spec_from_config(load_config(tmp_path / "first" / "config.json"))
    # --eval.use_async_envs makes it a LeRobot-style command line: LeRobot's video layout (no videos: the env
    # type renders none), every other default given on the line
    assert spec == EvalSpec(env=KA, policy=PARITY, n_episodes=9, batch_size=2, seed=5,
                            env_kwargs={"nan_reward_seeds": [7]}, device="auto", retries=2, video_layout="lerobot",
                            policy_block=2)  # LeRobot-style: blocks of the batch size
    assert out == str(tmp_path / "first")
    # the file names code (a module:callable policy): the command line must trust it (docs/security.md)
    again = resolved(["--config", tmp_path / "first" / "config.json", "--trust-remote-code"])
    assert {**again, "trust_remote_code": False} == printed  # the same, with the flag this command line gave
    # and the same numbers when run again from the saved file
    result = invoke(["--config", tmp_path / "first" / "config.json", "--output_dir", tmp_path / "again",
                     "--trust-remote-code"])
    assert result.exit_code == 0, result.output
    assert without_timings(eval_info(tmp_path / "again")) == without_timings(eval_info(tmp_path / "first"))


@pytest.mark.parametrize("suffix", [".yaml", ".json", ".toml"])
def test_command_line_overrides_the_config_file(tmp_path, suffix):
    data = {"env": KA, "policy": "random", "n_episodes": 4, "batch_size": 4, "seed": 5, "amp": "bf16",
            "env_kwargs": {"nan_reward_seeds": [6], "keep": 1}, "output_dir": str(tmp_path / "from_config")}
    path = tmp_path / f"cfg{suffix}"
    if suffix == ".yaml":
        yaml = pytest.importorskip("yaml")
        path.write_text(yaml.safe_dump(data))
    elif suffix == ".toml":
        path.write_text('env = "%s"\npolicy = "random"\nn_episodes = 4\nbatch_size = 4\nseed = 5\namp = "bf16"\n'
                        'output_dir = "%s"\n[env_kwargs]\nnan_reward_seeds = [6]\nkeep = 1\n'
                        % (KA, data["output_dir"]))
    else:
        path.write_text(json.dumps(data))
    doc = resolved(["--config", path])
    assert {k: doc[k] for k in data} == data
    # given on the command line wins, even when it equals the command line's default (seed 0)
    doc = resolved(["--config", path, "--seed", "0", "eval.batch_size=2", "--env-kwarg", "nan_reward_seeds=[1]",
                    "--policy.use_amp=false", "-o", tmp_path / "cli"])
    assert doc["seed"] == 0 and doc["batch_size"] == 2 and doc["amp"] == "none"
    assert doc["env_kwargs"] == {"nan_reward_seeds": [1], "keep": 1}  # merged key by key, the command line winning
    assert doc["policy"] == "random" and doc["n_episodes"] == 4  # from the file
    assert doc["output_dir"] == str(tmp_path / "cli")
    # LeRobot's --config_path is the same option
    assert resolved(["--config_path", path])["seed"] == 5


def test_config_relative_checkpoint_is_found_next_to_the_file(tmp_path):
    import fasteval

    asset = Path(fasteval.__file__).parent / "assets" / "cartpole_mlp"
    shutil.copytree(asset, tmp_path / "cfg" / "ckpt")
    (tmp_path / "cfg" / "eval.json").write_text(json.dumps({"env": "CartPole-v1", "policy": "ckpt"}))
    doc = resolved(["--config", tmp_path / "cfg" / "eval.json"])
    assert doc["policy"] == str((tmp_path / "cfg" / "ckpt").resolve())


@pytest.mark.parametrize("content, needle", [
    ({"env": KA, "batch_sise": 3}, "did you mean 'batch_size'"),
    ({"env": KA, "policy": "<ParityPolicy>"}, "live policy object"),
    ({"env": KA, "env_kwargs": [1]}, "env_kwargs: expected a mapping"),
    ({"env": KA, "n_episodes": 0}, "n_episodes: expected an integer >= 1"),
    ([1, 2], "expected a mapping"),
])
def test_bad_config_file_exits_2(tmp_path, content, needle):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(content))
    result = invoke(["--config", path, "-o", tmp_path / "run"])
    assert result.exit_code == 2, result.output
    assert needle in result.output and "Traceback" not in result.output


def test_config_with_resume_is_compared_with_the_run(tmp_path):
    # Issue 14: --resume accepts the original command line; only differing values are refused.
    assert invoke(["--env", KA, "-n", "2", "-o", tmp_path / "run"]).exit_code == 0
    (tmp_path / "c.json").write_text(json.dumps({"env": KA}))
    result = invoke(["--resume", tmp_path / "run", "--config", tmp_path / "c.json"])
    assert result.exit_code == 0, result.output
    (tmp_path / "c.json").write_text(json.dumps({"env": KA, "seed": 9}))
    result = invoke(["--resume", tmp_path / "run", "--config", tmp_path / "c.json"])
    assert result.exit_code == 2 and "seed (in" in result.output and "the run has 0, this command has 9" in result.output


def test_config_is_a_one_job_sweep(tmp_path):
    from fasteval.doors.sweep.plan import plan
    from fasteval.doors.sweep.spec import SweepSpec

    data = {"env": KA, "policy": "zero", "n_episodes": 6, "seed": 100, "batch_size": 3, "device": "cpu",
            "env_kwargs": {"nan_reward_seeds": [101]}, "retries": 0, "output_dir": "x"}
    spec, _ = spec_from_config(data)
    (job,) = plan(SweepSpec.from_dict(to_sweep_dict(data)))
    assert job.eval_spec() == spec
    with pytest.raises(Exception, match="amp"):
        to_sweep_dict({**data, "amp": "bf16"})


# -- table exports ---------------------------------------------------------------------------------

def test_export_parquet_and_csv_match_eval_info(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet", reason="pip install pyarrow (extra 'parquet')")
    out = tmp_path / "run"
    result = invoke(["--env", KA, "--policy", PARITY, "-n", "8", "-b", "3", "--seed", "2",
                     "--env-kwarg", "nan_reward_seeds=[4]", "--export", "parquet", "--export", "csv", "-o", out])
    assert result.exit_code == 0, result.output
    per_episode = eval_info(out)["per_episode"]
    rows = pq.read_table(out / "episodes.parquet").to_pylist()
    assert len(rows) == len(per_episode) == 8
    for row, record in zip(rows, per_episode):
        assert set(row) == set(record)
        for key, value in record.items():
            if isinstance(value, float) and math.isnan(value):
                assert math.isnan(row[key]), key
            else:
                assert row[key] == value and type(row[key]) is type(value), (key, row[key], value)
    import csv

    with (out / "episodes.csv").open() as f:
        csv_rows = list(csv.DictReader(f))
    assert [int(r["episode_ix"]) for r in csv_rows] == [r["episode_ix"] for r in per_episode]
    for row, record in zip(csv_rows, per_episode):
        assert math.isclose(float(row["sum_reward"]), record["sum_reward"]) or (
            math.isnan(record["sum_reward"]) and row["sum_reward"] == "nan")
        assert row["success"] == str(record["success"]) and int(row["length"]) == record["length"]
    assert math.isnan(per_episode[2]["sum_reward"])  # seed 4: the NaN episode made it through both tables


# -- experiment logging ----------------------------------------------------------------------------

def test_tensorboard_sink_writes_overall_and_per_task_scalars(tmp_path):
    pytest.importorskip("tensorboard", reason="pip install tensorboard (extra 'tensorboard')")
    from tensorboard.backend.event_processing import event_accumulator

    logs = tmp_path / "tb"
    result = invoke(["--env", KA, "--policy", PARITY, "-n", "6", "--seed", "1", "--log", f"tensorboard:{logs}",
                     "-o", tmp_path / "run"])
    assert result.exit_code == 0, result.output
    overall = eval_info(tmp_path / "run")["overall"]
    acc = event_accumulator.EventAccumulator(str(logs))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    for key in ("avg_sum_reward", "avg_max_reward", "pc_success", "n_episodes", "avg_length"):
        (event,) = acc.Scalars(f"eval/{key}")
        assert event.value == pytest.approx(overall[key], rel=1e-6), key
    assert f"eval/per_task/{KA}/0/avg_sum_reward" in tags
    assert f"eval/per_group/{KA}/pc_success" in tags
    assert "eval/pc_success_ci95_low" in tags


def test_tensorboard_sink_with_a_video_is_best_effort(tmp_path, capsys):
    pytest.importorskip("tensorboard", reason="pip install tensorboard (extra 'tensorboard')")
    import imageio.v3 as iio
    import numpy as np
    from tensorboard.backend.event_processing import event_accumulator

    from fasteval.run.api import evaluate
    from fasteval.run.sinks import TensorBoardSink

    video = tmp_path / "eval_episode_0.mp4"
    iio.imwrite(video, np.zeros((4, 16, 16, 3), dtype=np.uint8), fps=10)
    import dataclasses

    result = dataclasses.replace(evaluate(env=KA, n_episodes=2, device="cpu"), video_paths=[str(video)])
    TensorBoardSink(str(tmp_path / "tb")).write(result, spec=None)  # no moviepy: the video is skipped, with a note
    acc = event_accumulator.EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    assert "eval/avg_sum_reward" in acc.Tags()["scalars"]
    if importlib.util.find_spec("moviepy") is None:
        assert "skipped video summaries of 1 videos (they need moviepy" in capsys.readouterr().err
    else:
        assert acc.Tags()["images"] or acc.Tags()["tensors"]


def _wandb_records(path: Path) -> list:
    """The records of an offline ``.wandb`` file (a LevelDB-style log: 7-byte header, 32 KiB blocks)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, chunk, records = 7, 32768, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST
            record = pb.Record()
            record.ParseFromString(chunk)
            records.append(record)
            chunk = b""
    return records


def test_wandb_sink_offline_run_has_the_summary(tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="pip install wandb (extra 'wandb')")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    result = invoke(["--env", KA, "--policy", PARITY, "-n", "5", "--log", "wandb:fasteval-test", "-o", tmp_path / "run"])
    assert result.exit_code == 0, result.output
    (run_file,) = glob.glob(str(tmp_path / "wandb" / "offline-run-*" / "run-*.wandb"))
    summary = {}
    for record in _wandb_records(Path(run_file)):
        if record.WhichOneof("record_type") == "summary":
            for item in record.summary.update:
                key = item.key or "/".join(item.nested_key)
                summary[key] = json.loads(item.value_json)
    overall = eval_info(tmp_path / "run")["overall"]
    assert summary["eval/avg_sum_reward"] == pytest.approx(overall["avg_sum_reward"])
    assert summary["eval/pc_success"] == pytest.approx(overall["pc_success"])
    assert f"eval/per_task/{KA}/0/n_episodes" in summary


def test_a_failing_sink_exits_1_and_keeps_the_results(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    from fasteval.run import sinks

    def broken(self, *a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(sinks.TensorBoardSink, "write", broken)
    result = invoke(["--env", KA, "-n", "3", "--log", f"tensorboard:{tmp_path / 'tb'}", "-o", tmp_path / "run"])
    assert result.exit_code == 1, result.output
    assert "logging to tensorboard failed: OSError: disk full" in result.output
    assert eval_info(tmp_path / "run")["overall"]["n_episodes"] == 3
