"""``fasteval bench``: how fast does this policy evaluate on this env, and where does the time go?

The same options as ``fasteval`` build the spec (``--vectorization`` here takes a list);
the engine is the CLI's. Exit codes: 0 done; 1 the evaluation failed while running;
2 bad input (nothing was timed).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from fasteval.doors.cli import EXIT_BAD_INPUT, EXIT_RUNTIME_ERROR, build_spec, eval_options, fail
from fasteval.types.spec import VECTORIZATIONS

DEFAULT_EPISODES = 100
"""``-n`` default for the bench (the eval command's 10 is too few to time)."""


def bench_options(fn):
    """The eval options, with ``-n`` defaulting to :data:`DEFAULT_EPISODES`, ``--vectorization``
    taking a comma-separated list, and none of the video options (``--videos``, ``--video-select``,
    ``--video-layout``): the bench times the evaluation, and writes no files but ``--json``."""
    fn = eval_options(fn)
    vectorizations = click.option(
        "--vectorization", "vectorizations", default="sync", show_default=True, metavar="LIST",
        help=f"Comma-separated, from {', '.join(VECTORIZATIONS)}: each is measured (with every --sweep-batch size).",
    )(lambda: None).__click_params__[0]
    params = []
    for param in fn.__click_params__:
        if param.name in ("max_episodes_rendered", "video_select", "video_layout"):
            continue
        if param.name == "vectorization":
            param = vectorizations
        elif param.name == "n_episodes":
            param.default = DEFAULT_EPISODES
            param.help = "Episodes per timed repeat; episode i uses seed SEED + i (the same in every repeat)."
        elif param.name == "batch_size":
            param.help = "Env slots stepped together (capped at N); --sweep-batch measures several."
        params.append(param)
    fn.__click_params__ = params
    return fn


@click.command("bench", context_settings={"help_option_names": ["-h", "--help"]})
@bench_options
@click.option("--repeats", "-r", type=click.IntRange(min=1), default=5, show_default=True,
              help="Timed evaluations per configuration (the report gives median, min and max).")
@click.option("--warmup-episodes", type=click.IntRange(min=0), default=None,
              help="Episodes of the untimed warm-up run (dry run, JIT, graph capture) [default: one per slot, at least 2].")
@click.option("--sweep-batch", "sweep_batch", default=None, metavar="LIST",
              help="Comma-separated batch sizes (like 1,16,64,256) to measure instead of --batch-size; "
                   "one engine per configuration, the spec otherwise the same.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the results, with a machine header, to this JSON file.")
def bench(repeats: int, warmup_episodes: int | None, sweep_batch: str | None, json_path: Path | None,
          vectorizations: str, **options: Any) -> None:
    """Time the evaluation of a policy on an env: warm up, run N episodes REPEATS times, report.

    \b
    Reports, per configuration: median/min/max episodes/s and env steps/s; the stage
    breakdown (env_step, policy, transfers = h2d + d2h, bookkeeping); the evaluator's
    overhead in us per env step = (total - env - policy) / steps; and, for a grid, the
    fastest configuration.

    \b
    Example:
      fasteval bench --policy src/fasteval/assets/cartpole_mlp --env CartPole-v1 -n 200 \\
          --sweep-batch 1,16,64,256 --vectorization sync,async --json bench.json
    """
    from fasteval.doors.bench.harness import bench_grid, parse_batch_sizes, parse_vectorizations
    from fasteval.doors.bench.machine import machine_info
    from fasteval.doors.bench.report import report_document, write_json
    from fasteval.render.bench_text import format_report
    from fasteval.types.errors import FastevalError, UserInputError

    try:
        vecs = parse_vectorizations(vectorizations)
        batches = parse_batch_sizes(sweep_batch) if sweep_batch is not None else [options["batch_size"]]
        spec = build_spec(vectorization=vecs[0], **options)
    except UserInputError as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    from fasteval.run.record import spec_facts

    machine = machine_info()
    facts = {**spec_facts(spec), "batch_sizes": batches, "vectorizations": vecs, "repeats": repeats,
             "warmup_episodes": warmup_episodes}  # the spec's facts as a run's record and manifest give them

    def progress(cell) -> None:
        s = cell.summary()
        click.echo(f"  measured {cell.label}: {s['episodes_per_s']['median']:.1f} episodes/s", err=True)

    try:
        grid = bench_grid(spec, batches, vecs, repeats=repeats, warmup_episodes=warmup_episodes, on_cell=progress)
    except UserInputError as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    except FastevalError as exc:
        fail(str(exc), EXIT_RUNTIME_ERROR)
    command = " ".join(["fasteval", *sys.argv[1:]]) if sys.argv and "fasteval" in sys.argv[0] else "fasteval bench"
    doc = report_document(grid, facts, machine, command)
    click.echo(format_report(doc))
    if json_path is not None:
        write_json(json_path, doc)
        click.echo(f"wrote {json_path}")
