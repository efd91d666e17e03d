"""The ``fasteval`` command: parse options into an EvalSpec, run the engine, print, exit.

Exit codes:
  0  the evaluation ran and every requested episode is reported;
  1  the evaluation failed while running (an env or the policy raised mid-run);
  2  bad input: unknown env id or option value, an unusable path (NUL byte, empty, a folder
     below a file), unloadable policy, action shape mismatch, a policy that raises on its dry
     run, a --resume whose options differ from the run's. Nothing was evaluated, and nothing
     was written to the output folder. Also bad input that shows only once episodes have run
     (a success-rate --stop-when rule on an env that reports no success): the finished episodes
     are kept in the output folder.

``fasteval --help`` imports neither torch nor the engine: subcommands are listed from
:data:`SUBCOMMAND_HELP` and imported on use, and a run imports the engine when it starts.
"""

from __future__ import annotations

if __name__ == "__main__":  # `python -m fasteval.doors.cli` runs as the console script (fasteval.doors.entry), so
    import runpy  # a Ctrl-C during the imports below is one line and exit 130: entry imports this module under its

    runpy.run_module("fasteval.doors.entry", run_name="__main__")  # guard and runs it (it exits); run, not imported:
    raise SystemExit(0)  # the one import edge stays entry -> cli

import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import click

from fasteval.doors.backend_options import OPTION_NAMES as BACKEND_OPTION_NAMES, backend_options, pop_backend
from fasteval.doors.click_types import BATCH_BLOCK, DEVICE, PolicyBlock
from fasteval.doors.file_options import FileOptions, file_options
from fasteval.doors.help_sections import Section, SectionedHelp
from fasteval.doors.lerobot_options import FASTEVAL, LEROBOT
from fasteval.render.words import plural, rate_text
from fasteval.robot.env_names import summary_name
from fasteval.run.paths import UsablePath, path_problem
from fasteval.types.metric_bounds import RANK_METRICS
from fasteval.types.spec import (AMP_MODES, DESIGNS, EXPLORATIONS, NOISE_MODES, OBS_DTYPES, OBSERVATION_FORMATS, ON_NAN_ACTIONS,
                                 RESET_MODES, VECTORIZATIONS, VIDEO_LAYOUTS, VIDEO_SELECTIONS, EvalSpec)
from fasteval.types.spec import DEFAULT_POLICY_BLOCK

EXIT_OK, EXIT_RUNTIME_ERROR, EXIT_BAD_INPUT = 0, 1, 2
EXIT_SIGINT = 130  # 128 + SIGINT
DEFAULTS_KEY = "fasteval.defaults"
"""``ctx.meta`` key: which defaults the command line got (``lerobot`` or ``fasteval``)."""


def parse_env_kwargs(pairs: tuple[str, ...]) -> dict[str, Any]:
    """``("k=v", ...)`` -> dict; values are parsed as JSON where they parse, else kept as strings."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected key=value, got {pair!r}.", param_hint="--env-kwarg")
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        out[key.strip()] = value
    return out


def default_output_dir(env: str) -> Path:
    """``outputs/eval/<date>_<time>-<6 hex>_<env>``: sortable by start time, and unique (the random suffix),
    so that runs started in the same second without ``-o`` never share a folder."""
    import uuid

    from fasteval.types.files import safe_filename

    return Path("outputs") / "eval" / f"{time.strftime('%Y-%m-%d_%H-%M-%S')}-{uuid.uuid4().hex[:6]}_{safe_filename(env)}"


class _Progress:
    """tqdm bar on stderr: episodes done and what is known of them: the running success rate, or the
    mean return when the env reports no success signal (``signal()`` says, as the run goes); a race: remaining
    policies, leader, episodes counted. Off when stderr is not a TTY. ``steps`` (a
    :class:`fasteval.doors.progress.RunProgress`, set by :func:`run_one`) adds the env steps to the bar, or prints
    a line at a time where there is no bar."""

    def __init__(self, total: int, enabled: bool, signal: Callable[[], bool] = lambda: True, engine: Any = None):
        self.bar = None
        self.successes = 0
        self.sum_return = 0.0
        self.done = 0
        self.signal = signal
        self.engine = engine
        self.steps: Any = None
        self.race_type: type | None = None
        """:class:`fasteval.core.racing.RaceStop` where the engine may run a race (its stop rule is made later,
        by the run): the bar then shows the race's line."""
        if engine is not None and engine.spec.n_policies > 1:
            from fasteval.core.racing import RaceStop

            self.race_type = RaceStop
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="ep", file=sys.stderr, dynamic_ncols=True)

    def counts(self) -> tuple[int, int, float, bool]:
        return self.done, self.successes, self.sum_return, self.signal()

    def __call__(self, ledger: Any, episodes: Any) -> None:
        from fasteval.render.words import progress_outcome

        self.done += len(episodes)
        self.successes += int(ledger.success[episodes].sum())
        self.sum_return += float(ledger.sum_reward[episodes].sum())
        if self.steps is not None:
            self.steps.episodes_finished(int(ledger.length[episodes].sum()))
        if self.bar is None:
            return
        race = self.engine.stop_rule if self.race_type is not None else None
        if self.race_type is not None and isinstance(race, self.race_type):
            self.bar.set_postfix_str(race.progress()[6:], refresh=False)
        else:
            self.bar.set_postfix_str(progress_outcome(self.done, self.successes, self.sum_return, self.signal()),
                                     refresh=False)
        self.bar.update(len(episodes))

    def close(self) -> None:
        if self.steps is not None:
            self.steps.stop()
        if self.bar is not None:
            self.bar.close()


def format_success(agg: Mapping[str, Any], ci: bool = True) -> str:
    """``pc_success`` of an aggregate for the terminal, or why there is none."""
    if agg.get("n_episodes") == 0:  # no episode to read a signal from: not the env's lack of one
        return "none: no episode finished"
    if agg.get("pc_success") is None:
        return "no success signal (the env never reported info['is_success'])"
    if not ci:
        return f"{agg['pc_success']:.1f}%"
    lo, hi = agg["pc_success_ci95"]
    if agg.get("pc_success_ci95_fixed_n") is not None:  # the run stopped on its data: the anytime-valid interval
        return f"{agg['pc_success']:.1f}%  (95% anytime-valid CI {lo:.1f}-{hi:.1f}%, valid at the stop)"
    return f"{agg['pc_success']:.1f}%  (95% CI {lo:.1f}-{hi:.1f}%)"


def setup_row(result: Any) -> list[tuple[str, str]]:
    """The row that says what ``eval_s`` leaves out: the engine's set-up (envs built, env workers started, policy
    loaded: ``meta["setup_s"]``), when the record has it (issue 42: ``eval_s`` alone overstated a speed-up)."""
    setup = result.meta.get("setup_s")
    if not isinstance(setup, (int, float)) or setup <= 0:
        return []
    return [("setup_s", f"{setup:.3f}  (envs built, env workers started, policy loaded: not in eval_s)")]


