"""The differential test: LeRobot command lines run through ``lerobot-eval`` and through ``fasteval``.

:data:`CASES` is the table (docs/lerobot.md, "The differential test"). Every case is one LeRobot
command line (its ``--policy.path`` and ``--output_dir`` filled in here), run unchanged through
LeRobot 0.6.1's ``lerobot-eval`` and through ``fasteval``, both with torch on one thread
(:mod:`tests.lerobot.diff_driver`; fasteval gets ``--cpu-threads=1`` as well, plus a case's
``fasteval_flags``). Then, per case:

* per-episode ``sum_reward``, ``max_reward`` and ``success`` (``per_task[i].metrics`` on both sides):
  equal within :data:`TOL`, except where LeRobot is wrong (``expect="done-mask"``, below);
* the keys and layout of ``eval_info.json``: LeRobot's document is a sub-document of fasteval's
  (every key, the same JSON types, the same ``per_task`` order and ``per_group`` names);
* the videos: the same files under ``videos/`` (LeRobot writes whole batches, so its extra videos of
  episodes past ``n_episodes`` are left out), the same frame size, and fasteval's frames equal
  LeRobot's; fasteval's video has one more frame (the observation after the last step, which
  LeRobot's ``frames[: done_index + 1]`` drops).

``expect="done-mask"``: LeRobot's ``eval_policy`` sums rewards up to ``done_index + 1``, one step past
an episode's end. An episode that ends before the others of its batch gets one more reward (the first
step of the autoreset episode). The case runs episodes of different lengths in one batch: the
episode that ends last in its batch agrees, every other one differs, and LeRobot's batch-1 run
(``done-mask-b1``, where no step follows an episode's end) agrees with fasteval's batch-3 numbers.

PushT's reward moves only once the agent pushes the T, so two runs can agree on the rewards of 20 steps with
different actions; the videos are the witness of the agent's path (the first 10 episodes of each case).

The cases are tiny (1-3 episodes of 10-20 steps): the PushT table runs in about four minutes on two busy cores;
the LIBERO cases (``libero``: LeRobot's LIBERO as it is; ``libero-witness``: with a dense reward, so that equal
sums mean equal paths; ``libero-witness-reuse``: the same with fasteval's compiled-model reuse on) add about as much
(a LIBERO reset costs seconds). ``FASTEVAL_DIFFERENTIAL_CASES=a,b`` runs
only the named cases.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("lerobot")
pytest.importorskip("diffusers")

from fasteval.robot.env_kinds.model_reuse import ON, ON_VARIABLE  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TOL = 1e-9
"""Both sides run torch on one thread: the per-episode numbers agree to about 1e-13."""
CROSS_BATCH_TOL = 1e-4
"""Between batch sizes the policy's matrix products round differently (docs/lerobot.md)."""
FRAME_TOL = 25.0
"""The codecs differ (LeRobot: PyAV's libx264; fasteval: imageio's ffmpeg): frames are compared as 8x8 block
means, per frame at the 99.9th percentile of the pixels. The same states give 1-10 there (random-pixel frames
the most), a PushT agent a few pixels off gives well over 100."""
STEPS = 20
SYNC = "--eval.use_async_envs=false"
"""Every case: LeRobot 0.6.1's async envs (its default for batch > 1) start forkserver workers that do
not import gym-pusht (nor this test's env), so ``lerobot-eval`` fails there without it."""
COMMON = ("--env.type=pusht", f"--env.episode_length={STEPS}", "--policy.device=cpu", SYNC)


@dataclass(frozen=True)
class Case:
    """One row of the differential table: a LeRobot command line and what to expect."""

    name: str
    policy: str
    """Which checkpoint ``--policy.path`` names: ``act``, ``diffusion`` or ``metaworld_act``."""
    flags: tuple[str, ...]
    """The LeRobot command line, less ``--policy.path`` and ``--output_dir``."""
    fasteval_flags: tuple[str, ...] = ()
    """Added for fasteval only (``--reset-mode=wave``, ``--noise=global``, ``--max-episodes-rendered=0``)."""
    fasteval_environ: tuple[tuple[str, str], ...] = ()
    """Environment variables set for fasteval's run of this case only (``FASTEVAL_MODEL_REUSE=1``)."""
    expect: str = "equal"
    """``equal``: per-episode numbers within TOL; ``done-mask``: LeRobot's extra step past the end (see above)."""
    why: str = ""
    zeros: bool = False
    """Every reward is 0 on both sides (LIBERO's reward is 1 on success only): the names, files and videos are
    the witnesses, and ``libero-witness`` compares the same episodes with a dense reward."""


