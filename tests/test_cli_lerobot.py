"""A LeRobot command line through ``fasteval`` (issue 22, the doors side): LeRobot's defaults, its option table,
hub ids, threads, names and files. Needs no LeRobot (PushT: gym-pusht, where it is installed).

The per-seed comparison with ``lerobot-eval`` itself is tests/lerobot/test_differential.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from fasteval.doors.cli import main
from fasteval.doors.compat import rewrite
from fasteval.doors.lerobot_options import auto_batch_size, policy_reference

KA = "fasteval/KnownAnswer-v0"


def invoke(args, **kwargs):
    return CliRunner().invoke(main, [str(a) for a in args], **kwargs)


def printed(args) -> tuple[dict, str]:
    result = invoke([*args, "--print-config"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), result.stderr


# -- which defaults --------------------------------------------------------------------------------

@pytest.mark.parametrize("lerobot_flag", ["--env.type=known_answer", "--eval.use_async_envs=false", "eval.n_episodes=50",
                                          "--policy.path=zero", "--policy.device=cpu"])
def test_a_lerobot_style_option_brings_lerobots_defaults(lerobot_flag):
    args = [lerobot_flag] if "env.type" in lerobot_flag else ["--env", KA, lerobot_flag]
    doc, err = printed(args)
    assert (doc["seed"], doc["n_episodes"], doc["defaults"], doc["video_layout"]) == (1000, 50, "lerobot", "lerobot")
    assert doc["batch_size"] == auto_batch_size(50)  # eval.batch_size 0: LeRobot's rule
    assert Path(doc["output_dir"]).parts[:2] == ("outputs", "eval") and len(Path(doc["output_dir"]).parts) == 4
    assert "LeRobot's defaults" in err and "seed 1000" in err


def test_native_flags_keep_fasevals_defaults():
    doc, err = printed(["--env", KA])
    assert (doc["seed"], doc["n_episodes"], doc["batch_size"]) == (0, 10, 16)
    assert (doc["defaults"], doc["video_layout"], doc["max_episodes_rendered"]) == ("fasteval", "fasteval", 0)
    assert "LeRobot" not in err


def test_given_options_and_config_files_win_over_lerobots_defaults(tmp_path):
    doc, _ = printed(["--env.type=known_answer", "--seed=3", "-n", "7", "eval.batch_size=2"])
    assert (doc["seed"], doc["n_episodes"], doc["batch_size"]) == (3, 7, 2)
    (tmp_path / "c.json").write_text(json.dumps({"env": KA, "seed": 5, "n_episodes": 4, "output_dir": str(tmp_path / "o")}))
    doc, _ = printed(["--config", tmp_path / "c.json", "--eval.batch_size=3"])
    assert (doc["seed"], doc["n_episodes"], doc["batch_size"], doc["output_dir"]) == (5, 4, 3, str(tmp_path / "o"))


def test_lerobots_auto_batch_rule():
    assert [auto_batch_size(100, c) for c in (1, 2, 4, 16, 128)] == [1, 1, 2, 11, 64]
    assert auto_batch_size(3, 16) == 3  # capped by n_episodes
    doc, _ = printed(["--env", KA, "-n", "5", "-b", "0"])  # the native spelling of the same rule
    assert doc["batch_size"] == auto_batch_size(5)


def test_job_name_names_lerobots_default_output_folder():
    doc, _ = printed(["--env.type=known_answer", "--job_name=my_job"])
    assert Path(doc["output_dir"]).name.endswith("_my_job")
    doc, _ = printed(["--env.type=known_answer"])
    assert Path(doc["output_dir"]).name.endswith("_known_answer_policy")  # <env.type>_<policy type>


# -- every option: mapped, no effect, refused ---------------------------------------------------

@pytest.mark.parametrize("args, needle", [
    (["--eval.recording=true"], "--save-episodes"),
    (["--eval.recording_repo_id=me/x"], "hub upload"),
    (["--policy.use_peft=true"], "PEFT"),
    (["--policy.type=act"], "save_pretrained"),
    (["--policy.pretrained_path=x"], "give --policy.path"),
    (["--policy.n_action_steps=8"], "LeRobot checkpoints only"),  # a field override needs a LeRobot checkpoint
    (["--env.disable_env_checker=false"], "env checker"),
    (["--env.features={}"], "layout of an env type"),
    (["--seed=null"], "every episode i runs with seed"),
    (["--env.type=known_answer", "--env.camera_name=x"], "unknown option --env.camera_name"),
    (["--env.type=pusht", "--env.multitask_eval=false"], "unknown option --env.multitask_eval"),
    (["--policy.path=zero", "--policy.pretrained_revision=v1"], "not a hub id"),
    (["--policy.pretrained_revision=v1"], "needs --policy.path"),
    (["--no-fast-env"], "--env gym_pusht/PushT-v0"),
])
def test_refused_lerobot_options_exit_2_with_the_reason(args, needle):
    result = invoke(["--env", KA, *args] if not any("env.type" in a for a in args) else args)
    assert result.exit_code == 2, result.output
    assert needle in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("option", ["--policy.push_to_hub=true", "--policy.repo_id=me/x", "--env.max_parallel_tasks=4"])
def test_no_effect_options_say_so(option):
    notes: list[str] = []
    rewrite(["--env.type=known_answer", option], main.params, notes.append)
    assert len(notes) == 1 and "no effect" in notes[0] and option.split("=")[0] in notes[0]


def test_lerobot_default_values_are_accepted_quietly():
    notes: list[str] = []
    rewritten = rewrite(["--env.type=known_answer", "--eval.recording=false", "--env.disable_env_checker=true",
                         "--env.max_parallel_tasks=1", "--policy.use_peft=false"], main.params, notes.append)
    assert notes == [] and rewritten.lerobot


def test_pusht_fields_that_lerobot_does_not_pass_to_the_env_have_no_effect():
    notes: list[str] = []
    args = rewrite(["--env.type=pusht", "--env.fps=10", "--env.observation_height=96", "--env.episode_length=7",
                    "--env.obs_type=state"], main.params, notes.append).args
    assert "--max-steps=7" in args and "--env-kwarg=obs_type=state" in args
    assert [n.split(" ")[1] for n in notes] == ["--env.fps", "--env.observation_height"]


# -- --policy.path: a local folder first, then the hub ----------------------------------------------

def test_hub_id_resolves_like_lerobot(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert policy_reference("lerobot/diffusion_pusht") == "hf://lerobot/diffusion_pusht"
    assert policy_reference("lerobot/diffusion_pusht", "v1") == "hf://lerobot/diffusion_pusht@v1"
    (tmp_path / "lerobot" / "diffusion_pusht").mkdir(parents=True)
    assert policy_reference("lerobot/diffusion_pusht") == "lerobot/diffusion_pusht"  # a local folder wins
    assert policy_reference("outputs/train/x/pretrained_model") == "outputs/train/x/pretrained_model"  # no hub id
    assert policy_reference("pkg.mod:make") == "pkg.mod:make"


def test_hub_id_offline_is_one_line_and_exit_2(tmp_path, monkeypatch):
    pytest.importorskip("huggingface_hub")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    result = invoke(["--policy.path=nobody/no_such_policy", "--env.type=known_answer", "--eval.n_episodes=1",
                     "--output_dir", tmp_path / "out"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1 and "hf://nobody/no_such_policy" in lines[0] and "HF_HUB_OFFLINE" in lines[0]
    assert not (tmp_path / "out" / "eval_info.json").exists()


def test_a_missing_local_policy_folder_says_it_does_not_exist(tmp_path, monkeypatch):
    """``--policy.path=outputs/act`` where ``outputs/`` holds no ``act`` (LeRobot then tries the hub id): the error
    says first that there is no such folder (issue 42: only "could not reach the hub")."""
    pytest.importorskip("huggingface_hub")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "outputs").mkdir()
    for path, why in (("outputs/act", "outputs/ holds no 'act'"), ("nope/act", "there is no folder nope/")):
        result = invoke([f"--policy.path={path}", "--env.type=known_answer", "--eval.n_episodes=1",
                         "--output_dir", tmp_path / "out"])
        assert result.exit_code == 2, result.output
        lines = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
        assert len(lines) == 1 and lines[0].startswith(f"Error: policy {path}: no such local folder ({why}); as a hub "
                                                       f"id, policy hf://{path}:"), lines


# -- threads -----------------------------------------------------------------------------------------

def test_cpu_threads_flag_and_key():
    assert printed(["--env", KA, "--cpu-threads", "3"])[0]["cpu_threads"] == 3
    assert printed(["--env", KA, "cpu_threads=2"])[0]["cpu_threads"] == 2
    assert printed(["--env", KA])[0]["cpu_threads"] == 1


def test_cpu_threads_reach_the_run(tmp_path):
    result = invoke(["--env", KA, "--policy", "fasteval.testing.policies:ParityPolicy", "-n", "2", "--device", "cpu",
                     "--cpu-threads", "2", "-o", tmp_path / "run"])
    assert result.exit_code == 0, result.output
    meta = json.loads((tmp_path / "run" / "eval_info.json").read_text())["meta"]
    assert meta["torch_threads"] == 2


# -- PushT: which env, LeRobot's names and video layout ----------------------------------------

def _pusht():
    pytest.importorskip("gym_pusht")
    from fasteval.robot.fast_envs import FAST_PUSHT, pusht_env_id

    if pusht_env_id() != FAST_PUSHT:
        pytest.skip("this gym-pusht version has no fast subclass")


def test_no_fast_env_steps_gym_pushts_own_env():
    _pusht()
    assert printed(["--env.type=pusht"])[0]["env"] == "fasteval.robot.fast_envs.pusht:make_pusht"
    assert printed(["--env.type=pusht", "--no-fast-env"])[0]["env"] == "gym_pusht/PushT-v0"


def test_pusht_run_has_lerobots_names_and_video_layout(tmp_path):
    _pusht()
    out = tmp_path / "eval"
    result = invoke(["--policy.path=zero", "--env.type=pusht", "--eval.n_episodes=2", "--env.episode_length=3",
                     "--policy.device=cpu", f"--output_dir={out}"])
    assert result.exit_code == 0, result.output
    info = json.loads((out / "eval_info.json").read_text())
    assert list(info["per_group"]) == ["pusht"]
    assert [(t["task_group"], t["task_id"], t["task"]) for t in info["per_task"]] == [("pusht", 0, "PushT-v0")]
    assert {r["task"] for r in info["per_episode"]} == {"PushT-v0"}
    assert "bit-identical" in info["meta"]["env_note"] and info["meta"]["env"].endswith("pusht:make_pusht")
    videos = [str(out / "videos" / "pusht_0" / f"eval_episode_{i}.mp4") for i in range(2)]
    assert sorted(str(p) for p in (out / "videos").rglob("*.mp4")) == videos
    assert info["overall"]["video_paths"] == info["per_group"]["pusht"]["video_paths"] == videos
    assert info["per_task"][0]["metrics"]["video_paths"] == videos
    assert info["overall"]["predicted_video_paths"] == [] == info["per_task"][0]["metrics"]["predicted_video_paths"]
    assert json.loads((out / "config.json").read_text())["defaults"] == "lerobot"
    assert "env             pusht/0 PushT-v0" in result.stdout  # LeRobot's names on the summary, not an import path
    assert "fast_envs" not in result.stdout


# -- the last mile of the drop-in (issue 33) ------------------------------------------------------------

def test_summary_env_line_names_tasks_as_lerobot_does(tmp_path):
    from fasteval.robot.env_names import summary_name

    assert summary_name("fasteval.robot.fast_envs.pusht:make_pusht", [("pusht", 0, "PushT-v0")]) == "pusht/0 PushT-v0"
    assert summary_name("fasteval.robot.metaworld:make_metaworld_env", [("push-v3", 0, "push-v3")]) == "push-v3/0"
    assert summary_name("fasteval.robot.lerobot.envs:make_env", [("libero_spatial", 3, "pick_up")]) == \
        "libero_spatial/3 pick_up"
    assert summary_name("CartPole-v1", [("CartPole-v1", 0, "CartPole-v1")]) == "CartPole-v1"  # no LeRobot name
    assert summary_name("a/x, b/y", [("a", 0, "x"), ("b", 0, "y")], suite=True) == "a/x, b/y"
    result = invoke(["--env", KA, "-n", "1", "-o", tmp_path / "o"])
    assert result.exit_code == 0 and f"env             {KA}" in result.stdout


def test_policy_fields_are_overrides_of_the_checkpoints_config():
    """``--policy.<field>=value`` is LeRobot's override of the saved config: ``--policy-field field=value``, in the
    spec (and so in the manifest and config.json); LeRobot's config class parses it at load time
    (tests/lerobot/test_drop_in.py runs it). A typo of an option fasteval maps is still caught here."""
    args = rewrite(["--policy.path=zero", "--policy.n_action_steps=10", "--policy.num_inference_steps", "4",
                    "policy.use_amp=false"], main.params, lambda m: None).args
    assert "--policy-field=n_action_steps=10" in args and "--policy-field=num_inference_steps=4" in args
    assert "--amp=none" in args  # a mapped option stays mapped
    doc, _ = printed(["--env", KA, "--policy.n_action_steps=10", "--policy-field", "temporal_ensemble_coeff=0.01"])
    assert doc["policy_overrides"] == {"n_action_steps": "10", "temporal_ensemble_coeff": "0.01"}
    with pytest.raises(ValueError, match="Did you mean --policy.device"):
        rewrite(["--policy.devcie=cpu"], main.params)
    result = invoke(["--env", KA, "--policy-field", "n_action_steps"])
    assert result.exit_code == 2 and "field=value" in result.output


def _checkpoint(tmp_path, kind: str):
    folder = tmp_path / kind
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"type": kind}))
    return folder


def test_diffusion_under_lerobots_flags_gets_lerobots_noise_with_one_line(tmp_path):
    """LeRobot's command line promises LeRobot's numbers: Diffusion's noise comes from LeRobot's global RNG in its
    waves (``--noise global``), and one line says so and how to get per-episode noise. fasteval's own command line,
    an explicit ``--noise`` or ``--reset-mode``, and deterministic types keep per-episode noise."""
    diffusion, act = _checkpoint(tmp_path, "diffusion"), _checkpoint(tmp_path, "act")
    notes: list[str] = []
    rewritten = rewrite([f"--policy.path={diffusion}", "--env.type=known_answer"], main.params, notes.append)
    assert rewritten.defaults["noise"] == "global"
    assert len(notes) == 1 and "lerobot-eval" in notes[0] and "--noise episode" in notes[0]
    for args in ([f"--policy.path={diffusion}", "--env.type=known_answer", "--noise=episode"],
                 [f"--policy.path={diffusion}", "--env.type=known_answer", "--reset-mode", "continuous"],
                 [f"--policy.path={act}", "--env.type=known_answer"],
                 ["--policy", str(diffusion), "--env", KA]):
        notes.clear()
        assert "noise" not in rewrite(args, main.params, notes.append).defaults, args
        assert notes == [], args


def test_a_lerobot_style_rerun_into_the_same_output_dir_keeps_the_earlier_run(tmp_path):
    """LeRobot writes over its --output_dir; fasteval keeps the earlier run as <dir>-earlier-<k>, says where, and the
    new run's folder holds only its own records. Native options keep refusing (use --resume or another folder)."""
    out = tmp_path / "eval"
    args = ["--env.type=known_answer", "--policy.path=zero", "--eval.n_episodes=2", f"--output_dir={out}"]
    ids = []
    for k in range(3):
        result = invoke(args)
        assert result.exit_code == 0, result.output
        ids.append(json.loads((out / "manifest.json").read_text())["run_id"])
        assert len((out / "episodes.jsonl").read_text().splitlines()) == 2  # this run's records only
        if k:
            assert f"kept as {out}-earlier-{k}" in result.stderr
            earlier = json.loads((tmp_path / f"eval-earlier-{k}" / "manifest.json").read_text())
            assert earlier["run_id"] == ids[k - 1] and earlier["status"] == "complete"
        else:
            assert "earlier" not in result.stderr
    assert len(set(ids)) == 3
    native = invoke(["--env", KA, "-n", "2", "-o", out])
    assert native.exit_code == 2 and "already holds a fasteval run" in native.output
    assert not (tmp_path / "eval-earlier-3").exists()
    resumed = invoke(["--resume", out])  # a resume is never set aside
    assert resumed.exit_code == 0, resumed.output