def format_many_summary(result: Any, profile: bool, logged: int | None = None, log_file: Any = None) -> str:
    """The terminal summary of a many-policy run: the run's totals, then the ranking (and the race)."""
    from fasteval.render.ranking_text import format_ranking

    o = result.overall()
    rows = [("env", result.meta.get("env")), ("policies", f"{o['n_policies']} ({result.meta.get('policy_calls')})"),
            ("episodes", o["n_episodes"])]
    if logged is not None and logged < o["n_episodes"]:
        rows.append(("recorded", f"only {logged} of these {o['n_episodes']} episodes are in {log_file} (a write "
                                 f"failed); --resume runs the others again"))
    rows += [("env_steps", o["env_steps"]), ("eval_s", f"{o['eval_s']:.3f}"), *setup_row(result),
             ("episodes_per_s", rate_text(o["episodes_per_s"])), ("steps_per_s", rate_text(o["steps_per_s"]))]
    if profile:
        total = o["eval_s"] or 1.0
        for stage, seconds in result.timings.items():
            rows.append((f"  {stage}", f"{seconds:.4f} s ({100.0 * seconds / total:.1f}%)"))
    width = max(len(k) for k, _ in rows)
    head = "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
    return head + "\n" + format_ranking(result.ranking, result.race, result.verdict)