CASES = (
    Case("act-b1", "act", (*COMMON, "--eval.n_episodes=2", "--eval.batch_size=1"),
         why="batch 1: seeds 1000, 1001 (LeRobot's default seed)"),
    Case("act-auto", "act", (*COMMON, "--eval.n_episodes=3"),
         why="eval.batch_size 0 (LeRobot's default): its auto rule, min(floor(0.7 cores), n, 64), on both sides"),
    Case("act-b2", "act", (*COMMON, "--eval.n_episodes=3", "--eval.batch_size=2"),
         why="batch n: two waves, the last one half full; LeRobot writes 4 videos for 3 episodes, fasteval 3"),
    Case("act-b2-no-videos", "act", (*COMMON, "--eval.n_episodes=3", "--eval.batch_size=2"),
         fasteval_flags=("--max-episodes-rendered=0",),
         why="videos off (LeRobot has no switch: its run renders; the numbers do not depend on it)"),
    Case("diffusion-global-noise", "diffusion", (*COMMON, "--eval.n_episodes=3", "--eval.batch_size=2"),
         fasteval_flags=("--reset-mode=wave", "--noise=global"),
         why="Diffusion (DDIM) with LeRobot's global-RNG noise: the same draws in the same order"),
    Case("diffusion-lerobot-noise", "diffusion", (*COMMON, "--eval.n_episodes=3", "--eval.batch_size=2"),
         why="the same command line, nothing added: under LeRobot's flags Diffusion draws LeRobot's noise by default"),
    Case("act-n-action-steps", "act", (*COMMON, "--eval.n_episodes=2", "--eval.batch_size=2",
                                       "--policy.n_action_steps=4"),
         why="a --policy.<field> override, applied by LeRobot's config class on both sides"),
    Case("done-mask", "act", ("--env.type=fasteval_varying", "--policy.device=cpu", SYNC, "--eval.n_episodes=3",
                              "--eval.batch_size=3", "--seed=3"),
         expect="done-mask", why="episodes of 10, 11, 12 steps in one batch: LeRobot counts one step past the end"),
    Case("done-mask-b1", "act", ("--env.type=fasteval_varying", "--policy.device=cpu", SYNC, "--eval.n_episodes=3",
                                 "--eval.batch_size=1", "--seed=3"),
         why="the same episodes one at a time: LeRobot agrees (no step follows an episode's end)"),
)


SLOW = os.environ.get("FASTEVAL_DIFFERENTIAL_SLOW", "") == "1"
"""Meta-World's case: LeRobot's Meta-World always runs 500 steps (it ignores ``--env.episode_length``) and
renders 480x480 frames; on two busy CPU cores that is about half an hour per side, so it runs only with
``FASTEVAL_DIFFERENTIAL_SLOW=1`` (and the ``metaworld`` package installed)."""


def _metaworld_cases() -> tuple[Case, ...]:
    try:
        import metaworld  # noqa: F401
    except Exception:
        return ()
    if not SLOW:
        return ()
    return (Case("metaworld-push", "metaworld_act",
                 ("--env.type=metaworld", "--env.task=push-v3", "--policy.device=cpu", SYNC,
                  "--eval.n_episodes=1", "--eval.batch_size=1"),
                 why="LeRobot's Meta-World (its camera, 500 steps: LeRobot ignores env.episode_length there)"),)


LIBERO_STEPS = 6
LIBERO_SYNC = ("--policy.device=cpu", SYNC)


