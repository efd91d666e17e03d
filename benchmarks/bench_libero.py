"""fasteval against ``lerobot-eval`` on LIBERO (issue 33): the same episodes, in one sitting, sync and with the pool.

A random-init ACT built for LIBERO's features (two cameras, 8-d state, 7-d action, no hub weights), on
libero_spatial task 0 (``--task``), seeds 1000.., init states 0.. (the same on both sides: LeRobot's counter and
fasteval's seed rule agree when no episode ends early, and a random policy never succeeds). Rows:

* ``lerobot-eval sync``: LeRobot 0.6.1's ``eval_policy_all`` (:func:`fasteval.robot.lerobot.reference.lerobot_eval`,
  its sync vector env, torch on one thread as fasteval's default), no videos;
* ``lerobot-eval async`` (``--lerobot-async``): the same with LeRobot's async vector env (one process per env);
* ``fasteval sync``: ``evaluate(env=fasteval.robot.lerobot.envs:make_env, ...)``, what ``--env.type=libero`` runs
  (with its policy block, ``-b`` rows: ``--policy-block batch``, lerobot-eval's rounding; ``--policy-block 16`` gives
  the library's default, where a batch of 2 pays for 16 rows of ACT);
* ``fasteval ..., model reuse`` (``--model-reuse``, LIBERO): with ``FASTEVAL_MODEL_REUSE=1``, the compiled model
  reused across hard resets;
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
rendered, as before; ``--no-skip-off`` leaves these rows out): ACT reads one observation per ``n_action_steps`` steps,
so with skipping fasteval renders one frame pair per chunk (and the last settle step of each reset) where
``lerobot-eval`` renders every step. ``--metaworld`` adds the same rows on Meta-World (``push-v3``, LeRobot's env type,
a random ACT for its 480 px camera); ``--pusht`` adds one group on PushT: a random Diffusion policy executing 8 of its
16-step horizon (fasteval's fast PushT, LeRobot's global-RNG noise in waves, so the episodes are lerobot-eval's).
``--full`` runs every env at its full episode length (libero_spatial 280 steps, Meta-World 500, PushT 300).

**Where the time goes**: per-operation costs measured on one env of each kind in this process, as fasteval runs it
(:func:`breakdown`: its first reset, its later resets, a step whose observation is read, one that is not), and the
fasteval sync rows split by them (:func:`where_time_goes`: resets, physics, the renders of the observations read,
the policy, and what the model leaves over).

The sitting exits 1 when two rows of one group (same env and ``n_action_steps``) differ per episode in
``sum_reward`` / ``max_reward`` / ``success``.

    python benchmarks/bench_libero.py [--episodes 4] [--batch 2] [--steps 40 | --full] [--size 128]
                                      [--n-action-steps 1,10,50] [--metaworld] [--pusht] [--no-skip-off] [--model-reuse]
                                      [--policy-block batch|R] [--json out.json]
    python benchmarks/bench_libero.py --tiny        # the test-suite size (1 episode x 3 steps, 32 px, n_action_steps 2)
    python benchmarks/bench_libero.py --tiny --metaworld --pusht --no-libero   # the other envs at that size
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
METAWORLD_TASK = "push-v3"
FULL_STEPS = {"libero": 280, "metaworld": 500, "pusht": 300}
"""Full episode lengths: libero_spatial's cap (LeRobot's LIBERO config), Meta-World's (LeRobot's rollout limit), PushT's."""
PUSHT_EXEC = 8
"""PushT's policy: a Diffusion policy that executes 8 of its 16-step horizon (LeRobot's default)."""


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
        elif env_type == "metaworld":
            ref = lerobot_eval(folder, n, batch, seed=seed, env_type="metaworld", task=METAWORLD_TASK,
                               max_episode_steps=steps, use_async_envs=use_async)
        else:
            ref = lerobot_eval(folder, n, batch, seed=seed, env_type="libero", task=task, task_ids=[0],
                               episode_length=steps, observation_height=size, observation_width=size,
                               use_async_envs=use_async)
    finally:
        torch.set_num_threads(threads)
    return {"eval_s": ref["eval_s"], "wall_s": time.perf_counter() - start, "load_before": load, "load_after": _load(),
            "episodes": [{k: r[k] for k in KEYS} for r in ref["per_episode"]]}