def format_summary(result: Any, profile: bool, logged: int | None = None, log_file: Any = None) -> str:
    """The terminal summary of a run's record; ``logged``: the episodes its ``log_file`` (``episodes.jsonl``)
    holds, said when fewer than the record's (a write failed)."""
    from fasteval.types.many_result import ManyPolicyResult

    if isinstance(result, ManyPolicyResult):
        return format_many_summary(result, profile, logged, log_file)
    o = result.overall()
    rows = [
        ("env", summary_name(result.meta.get("env"), result.per_episode.tasks, bool(result.meta.get("suite")))),
        ("policy", result.meta.get("policy")),
        ("episodes", o["n_episodes"]),
    ]
    if logged is not None and logged < o["n_episodes"]:
        rows.append(("recorded", f"only {logged} of these {o['n_episodes']} episodes are in {log_file} (a write "
                                 f"failed); --resume runs the others again"))
    rows += [
        ("avg_sum_reward", f"{o['avg_sum_reward']:.4f}"),
        ("avg_max_reward", f"{o['avg_max_reward']:.4f}"),
        ("pc_success", format_success(o)),
        ("avg_length", f"{o['avg_length']:.1f}"),
        ("env_steps", o["env_steps"]),
        ("eval_s", f"{o['eval_s']:.3f}"),
        *setup_row(result),
        ("episodes_per_s", rate_text(o["episodes_per_s"])),
        ("steps_per_s", rate_text(o["steps_per_s"])),
    ]
    from fasteval.core.slots import PER_EPISODE

    if result.meta.get("seeding", PER_EPISODE) != PER_EPISODE:  # a batched env: its workers, not its episodes, are seeded
        rows.append(("seeding", f"{result.meta['seeding']} (a batched env: episode i is not a function of seed + i)"))
    from fasteval.types.eval_result import RESUMED_GLOBAL_RNG

    if result.meta.get(RESUMED_GLOBAL_RNG):  # a resumed run of a policy on torch's global RNG
        rows.append(("noise", result.meta[RESUMED_GLOBAL_RNG]))
    if result.meta.get("guarantee"):  # bitwise per episode (conditions), or to rounding (why)
        rows.append(("guarantee", result.meta["guarantee"]))
    stop = result.meta.get("stopping")
    if stop:
        truncated = stop.get("design") == "truncated"
        what = (f"rule {stop['rule']} held at k = {stop['k']}" if stop["reason"] == "rule" else
                f"cap of {stop['cap']} reached, rule {stop['rule']} did not hold" if stop["reason"] == "cap" else
                f"at k = {stop['k']}: surely not {stop['decision'][4:]} {stop['threshold']:g} (the interval lies "
                f"wholly {'below' if stop['decision'] == 'not_above' else 'above'} it; a futility stop, no claim)"
                if stop["reason"] == "futility" and not truncated else
                f"at k = {stop['k']} for futility: rule {stop['rule']} is unlikely to hold by the cap (no claim)"
                if stop["reason"] == "futility" else f"rule {stop['rule']} not decided yet ({stop['reason']})")
        if truncated and stop.get("decision_bound"):
            what += f" ({stop['decision_bound']})"
        rows.append(("stopped", f"{what}; {int(round(stop['confidence'] * 100))}% anytime-valid interval "
                                f"{stop['cs_low']:.4f}-{stop['cs_high']:.4f}"
                                + ("  (wider than the design's test, which decided: it holds at any stop)"
                                   if truncated and stop["reason"] == "rule" else "")
                                + (f"; {stop['n_computed_past_stop']} episodes computed past the stop (not counted)"
                                   if stop.get("n_computed_past_stop") else "")))
        if stop.get("decided_by"):
            rows.append(("decided by", stop["decided_by"]))
    if o["n_nan_reward_episodes"]:
        rows.append(("NaN-reward episodes", f"{o['n_nan_reward_episodes']} (their returns are NaN)"))
    if profile:
        total = o["eval_s"] or 1.0
        rows.append(("cuda_graph", result.meta.get("policy_cuda_graph", "off")))  # captured | eager (reason) | off
        for stage, seconds in result.timings.items():
            rows.append((f"  {stage}", f"{seconds:.4f} s ({100.0 * seconds / total:.1f}%)"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


EVAL_OPTIONS = [
    click.option("--policy", "-p", multiple=True, default=("zero",), show_default=True,
                 help="zero | random | checkpoint folder (config.json + model.safetensors) | module:callable | "
                      "ws://HOST:PORT (fasteval serve) | openpi+ws://HOST:PORT (an openpi server). Repeat it, or give "
                      "a quoted glob ('outputs/train/act/checkpoints/*/pretrained_model'), to evaluate several "
                      "policies in one pass on the same episodes (a ranking; --stop-when best races them)."),
    click.option("--env", "-e", default="CartPole-v1", show_default=True,
                 help="gymnasium id (plugins: ns/Name-vN imports ns) or module:callable returning an Env."),
    click.option("--env-kwarg", "env_kwargs", multiple=True, metavar="KEY=VALUE",
                 help="Keyword argument for the env; repeatable; values parsed as JSON where they parse."),
    click.option("--n-episodes", "-n", type=click.IntRange(min=1), default=10, show_default=True,
                 help="Exactly this many episodes; episode i uses seed SEED + i."),
    click.option("--batch-size", "-b", type=click.IntRange(min=0), default=16, show_default=True,
                 help="Env slots stepped together (capped at N). 0: LeRobot's auto rule, min(floor(0.7 cores), N, 64)."),
    click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of episode 0."),
    click.option("--vectorization", type=click.Choice(VECTORIZATIONS), default="sync", show_default=True,
                 help="sync: envs in-process (best for cheap envs). async: a pool of worker processes, each "
                      "stepping a block of slots."),
    click.option("--workers", "workers", type=click.IntRange(min=1), default=None,
                 help="Env worker processes for --vectorization async (capped at the batch size) "
                      "[default: min(batch, usable cores)]."),
    click.option("--device", type=DEVICE, default="auto", show_default=True,
                 help="Policy device: cpu, cuda, cuda:N or auto (cuda when available)."),
    click.option("--max-steps", type=click.IntRange(min=1), default=None,
                 help="Step cap per episode [default: the env spec's max_episode_steps]."),
    click.option("--reset-mode", type=click.Choice(RESET_MODES), default="auto", show_default=True,
                 help="Stateful policies: per-env resets (continuous batching) or waves."),
    click.option("--trust-remote-code", is_flag=True,
                 help="Allow code for this run: path/to/file.py:callable policies and envs (runs that file), any "
                      "module:callable env, an env namespace that is not an installed gymnasium plugin (imports it), "
                      "and the code a --config file names. Only the command line can give it (docs/security.md)."),
    click.option("--pipeline", is_flag=True,
                 help="Double-buffer two slot groups (async envs step while the policy runs). Needs async, stateless policy."),
    click.option("--cuda-graph/--no-cuda-graph", "cuda_graph", default=None,
                 help="Capture the policy step in a CUDA graph [default: on where CUDA exists]."),
    click.option("--amp", type=click.Choice(AMP_MODES), default="none", show_default=True,
                 help="Autocast the policy (faster on tensor-core GPUs; slightly different numbers). auto: the "
                      "device's default autocast dtype (fp16 on CUDA, bf16 on CPU), as LeRobot's --policy.use_amp."),
    click.option("--compile", "compile_policy", is_flag=True, help="torch.compile the policy step (large policies)."),
    click.option("--stack-weights", "stack_weights", is_flag=True,
                 help="Several checkpoints of one architecture: run them as one vmap call over their stacked weights "
                      "(torch.func), instead of one call per policy, on CUDA; on a CPU, where it measured slower, the separate "
                      "calls are kept (FASTEVAL_STACK_WEIGHTS=stacked|separate|measure chooses; the choice is printed); "
                      "falls back (said in the meta) where a policy is not functional. Same results within the "
                      "rounding of batched matmuls."),
    click.option("--obs-format", "observation_format", type=click.Choice(OBSERVATION_FORMATS), default="raw", show_default=True,
                 help="raw: the env's observations. lerobot: observation.image(s)/state/environment_state keys, "
                      "images as float CHW in [0, 1] on the policy device."),
    click.option("--rename", "rename", multiple=True, metavar="KEY=NEW",
                 help="Rename an observation key on the way to the policy; repeatable (e.g. observation.images.top=observation.image)."),
    click.option("--policy-field", "policy_overrides", multiple=True, metavar="FIELD=VALUE",
                 help="Set a field of a LeRobot checkpoint's config before the policy is built, parsed by LeRobot's "
                      "config class (LeRobot's --policy.FIELD=VALUE, e.g. n_action_steps=10); repeatable."),
    click.option("--obs-dtype", "obs_dtype", type=click.Choice(OBS_DTYPES), default="auto", show_default=True,
                 help="dtype of float observations for the policy: auto = the policy's parameter dtype "
                      "(nn.Module policies; else as the env gives them), float32, float64, or keep (no cast)."),
    click.option("--policy-block", "policy_block", type=PolicyBlock(), default=str(DEFAULT_POLICY_BLOCK),
                 show_default=True, metavar="R|batch|0",
                 help="Rows per policy call: the network runs on blocks of exactly R rows (the last padded), so an "
                      "episode's numbers do not depend on -b, workers, pipelining or the other slots. 0: the whole "
                      "batch (free batching; results move with -b by float rounding). batch: R = -b (lerobot-eval's "
                      "rounding; the default with LeRobot-style options). Part of what is evaluated."),
    click.option("--videos", "--max-episodes-rendered", "max_episodes_rendered", type=click.IntRange(min=0), default=0,
                 show_default=True, help="Render K episodes (chosen by --video-select) into "
                 "OUTPUT_DIR/videos/<task>/ep<episode>_seed<seed>_<success|failure>.mp4 (ep<episode>_seed<seed>.mp4 "
                 "for an env without a success signal; --video-layout lerobot: "
                 "OUTPUT_DIR/videos/<group>_<task_id>/eval_episode_<episode>.mp4) [LeRobot-style options: 10]."),
    click.option("--video-layout", "video_layout", type=click.Choice(VIDEO_LAYOUTS), default="fasteval", show_default=True,
                 help="Video file names: fasteval's, or lerobot-eval's (the default with LeRobot-style options)."),
    click.option("--cpu-threads", "cpu_threads", type=click.IntRange(min=1), default=1, show_default=True,
                 help="torch threads while a CPU policy runs. Per-seed equality with lerobot-eval down to 1e-12 "
                      "needs the same count on both sides (OMP_NUM_THREADS=1 lerobot-eval ... --cpu-threads 1)."),
    click.option("--noise", "noise", type=click.Choice(NOISE_MODES), default="episode", show_default=True,
                 help="Stochastic LeRobot policies (Diffusion): a noise generator per episode (batch-invariant), "
                      "or LeRobot's global RNG aligned with lerobot-eval's (its numbers with --reset-mode wave)."),
    click.option("--exploration", "exploration", type=click.Choice(EXPLORATIONS), default="deterministic", show_default=True,
                 help="TorchRL / tensordict actors (set with TorchRL's set_exploration_type) and SB3 policies: the "
                      "deterministic action, or a random sample drawn per episode (batch-invariant)."),
    click.option("--no-fast-env", "--fast-env", is_flag=True, expose_value=False,
                 help="--env.type=pusht: step gym-pusht's own env instead of fasteval's bit-identical, faster subclass."),
    click.option("--stop-when", "stop_when", default=None, metavar="RULE",
                 help="Stop as soon as RULE holds on episodes 0..k-1 (-n is then the cap): ci<=EPS, above=T, below=T "
                      "(success rate; above/below also stop once surely not above/below T), return:ci<=E, return:above=T, return:below=T (mean return, needs --return-bounds). "
                      "Several policies: best, best:eps=E, return:best[:eps=E], max_reward:best[:eps=E] race them, dropping "
                      "each once another is shown better (bounds: the env's declared ones, else --return-bounds). Anytime-valid; same k in every mode. See docs/how-many-episodes.md."),
    click.option("--rank-by", "rank_by", type=click.Choice(RANK_METRICS), default=None,
                 help="Several policies: rank (and race, with --stop-when best) by the success rate, the mean return "
                      "or the mean max reward [default: success where the env has a success signal, else return]."),
    click.option("--confidence", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.95, show_default=True,
                 help="Level of --stop-when's anytime-valid confidence sequence."),
    click.option("--return-bounds", "return_bounds", default=None, metavar="LO,HI",
                 help="Smallest and largest possible episode return (for return: rules; a return outside is an error); "
                      "for max_reward:best, of an episode's max reward. Not needed where the env declares them."),
    click.option("--design", "design", type=click.Choice(DESIGNS), default="anytime", show_default=True,
                 help="How --stop-when above=T/below=T decides: anytime (valid however long the run goes on) or "
                      "truncated (-n is a real budget: a group-sequential design spends its error by -n, decides "
                      "sooner, and cannot be resumed with a larger -n)."),
    click.option("--video-select", "video_select", type=click.Choice(VIDEO_SELECTIONS), default="first", show_default=True,
                 help="Which episodes --videos renders: the first K by index, the first K failures or successes "
                      "(by index; only the K kept episodes are rendered, replayed from their seeds and actions), or the "
                      "first K of every task (suites)."),
]


def eval_options(fn):
    for option in reversed(EVAL_OPTIONS):
        fn = option(fn)
    return fn


def build_spec(policy, env, env_kwargs, n_episodes, batch_size, seed, vectorization, device, max_steps, reset_mode,
               trust_remote_code, pipeline=False, cuda_graph=None, amp="none", compile_policy=False, rename=(),
               policy_overrides=(), **extra):
    if batch_size == 0:  # LeRobot's eval.batch_size=0
        from fasteval.doors.lerobot_options import auto_batch_size

        batch_size = auto_batch_size(n_episodes)
    if extra.get("policy_block") == BATCH_BLOCK:  # R = the batch size: lerobot-eval's rounding
        extra["policy_block"] = batch_size
    from fasteval.run.policy_refs import as_policy_field, expand_policy_refs

    policy = as_policy_field(expand_policy_refs((policy,) if isinstance(policy, str) else tuple(policy)))
    return EvalSpec(
        env=env, policy=policy, env_kwargs=parse_env_kwargs(env_kwargs), n_episodes=n_episodes,
        batch_size=batch_size, seed=seed, vectorization=vectorization, device=device, max_steps=max_steps,
        reset_mode=reset_mode, trust_remote_code=trust_remote_code, pipeline=pipeline, cuda_graph=cuda_graph,
        amp=amp, compile=compile_policy, rename=parse_renames(rename),
        policy_overrides=parse_pairs(policy_overrides, "--policy-field", "field=value"), **extra,
    )


def parse_renames(pairs: tuple[str, ...]) -> dict[str, str]:
    """``("key=new", ...)`` -> ``{key: new}`` (for ``--rename``)."""
    return parse_pairs(pairs, "--rename", "key=new_key")


def parse_pairs(pairs: Any, option: str, form: str) -> dict[str, str]:
    """``("key=value", ...)`` -> ``{key: value}`` (``--rename``, ``--policy-field``); a mapping passes through
    (a ``--config`` file's)."""
    if isinstance(pairs, Mapping):
        return {str(k): str(v) for k, v in pairs.items()}
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, new = pair.partition("=")
        if not sep or not key.strip() or not new.strip():
            raise click.BadParameter(f"expected {form}, got {pair!r}.", param_hint=option)
        out[key.strip()] = new.strip()
    return out


def fail(message: str, code: int) -> None:
    click.echo(f"Error: {message}", err=True)
    sys.exit(code)


SUBCOMMANDS = {
    # name -> "module:attribute" of a click command; imported only when used.
    "bench": "fasteval.doors.bench.cli:bench",
    "sweep": "fasteval.doors.sweep.cli:sweep",
    "report": "fasteval.doors.sweep.cli:report",
    "compare": "fasteval.doors.compare:compare",
    "serve": "fasteval.doors.serve:serve",
    "merge": "fasteval.doors.merge:merge",
}
SUBCOMMAND_HELP = {
    # name -> the line `fasteval --help` shows, so that the help imports none of them (nor torch).
    "bench": "Time an evaluation by stage, with warm-up and repeats.",
    "sweep": "Run (or resume) a sweep file: policies x envs x seeds.",
    "report": "Write the report (report.html; for sweeps also report.md) of a run or sweep folder.",
    "compare": "Compare two policies on the same episodes (paired tests; --fail-if-worse exits 3).",
    "serve": "Serve a policy over websockets (openpi's protocol and fasteval's); docs/serving.md.",
    "merge": "Merge the run folders of one evaluation's shards (--shard K/N) into one record; docs/distributed.md.",
}


def lerobot_name_rows() -> list[tuple[str, str]]:
    """The ``--help`` rows of LeRobot's spellings (:mod:`fasteval.doors.compat` rewrites them into native options)."""
    from fasteval.doors.compat import ALIASES, ENV_TASK_OPTION, ENV_TYPE_OPTION, JOB_NAME, POLICY_PATH, POLICY_REVISION

    rows = [(f"{POLICY_PATH}=DIR|REPO_ID", "A LeRobot checkpoint: a local folder first, else a hub id (as --policy)."),
            (f"{POLICY_REVISION}=REV", f"The hub revision of {POLICY_PATH}."),
            (f"{ENV_TYPE_OPTION}=TYPE, {ENV_TASK_OPTION}=TASK", "LeRobot's env types and tasks (a comma-separated list of "
             "tasks is a suite); --env.<field>=VALUE sets a field of the type."),
            (f"{JOB_NAME}=NAME", "Names LeRobot's default output folder."),
            ("--policy.FIELD=VALUE", "A field of the checkpoint's config, set by LeRobot's config class (= --policy-field).")]
    for name, alias in ALIASES.items():
        values = f" ({', '.join(f'{k}: {v}' for k, v in alias.values.items())})" if alias.values else ""
        rows.append((f"{name}=VALUE", f"= {alias.target}{values}" + (", one per entry" if alias.expand else "")))
    rows.append(("KEY=VALUE", "After the options: the same names without the dashes (eval.batch_size=8, seed=3). "
                              "Native options spelled with underscores work too (--n_episodes=5)."))
    return rows


HELP_SECTIONS = (
    Section("What to evaluate", ("policy", "env", "env_kwargs", "n_episodes", "seed", "max_steps", "observation_format",
                                 "rename", "obs_dtype", "policy_block", "exploration", "trust_remote_code", "config_file", "resume_dir")),
    Section("How it runs", ("batch_size", "vectorization", "workers", "device", "reset_mode", "pipeline", "cuda_graph",
                            "amp", "compile_policy", "stack_weights", "cpu_threads", "profile")),
    Section("Many machines", ("shard", *BACKEND_OPTION_NAMES),
            intro="One evaluation over many machines: shards merged by `fasteval merge`, or Ray actors driven from "
                  "here (docs/distributed.md)."),
    Section("Outputs", ("output_dir", "report", "max_episodes_rendered", "video_select", "video_layout",
                        "save_episodes_dir", "export_formats", "log_targets", "print_config")),
    Section("Faults and limits", ("retries", "on_nan_action", "step_timeout", "policy_timeout_s", "stop_grace_s")),
    Section("Statistics", ("stop_when", "rank_by", "confidence", "return_bounds", "design")),
    Section("LeRobot names", ("noise", "policy_overrides", "no_fast_env"),
            intro="LeRobot's own option names are accepted as they are, rewritten into the options above before "
                  "parsing; with any of them LeRobot's defaults apply (seed 1000, 50 episodes, 10 videos). Every "
                  "lerobot-eval option and what fasteval does with it: docs/lerobot.md.",
            extra_rows=lerobot_name_rows),
)
"""``fasteval --help``: every option under the heading of its purpose (tests/test_cli.py checks that each is
under exactly one)."""


class LazyGroup(SectionedHelp, click.Group):
    """A group whose subcommands live in their own modules and are imported on first use; its ``--help``
    shows the options under :data:`HELP_SECTIONS`."""

    help_sections = HELP_SECTIONS

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        from fasteval.doors.compat import rewrite  # LeRobot-style aliases and key=value -> native options, once

        try:
            rewritten = rewrite(args, self.get_params(ctx))
        except ValueError as exc:
            if not ctx.resilient_parsing:
                raise click.UsageError(str(exc), ctx) from None
        else:
            args = rewritten.args
            ctx.meta[DEFAULTS_KEY] = LEROBOT if rewritten.lerobot else FASTEVAL
            if rewritten.defaults:  # LeRobot's defaults, under anything the command line (or --config) gives
                ctx.default_map = {**rewritten.defaults, **(ctx.default_map or {})}
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        """The command; a Ctrl-C that reaches here (before a run's own signal handling is in place: while
        torch, a policy or a sweep's parts are imported and built) ends in one line and exit 130, as the README
        says, not click's "Aborted!" and exit 1."""
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            click.echo("Error: interrupted by SIGINT (Ctrl-C).", err=True)
            sys.exit(EXIT_SIGINT)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *SUBCOMMANDS})

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self.format_option_sections(ctx, formatter)
        self.format_commands(ctx, formatter)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands section of ``--help``, from :data:`SUBCOMMAND_HELP`: imports nothing."""
        rows = [(name, SUBCOMMAND_HELP.get(name, "")) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        return super().get_command(ctx, name) or self._load(name)

    @staticmethod
    def _load(name: str) -> click.Command | None:
        import importlib

        ref = SUBCOMMANDS.get(name)
        if ref is None:
            return None
        module_name, _, attr = ref.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and module_name.startswith(exc.name):
                return None  # that door is not built yet
            raise
        return getattr(module, attr)


@click.group(cls=LazyGroup, invoke_without_command=True, no_args_is_help=True, context_settings={"help_option_names": ["-h", "--help"]})
@eval_options
@click.option("--output-dir", "-o", type=UsablePath("dir", writable=True), default=None,
              help="Where manifest.json, episodes.jsonl and eval_info.json go [default: outputs/eval/<time>_<env>].")
@click.option("--resume", "resume_dir", type=UsablePath("dir", writable=True), default=None,
              help="Finish an interrupted run in this folder: its settings come from its manifest.json; "
                   "episodes already recorded are skipped. The original command line may be repeated "
                   "with it: options equal to the run's are accepted, differing ones are refused.")
@click.option("--retries", type=click.IntRange(min=0), default=1, show_default=True,
              help="Retries of an episode whose env raised, hung or died (from its seed, on a rebuilt env).")
@click.option("--on-nan-action", type=click.Choice(ON_NAN_ACTIONS), default="error", show_default=True,
              help="Non-finite policy actions (never sent to the env): stop the run, or record the episode as failed.")
@click.option("--step-timeout", type=click.FloatRange(min=0, min_open=True), default=300.0, show_default=True,
              help="Seconds an env step/reset may take: an async env's worker is killed and the episode retried; "
                   "a sync env cannot be interrupted, so the run ends (records kept, exit 1, resume with --resume).")
@click.option("--policy-timeout", "policy_timeout_s", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Seconds the policy may take for one step: then the run ends (records kept, exit 1, resume "
                   "with --resume); a served policy's dropped connection is retried for that long "
                   "[default: no limit; 30 s for ws:// policies].")
@click.option("--stop-grace", "stop_grace_s", type=click.FloatRange(min=0, min_open=True), default=30.0,
              show_default=True,
              help="After a first SIGINT/SIGTERM the episodes in flight have this many seconds to finish; then the "
                   "run stops as a second signal would (finished episodes kept, exit 130/143, --resume runs the rest).")
@click.option("--profile", is_flag=True, help="Show the per-stage time breakdown.")
@click.option("--shard", "shard", default=None, metavar="K/N",
              help="Run only shard K of N of the evaluation (episodes i with i % N == K, K from 0) into its own "
                   "folder; `fasteval merge DIR...` builds the one record of all N. Not with --stop-when. "
                   "docs/distributed.md.")
@click.option("--report/--no-report", "report", default=True, show_default=True,
              help="Write OUTPUT_DIR/report.html: one self-contained page with the results, plots, videos, errors "
                   "and provenance (rebuild it later with `fasteval report OUTPUT_DIR`).")
@click.option("--save-episodes", "save_episodes_dir", type=UsablePath("dir", writable=True), default=None,
              help="Write every step of the n episodes (observations, actions, rewards, flags) to DIR as a TensorDict "
                   "memory map (load it with fasteval.run.episode_files.load_episodes).")
@backend_options
@file_options
@click.version_option(package_name="fasteval")
@click.pass_context
def main(ctx: click.Context, output_dir: Path | None, resume_dir: Path | None, retries: int, on_nan_action: str,
         step_timeout: float, policy_timeout_s: float | None, stop_grace_s: float, profile: bool, report: bool,
         save_episodes_dir: Path | None, shard: str | None, **options: Any) -> None:
    """Evaluate a policy on a gymnasium env: exactly N episodes, seeds SEED..SEED+N-1.

    \b
    Example:
      fasteval --policy src/fasteval/assets/cartpole_mlp --env CartPole-v1 -n 100

    \b
    Exit codes: 0 done; 1 some episodes failed or the run stopped on an error
    (finished episodes are kept); 2 bad input; 130/143 interrupted by SIGINT/SIGTERM
    (resume with --resume DIR).
    """
    if ctx.invoked_subcommand is not None:
        return
    backend = pop_backend(options)  # --backend ray and its options: where the episodes run, not the spec
    files = FileOptions(options)  # --config, --print-config, --log, --export
    files.defaults = ctx.meta.get(DEFAULTS_KEY, FASTEVAL)
    from fasteval.doors.suites import suite_from_spec
    from fasteval.types.errors import UserInputError

    try:
        fault_fields = dict(retries=retries, on_nan_action=on_nan_action, step_timeout=step_timeout,
                            policy_timeout_s=policy_timeout_s, stop_grace_s=stop_grace_s)
        if resume_dir is not None:  # a resume keeps the run's fault handling, unless the command line changes it
            from fasteval.run.config import given_on_command_line

            on_command_line = given_on_command_line(ctx)
            fault_fields = {k: v for k, v in fault_fields.items() if k in on_command_line}
        spec, out_dir = resolve_run(ctx, options, files, output_dir, resume_dir, fault_fields, save_episodes_dir)
        if files.config_file is not None:  # the file's backend keys, under the command line's options
            from fasteval.doors.backend_options import backend_with_config

            backend = backend_with_config(ctx, backend, files.config_file)
        from fasteval.doors.backend_options import backend_keys

        files.backend = backend_keys(backend)
        from fasteval.doors.ignored_options import ignored_option_lines

        for line in ignored_option_lines(spec):
            click.echo(line, err=True)
        if files.print_config:
            from fasteval.run.config import dump_config

            if files.defaults == LEROBOT:
                click.echo(lerobot_defaults_line(spec), err=True)
            click.echo(dump_config(spec, out_dir, defaults=files.defaults, backend=files.backend))
            return
        suite = suite_from_spec(spec)  # --env.task=a,b (a list of task names): one durable run per task
        if shard is not None:  # one shard of the evaluation (a resume's is checked against its manifest)
            from fasteval.run.shards import check_shardable, parse_shard

            shard = parse_shard(shard)
            if resume_dir is None:
                check_shardable(shard, spec, suite=suite is not None)
        if files.defaults == LEROBOT and resume_dir is None:  # LeRobot writes over an earlier run; fasteval keeps it
            from fasteval.doors.lerobot_options import rerun_note

            note = rerun_note(out_dir, suite)
            if note:
                click.echo(note, err=True)
        if suite is not None:
            if save_episodes_dir is not None:
                raise UserInputError("--save-episodes is not supported for a list of tasks yet; run one task at a time.")
            sys.exit(suite_command(spec, suite, out_dir, files, profile, report))
        from fasteval.doors.backend_options import build_run_engine

        engine = build_run_engine(spec, backend, build_engine)
    except UserInputError as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    outcome = run_one(engine, out_dir, resume=resume_dir is not None, shard=shard)
    shard = outcome.result.meta.get("shard")  # a resumed shard's is its manifest's
    wanted = len(range(shard["index"], spec.n_episodes, shard["count"])) if shard else spec.n_episodes
    code = end_of_run(outcome, spec, out_dir, files, profile, wanted=wanted, save_episodes_dir=save_episodes_dir,
                      report=report)
    if code != EXIT_OK:
        sys.exit(code)


def resolve_run(ctx: click.Context, options: dict[str, Any], files: FileOptions, output_dir: Path | None,
                resume_dir: Path | None, fault_fields: dict[str, Any], save_episodes_dir: Path | None) -> tuple[Any, Path]:
    """The spec of the run and its folder, from the options, ``--config`` or the manifest of ``--resume``;
    raises UserInputError (exit 2) before anything runs."""
    from fasteval.run.rundir import RunDirectory
    from fasteval.types.errors import UserInputError
    from fasteval.types.trust import COMMAND_LINE, check_env_ref, check_policy_ref

    if resume_dir is not None:
        spec = spec_from_manifest(ctx, RunDirectory(resume_dir), options, output_dir, files.config_file)
        files.config_file = None  # compared with the manifest above; the manifest's values stand
    else:
        spec = build_spec(**options)
        check_env_ref(spec.env, COMMAND_LINE, spec.trust_remote_code)  # a --config's are checked by files.resolve
        check_policy_ref(spec.policy, COMMAND_LINE, spec.trust_remote_code)
    spec = spec.replace(**fault_fields)
    if save_episodes_dir is not None:
        from fasteval.run.episode_files import check_episode_folder

        if resume_dir is not None:
            raise UserInputError("--save-episodes cannot be combined with --resume: the steps of the episodes "
                                 "recorded before the interruption were not kept. Run again without --resume.")
        if spec.n_policies > 1:
            raise UserInputError(f"--save-episodes records one policy's rollouts; this run has {spec.n_policies} "
                                 f"policies. Save each policy's episodes with a run of its own.")
        check_episode_folder(save_episodes_dir)
        spec = spec.replace(return_episode_data=True)
    spec, output_dir = files.resolve(ctx, spec, output_dir, resume=resume_dir is not None)
    out_dir = Path(resume_dir or output_dir or default_output_dir(spec.env))
    if save_episodes_dir is not None and Path(save_episodes_dir).resolve() == out_dir.resolve():
        raise UserInputError(f"--save-episodes {save_episodes_dir} is the output folder (-o): the episode data would be "
                             f"written over the run's records. Give --save-episodes a folder of its own, e.g. "
                             f"{out_dir / 'episodes'}.")
    if spec.max_episodes_rendered and spec.videos_dir is None:
        spec = spec.replace(videos_dir=str(default_videos_dir(spec, out_dir)))
    check_output_paths(out_dir, spec)
    if resume_dir is None and not files.print_config:
        check_new_output_folder(out_dir, lerobot=files.defaults == LEROBOT)
    check_lerobot_first(spec)
    return spec, out_dir


def default_videos_dir(spec: Any, out_dir: Path) -> Path:
    """``OUTPUT_DIR/videos``; LeRobot's layout, one task: its task's folder, ``videos/<group>_<task_id>``."""
    from fasteval.doors.suites import suite_from_spec

    if spec.video_layout != LEROBOT or suite_from_spec(spec) is not None:
        return out_dir / "videos"  # a suite puts each task's videos in videos/<group>_<task_id>/
    from fasteval.robot.env_names import task_label
    from fasteval.types.eval_result import task_folder

    group, task_id, _task = task_label(spec.env, spec.env_kwargs)
    return out_dir / "videos" / task_folder(group, task_id)


def check_lerobot_first(spec: Any) -> None:
    """A LeRobot checkpoint needs LeRobot (and Python >= 3.12): say so before the env is built, whose own
    missing package (gym-pusht) would otherwise be reported first. Raises PolicyLoadError (exit 2)."""
    from fasteval.doors.lerobot_options import checkpoint_type
    from fasteval.robot.lerobot.checkpoint import is_lerobot_checkpoint

    for policy in spec.policies:
        if isinstance(policy, str) and (is_lerobot_checkpoint(policy) or (policy.startswith("hf://") and
                                                                          checkpoint_type(policy) is not None)):
            from fasteval.robot.lerobot.extra import require_lerobot

            require_lerobot(f"the LeRobot checkpoint {policy}")
            if spec.policy_overrides and not policy.startswith("hf://"):  # LeRobot's own error, before any env
                from fasteval.robot.lerobot.checkpoint import lerobot_policy_type
                from fasteval.robot.lerobot.loader import read_config

                read_config(Path(policy), lerobot_policy_type(policy) or "?", spec.policy_overrides)


def lerobot_defaults_line(spec: Any) -> str:
    """The stderr line of ``--print-config`` for a LeRobot-style command line: which defaults applied."""
    return (f"fasteval: LeRobot-style options, so LeRobot's defaults for what the command line leaves out: seed 1000, "
            f"eval.n_episodes 50, eval.batch_size 0 (LeRobot's auto rule; here {spec.n_slots}), 10 videos in "
            f"LeRobot's layout, outputs/eval/<date>/<time>_<job_name>. This run: seed {spec.seed}, "
            f"{spec.n_episodes} episodes, batch {spec.batch_size}.")


def build_engine(spec: Any) -> Any:
    """The engine of a one-task run; a spec that renders videos must have a renderable env (exit 2 before the run)."""
    from fasteval.run.engine import Engine

    engine = Engine(spec)
    if spec.max_episodes_rendered:
        from fasteval.robot.recording import check_renderable

        try:
            check_renderable(engine)  # a MuJoCo env without render_mode
        except BaseException:
            engine.close()
            raise
    return engine


def start_progress(engine: Any, total: int | None = None) -> _Progress:
    """The progress of one engine run: the episode bar on a terminal, with the env steps
    (:class:`fasteval.doors.progress.RunProgress`), or its lines off one. Close it at the run's end."""
    from fasteval.doors.progress import RunProgress

    spec = engine.spec
    total = (spec.n_episodes if total is None else total) * spec.n_policies
    progress = _Progress(total, enabled=sys.stderr.isatty(),
                         signal=lambda: bool(engine.envs.has_success_signal), engine=engine)
    progress.steps = RunProgress(engine, total, progress.counts,
                                 write=lambda line: click.echo(line, err=True), bar=progress.bar).start()
    return progress


