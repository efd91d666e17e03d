"""CartPole-v1 throughput: fasteval vs the classic static-batch loop vs the limits (issue 2).

Usage::

    python benchmarks/bench_cartpole.py [--episodes 2000] [--batch-sizes 1,16,256] [--repeats 3]
                                        [--policies zero,demo[,random]] [--json FILE] [--profile]
                                        [--no-cli] [--strict] [--tiny]

In one process, for the ``zero`` policy and the demo MLP (``src/fasteval/assets/cartpole_mlp``;
a freshly initialised ``MLPPolicy(4, 2)`` if that checkpoint is missing) and each batch size b:

* ``fasteval``: ``Evaluator(env, policy, batch_size=b, device="cpu")``, built and warmed up
  untimed, then ``evaluate(n_episodes=N, seed=0)``; engine time (``eval_s``) and wall time;
* ``classic loop``: ``classic_loop.classic_eval`` (LeRobot-style static batches, default
  autoreset, ``ceil(N / b)`` batches); its env is built untimed;
* ``env only``: b ``gym.make("CartPole-v1")`` envs stepped in a tight Python loop with
  per-slot seeded resets, replaying each episode's actions (recorded once, untimed), so it
  takes exactly fasteval's steps and resets (checked: same episode lengths);
* ``policy only``: forward passes at batch b on a fixed observation tensor (rows/s);
* ``sequential limit``: ``1 / (1 / env_only_rate + 1 / policy_only_rate)`` steps/s.

Repeats are the outer loop (rows interleaved, so machine noise hits every row alike);
the table shows medians. Then the issue's three targets are checked and printed as
PASS/FAIL lines, and (``--profile``) fasteval is profiled at batch 16 and 256.
The script exits 0 unless ``--strict`` is given and a target fails.
"""

from __future__ import annotations

import argparse
import cProfile
import inspect
import io
import math
import os
import pstats
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import fasteval  # noqa: E402
from fasteval.robot.policies import MLPPolicy, RandomPolicy, ZeroPolicy, load_checkpoint  # noqa: E402
from fasteval.robot.policies.checkpoint import is_checkpoint_dir  # noqa: E402

from classic_loop import classic_eval, make_vector_env  # noqa: E402
from common import (  # noqa: E402
    Samples, calls_per_budget, check_line, env_only_replay, command_line, fmt_num, format_machine, machine_info,
    markdown_table, timed, write_json,
)

ENV_ID = "CartPole-v1"
DEMO_PATH = Path(fasteval.__file__).resolve().parent / "assets" / "cartpole_mlp"
ENV_ONLY_TARGET = 1.25     # zero policy, b=16: eval_s <= 1.25 x env-only time
LIMIT_TARGET = 0.8         # demo policy, b>=16: fasteval >= 0.8 x sequential limit
CLASSIC_TARGET = 2.0       # demo policy, b>=16: fasteval >= 2 x classic loop
CLI_TARGET_S = 3.0


# -- policies ----------------------------------------------------------------------------------
def load_demo_policy() -> tuple[torch.nn.Module, str]:
    """The trained demo MLP, or a freshly initialised MLPPolicy(4, 2) if the checkpoint is missing."""
    if is_checkpoint_dir(DEMO_PATH):
        return load_checkpoint(DEMO_PATH).eval(), f"demo MLP checkpoint {DEMO_PATH.relative_to(DEMO_PATH.parents[3])}"
    torch.manual_seed(0)
    return MLPPolicy(4, 2).eval(), (
        f"UNTRAINED MLPPolicy(4, 2) (torch.manual_seed(0)) -- {DEMO_PATH.name} checkpoint not found at {DEMO_PATH}"
    )


def policy_object(policy: Any, action_space: gym.Space, b: int) -> Any:
    """The object fasteval builds for ``policy`` at batch ``b``: a live module as it is, ``None`` ->
    fasteval's ``ZeroPolicy``, ``"random"`` -> fasteval's ``RandomPolicy``."""
    if policy is None:
        return ZeroPolicy(action_space, b)
    if isinstance(policy, str):
        return {"random": RandomPolicy, "zero": ZeroPolicy}[policy](action_space, b)
    return policy