def _libero_cases() -> tuple[Case, ...]:
    """LIBERO, offline (its assets from the package registry, linked where hf-libero looks by the install step;
    lerobot-eval needs that link), with small images and short episodes (a LIBERO reset takes seconds)."""
    try:
        from fasteval.robot.lerobot.libero import assets_dir, libero_dir
    except Exception:
        return ()
    if libero_dir() is None or assets_dir() is None or os.environ.get("FASTEVAL_LIBERO_ASSETS"):
        return ()
    return (
        Case("libero", "libero_act",
             ("--env.type=libero", "--env.task=libero_spatial", "--env.task_ids=[0]", *LIBERO_SYNC,
              "--eval.n_episodes=1", "--eval.batch_size=1", "--env.episode_length=4",
              "--env.observation_height=64", "--env.observation_width=64"),
             zeros=True, why="LeRobot's LIBERO as it is: libero_spatial task 0, LeRobot's names, files and video"),
        Case("libero-witness", "libero_act",
             ("--env.type=libero_witness", "--env.task=libero_spatial,libero_object", "--env.task_ids=[0]",
              *LIBERO_SYNC, "--eval.n_episodes=2", "--eval.batch_size=2", f"--env.episode_length={LIBERO_STEPS}",
              "--env.observation_height=32", "--env.observation_width=32"),
             why="LeRobot's LIBERO env type plus a dense reward (the end effector's distance from its start): task 0 "
                 "of libero_spatial and of libero_object, init states 0 and 1, the same paths on both sides"),
        Case("libero-witness-reuse", "libero_act",
             ("--env.type=libero_witness", "--env.task=libero_spatial", "--env.task_ids=[0]", *LIBERO_SYNC,
              "--eval.n_episodes=3", "--eval.batch_size=2", f"--env.episode_length={LIBERO_STEPS}",
              "--env.observation_height=32", "--env.observation_width=32"),
             fasteval_environ=((ON_VARIABLE, "1"),),
             why="fasteval's opt-in model reuse (FASTEVAL_MODEL_REUSE=1) against lerobot-eval's hard resets, which "
                 "compile every time: episode 2 runs on env 0's second hard reset, the compiled model reused"),
    )


ALL_CASES = CASES + _metaworld_cases() + _libero_cases()
if os.environ.get("FASTEVAL_DIFFERENTIAL_CASES"):  # a comma-separated subset, by name (while working on one case)
    _chosen = set(os.environ["FASTEVAL_DIFFERENTIAL_CASES"].split(","))
    ALL_CASES = tuple(c for c in ALL_CASES if c.name in _chosen or f"{c.name}-b1" in _chosen)


# -- running the table once -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def checkpoints(act_checkpoint: Path, diffusion_checkpoint: Path, tmp_path_factory) -> dict[str, Path]:
    out = {"act": act_checkpoint, "diffusion": diffusion_checkpoint}
    if any(c.policy == "libero_act" for c in ALL_CASES):
        from fasteval.robot.lerobot.testing import write_libero_act_checkpoint

        out["libero_act"] = write_libero_act_checkpoint(tmp_path_factory.mktemp("libero_act"), seed=0)
    if any(c.policy == "metaworld_act" for c in ALL_CASES):
        from fasteval.robot.lerobot.testing import write_metaworld_act_checkpoint

        out["metaworld_act"] = write_metaworld_act_checkpoint(tmp_path_factory.mktemp("mw_act"), seed=0)
    return out


@pytest.fixture(scope="module")
def table(checkpoints: dict[str, Path], tmp_path_factory) -> dict[str, dict[str, Any]]:
    """Runs every case through both sides (two driver processes, side by side); returns
    ``{case: {"lerobot-eval": {"rc", "dir", "log"}, "fasteval": {...}}}``."""
    root = tmp_path_factory.mktemp("differential")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)]), "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1", "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl"), "HF_HUB_OFFLINE": "1",
           "LIBERO_CONFIG_PATH": str(root / "libero")}
    if any(c.policy == "libero_act" for c in ALL_CASES):  # LIBERO's config.yaml, as the install step writes it
        from fasteval.robot.lerobot.libero import write_config

        write_config(root / "libero" / "config.yaml")
    procs, files = {}, {}
    for side in ("lerobot-eval", "fasteval"):
        cases = []
        for case in ALL_CASES:
            out = root / side / case.name
            argv = [f"--policy.path={checkpoints[case.policy]}", *case.flags, f"--output_dir={out}"]
            environ = {}
            if side == "fasteval":
                argv += ["--cpu-threads=1", *case.fasteval_flags]
                environ = dict(case.fasteval_environ)
            cases.append({"name": case.name, "argv": argv, "log": str(root / side / f"{case.name}.log"),
                          "environ": environ})
        (root / f"{side}.cases.json").write_text(json.dumps(cases, indent=1))
        files[side] = root / f"{side}.results.json"
        procs[side] = subprocess.Popen([sys.executable, "-m", "tests.lerobot.diff_driver", side,
                                        str(root / f"{side}.cases.json"), str(files[side])], cwd=REPO, env=env)
    for side, proc in procs.items():
        assert proc.wait(timeout=1800) == 0, f"the {side} driver failed"
    out: dict[str, dict[str, Any]] = {}
    for side, path in files.items():
        for name, res in json.loads(path.read_text()).items():
            out.setdefault(name, {})[side] = {**res, "dir": root / side / name, "log": root / side / f"{name}.log"}
    return out