def run_one(engine: Any, out_dir: Path, resume: bool, shard: Any = None) -> Any:
    """Run ``engine`` durably into ``out_dir`` with a progress bar; errors before the run exit 2, errors in it 1.
    ``shard``: only shard K of N's episodes (``--shard``, :mod:`fasteval.run.shards`)."""
    from fasteval.run.durable import run_durable
    from fasteval.run.rundir import RunDirectory
    from fasteval.types.errors import FastevalError, UserInputError

    spec = engine.spec
    progress = start_progress(engine, shard.size(spec.n_episodes) if shard is not None else None)
    if spec.n_policies > 1 and spec.stop_when is not None:  # the race says its eliminations as they happen
        engine.announce = lambda line: (progress.bar.write(line, file=sys.stderr) if progress.bar is not None
                                        else click.echo(line, err=True))
    try:
        return run_durable(engine, RunDirectory(out_dir), resume=resume, on_finished=progress,
                           announce=lambda m: click.echo(m, err=True), shard=shard)
    except UserInputError as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    except FastevalError as exc:
        fail(str(exc), EXIT_RUNTIME_ERROR)
    finally:
        progress.close()
        engine.close()


def end_of_run(outcome: Any, spec: Any, out_dir: Path, files: FileOptions, profile: bool, *, wanted: int,
               suite: bool = False, wrote: str = "", save_episodes_dir: Path | None = None, report: bool = True) -> int:
    """The end of every ``fasteval`` run (one task or a suite): the summary, the files written (``report.html``
    with ``report``), the failed episodes and how to resume; returns the exit code. ``wanted``: the episodes
    the command asked for; ``wrote``: said before the status on the ``wrote eval_info.json`` line."""
    from fasteval.run.rundir import EPISODES, EVAL_INFO

    result = outcome.result
    resumed = outcome.resumed_episodes
    if resumed:
        click.echo(f"resumed: {plural(resumed, 'episode')} {'was' if resumed == 1 else 'were'} already recorded in {out_dir}")
    written, logged = outcome.wrote, outcome.logged  # logged: None for a suite (each task logs its own)
    click.echo(format_summary(result, profile, logged, out_dir / EPISODES))
    if EVAL_INFO in written:
        click.echo(f"wrote {out_dir / EVAL_INFO} ({wrote}status: {outcome.status})")
    else:
        click.echo(f"Error: {out_dir / EVAL_INFO} was not written (status: {outcome.status}); the records in "
                   f"{out_dir / EPISODES} are kept.", err=True)
    if save_episodes_dir is not None and result.episode_data is not None:
        from fasteval.run.episode_files import save_episodes

        n_saved = save_episodes(result.episode_data, save_episodes_dir)
        click.echo(f"wrote {n_saved} episodes ({len(result.episode_data)} steps) to {save_episodes_dir}")
    problems = files.finish(spec, out_dir, result)  # config.json, --export, --log
    if report and EVAL_INFO in written:  # the page is drawn from the record eval_info.json was written from
        problems += write_html_report(out_dir, None if suite else result.eval_info_document())
    for problem in problems:
        click.echo(f"Error: {problem} (the results are in {out_dir})", err=True)
    code = exit_code(outcome.status, outcome.signal_number)
    if code == EXIT_OK:  # the run is complete; an extra output (or a suite's merged eval_info.json) is not
        return EXIT_RUNTIME_ERROR if problems or EVAL_INFO not in written else EXIT_OK
    if result.n_failed or result.errors:
        errors_at = out_dir / "tasks" / "*" / "errors.jsonl" if suite else out_dir / "errors.jsonl"
        click.echo("\n".join(describe_failures(result, errors_at)), err=True)
    from fasteval.types.errors import UserInputError

    if isinstance(outcome.error, UserInputError):  # bad input met once episodes ran (they are kept): fix it, not resume
        click.echo(f"Error: {outcome.error}", err=True)
        return EXIT_BAD_INPUT
    recorded = len(result.per_episode) if logged is None else min(len(result.per_episode), logged)
    click.echo(resume_hint(outcome.status, recorded, wanted, out_dir, suite, spec), err=True)
    if code != EXIT_RUNTIME_ERROR:  # interrupted
        return code
    if outcome.error is not None:
        click.echo(f"Error: {outcome.error}", err=True)
    return code