class Case:
    """Everything for one (policy, batch size): a warmed-up Evaluator, the classic loop's vector
    env and a policy object for it, and the env-only envs."""

    def __init__(self, policy_name: str, demo: torch.nn.Module | None, b: int, n: int, env_only_envs: list[gym.Env]):
        self.policy_name, self.b, self.n = policy_name, b, n
        spec_policy = "zero" if demo is None else demo  # "zero" / "random": fasteval builds its own
        self.evaluator = fasteval.Evaluator(env=ENV_ID, policy=spec_policy, batch_size=b, device="cpu")
        self.evaluator.evaluate(n_episodes=min(b, 4) if b > 1 else 2, seed=10_000_000)  # build + dry run + warm-up
        self.classic_env = make_vector_env(ENV_ID, b)
        # The same policy object fasteval runs: the live module, or fasteval's own ZeroPolicy.
        self.classic_policy = policy_object(demo, self.classic_env.single_action_space, b)
        classic_eval(self.classic_env, self.classic_policy, min(b, 2), start_seed=10_000_000)  # warm-up
        self.env_only_envs = env_only_envs
        self.lengths: np.ndarray | None = None
        self.result = None
        self.classic = None

    def close(self) -> None:
        self.evaluator.close()
        self.classic_env.close()


# -- the limit rows ----------------------------------------------------------------------------
def record_actions(policy: Any, n: int, seed: int, b: int = 256) -> list[list[int]]:
    """Each episode's actions under ``policy`` (untimed), for the env-only replay.

    A plain continuous-batching loop over ``b`` envs: episode ``i`` is reset with seed
    ``seed + i``; the policy sees the ``[b, 4]`` observation buffer every step.
    """
    call = policy.select_action if hasattr(policy, "select_action") else policy
    b = min(b, n)
    envs = [gym.make(ENV_ID) for _ in range(b)]
    obs_buf = np.zeros((b, 4), dtype=np.float32)
    obs_t = torch.from_numpy(obs_buf)
    actions: list[list[int]] = [[] for _ in range(n)]
    slot_ep = [-1] * b
    next_ep = 0
    reset = _per_env_reset(policy)
    for slot in range(b):
        obs_buf[slot], _ = envs[slot].reset(seed=seed + next_ep)
        reset(slot, seed + next_ep)
        slot_ep[slot] = next_ep
        next_ep += 1
    with torch.inference_mode():
        while any(ep >= 0 for ep in slot_ep):
            out = call(obs_t)
            if out.is_floating_point():  # logits
                out = out.argmax(-1)
            acts = out.reshape(-1)[:b].tolist() if out.numel() >= b else [int(out.reshape(-1)[0])] * b
            for slot in range(b):
                ep = slot_ep[slot]
                if ep < 0:
                    continue
                obs, _r, term, trunc, _ = envs[slot].step(acts[slot])
                obs_buf[slot] = obs
                actions[ep].append(acts[slot])
                if term or trunc:
                    if next_ep < n:
                        obs_buf[slot], _ = envs[slot].reset(seed=seed + next_ep)
                        reset(slot, seed + next_ep)
                        slot_ep[slot] = next_ep
                        next_ep += 1
                    else:
                        slot_ep[slot] = -1
    for e in envs:
        e.close()
    return actions


def _per_env_reset(policy: Any):
    """``(slot, seed) -> None`` resetting one slot of a per-env policy (``reset(env_ids[, seeds])``)."""
    from fasteval.core.capabilities import Resettable

    if not isinstance(policy, Resettable):
        return lambda slot, seed: None
    fn = policy.reset
    params = inspect.signature(fn).parameters
    if not params:
        raise ValueError("record_actions supports stateless policies and per-env reset(env_ids[, seeds]) only")
    if "seeds" in params:
        return lambda slot, seed: fn(torch.tensor([slot]), seeds=[seed])
    return lambda slot, seed: fn(torch.tensor([slot]))


