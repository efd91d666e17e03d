"""``fasteval sweep SPEC`` and ``fasteval report DIR``: parse options, delegate, exit.

Exit codes of ``fasteval sweep``:
  0  every job is complete in the store;
  1  some jobs failed (their errors are in the store and the report; re-run to retry them);
  2  bad input: unreadable or invalid sweep file, unknown policy reference, missing Ray,
     a store made with other settings, or a folder another sweep is writing to.

``fasteval report`` exits 0, or 2 when the folder holds no store.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from fasteval.doors.cli import EXIT_BAD_INPUT, EXIT_OK, EXIT_RUNTIME_ERROR, fail, plural
from fasteval.run.paths import UsablePath


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("spec_file", type=UsablePath("file", must_exist=True))
@click.option("--out", "-o", "out_dir", type=UsablePath("dir", writable=True), default=None,
              help="Sweep folder: results.sqlite and the report [default: outputs/sweeps/<spec name>].")
@click.option("--backend", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="local: this machine, no services. ray: one Ray task per job.")
@click.option("--workers", "-w", type=click.IntRange(min=1), default=None,
              help="local: jobs run at once (1 runs them in this process) [default: CPU cores].")
@click.option("--address", default=None,
              help="ray: cluster address (auto, ray://HOST:10001) [default: a running Ray, else a local one].")
@click.option("--num-cpus", type=click.FloatRange(min=0), default=1.0, show_default=True, help="ray: CPUs per job.")
@click.option("--num-gpus", type=click.FloatRange(min=0), default=0.0, show_default=True, help="ray: GPUs per job.")
@click.option("--max-retries", type=click.IntRange(min=0), default=3, show_default=True,
              help="ray: retries of a job whose worker died.")
@click.option("--no-report", is_flag=True, help="Skip the report at the end (build it later with `fasteval report`).")
@click.option("--trust-remote-code", is_flag=True,
              help="Allow the file's module:callable and path/file.py:callable policies and envs (they run code). "
                   "A sweep file cannot allow them itself.")
@click.option("--max-jobs", type=click.IntRange(min=1), default=None,
              help="Most jobs (policies x envs x seed blocks) the file may ask for [default: 10000].")
def sweep(spec_file: Path, out_dir: Path | None, backend: str, workers: int | None, address: str | None,
          num_cpus: float, num_gpus: float, max_retries: int, no_report: bool, trust_remote_code: bool,
          max_jobs: int | None) -> None:
    """Run (or resume) the sweep in SPEC_FILE (.yaml, .toml or .json).

    \b
    Re-running the same command resumes: finished episodes are skipped, failed jobs retried.
    Example:
      fasteval sweep examples/sweep.yaml --workers 2
    """
    from fasteval.types.errors import UserInputError
    from fasteval.doors.sweep.executors import LocalExecutor, RayExecutor
    from fasteval.doors.sweep.runner import run_sweep
    from fasteval.doors.sweep.spec import load_sweep_file, trusted_sweep

    if backend == "local" and address is not None:
        raise click.BadParameter("--address is for --backend ray.", param_hint="--address")
    if backend == "ray" and workers is not None:
        raise click.BadParameter("--workers is for --backend local; with Ray, size jobs with --num-cpus/--num-gpus.",
                                 param_hint="--workers")
    try:
        spec = trusted_sweep(load_sweep_file(spec_file), f"sweep file {str(spec_file)!r}", trust_remote_code, max_jobs)
        executor = (RayExecutor(address, num_cpus, num_gpus, max_retries) if backend == "ray" else LocalExecutor(workers))
        out = out_dir or Path("outputs") / "sweeps" / spec.name
        click.echo(f"sweep {spec.name!r}: {spec.n_jobs} jobs -> {out}", err=True)
        outcome = run_sweep(spec, out, executor=executor, base_dir=spec_file.resolve().parent,
                            report=not no_report, progress=lambda line: click.echo(line, err=True))
    except UserInputError as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    click.echo(f"{plural(outcome.done, 'job')} ran, {outcome.skipped} {'was' if outcome.skipped == 1 else 'were'} "
               f"complete, {len(outcome.failed)} failed; {plural(outcome.episodes_added, 'episode')} added, "
               f"{plural(outcome.episodes_stored, 'episode')} now stored in {out / 'results.sqlite'}")
    if outcome.report is not None:
        click.echo(f"report: {outcome.report['paths']['md']}")
    if outcome.failed:
        click.echo(f"Error: {len(outcome.failed)} job(s) failed; re-run the same command to retry them. First error:\n"
                   f"  {outcome.failed[0][0]}: {outcome.failed[0][1]}", err=True)
        sys.exit(EXIT_RUNTIME_ERROR)
    sys.exit(EXIT_OK)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("sweep_dir", type=UsablePath("any", must_exist=True))
@click.option("--out", "-o", "out_dir", type=UsablePath("dir", writable=True), default=None,
              help="Where the report goes [default: SWEEP_DIR].")
def report(sweep_dir: Path, out_dir: Path | None) -> None:
    """Build report.md, report.json and plots from SWEEP_DIR's results store alone."""
    from fasteval.types.errors import UserInputError
    from fasteval.doors.sweep.report import write_report

    try:
        doc = write_report(sweep_dir, out_dir)
    except UserInputError as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    for path in doc["paths"].values():
        click.echo(f"wrote {path}")
    if not isinstance(doc["plots"], list):
        click.echo(doc["plots"], err=True)