def exit_code(status: str, signal_number: int | None) -> int:
    """The exit code of a run's end state (the one mapping; the manifest and eval_info.json say the status):
    complete (a ``--stop-when`` run stopped by its rule included) 0; interrupted 128 + the signal (130
    SIGINT, 143 SIGTERM); failed 1."""
    from fasteval.run.durable import STATUS_COMPLETE, STATUS_INTERRUPTED

    if status == STATUS_COMPLETE:
        return EXIT_OK
    if status == STATUS_INTERRUPTED:
        return 128 + (signal_number or 2)
    return EXIT_RUNTIME_ERROR


def write_html_report(out_dir: Path, doc: Any = None) -> list[str]:
    """``report.html`` in the run folder (a suite's, and each of its tasks'), from the files the run
    wrote; returns the problems (empty: written). The results are on disk whatever happens here.
    ``doc``: the document ``eval_info.json`` was written from (the record's, in memory: the same page,
    without reading the file back); default: read from the folder."""
    from fasteval.render.html import write_run_report

    try:
        path = write_run_report(out_dir, doc=doc)
    except Exception as exc:  # noqa: BLE001 -- a page that cannot be drawn must not lose the run
        return [f"writing {out_dir / 'report.html'} failed: {type(exc).__name__}: {exc}"]
    click.echo(f"wrote {path}")
    return []