def policy_only_rate(policy: Any, b: int, budget_s: float) -> float:
    """Rows per second of ``policy`` forward passes at batch ``b`` (inference mode, CPU)."""
    call = policy.select_action if hasattr(policy, "select_action") else policy
    obs = torch.from_numpy(np.random.default_rng(0).standard_normal((b, 4)).astype(np.float32))
    with torch.inference_mode():
        for _ in range(20):
            call(obs)
        calls, seconds = calls_per_budget(lambda: call(obs), budget_s)
    return b * calls / seconds


# -- CLI start-up ------------------------------------------------------------------------------
def cli_command() -> tuple[list[str], str]:
    exe = shutil.which("fasteval")
    if exe:
        return [exe], exe
    local = Path(sys.executable).parent / "fasteval"
    if local.exists():
        return [str(local)], str(local)
    return [sys.executable, "-c", "from fasteval.doors.cli import main; main()"], "python -c 'from fasteval.doors.cli import main; main()'"


def cli_startup(repeats: int = 3, breakdown: bool = False) -> dict[str, Any]:
    """Median seconds from launching ``fasteval --env CartPole-v1 -n 1 -b 1 -o <tmp>`` to its end."""
    cmd, shown = cli_command()
    out: dict[str, Any] = {"command": f"{shown} --env {ENV_ID} -n 1 -b 1 -o <tmp>"}
    with tempfile.TemporaryDirectory() as tmp:
        args = [*cmd, "--env", ENV_ID, "-n", "1", "-b", "1", "-o", tmp]
        env = dict(os.environ)
        proc = subprocess.run(args, capture_output=True, text=True, env=env)  # warm caches, untimed
        if proc.returncode != 0:
            out.update(ok=False, error=proc.stderr[-2000:], seconds=float("nan"), samples=[])
            return out
        samples = []
        for _ in range(repeats):
            t, proc = timed(lambda: subprocess.run(args, capture_output=True, text=True, env=env))
            samples.append(t)
        out.update(ok=True, samples=samples, seconds=statistics.median(samples))
        # Reference points: a bare interpreter and `import torch` alone.
        out["python_s"] = statistics.median(timed(lambda: subprocess.run([sys.executable, "-c", "pass"]))[0] for _ in range(3))
        out["import_torch_s"] = statistics.median(
            timed(lambda: subprocess.run([sys.executable, "-c", "import torch"]))[0] for _ in range(3))
        if breakdown or out["seconds"] >= CLI_TARGET_S:
            out["importtime_top"] = importtime_breakdown(tmp)
    return out


