"""fasteval against ``lerobot-eval`` on LIBERO (issue 33): the same episodes, in one sitting, sync and with the pool.

A random-init ACT built for LIBERO's features (two cameras, 8-d state, 7-d action, no hub weights), on
libero_spatial task 0 (``--task``), seeds 1000.., init states 0.. (the same on both sides: LeRobot's counter and
fasteval's seed rule agree when no episode ends early, and a random policy never succeeds). Rows:

* ``lerobot-eval sync``: LeRobot 0.6.1's ``eval_policy_all`` (:func:`fasteval.robot.lerobot.reference.lerobot_eval`,
  its sync vector env, torch on one thread as fasteval's default), no videos;
* ``lerobot-eval async`` (``--lerobot-async``): the same with LeRobot's async vector env (one process per env);
* ``fasteval sync``: ``evaluate(env=fasteval.robot.lerobot.envs:make_env, ...)``, what ``--env.type=libero`` runs;
* ``fasteval pool``: the same with ``vectorization="async"`` (``--workers``, default the usable cores).

Times are each side's own ``eval_s`` (envs' first resets included, building the policy not), and the wall time of
the call; the load average is read before and after every row. Then the scaling estimate: a LIBERO step is
render-bound (MuJoCo's physics is ~3 ms; each 128 px camera frame through Mesa's llvmpipe ~0.1 s), so the env
share of the sync row (``env_step``: every env's steps and resets, one after the other) divides over the cores,
the rest (policy, bookkeeping) does not: ``T(c) = (eval_s - env_step) + env_step / min(c, batch)``; the pool row
measures ``c`` = the workers. llvmpipe renders with threads of its own (``LP_NUM_THREADS``, default: the cores),
so on a busy machine the sync rows already spread over the cores, and the pool's gain is smaller than the model.

**Unread frames** (issue 40): the rows repeat for each ACT ``n_action_steps`` (``--n-action-steps 1,10,50``, chunk
``max(n_action_steps)``), and ``fasteval sync, skip off`` runs with ``FASTEVAL_NO_UNREAD_SKIP=1`` (every frame
rendered, as before): ACT reads one observation per ``n_action_steps`` steps, so with skipping fasteval renders
one frame pair per chunk (and the last settle step of each reset) where ``lerobot-eval`` renders every step.
``--pusht`` adds the same rows for PushT (a random ACT for its 96 px image, fasteval's fast PushT).

The sitting exits 1 when two rows of one group (same env and ``n_action_steps``) differ per episode in
``sum_reward`` / ``max_reward`` / ``success``.

    python benchmarks/bench_libero.py [--episodes 4] [--batch 2] [--steps 40] [--size 128] [--n-action-steps 1,10,50]
                                      [--pusht] [--json out.json]
    python benchmarks/bench_libero.py --tiny        # the test-suite size (1 episode x 3 steps, 32 px, n_action_steps 2)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import format_machine, machine_info, write_json  # noqa: E402

KEYS = ("sum_reward", "max_reward", "success")


def _load() -> str:
    try:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def lerobot_row(folder: Path, n: int, batch: int, steps: int, size: int, seed: int, task: str,
                use_async: bool, env_type: str = "libero") -> dict[str, Any]:
    import torch

    from fasteval.robot.lerobot.reference import lerobot_eval

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    load, start = _load(), time.perf_counter()
    try:
        if env_type == "pusht":
            ref = lerobot_eval(folder, n, batch, seed=seed, env_type="pusht", episode_length=steps,
                               use_async_envs=use_async)
        else:
            ref = lerobot_eval(folder, n, batch, seed=seed, env_type="libero", task=task, task_ids=[0],
                               episode_length=steps, observation_height=size, observation_width=size,
                               use_async_envs=use_async)
    finally:
        torch.set_num_threads(threads)
    return {"eval_s": ref["eval_s"], "wall_s": time.perf_counter() - start, "load_before": load, "load_after": _load(),
            "episodes": [{k: r[k] for k in KEYS} for r in ref["per_episode"]]}


def fasteval_row(folder: Path, n: int, batch: int, steps: int, size: int, seed: int, task: str, vectorization: str,
                 workers: int | None, skip: bool = True, env_type: str = "libero") -> dict[str, Any]:
    from fasteval import evaluate
    from fasteval.core.unread import OFF_VARIABLE
    from fasteval.robot.lerobot.envs import ENV_REF

    if env_type == "pusht":
        from fasteval.robot.fast_envs import FAST_PUSHT

        env, kwargs, cap = FAST_PUSHT, {"obs_type": "pixels_agent_pos", "render_mode": "rgb_array"}, steps
    else:
        env, cap = ENV_REF, None
        kwargs = {"type": "libero", "task": task, "task_id": 0, "episode_length": steps, "observation_height": size,
                  "observation_width": size}
    old = os.environ.pop(OFF_VARIABLE, None)
    if not skip:
        os.environ[OFF_VARIABLE] = "1"
    load, start = _load(), time.perf_counter()
    try:
        result = evaluate(env=env, env_kwargs=kwargs, policy=str(folder), n_episodes=n, batch_size=batch, seed=seed,
                          device="cpu", vectorization=vectorization, workers=workers, cpu_threads=1, max_steps=cap)
    finally:
        os.environ.pop(OFF_VARIABLE, None)
        if old is not None:
            os.environ[OFF_VARIABLE] = old
    return {"eval_s": result.eval_s, "wall_s": time.perf_counter() - start, "load_before": load, "load_after": _load(),
            "timings": dict(result.timings), "workers": workers, "protocol": result.meta.get("protocol"),
            "unread_observations": result.meta.get("unread_observations"),
            "episodes": [{k: r[k] for k in KEYS} for r in result.per_episode]}


def median_row(repeats: list[dict[str, Any]]) -> dict[str, Any]:
    """The repeat of median ``eval_s`` (its timings and loads with it), with every repeat's ``eval_s``."""
    ok = [r for r in repeats if "error" not in r]
    if not ok:
        return repeats[0]
    ok.sort(key=lambda r: r["eval_s"])
    return {**ok[len(ok) // 2], "eval_s_repeats": [r["eval_s"] for r in repeats if "error" not in r]}


def group_of(name: str) -> str:
    """A row's group: its ``[...]`` suffix (env and ``n_action_steps``)."""
    return name[name.index(" ["):] if " [" in name else ""


def problems(rows: dict[str, dict[str, Any]]) -> list[str]:
    """Rows whose per-episode results differ from the first row's of their group ([] if none)."""
    found = []
    for group in dict.fromkeys(group_of(n) for n in rows):
        found += _problems({n: r for n, r in rows.items() if group_of(n) == group})
    return found


def _problems(rows: dict[str, dict[str, Any]]) -> list[str]:
    found = []
    names = [n for n, r in rows.items() if "episodes" in r]
    for name in names[1:]:
        for i, (a, b) in enumerate(zip(rows[names[0]]["episodes"], rows[name]["episodes"])):
            for key in KEYS:
                if (a[key] != b[key]) if key == "success" else abs(float(a[key]) - float(b[key])) > 1e-4:
                    found.append(f"{name}: episode {i} {key} {b[key]} differs from {names[0]}'s {a[key]}")
    return found


def scaling(sync: dict[str, Any], batch: int, cores: list[int]) -> dict[int, float]:
    """Projected fasteval time on ``c`` cores from the sync row: its serial part plus its env part over min(c, batch)."""
    env = float(sync["timings"].get("env_step", 0.0))
    serial = max(float(sync["eval_s"]) - env, 0.0)
    return {c: serial + env / max(1, min(c, batch)) for c in cores}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--steps", type=int, default=40, help="episode length (LIBERO's libero_spatial cap is 280)")
    parser.add_argument("--size", type=int, default=128, help="camera image size (px)")
    parser.add_argument("--task", default="libero_spatial")
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--n-action-steps", default="1,10,50", help="ACT's n_action_steps, one group of rows each")
    parser.add_argument("--pusht", action="store_true", help="add the same rows on PushT")
    parser.add_argument("--workers", type=int, default=None, help="fasteval pool workers [default: usable cores]")
    parser.add_argument("--lerobot-async", action="store_true", help="add lerobot-eval with its async vector env")
    parser.add_argument("--skip-lerobot", action="store_true")
    parser.add_argument("--repeats", type=int, default=1, help="rows interleaved per repeat; medians reported")
    parser.add_argument("--tiny", action="store_true", help="1 episode x 3 steps at 32 px, n_action_steps 2 (tests)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.tiny:
        args.episodes, args.batch, args.steps, args.size, args.n_action_steps = 1, 1, 3, 32, "2"
    exec_steps = sorted({int(x) for x in str(args.n_action_steps).split(",") if x.strip()})
    from fasteval.robot.env_kinds.headless import ensure_headless_gl
    from fasteval.robot.lerobot.libero import prepare_libero
    from fasteval.robot.lerobot.testing import write_act_checkpoint, write_libero_act_checkpoint

    ensure_headless_gl()
    prepare_libero()
    info = machine_info()
    usable = int(info.get("usable_cores") or os.cpu_count() or 1)
    workers = args.workers or max(1, min(args.batch, usable))
    n, b, steps, size, seed = args.episodes, args.batch, args.steps, args.size, args.seed
    chunk = max(exec_steps)
    envs = ["libero"] + (["pusht"] if args.pusht else [])
    runs: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folders = {}
        for env_type in envs:
            for k in exec_steps:
                where = Path(tmp) / f"act_{env_type}_{k}"
                folders[env_type, k] = (write_libero_act_checkpoint(where, seed=0, image_size=size, chunk_size=chunk,
                                                                    n_action_steps=k) if env_type == "libero" else
                                        write_act_checkpoint(where, seed=0, chunk_size=chunk, n_action_steps=k))
        for _ in range(max(1, args.repeats)):  # rows interleaved: background load hits every row alike
            for (env_type, k), folder in folders.items():
                tag = f" [{env_type}, n_action_steps {k}]"
                common = (folder, n, b, steps, size, seed, args.task)
                if not args.skip_lerobot:
                    runs.setdefault("lerobot-eval sync" + tag, []).append(
                        lerobot_row(*common, False, env_type=env_type))
                runs.setdefault("fasteval sync" + tag, []).append(
                    fasteval_row(*common, "sync", None, env_type=env_type))
                runs.setdefault("fasteval sync, skip off" + tag, []).append(
                    fasteval_row(*common, "sync", None, skip=False, env_type=env_type))
                runs.setdefault(f"fasteval pool ({workers} workers)" + tag, []).append(
                    fasteval_row(*common, "async", workers, env_type=env_type))
                if args.lerobot_async and not args.skip_lerobot:
                    try:
                        row = lerobot_row(*common, True, env_type=env_type)
                    except Exception as exc:  # noqa: BLE001 -- a peer that cannot run is reported, not fatal
                        row = {"error": f"{type(exc).__name__}: {exc}"}
                    runs.setdefault("lerobot-eval async" + tag, []).append(row)
    rows = {name: median_row(repeats) for name, repeats in runs.items()}

    lp = os.environ.get("LP_NUM_THREADS", "unset (llvmpipe: one thread per core)")
    print(f"## bench_libero: LIBERO {args.task} task 0, random ACT ({size} px cameras), {n} episodes x {steps} steps, "
          f"batch {b}, n_action_steps {', '.join(map(str, exec_steps))} (chunk {chunk}), "
          f"MUJOCO_GL={os.environ.get('MUJOCO_GL')}, LP_NUM_THREADS {lp}, {max(1, args.repeats)} repeats (medians)\n")
    print(format_machine(info) + "\n")
    print("| row | eval s (median) | repeats | wall s | s per env step | vs lerobot-eval sync | unread frames | "
          "load before | load after |")
    print("|---|---:|---|---:|---:|---:|---|---|---|")
    env_steps = n * steps
    for name, row in rows.items():
        if "error" in row:
            print(f"| {name} | failed: {row['error'][:120]} | | | | | | | |")
            continue
        base = rows.get("lerobot-eval sync" + group_of(name), {}).get("eval_s")
        vs = f"{base / row['eval_s']:.2f}x" if base else "n/a"
        reps = ", ".join(f"{t:.1f}" for t in row.get("eval_s_repeats", [row["eval_s"]]))
        print(f"| {name} | {row['eval_s']:.1f} | {reps} | {row['wall_s']:.1f} | {row['eval_s'] / env_steps:.3f} | {vs} | "
              f"{row.get('unread_observations', 'rendered')} | {row['load_before']} | {row['load_after']} |")
    projected: dict[str, dict[int, float]] = {}
    for name, sync in rows.items():
        if not name.startswith("fasteval sync [") or "error" in sync:
            continue
        group = group_of(name)
        base = rows.get("lerobot-eval sync" + group, {}).get("eval_s")
        projected[group] = scaling(sync, b, sorted({1, 2, 4, 8, 16, workers}))
        env_share = float(sync["timings"].get("env_step", 0.0)) / max(float(sync["eval_s"]), 1e-9)
        print(f"\nfasteval sync{group}: env_step {sync['timings'].get('env_step', 0.0):.1f} s of {sync['eval_s']:.1f} s "
              f"({100 * env_share:.0f}%: renders, physics, resets); policy {sync['timings'].get('policy', 0.0):.2f} s")
        print("projected fasteval time on c cores (serial part + env part / min(c, batch)), and the ratio to "
              "lerobot-eval sync:")
        for c, t in projected[group].items():
            print(f"- {c} cores: {t:.1f} s" + (f", {base / t:.2f}x" if base else ""))
    found = problems(rows)
    for line in found:
        print(f"FAIL: {line}")
    if args.json:
        write_json(args.json, {"machine": info, "task": args.task, "episodes": n, "batch": b, "steps": steps,
                               "size": size, "workers": workers, "n_action_steps": exec_steps, "rows": rows,
                               "projected_s": {g: {str(k): v for k, v in p.items()} for g, p in projected.items()},
                               "problems": found})
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