def resume_hint(status: str, recorded: int, wanted: int, out_dir: Path, suite: bool, spec: Any = None) -> str:
    """How to finish a run that stopped: ``--resume DIR`` (one task; with ``--trust-remote-code`` when the
    run names code, which a manifest cannot allow), or the same command into the same folder (a suite
    resumes each task's run folder)."""
    from fasteval.doors.suites import suite_resume
    from fasteval.run.rundir import resume_command

    how = suite_resume(out_dir) if suite else resume_command(out_dir, spec)
    what = "interrupted" if status == "interrupted" else "stopped"
    return f"{what} after {recorded} of {wanted} episodes. Resume with:\n  {how}"


FAILURES_SHOWN = 5
"""Failed episodes named in the terminal; the rest are counted (all are in errors.jsonl)."""


def describe_failures(result: Any, errors_file: Path, limit: int = FAILURES_SHOWN) -> list[str]:
    """Lines for stderr: how many episodes failed for good, and the first ``limit`` of them by
    index, seed, stage and the first line of their error; ``errors_file``: where all of them are."""
    final = sorted((e for e in result.errors if e.get("final")), key=lambda e: e.get("episode_ix", 0))
    retried = len(result.errors) - len(final)
    head = f"{plural(result.n_failed, 'episode')} failed for good"
    if retried:
        head += f"; {plural(retried, 'env/policy error')} {'was' if retried == 1 else 'were'} retried"
    lines = [f"{head} (details in {errors_file})" + (":" if final else ".")]
    for error in final[:limit]:
        text = str(error.get("error") or "").strip()
        first = text.splitlines()[0] if text else "(no message)"
        if len(first) > 200:
            first = first[:197] + "..."
        lines.append(f"  episode {error.get('episode_ix')} (seed {error.get('seed')}, {error.get('stage')}): {first}")
    if len(final) > limit:
        lines.append(f"  ... and {len(final) - limit} more")
    return lines