def importtime_breakdown(tmp: str, top: int = 15) -> list[tuple[str, float]]:
    """Top imports by cumulative time of the CLI run, from ``python -X importtime``."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "from fasteval.doors.cli import main; main()",
         "--env", ENV_ID, "-n", "1", "-b", "1", "-o", tmp],
        capture_output=True, text=True,
    )
    rows = []
    for line in proc.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+)\s+\|\s+(\d+)\s+\|(\s*)(\S+)", line)
        if m and len(m.group(3)) <= 3:  # top-level packages only (indent of 1 or 2)
            rows.append((m.group(4), int(m.group(2)) / 1e6))
    rows.sort(key=lambda r: -r[1])
    return rows[:top]


# -- profile -----------------------------------------------------------------------------------
def profile_case(case: Case, n: int, top: int = 10) -> str:
    prof = cProfile.Profile()
    prof.enable()
    case.evaluator.evaluate(n_episodes=n, seed=0)
    prof.disable()
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf)
    stats.sort_stats("tottime").print_stats(top)
    text = buf.getvalue()
    # Keep the table part of pstats' output.
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip().startswith("ncalls")), 0)
    total = next((line.strip() for line in lines if "function calls" in line), "")
    return "\n".join([total, *lines[start:]]).rstrip()


# -- main --------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", "-n", type=int, default=2000)
    p.add_argument("--batch-sizes", default="1,16,256")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--policies", default="zero,demo",
                   help="comma list of zero, demo, random (random: fasteval's seeded RandomPolicy, an example with "
                        "widely varying episode lengths; not part of the targets)")
    p.add_argument("--torch-threads", type=int, default=None, help="torch.set_num_threads(N) first [default: torch's own]")
    p.add_argument("--json", dest="json_path", default=None, help="also write every number to this JSON file")
    p.add_argument("--profile", action="store_true", help="cProfile fasteval at batch 16 and 256 (top 10 by self time)")
    p.add_argument("--profile-episodes", type=int, default=200, help="episodes per profiled run")
    p.add_argument("--no-cli", action="store_true", help="skip the CLI start-up check")
    p.add_argument("--cli-breakdown", action="store_true", help="always show the -X importtime breakdown")
    p.add_argument("--policy-budget", type=float, default=0.3, help="seconds per policy-only measurement")
    p.add_argument("--strict", action="store_true", help="exit 1 if a target fails")
    p.add_argument("--tiny", action="store_true", help="smoke run: 8 episodes, batches 1,4, 1 repeat, no CLI check")
    args = p.parse_args(argv)
    if args.tiny:
        args.episodes, args.batch_sizes, args.repeats, args.no_cli = 8, "1,4", 1, True
        args.policy_budget = 0.02
    args.batches = [int(x) for x in str(args.batch_sizes).split(",") if x.strip()]
    args.policy_names = [x.strip() for x in str(args.policies).split(",") if x.strip()]
    if not set(args.policy_names) <= {"zero", "demo", "random"} or not args.policy_names:
        p.error("--policies: a comma list of zero, demo, random")
    if args.episodes < 1 or args.repeats < 1 or not args.batches or min(args.batches) < 1:
        p.error("--episodes, --repeats and every batch size must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    n = args.episodes
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    info = machine_info()
    demo, demo_desc = load_demo_policy()
    print(f"# CartPole (issue 2): fasteval vs classic loop vs limits\n\n{format_machine(info)}")
    print(f"- command: `{command_line()}`")
    print(f"- N = {n} episodes (seeds 0..{n - 1}), batch sizes {args.batches}, medians of {args.repeats} repeat(s)")
    print(f"- demo policy: {demo_desc}\n", flush=True)

    policies = [(pn, {"zero": None, "demo": demo, "random": "random"}[pn]) for pn in args.policy_names]
    env_only_envs = {b: [gym.make(ENV_ID) for _ in range(b)] for b in args.batches}
    cases = {(pn, b): Case(pn, pol, b, n, env_only_envs[b]) for b in args.batches for pn, pol in policies}
    S = Samples()
    t_start = time.perf_counter()
    replay_exact: dict[tuple[str, int], bool] = {}
    t_rec = time.perf_counter()
    space = gym.make(ENV_ID).action_space
    recorded = {pn: record_actions(policy_object(pol, space, max(args.batches)), n, seed=0, b=max(args.batches))
                for pn, pol in policies}
    print(f"recorded the policies' actions for the env-only replay ({time.perf_counter() - t_rec:.0f} s)", file=sys.stderr, flush=True)
    for rep in range(args.repeats):
        for b in args.batches:
            for pn, pol in policies:
                c = cases[(pn, b)]
                key = (pn, b)
                wall, res = timed(lambda: c.evaluator.evaluate(n_episodes=n, seed=0))
                o = res.overall()
                S.add(key + ("fasteval_eval_s",), o["eval_s"])
                S.add(key + ("fasteval_wall_s",), wall)
                for stage, sec in res.timings.items():
                    S.add(key + ("stage", stage), sec)
                if c.result is None:
                    c.result = res
                    c.lengths = res.column("length").astype(np.int64)
                t_classic, cres = timed(lambda: classic_eval(c.classic_env, c.classic_policy, n, start_seed=0))
                S.add(key + ("classic_s",), t_classic)
                c.classic = cres
                t_env, replay_lengths = env_only_replay(c.env_only_envs, recorded[pn], seed=0)
                S.add(key + ("env_only_s",), t_env)
                replay_exact[key] = replay_exact.get(key, True) and replay_lengths == c.lengths.tolist()
                S.add(key + ("policy_rows_s",), policy_only_rate(c.classic_policy, b, args.policy_budget))
        print(f"repeat {rep + 1}/{args.repeats} done ({time.perf_counter() - t_start:.0f} s)", file=sys.stderr, flush=True)

    # -- table -----------------------------------------------------------------------------------
    headers = ["policy", "b", "row", "time (s)", "episodes/s", "env steps", "env steps/s", "fasteval x", "avg return"]
    rows, records = [], []
    derived: dict[tuple[str, int], dict[str, float]] = {}
    for pn, _ in policies:
        for b in args.batches:
            c = cases[(pn, b)]
            key = (pn, b)
            o = c.result.overall()
            steps = int(o["env_steps"])
            fe = S.median(key + ("fasteval_eval_s",))
            fw = S.median(key + ("fasteval_wall_s",))
            cl = S.median(key + ("classic_s",))
            eo = S.median(key + ("env_only_s",))
            pr = S.median(key + ("policy_rows_s",))
            env_rate = steps / eo
            limit = 1.0 / (1.0 / env_rate + 1.0 / pr)
            fe_rate = steps / fe
            d = dict(steps=steps, eval_s=fe, wall_s=fw, classic_s=cl, env_only_s=eo, policy_rows_s=pr,
                     env_rate=env_rate, limit=limit, fe_rate=fe_rate, classic_steps=c.classic.env_steps,
                     ratio_env=_median_ratio(S, key, "fasteval_eval_s", "env_only_s"),
                     ratio_classic=_median_ratio(S, key, "classic_s", "fasteval_eval_s"))
            derived[key] = d
            fe_ret, cl_ret = o["avg_sum_reward"], c.classic.aggregated()["avg_sum_reward"]
            table = [
                ("fasteval (eval_s)", fe, n / fe, steps, fe_rate, 1.0, fe_ret),
                ("fasteval (wall)", fw, n / fw, steps, steps / fw, fw / fe, fe_ret),
                ("classic loop", cl, n / cl, c.classic.env_steps, c.classic.env_steps / cl, cl / fe, cl_ret),
                ("env only (limit)", eo, n / eo, steps, env_rate, fe_rate / env_rate, ""),
                ("policy only (rows/s)", "", "", "", pr, fe_rate / pr, ""),
                ("sequential limit", steps / limit, n * limit / steps, steps, limit, fe_rate / limit, ""),
            ]
            for row, t, eps, st, rate, ratio, ret in table:
                rows.append([pn, str(b), row, _f(t, 4), _f(eps), _f(st), _f(rate), _f(ratio, 3) + "x" if ratio != "" else "",
                             _f(ret, 4)])
                records.append(dict(policy=pn, batch_size=b, row=row, time_s=t, episodes_per_s=eps, env_steps=st,
                                    env_steps_per_s=rate, fasteval_x=ratio, avg_return=ret))
    print(markdown_table(headers, rows))
    print(
        "\n`fasteval x` = fasteval's throughput (engine time, eval_s) / the row's: > 1 means fasteval is faster. "
        "`env steps` is what each row simulated (the classic loop also steps finished envs until its batch ends, "
        "and the extra episodes of its last batch). `time` of the policy-only row is n/a; the sequential limit's "
        "time is the fasteval step count at the limit rate.\n"
    )

    # -- stage breakdown ---------------------------------------------------------------------------
    stage_names = list(cases[policies[0][0], args.batches[0]].result.timings)
    srows = []
    for pn, _ in policies:
        for b in args.batches:
            key = (pn, b)
            fe = derived[key]["eval_s"]
            vals = S.values(key + ("fasteval_eval_s",))
            cells = [pn, str(b), _f(fe, 4), f"{min(vals):.3g}-{max(vals):.3g}"]
            for st in stage_names:
                sec = S.median(key + ("stage", st))
                cells.append(f"{sec:.4f} ({100 * sec / fe:.0f}%)")
            cells.append(_f(derived[key]["env_only_s"], 4))
            srows.append(cells)
    print("fasteval stage times (s, median; share of eval_s), next to the env-only time for the same steps:\n")
    print(markdown_table(["policy", "b", "eval_s", "eval_s range", *stage_names, "env only"], srows))

    # -- returns / correctness -------------------------------------------------------------------
    print("\nReturns (fasteval vs classic loop, same seeds 0..N-1):")
    ret_notes = []
    for pn, _ in policies:
        for b in args.batches:
            c = cases[(pn, b)]
            fs, cs = c.result.column("sum_reward"), c.classic.sum_reward
            fm, cm = c.result.column("max_reward"), c.classic.max_reward
            n_sim = c.classic.n_simulated_episodes
            line = (f"- {pn}, b={b}: avg_sum_reward fasteval {fs.mean():.4f} / classic {cs.mean():.4f}; "
                    f"per-episode sums differ in {int((fs != cs).sum())}/{n}, maxes in {int((fm != cm).sum())}/{n}; "
                    f"classic simulated {n_sim} episodes ({n_sim - n} discarded) and {c.classic.env_steps} steps "
                    f"for {derived[(pn, b)]['steps']} useful ({c.classic.env_steps / derived[(pn, b)]['steps']:.2f}x)")
            line += ("; env-only replay took fasteval's exact episode lengths" if replay_exact[(pn, b)]
                     else "; WARNING: env-only replay lengths differ from fasteval's")
            print(line)
            ret_notes.append(line)
    neg = negative_reward_demo(min(64, max(8, n)), max(b for b in args.batches))
    print(neg)

    # -- targets ---------------------------------------------------------------------------------
    print("\n## Targets\n")
    checks = []
    if ("zero", 16) in derived:
        r = derived[("zero", 16)]["ratio_env"]
        checks.append(("zero policy, b=16: fasteval eval_s <= 1.25x env-only time (same steps)", r <= ENV_ONLY_TARGET,
                       f"eval_s / env-only = {r:.3f}x (median of per-repeat ratios)"))
    else:
        checks.append(("zero policy, b=16: fasteval eval_s <= 1.25x env-only time", None, "batch 16 not run"))
    big = [b for b in args.batches if b >= 16]
    for b in big:
        d = derived[("demo", b)]
        checks.append((f"demo policy, b={b}: fasteval >= 0.8x sequential limit", d["fe_rate"] >= LIMIT_TARGET * d["limit"],
                       f"{d['fe_rate']:.0f} vs limit {d['limit']:.0f} steps/s = {d['fe_rate'] / d['limit']:.3f}x"))
        checks.append((f"demo policy, b={b}: fasteval >= 2x classic loop", d["ratio_classic"] >= CLASSIC_TARGET,
                       f"classic time / fasteval eval_s = {d['ratio_classic']:.2f}x (median of per-repeat ratios)"))
    if not big:
        checks.append(("demo policy, b>=16: >= 0.8x sequential limit and >= 2x classic", None, "no batch >= 16 run"))
    cli = None
    if args.no_cli:
        checks.append(("CLI start-up < 3 s", None, "skipped (--no-cli)"))
    else:
        cli = cli_startup(3, breakdown=args.cli_breakdown)
        if not cli["ok"]:
            checks.append(("CLI start-up < 3 s", False, f"the CLI failed: {cli['error']}"))
        else:
            checks.append(("CLI start-up < 3 s", cli["seconds"] < CLI_TARGET_S,
                           f"median {cli['seconds']:.2f} s of {', '.join(f'{s:.2f}' for s in cli['samples'])} "
                           f"(`{cli['command']}`; bare python {cli['python_s']:.2f} s, python -c 'import torch' "
                           f"{cli['import_torch_s']:.2f} s)"))
    lines = [check_line(*c) for c in checks]
    print("\n".join(lines))
    if cli and cli.get("importtime_top"):
        print("\n-X importtime, top-level imports by cumulative time:")
        for name, sec in cli["importtime_top"]:
            print(f"  {sec:7.3f} s  {name}")

    # -- profile ---------------------------------------------------------------------------------
    profiles = {}
    if args.profile:
        pn_ep = min(args.profile_episodes, n)
        for pn, _ in policies:
            for b in (16, 256):
                if (pn, b) not in cases:
                    continue
                text = profile_case(cases[(pn, b)], pn_ep)
                profiles[f"{pn}|{b}"] = text
                print(f"\n## cProfile: fasteval, {pn} policy, b={b}, {pn_ep} episodes, top 10 by self time\n\n{text}")

    if args.json_path:
        write_json(args.json_path, {
            "machine": info, "command": command_line(), "episodes": n, "batch_sizes": args.batches,
            "repeats": args.repeats, "demo_policy": demo_desc, "table": records,
            "derived": {f"{k[0]}|{k[1]}": v for k, v in derived.items()}, "samples": S.to_dict(),
            "returns": ret_notes, "checks": [{"name": c[0], "ok": c[1], "detail": c[2]} for c in checks],
            "cli": cli, "profiles": profiles,
        })
        print(f"\nwrote {args.json_path}")
    for c in cases.values():
        c.close()
    for envs in env_only_envs.values():
        for e in envs:
            e.close()
    failed = any(c[1] is False for c in checks)
    return 1 if (failed and args.strict) else 0


def _median_ratio(S: Samples, key: tuple, num: str, den: str) -> float:
    a, b = S.values(key + (num,)), S.values(key + (den,))
    return statistics.median(x / y for x, y in zip(a, b))


def _f(value: Any, digits: int = 3) -> str:
    if value == "" or value is None:
        return ""
    if isinstance(value, float) and math.isnan(value):
        return "n/a"
    if isinstance(value, float) and abs(value) < 100:
        return f"{value:.{digits}g}" if abs(value) >= 1 else f"{value:.{digits}f}"
    return fmt_num(value)


def negative_reward_demo(n: int, b: int) -> str:
    """The zero-fill / off-by-one bias made visible: CartPole with reward -1 per step."""
    def make():
        return gym.wrappers.TransformReward(gym.make(ENV_ID), lambda r: r - 2.0)

    venv = gym.vector.SyncVectorEnv([make for _ in range(b)])
    policy = ZeroPolicy(venv.single_action_space, b)
    cres = classic_eval(venv, policy, n)
    venv.close()
    # fasteval on the same env: register a throwaway id for the wrapped env.
    env_id = "fasteval_bench/CartPoleMinusOne-v0"
    if env_id not in gym.registry:
        gym.register(id=env_id, entry_point=make)
    fe = fasteval.evaluate(env=env_id, policy="zero", n_episodes=n, batch_size=b, device="cpu")
    o = fe.overall()
    return (f"- bias demo (CartPole with reward -1 per step, zero policy, {n} episodes, b={b}): avg_max_reward "
            f"fasteval {o['avg_max_reward']:.3f} / classic {cres.aggregated()['avg_max_reward']:.3f} (the classic max is "
            f"taken over a zero-filled row, so episodes shorter than their batch report 0); avg_sum_reward "
            f"{o['avg_sum_reward']:.3f} / {cres.aggregated()['avg_sum_reward']:.3f} (the extra step past the end is "
            f"gymnasium's autoreset step, reward 0, so sums agree)")


if __name__ == "__main__":
    sys.exit(main())
