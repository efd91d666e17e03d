"""What ``--videos K`` costs, and where the time goes: the same runs with no videos, with the first K
(replayed beside the loop after their episodes where the env allows, PushT rendered in the loop; and rendered
in the loop on every env with ``FASTEVAL_LIVE_VIDEOS=1``) and with the first K failures (the kept episodes
replayed beside the loop), on PushT, Hopper and HalfCheetah, optionally on two source trees side by side.

    python benchmarks/bench_videos.py [--before ../other-checkout] [--repeats 3] [--tiny]

Each sample is one ``Engine(spec).run()`` in a fresh process of the tree (the build is not timed):
``run_s`` is the call's wall time (it includes the wait for the last videos), ``eval_s`` the
engine's, and the stages are the run's ``timings`` (a tree from before the ``render`` and
``encode`` stages books both under ``bookkeeping``). Rows are interleaved (repeat loop outermost,
trees alternating) so that load on the machine hits every row alike; medians are reported, with
the machine and its load. MuJoCo envs render with ``MUJOCO_GL=egl`` (set it before running;
without a GPU it is Mesa's software renderer, and the figures say so). ``--tiny`` runs the
known-answer env (8x8 frames) for the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import command_line, format_machine, machine_info, markdown_table  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

ENVS = {
    "pusht": {"env": "gym_pusht/PushT-v0", "n_episodes": 8, "batch_size": 4},
    "hopper": {"env": "Hopper-v5", "env_kwargs": {"render_mode": "rgb_array"}, "n_episodes": 8, "batch_size": 4},
    "halfcheetah": {"env": "HalfCheetah-v5", "env_kwargs": {"render_mode": "rgb_array", "width": 128, "height": 128},
                    "n_episodes": 4, "batch_size": 4},
}
TINY_ENVS = {"known": {"env": "fasteval.testing.envs:make_known_answer_env", "n_episodes": 6, "batch_size": 3}}
MODES = {"no videos": {}, "first 2": {"max_episodes_rendered": 2, "video_select": "first"},
         "first 2 live": {"max_episodes_rendered": 2, "video_select": "first", "_environ": {"FASTEVAL_LIVE_VIDEOS": "1"}},
         "failures 2": {"max_episodes_rendered": 2, "video_select": "failures"}}
STAGES = ("env_step", "policy", "bookkeeping", "render", "encode")

DRIVER = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
fields = json.loads(sys.argv[2])
from fasteval.types.spec import EvalSpec
try:
    from fasteval.run.engine import Engine
except ImportError:
    from fasteval.engine import Engine
spec = EvalSpec(policy="random", seed=0, **fields)
with Engine(spec) as engine:
    t = time.perf_counter()
    result = engine.run()
    run_s = time.perf_counter() - t
print(json.dumps({"run_s": run_s, "eval_s": result.eval_s, "timings": result.timings,
                  "videos": len(result.video_paths or [])}))
"""


def sample(tree: Path, fields: dict, videos_dir: str) -> dict:
    fields = dict(fields, videos_dir=videos_dir) if fields.get("max_episodes_rendered") else dict(fields)
    environ = fields.pop("_environ", {})  # a mode's environment variables (FASTEVAL_LIVE_VIDEOS)
    env = {**os.environ, **environ, "PYTHONPATH": os.pathsep.join([str(tree / "src"), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", DRIVER, str(tree / "src"), json.dumps(fields)], capture_output=True,
                         text=True, env=env, cwd=videos_dir, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="another checkout to run beside this one")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--envs", default=",".join(ENVS), help="comma-separated: " + ", ".join(ENVS))
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated: " + ", ".join(MODES))
    parser.add_argument("--tiny", action="store_true", help="the known-answer env, one repeat (for the test suite)")
    args = parser.parse_args(argv)
    envs = TINY_ENVS if args.tiny else {k: ENVS[k] for k in args.envs.split(",")}
    trees = {"this": REPO}
    if args.before is not None:
        trees = {"before": args.before.resolve(), "this": REPO}
    samples: dict[tuple[str, str, str], list[dict]] = {}
    for round_ in range(1 if args.tiny else args.repeats):
        order = list(trees) if round_ % 2 == 0 else list(trees)[::-1]
        for env_name, env_fields in envs.items():
            for mode, mode_fields in ((m, MODES[m]) for m in args.modes.split(",")):
                for tree in order:
                    with tempfile.TemporaryDirectory() as tmp:
                        got = sample(trees[tree], {**env_fields, **mode_fields}, tmp)
                    samples.setdefault((env_name, mode, tree), []).append(got)
    print(format_machine(machine_info()))
    print(f"- MUJOCO_GL={os.environ.get('MUJOCO_GL', '(unset)')}")
    print("command:", command_line())
    rows = []
    for (env_name, mode, tree), runs in samples.items():
        med = {k: statistics.median(r[k] for r in runs) for k in ("run_s", "eval_s")}
        stages = {s: statistics.median(r["timings"].get(s, 0.0) for r in runs) for s in STAGES}
        rows.append([env_name, mode, tree, str(runs[0]["videos"]), f"{med['run_s']:.2f}", f"{med['eval_s']:.2f}",
                     *(f"{stages[s]:.2f}" for s in STAGES), str(len(runs))])
    print(markdown_table(["env", "videos", "tree", "files", "run_s", "eval_s", *(f"{s} s" for s in STAGES), "n"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