def check_output_paths(out_dir: Path, spec: Any) -> None:
    """The output folder (from ``-o``, a config file or the default) and ``videos_dir`` must be
    usable before anything runs; raises UserInputError (exit 2) naming the path and the problem."""
    from fasteval.types.errors import UserInputError

    for what, path in (("output folder", out_dir), ("videos folder", spec.videos_dir)):
        if path is None:
            continue
        problem = path_problem(path, kind="dir", writable=True)
        if problem is not None:
            raise UserInputError(f"the {what} {str(path)!r} is not usable: {problem}. Choose another folder.")


def check_new_output_folder(out_dir: Path, lerobot: bool = False) -> None:
    """A new run never writes over files fasteval did not write: a folder that holds other files and no run is
    refused (:func:`fasteval.run.output_folder.new_folder_problem`). LeRobot-style options (``lerobot``) move an
    earlier run's folder aside whole (:func:`~fasteval.doors.lerobot_options.set_aside_earlier_run`)."""
    from fasteval.run.output_folder import new_folder_problem
    from fasteval.types.errors import UserInputError

    if lerobot:
        from fasteval.doors.lerobot_options import holds_earlier_run

        if holds_earlier_run(out_dir):
            return
    problem = new_folder_problem(out_dir)
    if problem is not None:
        raise UserInputError(problem)