def _side(table: dict, case: Case, side: str) -> tuple[dict[str, Any], Path]:
    run = table[case.name][side]
    assert run["rc"] == 0, f"{side} {case.name}: exit {run['rc']}\n" + run["log"].read_text()[-3000:]
    return json.loads((run["dir"] / "eval_info.json").read_text()), run["dir"]


def _episodes(info: dict[str, Any]) -> list[tuple[float, float, bool]]:
    return [(float(s), float(m), bool(ok)) for task in info["per_task"]
            for s, m, ok in zip(task["metrics"]["sum_rewards"], task["metrics"]["max_rewards"],
                                task["metrics"]["successes"])]


# -- the comparisons ----------------------------------------------------------------------------------
@pytest.mark.parametrize("case", ALL_CASES, ids=[c.name for c in ALL_CASES])
def test_per_episode_numbers(table: dict, case: Case) -> None:
    theirs, _ = _side(table, case, "lerobot-eval")
    ours, out = _side(table, case, "fasteval")
    a, b = _episodes(ours), _episodes(theirs)
    assert len(a) == len(b) > 0
    assert case.zeros or any(r[0] != 0 for r in b)  # not a comparison between zeros
    if case.expect == "equal":
        for (s1, m1, ok1), (s2, m2, ok2) in zip(a, b):
            assert s1 == pytest.approx(s2, abs=TOL) and m1 == pytest.approx(m2, abs=TOL) and ok1 == ok2
        return
    assert case.expect == "done-mask"
    lengths = [r["length"] for r in ours["per_episode"]]
    assert len(set(lengths)) == len(lengths)  # the episodes end at different steps
    last = lengths.index(max(lengths))
    for i, ((s1, _, _), (s2, _, _)) in enumerate(zip(a, b)):
        if i == last:
            assert s1 == pytest.approx(s2, abs=TOL)
        else:
            assert abs(s1 - s2) > 10 * CROSS_BATCH_TOL, f"episode {i} ended early and LeRobot counted no step past its end"
    alone, _ = _side(table, next(c for c in ALL_CASES if c.name == f"{case.name}-b1"), "lerobot-eval")
    # LeRobot's batch-1 numbers are fasteval's batch-3 numbers (to the rounding of the batch size, ~1e-6 over an episode)
    assert [r[0] for r in _episodes(alone)] == pytest.approx([r[0] for r in a], abs=CROSS_BATCH_TOL)


@pytest.mark.parametrize("case", [c for c in ALL_CASES if c.fasteval_environ], ids=lambda c: c.name)
def test_the_case_environment_reached_the_run(table: dict, case: Case) -> None:
    """``libero-witness-reuse`` compared episodes with the compiled model reused: the run says so in its meta."""
    ours, _ = _side(table, case, "fasteval")
    assert ours["meta"].get("reset_reuse") == ON, f"reset_reuse: {ours['meta'].get('reset_reuse')!r}"


def _relative(paths: list[str], root: Path) -> list[str]:
    return [str(Path(p).resolve().relative_to(root.resolve())) if os.path.isabs(p) else p for p in paths]


