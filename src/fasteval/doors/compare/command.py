"""The click command ``fasteval compare`` (inputs, outputs and exit codes: see the package docstring)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from fasteval.doors.click_types import FiniteFloatRange
from fasteval.doors.compare.document import build_document, write_outputs
from fasteval.doors.compare.inputs import load_side
from fasteval.doors.compare.live import DESIGNS, run_live
from fasteval.render.compare_text import render_table
from fasteval.types.errors import UserInputError
from fasteval.types.metric_bounds import RANK_METRICS

EXIT_OK, EXIT_BAD_INPUT = 0, 2


# -- the command ----------------------------------------------------------------------------------------
@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("runs", nargs=-1, metavar="[RUN_A RUN_B]")
@click.option("--alpha", type=FiniteFloatRange(0, 1, min_open=True, max_open=True), default=0.05, show_default=True,
              help="Significance level (two-sided; Holm's correction across tasks).")
@click.option("--margin", type=FiniteFloatRange(min=0, min_open=True), default=None,
              help="Non-inferiority margin (a success-rate difference such as 0.05, or return units when the env has no success signal).")
@click.option("--fail-if-worse", is_flag=True, help="Exit 3 when B is significantly worse than A on any task (with --margin: not shown non-inferior).")
@click.option("--output-dir", "-o", type=click.Path(file_okay=False, path_type=Path), default=Path("."), show_default=True,
              help="Folder for compare.json, compare.md and compare.html (created if missing); the run prints where they went.")
@click.option("--n-boot", type=click.IntRange(min=100), default=2000, show_default=True, help="Bootstrap resamples.")
@click.option("--confidence", type=FiniteFloatRange(0, 1, min_open=True, max_open=True), default=0.95, show_default=True,
              help="Level of the intervals (bootstrap; anytime-valid sequences in live mode).")
@click.option("--policy-a", default=None, help="Live mode: policy A (the baseline).")
@click.option("--policy-b", default=None, help="Live mode: policy B (the candidate).")
@click.option("--env", default=None, help="Live mode: the env both policies run on, with the same seeds.")
@click.option("--env-kwarg", "env_kwargs", multiple=True, metavar="KEY=VALUE", help="Live mode: env keyword argument; repeatable.")
@click.option("--n-episodes", "-n", type=click.IntRange(min=1), default=100, show_default=True, help="Live mode: most episodes per policy (the cap).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Live mode: seed of episode 0.")
@click.option("--batch-size", "-b", type=click.IntRange(min=1), default=16, show_default=True, help="Live mode: env slots per policy.")
@click.option("--stop-when", default=None, help="Live mode: 'decided' stops when the anytime-valid paired test decides.")
@click.option("--return-bounds", default=None, metavar="LO,HI", help="Live mode: bounds of an episode return (paired returns test).")
@click.option("--rank-by", "rank_by", type=click.Choice(RANK_METRICS), default=None,
              help="The verdict's metric: success, return (the paired t-test of the mean) or max_reward "
                   "[default: success where both runs have a success signal, else return].")
@click.option("--design", type=click.Choice(DESIGNS), default="anytime", show_default=True,
              help="Live mode with --stop-when decided: anytime (the e-process, valid however long it runs) or truncated "
                   "(-n is a real budget: exact group-sequential McNemar bounds spend alpha by -n; success only).")
def compare(runs: tuple[str, ...], alpha: float, margin: float | None, fail_if_worse: bool, output_dir: Path,
            n_boot: int, confidence: float, policy_a: str | None, policy_b: str | None, env: str | None,
            env_kwargs: tuple[str, ...], n_episodes: int, seed: int, batch_size: int, stop_when: str | None,
            return_bounds: str | None, design: str, rank_by: str | None) -> None:
    """Compare two policies on the same episodes: RUN_A (baseline) and RUN_B (candidate).

    RUN_A and RUN_B are run folders or sweep cells SWEEP_DIR::POLICY[::ENV]. Or run both live:
    --policy-a P --policy-b Q --env E [--stop-when decided]. Exit codes: 0 done, 2 bad input,
    3 --fail-if-worse and B is significantly worse somewhere.
    """
    options = dict(alpha=alpha, margin=margin, fail_if_worse=fail_if_worse, confidence=confidence, n_boot=n_boot,
                   rank_by=rank_by)
    live = any(v is not None for v in (policy_a, policy_b, env))
    try:
        if live:
            if runs:
                raise UserInputError("compare: give either two run folders or --policy-a/--policy-b/--env, not both.")
            doc = run_live(policy_a, policy_b, env, env_kwargs, n_episodes=n_episodes, seed=seed, batch_size=batch_size,
                           stop_when=stop_when, return_bounds=return_bounds, design=design, **options)
        else:
            if len(runs) != 2:
                raise UserInputError(f"compare: expected two runs, RUN_A and RUN_B, got {len(runs)}. "
                                     f"Example: fasteval compare runs/baseline runs/candidate")
            if stop_when or return_bounds or design != "anytime":
                raise UserInputError("compare: --stop-when, --return-bounds and --design are for live comparisons "
                                     "(--policy-a/--policy-b/--env).")
            doc = build_document(load_side(runs[0], "A"), load_side(runs[1], "B"), **options)
        json_path, md_path = write_outputs(doc, output_dir)
    except UserInputError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    click.echo(render_table(doc))
    for note in doc.get("notes", []):
        click.echo(f"note: {note}", err=True)
    written = [json_path.name, md_path.name]
    try:  # the page is a view of compare.json: a failure to write it loses no result
        from fasteval.render.html import write_compare_report

        written.append(write_compare_report(doc, output_dir).name)
    except OSError as exc:
        click.echo(f"warning: compare.html was not written ({exc}); compare.json holds every number", err=True)
    # Say where: the default folder is the current one, which a user may not expect (issue 42).
    click.echo(f"wrote {', '.join(written)} in {output_dir.resolve()}"
               + ("" if output_dir != Path(".") else " (the current folder; -o DIR writes them elsewhere)"))
    sys.exit(doc["overall"]["exit_code"])