def fasteval_row(folder: Path, n: int, batch: int, steps: int, size: int, seed: int, task: str, vectorization: str,
                 workers: int | None, skip: bool = True, env_type: str = "libero", policy_block: int | None = None,
                 model_reuse: bool = False) -> dict[str, Any]:
    """One fasteval run. ``policy_block`` ``None`` is ``batch``, what LeRobot's flags run (``--env.type=libero``: the
    policy's block is ``-b``, lerobot-eval's rounding); ``model_reuse`` sets ``FASTEVAL_MODEL_REUSE=1`` (LIBERO)."""
    from fasteval import evaluate
    from fasteval.core.unread import OFF_VARIABLE
    from fasteval.robot.env_kinds.model_reuse import ON_VARIABLE
    from fasteval.robot.lerobot.envs import ENV_REF

    if env_type == "pusht":
        from fasteval.robot.fast_envs import FAST_PUSHT

        env, kwargs, cap = FAST_PUSHT, {"obs_type": "pixels_agent_pos", "render_mode": "rgb_array"}, steps
    elif env_type == "metaworld":
        env, kwargs, cap = ENV_REF, {"type": "metaworld", "task": METAWORLD_TASK}, steps
    else:
        env, cap = ENV_REF, None
        kwargs = {"type": "libero", "task": task, "task_id": 0, "episode_length": steps, "observation_height": size,
                  "observation_width": size}
    old = os.environ.pop(OFF_VARIABLE, None)
    old_reuse = os.environ.pop(ON_VARIABLE, None)
    if not skip:
        os.environ[OFF_VARIABLE] = "1"
    if model_reuse:
        os.environ[ON_VARIABLE] = "1"
    load, start = _load(), time.perf_counter()
    try:
        # PushT's Diffusion draws LeRobot's global-RNG noise in LeRobot's waves: the same episodes as lerobot-eval's
        stochastic = {"noise": "global", "reset_mode": "wave"} if env_type == "pusht" else {}
        result = evaluate(env=env, env_kwargs=kwargs, policy=str(folder), n_episodes=n, batch_size=batch, seed=seed,
                          device="cpu", vectorization=vectorization, workers=workers, cpu_threads=1, max_steps=cap,
                          policy_block=batch if policy_block is None else policy_block, **stochastic)
    finally:
        os.environ.pop(OFF_VARIABLE, None)
        os.environ.pop(ON_VARIABLE, None)
        if old is not None:
            os.environ[OFF_VARIABLE] = old
        if old_reuse is not None:
            os.environ[ON_VARIABLE] = old_reuse
    return {"eval_s": result.eval_s, "wall_s": time.perf_counter() - start, "load_before": load, "load_after": _load(),
            "timings": dict(result.timings), "workers": workers, "protocol": result.meta.get("protocol"),
            "unread_observations": result.meta.get("unread_observations"),
            "reset_reuse": result.meta.get("reset_reuse"), "gl_renderers": result.meta.get("gl_renderers"),
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


def probe_env(env_type: str, steps: int, size: int, task: str):
    """One env of ``env_type`` as fasteval builds it (LIBERO and Meta-World through LeRobot's env types, PushT fasteval's
    fast PushT), with its declared unread step (``None`` where it has none; for LIBERO its settle steps render only the
    last frame too)."""
    from fasteval.core.envs import EnvFactory
    from fasteval.robot.env_kinds import ENV_KINDS
    from fasteval.robot.lerobot.envs import ENV_REF

    if env_type == "pusht":
        from fasteval.robot.fast_envs import FAST_PUSHT

        factory = EnvFactory(FAST_PUSHT, {"obs_type": "pixels_agent_pos", "render_mode": "rgb_array"}, kinds=ENV_KINDS)
    elif env_type == "metaworld":
        factory = EnvFactory(ENV_REF, {"type": "metaworld", "task": METAWORLD_TASK}, kinds=ENV_KINDS)
    else:
        factory = EnvFactory(ENV_REF, {"type": "libero", "task": task, "task_id": 0, "episode_length": steps,
                                       "observation_height": size, "observation_width": size}, kinds=ENV_KINDS)
    env = factory()
    return env, ENV_KINDS.unread_step(env)


def breakdown(env_type: str, steps: int, size: int, task: str, seed: int, n_resets: int, n_steps: int) -> dict[str, Any]:
    """Per-operation costs of one env in this process, as fasteval runs it: its first reset (it builds the env), its
    later resets (mean of ``n_resets``), a step whose observation is read (physics and the renders) and one that is
    not (physics alone, where the kind can skip: else ``None``), each the mean of ``n_steps`` (zero actions)."""
    import numpy as np

    env, unread = probe_env(env_type, steps, size, task)
    try:
        action = np.zeros(env.action_space.shape, dtype=env.action_space.dtype)
        t = time.perf_counter()
        env.reset(seed=seed)
        first = time.perf_counter() - t
        resets = []
        for i in range(max(1, n_resets)):
            t = time.perf_counter()
            env.reset(seed=seed + 1 + i)
            resets.append(time.perf_counter() - t)
        read = []
        for _ in range(max(1, n_steps)):
            t = time.perf_counter()
            env.step(action)
            read.append(time.perf_counter() - t)
        skipped = []
        for _ in range(max(1, n_steps) if unread is not None else 0):
            t = time.perf_counter()
            unread(action)
            skipped.append(time.perf_counter() - t)
    finally:
        env.close()
    out = {"first_reset_s": first, "reset_s": sum(resets) / len(resets), "read_step_s": sum(read) / len(read),
           "unread_step_s": sum(skipped) / len(skipped) if skipped else None}
    out["render_per_read_s"] = (max(out["read_step_s"] - out["unread_step_s"], 0.0)
                                if out["unread_step_s"] is not None else None)
    return out


def where_time_goes(row: dict[str, Any], costs: dict[str, Any], n: int, steps: int, k: int,
                    batch: int) -> dict[str, float]:
    """The fasteval sync row's time split by what it did, from :func:`breakdown`'s per-operation costs: ``resets``
    (n episodes' resets: the first of each of the ``min(batch, n)`` envs builds it), ``physics`` (every step without its frames; every step with them where the env cannot
    skip), ``renders of reads`` (one frame set per ``k`` steps), ``policy`` (the row's own timer), ``other`` (what
    the model does not explain: bookkeeping, transfers, first builds, the model's error)."""
    import math

    physics_step = costs["unread_step_s"] if costs["unread_step_s"] is not None else costs["read_step_s"]
    reads = n * math.ceil(steps / max(1, k)) if costs["render_per_read_s"] is not None else 0
    built = min(max(1, batch), n)
    resets = built * costs["first_reset_s"] + (n - built) * costs["reset_s"]
    parts = {"resets": resets, "physics": n * steps * physics_step,
             "renders of reads": reads * (costs["render_per_read_s"] or 0.0),
             "policy": float(row.get("timings", {}).get("policy", 0.0))}
    parts["other"] = float(row["eval_s"]) - sum(parts.values())
    return parts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--steps", type=int, default=40, help="episode length (LIBERO's libero_spatial cap is 280)")
    parser.add_argument("--full", action="store_true",
                        help="full episode lengths: libero_spatial 280, Meta-World 500, PushT 300 (overrides --steps)")
    parser.add_argument("--size", type=int, default=128, help="camera image size (px)")
    parser.add_argument("--task", default="libero_spatial")
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--n-action-steps", default="1,10,50", help="ACT's n_action_steps, one group of rows each")
    parser.add_argument("--metaworld", action="store_true", help=f"add the same rows on Meta-World ({METAWORLD_TASK})")
    parser.add_argument("--pusht", action="store_true", help="add rows on PushT (Diffusion executing 8 of 16)")
    parser.add_argument("--no-libero", action="store_true", help="leave LIBERO out (Meta-World / PushT alone)")
    parser.add_argument("--no-skip-off", action="store_true", help="leave out the 'fasteval sync, skip off' rows")
    parser.add_argument("--workers", type=int, default=None, help="fasteval pool workers [default: usable cores]")
    parser.add_argument("--policy-block", default="batch",
                        help="fasteval's --policy-block: 'batch' (default: what LeRobot's flags run, lerobot-eval's "
                             "rounding), or R rows (16: the library's default; a batch of 2 then pays for 16 rows)")
    parser.add_argument("--model-reuse", action="store_true",
                        help="add LIBERO rows with FASTEVAL_MODEL_REUSE=1 (the compiled model reused across hard resets)")
    parser.add_argument("--lerobot-async", action="store_true", help="add lerobot-eval with its async vector env")
    parser.add_argument("--skip-lerobot", action="store_true")
    parser.add_argument("--repeats", type=int, default=1, help="rows interleaved per repeat; medians reported")
    parser.add_argument("--breakdown-steps", type=int, default=10,
                        help="steps (and resets: a third of them, at least 2) timed per env for the time breakdown")
    parser.add_argument("--tiny", action="store_true", help="1 episode x 3 steps at 32 px, n_action_steps 2 (tests)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.tiny:
        args.episodes, args.batch, args.steps, args.size, args.n_action_steps = 1, 1, 3, 32, "2"
        args.breakdown_steps, args.full = 2, False
    exec_steps = sorted({int(x) for x in str(args.n_action_steps).split(",") if x.strip()})
    policy_block = None if args.policy_block == "batch" else int(args.policy_block)
    from fasteval.robot.env_kinds.headless import ensure_headless_gl
    from fasteval.robot.lerobot.libero import prepare_libero
    from fasteval.robot.lerobot.testing import (write_diffusion_checkpoint, write_libero_act_checkpoint,
                                                write_metaworld_act_checkpoint)

    ensure_headless_gl()
    prepare_libero()
    info = machine_info()
    usable = int(info.get("usable_cores") or os.cpu_count() or 1)
    workers = args.workers or max(1, min(args.batch, usable))
    n, b, size, seed = args.episodes, args.batch, args.size, args.seed
    chunk = max(exec_steps)
    envs = ([] if args.no_libero else ["libero"]) + (["metaworld"] if args.metaworld else []) + (
        ["pusht"] if args.pusht else [])
    steps_of = {e: FULL_STEPS[e] if args.full else args.steps for e in envs}
    groups = [(e, k) for e in envs for k in ([PUSHT_EXEC] if e == "pusht" else exec_steps)]
    runs: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folders = {}
        for env_type, k in groups:
            where = Path(tmp) / f"policy_{env_type}_{k}"
            if env_type == "libero":
                folders[env_type, k] = write_libero_act_checkpoint(where, seed=0, image_size=size, chunk_size=chunk,
                                                                   n_action_steps=k)
            elif env_type == "metaworld":
                folders[env_type, k] = write_metaworld_act_checkpoint(where, seed=0, chunk_size=chunk, n_action_steps=k)
            else:
                folders[env_type, k] = write_diffusion_checkpoint(where, seed=0)  # horizon 16, executes 8
        for _ in range(max(1, args.repeats)):  # rows interleaved: background load hits every row alike
            for (env_type, k), folder in folders.items():
                tag = f" [{env_type}, n_action_steps {k}]"
                common = (folder, n, b, steps_of[env_type], size, seed, args.task)
                if not args.skip_lerobot:
                    runs.setdefault("lerobot-eval sync" + tag, []).append(
                        lerobot_row(*common, False, env_type=env_type))
                block = {"policy_block": policy_block}
                runs.setdefault("fasteval sync" + tag, []).append(
                    fasteval_row(*common, "sync", None, env_type=env_type, **block))
                if not args.no_skip_off:
                    runs.setdefault("fasteval sync, skip off" + tag, []).append(
                        fasteval_row(*common, "sync", None, skip=False, env_type=env_type, **block))
                runs.setdefault(f"fasteval pool ({workers} workers)" + tag, []).append(
                    fasteval_row(*common, "async", workers, env_type=env_type, **block))
                if args.model_reuse and env_type == "libero":
                    runs.setdefault("fasteval sync, model reuse" + tag, []).append(
                        fasteval_row(*common, "sync", None, env_type=env_type, model_reuse=True, **block))
                    runs.setdefault(f"fasteval pool ({workers} workers), model reuse" + tag, []).append(
                        fasteval_row(*common, "async", workers, env_type=env_type, model_reuse=True, **block))
                if args.lerobot_async and not args.skip_lerobot:
                    try:
                        row = lerobot_row(*common, True, env_type=env_type)
                    except Exception as exc:  # noqa: BLE001 -- a peer that cannot run is reported, not fatal
                        row = {"error": f"{type(exc).__name__}: {exc}"}
                    runs.setdefault("lerobot-eval async" + tag, []).append(row)
    rows = {name: median_row(repeats) for name, repeats in runs.items()}
    costs = {e: breakdown(e, steps_of[e], size, args.task, seed, max(2, args.breakdown_steps // 3), args.breakdown_steps)
             for e in envs}

    lp = os.environ.get("LP_NUM_THREADS", "unset (llvmpipe: one thread per core)")
    policies = {"libero": "random ACT", "metaworld": "random ACT", "pusht": "random Diffusion (executes 8 of 16)"}
    block_text = policy_block or f"{args.batch} rows (-b)"
    print(f"## bench_libero: {', '.join(f'{e} ({policies[e]}, {steps_of[e]} steps)' for e in envs)}; LIBERO "
          f"{args.task} task 0 ({size} px, two cameras), Meta-World {METAWORLD_TASK}; {n} episodes, batch {b}, "
          f"n_action_steps {', '.join(map(str, exec_steps))} (ACT chunk {chunk}), MUJOCO_GL={os.environ.get('MUJOCO_GL')}, "
          f"LP_NUM_THREADS {lp}, fasteval's policy block {block_text}, {max(1, args.repeats)} repeats (medians)\n")
    print(format_machine(info) + "\n")
    print("| row | eval s (median) | repeats | wall s | s per env step | vs lerobot-eval sync | unread frames | "
          "load before | load after |")
    print("|---|---:|---|---:|---:|---:|---|---|---|")
    for name, row in rows.items():
        if "error" in row:
            print(f"| {name} | failed: {row['error'][:120]} | | | | | | | |")
            continue
        env_steps = n * steps_of[group_of(name)[2:].split(",")[0]]
        base = rows.get("lerobot-eval sync" + group_of(name), {}).get("eval_s")
        vs = f"{base / row['eval_s']:.2f}x" if base else "n/a"
        reps = ", ".join(f"{t:.1f}" for t in row.get("eval_s_repeats", [row["eval_s"]]))
        print(f"| {name} | {row['eval_s']:.1f} | {reps} | {row['wall_s']:.1f} | {row['eval_s'] / env_steps:.3f} | {vs} | "
              f"{row.get('unread_observations', 'rendered')} | {row['load_before']} | {row['load_after']} |")
    print("\n### where the time goes (fasteval sync rows: per-operation costs measured on one env in this process)\n")
    for e, c in costs.items():
        unread = "n/a (renders every step)" if c["unread_step_s"] is None else f"{c['unread_step_s']:.4f} s"
        print(f"- {e}: first reset {c['first_reset_s']:.2f} s (builds the env), later resets {c['reset_s']:.2f} s, "
              f"step read {c['read_step_s']:.4f} s, step unread {unread}")
    print("\n| row | eval s | resets | physics | renders of reads | policy | other |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    split: dict[str, dict[str, float]] = {}
    for (env_type, k) in groups:
        name = f"fasteval sync [{env_type}, n_action_steps {k}]"
        if name not in rows or "error" in rows[name]:
            continue
        split[name] = parts = where_time_goes(rows[name], costs[env_type], n, steps_of[env_type], k, b)
        print(f"| {name} | {rows[name]['eval_s']:.1f} | " + " | ".join(f"{v:.1f}" for v in parts.values()) + " |")
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
        write_json(args.json, {"machine": info, "task": args.task, "episodes": n, "batch": b, "steps": steps_of,
                               "size": size, "workers": workers, "n_action_steps": exec_steps, "rows": rows,
                               "costs": costs, "where_time_goes": split,
                               "projected_s": {g: {str(k): v for k, v in p.items()} for g, p in projected.items()},
                               "problems": found})
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