def _assert_sublayout(theirs: Any, ours: Any, where: str, out: tuple[Path, Path]) -> None:
    """Every key of LeRobot's document is in fasteval's, with the same JSON type, recursively."""
    if isinstance(theirs, dict):
        assert isinstance(ours, dict), f"{where}: {type(ours).__name__}, LeRobot has an object"
        missing = sorted(set(theirs) - set(ours))
        assert not missing, f"{where}: keys {missing} missing (fasteval has {sorted(ours)})"
        for key, value in theirs.items():
            _assert_sublayout(value, ours[key], f"{where}.{key}", out)
    elif isinstance(theirs, list):
        assert isinstance(ours, list), f"{where}: {type(ours).__name__}, LeRobot has a list"
        if where.endswith("video_paths"):
            return  # compared file by file in test_videos
        assert len(ours) == len(theirs), f"{where}: {len(ours)} items, LeRobot has {len(theirs)}"
        for i, (t, o) in enumerate(zip(theirs, ours)):
            _assert_sublayout(t, o, f"{where}[{i}]", out)
    elif isinstance(theirs, bool):
        assert isinstance(ours, bool), f"{where}: {ours!r}, LeRobot has a boolean"
    elif isinstance(theirs, (int, float)):
        assert isinstance(ours, (int, float)) and not isinstance(ours, bool), f"{where}: {ours!r}, LeRobot a number"
        if isinstance(theirs, int):
            assert isinstance(ours, int), f"{where}: {ours!r}, LeRobot has an integer"
    else:
        assert type(ours) is type(theirs), f"{where}: {ours!r}, LeRobot has {theirs!r}"
        if where.endswith((".task_group", ".task_id")):
            assert ours == theirs, f"{where}: {ours!r}, LeRobot names it {theirs!r}"


@pytest.mark.parametrize("case", ALL_CASES, ids=[c.name for c in ALL_CASES])
def test_eval_info_layout(table: dict, case: Case) -> None:
    theirs, lr_dir = _side(table, case, "lerobot-eval")
    ours, fe_dir = _side(table, case, "fasteval")
    _assert_sublayout(theirs, ours, "eval_info", (lr_dir, fe_dir))
    assert list(ours["per_group"]) == list(theirs["per_group"])
    assert [(t["task_group"], t["task_id"]) for t in ours["per_task"]] == \
        [(t["task_group"], t["task_id"]) for t in theirs["per_task"]]
    names = {r["task"] for r in ours["per_episode"]}
    assert not any(":" in n for n in names), f"per_episode task names {names}: a factory path, not the task's name"


def _frames(path: Path) -> np.ndarray:
    import av

    with av.open(str(path)) as container:
        return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])


@pytest.mark.parametrize("case", [c for c in ALL_CASES if c.expect == "equal"], ids=lambda c: c.name)
def test_videos(table: dict, case: Case) -> None:
    theirs, lr_dir = _side(table, case, "lerobot-eval")
    ours, fe_dir = _side(table, case, "fasteval")
    n = theirs["overall"]["n_episodes"]
    lr_files = sorted(str(p.relative_to(lr_dir)) for p in (lr_dir / "videos").rglob("*.mp4"))
    fe_files = sorted(str(p.relative_to(fe_dir)) for p in (fe_dir / "videos").rglob("*.mp4")) \
        if (fe_dir / "videos").exists() else []
    if "--max-episodes-rendered=0" in case.fasteval_flags:
        assert fe_files == [] and ours["overall"]["video_paths"] == []
        return
    expected = [f for f in lr_files if int(Path(f).stem.rsplit("_", 1)[1]) < min(n, 10)]  # LeRobot: whole batches
    assert fe_files == expected
    for key in ("overall",):
        assert sorted(_relative(ours[key]["video_paths"], fe_dir)) == expected
    for group, agg in ours["per_group"].items():
        assert sorted(_relative(agg["video_paths"], fe_dir)) == [f for f in expected if f"/{group}_" in f"/{f}"]
    for task in ours["per_task"]:
        folder = f"videos/{task['task_group']}_{task['task_id']}/"
        assert sorted(_relative(task["metrics"]["video_paths"], fe_dir)) == [f for f in expected if f.startswith(folder)]
    for rel in expected:
        a, b = _frames(fe_dir / rel), _frames(lr_dir / rel)
        assert a.shape[1:] == b.shape[1:] and len(a) == len(b) + 1, (rel, a.shape, b.shape)
        worst = max(np.percentile(np.abs(_blocks(a[t]) - _blocks(b[t])), 99.9) for t in range(len(b)))
        assert worst < FRAME_TOL, f"{rel}: a frame differs by {worst:.1f} (8x8 block means): not the same states"


def _blocks(frame: np.ndarray, k: int = 8) -> np.ndarray:
    h, w, c = frame.shape
    return frame[: h // k * k, : w // k * k].astype(np.float32).reshape(h // k, k, w // k, k, c).mean((1, 3))