def spec_from_manifest(ctx: click.Context, run_dir: Any, options: dict[str, Any], output_dir: Path | None = None,
                       config_file: Any = None):
    """The spec of an earlier run, from its manifest, for ``--resume DIR``.

    The original command line may be given again: every option (and ``--config`` key) given is
    compared with the manifest. An option of *how* it runs (a :class:`~fasteval.types.spec.How`
    field) takes the new value; one of *what* is evaluated must be equal, except a larger ``-n``,
    which extends the run. Any other difference is refused with a UserInputError naming each one.
    """
    from fasteval.run.config import PARAM_FOR_FIELD, given_on_command_line
    from fasteval.run.record import manifest_spec
    from fasteval.run.rundir import what_differences
    from fasteval.types.errors import UserInputError
    from fasteval.types.spec import HOW_FIELDS

    manifest = run_dir.read_manifest()
    saved = manifest_spec(manifest)
    long_name = {p.name: next((o for o in p.opts if o.startswith("--")), p.opts[0])
                 for p in ctx.command.params if isinstance(p, click.Option)}
    given = {f: long_name.get(PARAM_FOR_FIELD.get(f, f), f) for f in given_on_command_line(ctx)
             if PARAM_FOR_FIELD.get(f, f) in options}  # the options that build the spec (not -o, --retries, ...)
    differ: list[str] = []
    if given or config_file is not None:
        wanted = build_spec(**options)
        if config_file is not None:
            from fasteval.run.config import apply_config, read_config_file

            from_file = read_config_file(config_file)
            wanted, config_out = apply_config(ctx, wanted, output_dir, config_file)
            for key in from_file:
                given.setdefault(key, f"{key} (in {config_file})")
            if output_dir is None and config_out is not None:
                output_dir = Path(config_out)
        values = wanted.to_dict()
        asked = {k: v for k, v in values.items() if k in given and k != "trust_remote_code"}  # trust: below
        saved.update({k: v for k, v in asked.items() if k in HOW_FIELDS})  # how it runs: this command's
        for field_name, had, has in what_differences(saved, {**saved, **asked}):
            hint = ""
            if field_name == "n_episodes":
                hint = (" (a --design truncated run is valid up to the cap it was planned for and spent its error by it: "
                        "it cannot be extended; start a new run for a larger budget)" if saved.get("design") == "truncated"
                        else " (a resume may only extend a run: give a larger -n, or none)")
            differ.append(f"{given[field_name]}: the run has {had!r}, this command has {has!r}{hint}")
        saved.update({k: v for k, v in asked.items() if k not in HOW_FIELDS})  # equal, or a larger -n
    if output_dir is not None and Path(output_dir).resolve() != Path(run_dir.path).resolve():
        differ.append(f"--output-dir: the run is in {str(run_dir.path)!r}, this command has {str(output_dir)!r}")
    if differ:
        raise UserInputError(
            f"--resume {run_dir.path}: this command differs from the run in {run_dir.path / 'manifest.json'}: "
            + "; ".join(differ) + ". Drop those options (the run's values are used), or start a new run with "
            "another --output-dir. What is evaluated (env, policy, seed, step cap, stop rule, observation format, "
            "precision...) must match, and a larger -n extends the run; how it runs (batch size, vectorization, "
            "workers, device, pipeline, graphs, threads, timeouts, videos...) may change on resume."
        )
    # A manifest is a file: it cannot grant trust, and the code it names needs this command's flag.
    # A reference repeated on this command line (equal to the manifest's, or refused above) is the command line's.
    from fasteval.types.trust import COMMAND_LINE, check_env_ref, check_policy_ref

    saved["trust_remote_code"] = bool(options.get("trust_remote_code"))
    manifest_source = f"the manifest {str(run_dir.path / 'manifest.json')!r}"
    check_env_ref(saved.get("env"), COMMAND_LINE if "env" in given else manifest_source, saved["trust_remote_code"])
    check_policy_ref(saved.get("policy"), COMMAND_LINE if "policy" in given else manifest_source,
                     saved["trust_remote_code"])
    return EvalSpec.from_dict(saved)


def suite_command(spec: EvalSpec, suite: Mapping[str, Mapping[Any, Any]], out_dir: str | Path, files: FileOptions,
                  profile: bool = False, report: bool = True) -> int:
    """The ``fasteval`` command for a suite spec (see :func:`fasteval.doors.suites.run_suite_durable`): run, print, return the exit code."""
    from fasteval.doors.suites import flatten_suite, run_suite_durable

    out_dir = Path(out_dir)
    outcome = run_suite_durable(spec, suite, out_dir, announce=lambda m: click.echo(m, err=True), progress=start_progress)
    for row in outcome.result.per_task():
        agg = row["aggregated"]
        click.echo(f"{row['task_group']}/{row['task_id']} {row['task']}: {agg['n_episodes']} episodes, "
                   f"avg_sum_reward {agg['avg_sum_reward']:.4f}, pc_success {format_success(agg, ci=False)}")
    n_tasks = len(flatten_suite(suite))
    return end_of_run(outcome, spec, out_dir, files, profile, wanted=spec.n_episodes * n_tasks, suite=True,
                      wrote=f"{len(outcome.folders)} of {n_tasks} tasks; ", report=report)
