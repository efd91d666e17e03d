"""``fasteval sweep SPEC`` and ``fasteval report DIR``: parse options, delegate, exit.

Exit codes of ``fasteval sweep``:
  0  every job is complete in the store;
  1  some jobs failed (their errors are in the store and the report; re-run to retry them);
  2  bad input: unreadable or invalid sweep file, unknown env or policy reference, missing Ray,
     a store made with other settings, or a folder another sweep is writing to (nothing ran);
  130/143  stopped by SIGINT/SIGTERM: the first finishes the jobs in flight, a second stops at once
     (:mod:`fasteval.doors.sweep.signals`); the command printed resumes it.

``fasteval report DIR`` rebuilds the report of a sweep folder (it holds ``results.sqlite``:
``report.md``, ``report.json``, the PNG plots and ``report.html`` with a page per cell under
``cells/``, from the store alone; ``--out`` moves them) or of a run folder (it holds
``eval_info.json``: ``report.html``, and for a suite one page per task under ``tasks/``; the page
links its videos and files by relative path, so it is written into the run folder itself). It
exits 0, or 2 when the folder holds neither (or ``--out`` is given for a run folder).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from fasteval.doors.cli import EXIT_BAD_INPUT, EXIT_OK, EXIT_RUNTIME_ERROR, fail
from fasteval.render.words import plural
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
              help="Allow the file's module:callable and path/file.py:callable policies and envs (they run code), "
                   "and env namespaces that are not installed gymnasium plugins (importing one runs it). A sweep "
                   "file cannot allow them itself.")
@click.option("--max-jobs", type=click.IntRange(min=1), default=None,
              help="Most jobs (policies x envs x seed blocks) the file may ask for [default: 10000].")
def sweep(spec_file: Path, out_dir: Path | None, backend: str, workers: int | None, address: str | None,
          num_cpus: float, num_gpus: float, max_retries: int, no_report: bool, trust_remote_code: bool,
          max_jobs: int | None) -> None:
    """Run (or resume) the sweep in SPEC_FILE (.yaml, .toml or .json).

    \b
    Re-running the same command resumes: finished episodes are skipped, failed jobs retried.
    SIGINT/SIGTERM: the first finishes the jobs in flight (exit 130/143), a second stops at once.
    Example:
      fasteval sweep examples/sweep.yaml --workers 2
    """
    from fasteval.types.errors import UserInputError
    from fasteval.doors.sweep.executors import LocalExecutor, RayExecutor
    from fasteval.doors.sweep.runner import run_sweep
    from fasteval.doors.sweep.signals import SweepStop
    from fasteval.doors.sweep.spec import load_sweep_file, trusted_sweep

    if backend == "local" and address is not None:
        raise click.BadParameter("--address is for --backend ray.", param_hint="--address")
    if backend == "ray" and workers is not None:
        raise click.BadParameter("--workers is for --backend local; with Ray, size jobs with --num-cpus/--num-gpus.",
                                 param_hint="--workers")
    out = out_dir
    stop = SweepStop(lambda line: click.echo(line, err=True))
    try:
        spec = trusted_sweep(load_sweep_file(spec_file), f"sweep file {str(spec_file)!r}", trust_remote_code, max_jobs)
        executor = (RayExecutor(address, num_cpus, num_gpus, max_retries) if backend == "ray" else LocalExecutor(workers))
        out = out_dir or Path("outputs") / "sweeps" / spec.name
        click.echo(f"sweep {spec.name!r}: {spec.n_jobs} jobs -> {out}", err=True)
        with stop:
            outcome = run_sweep(spec, out, executor=executor, base_dir=spec_file.resolve().parent,
                                report=not no_report, progress=lambda line: click.echo(line, err=True),
                                stop=stop.requested)
    except UserInputError as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    except KeyboardInterrupt:  # a second signal (or a Ctrl-C before the handlers were in place)
        if out is None or not (Path(out) / "results.sqlite").exists():
            click.echo("Error: interrupted before anything was stored.", err=True)
            sys.exit(stop.exit_code)
        click.echo(f"Error: stopped at once by a second {stop.name}: the episodes finished so far are in "
                   f"{Path(out) / 'results.sqlite'}; no report was written.", err=True)
        click.echo(resume_line(spec_file, out, backend, trust_remote_code), err=True)
        sys.exit(stop.exit_code)
    ran = outcome.done + len(outcome.failed)
    click.echo(f"this run: {plural(ran, 'job')} ran ({outcome.done} finished, {len(outcome.failed)} failed); "
               f"{outcome.skipped} {'was' if outcome.skipped == 1 else 'were'} already complete and skipped; "
               f"{plural(outcome.episodes_added, 'episode')} added, {plural(outcome.episodes_stored, 'episode')} "
               f"now stored in {out / 'results.sqlite'}")
    if outcome.report is not None:
        click.echo(f"report: {outcome.report['paths']['md']} and {outcome.report['paths']['html']}")
    if stop.received is not None:
        click.echo(f"interrupted by {stop.name}: the jobs in flight finished; {plural(outcome.not_started, 'job')} "
                   f"did not start.", err=True)
        if outcome.failed:
            click.echo(failure_advice(outcome.failed), err=True)
        click.echo(resume_line(spec_file, out, backend, trust_remote_code), err=True)
        sys.exit(stop.exit_code)
    if outcome.failed:
        click.echo(failure_advice(outcome.failed), err=True)
        sys.exit(EXIT_RUNTIME_ERROR)
    sys.exit(EXIT_OK)


def resume_line(spec_file: Path, out: Path, backend: str, trust_remote_code: bool) -> str:
    """How to resume an interrupted sweep: the same command (its folder named, its backend, and the flag a file
    cannot give; workers and resources may change, results do not)."""
    args = ["fasteval", "sweep", str(spec_file), "-o", str(out)]
    if backend != "local":
        args += ["--backend", backend]
    if trust_remote_code:
        args.append("--trust-remote-code")
    return f"Resume with:\n  {shlex.join(args)}"


def failure_advice(failed: list[tuple[str, str]]) -> str:
    """The error lines for failed jobs: whether re-running can help (bad input fails the same way
    every time, see :mod:`fasteval.doors.sweep.retry`), and the first error."""
    from fasteval.doors.sweep.retry import retry_verdict

    hopeless = sum(1 for _, error in failed if retry_verdict(error)["helps"] is False)
    n = len(failed)
    if hopeless == n:
        advice = (f"{plural(n, 'job')} failed with bad input: a retry cannot help. Fix the sweep file or the "
                  "checkpoint, then re-run the same command.")
    elif hopeless:
        advice = (f"{plural(n, 'job')} failed: {hopeless} with bad input (a retry cannot help: fix it first); "
                  f"re-run the same command to retry the other {n - hopeless}.")
    else:
        advice = f"{plural(n, 'job')} failed; re-run the same command to retry {'it' if n == 1 else 'them'}."
    label, error = failed[0]
    return f"Error: {advice} First error:\n  {label}: {error}"


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("folder", type=UsablePath("any", must_exist=True))
@click.option("--out", "-o", "out_dir", type=UsablePath("dir", writable=True), default=None,
              help="Sweeps: where the report goes [default: FOLDER]. Run folders take their report.html in place.")
def report(folder: Path, out_dir: Path | None) -> None:
    """Write the report of FOLDER: a sweep folder (results.sqlite) or a run folder (eval_info.json)."""
    from fasteval.doors.sweep.store import store_path
    from fasteval.types.errors import UserInputError

    try:
        if store_path(folder).is_file():
            _sweep(folder, out_dir)
        elif (Path(folder) / "eval_info.json").is_file():
            if out_dir is not None:
                raise UserInputError(f"--out is for sweep folders: a run's report.html links its videos and files by "
                                     f"relative path, so it is written into {folder}. Drop --out.")
            from fasteval.render.html import write_run_report

            click.echo(f"wrote {write_run_report(folder)}")
        else:
            raise UserInputError(f"no results store at {str(store_path(folder))!r} and no eval_info.json in {str(folder)!r}; "
                                 "expected the folder a `fasteval sweep` wrote (it holds results.sqlite) or the output "
                                 "folder of a `fasteval` run (it holds eval_info.json).")
    except UserInputError as exc:
        fail(str(exc), EXIT_BAD_INPUT)


def _sweep(folder: Path, out_dir: Path | None) -> None:
    from fasteval.doors.sweep.report import write_report

    doc = write_report(folder, out_dir)
    for path in doc["paths"].values():
        click.echo(f"wrote {path}")
    if not isinstance(doc["plots"], list):
        click.echo(doc["plots"], err=True)