def test_an_unfinished_suite_is_left_for_the_same_command(tmp_path):
    from fasteval.doors.lerobot_options import set_aside_earlier_run

    folder = tmp_path / "suite"
    (folder / "tasks" / "g_0").mkdir(parents=True)
    (folder / "tasks" / "g_0" / "manifest.json").write_text(json.dumps({"status": "interrupted"}))
    assert set_aside_earlier_run(folder, ["g_0", "g_1"]) is None and folder.is_dir()  # the same command finishes it
    (folder / "tasks" / "g_0" / "manifest.json").write_text(json.dumps({"status": "complete"}))
    assert set_aside_earlier_run(folder, ["g_0", "g_1"]) == tmp_path / "suite-earlier-1"
    assert not folder.exists() and (tmp_path / "suite-earlier-1" / "tasks" / "g_0").is_dir()
    assert set_aside_earlier_run(tmp_path / "nothing-here") is None


# -- Python first --------------------------------------------------------------------------------------

@pytest.mark.skipif(sys.version_info >= (3, 12), reason="the message of a Python without LeRobot 0.6")
def test_python_requirement_is_said_before_the_envs_package(tmp_path, monkeypatch):
    folder = tmp_path / "act"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"type": "act"}))
    monkeypatch.setitem(sys.modules, "gym_pusht", None)  # gym-pusht missing too: its error would come first
    result = invoke([f"--policy.path={folder}", "--env.type=pusht", "--eval.n_episodes=1",
                     "--output_dir", tmp_path / "out"])
    assert result.exit_code == 2, result.output
    first = next(line for line in result.stderr.splitlines() if line.startswith("Error:"))
    assert "Python >= 3.12" in first and "gym" not in first.lower()
