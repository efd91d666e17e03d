"""``fasteval merge DIR... -o OUT``: the shards of one evaluation (``--shard K/N``), merged into one run folder.

The merge itself is :func:`fasteval.run.merge.merge_folders`; this door parses, prints and exits:
0 merged; 2 a bad merge (folders of another evaluation, overlapping or missing episodes, an unfinished
shard), with one line saying which and what to do.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from fasteval.run.paths import UsablePath


@click.command("merge")
@click.argument("folders", nargs=-1, required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--output-dir", "-o", type=UsablePath("dir", writable=True), default=None,
              help="The merged run folder [default: outputs/eval/<time>_<env>].")
@click.option("--report/--no-report", "report", default=True, show_default=True,
              help="Write OUTPUT_DIR/report.html from the merged record.")
def merge(folders: tuple[Path, ...], output_dir: Path | None, report: bool) -> None:
    """Merge the run folders of one evaluation's shards into the one record of the whole evaluation.

    \b
    Example (4 shards, then the merge):
      for k in 0 1 2 3; do fasteval -n 1000 --shard $k/4 -o out/shard$k; done
      fasteval merge out/shard* -o out/all

    Refuses (exit 2) folders of another evaluation (another what, weights or step cap), episodes in two
    folders, episodes in none, and runs that have not completed.
    """
    from fasteval.doors.cli import EXIT_BAD_INPUT, default_output_dir, fail, format_summary, write_html_report
    from fasteval.run.merge import merge_folders
    from fasteval.types.errors import UserInputError

    out = output_dir
    try:
        if out is None:
            from fasteval.run.merge import read_part

            out = default_output_dir(str(read_part(folders[0]).manifest.get("env", "merged")))
        record = merge_folders(folders, out)
    except UserInputError as exc:
        fail(str(exc), EXIT_BAD_INPUT)
        return
    click.echo(format_summary(record, profile=False))
    click.echo(f"merged {len(folders)} run folders ({len(record.per_episode)} episodes) into {Path(out) / 'eval_info.json'}")
    problems = write_html_report(Path(out), record.eval_info_document()) if report else []
    for problem in problems:
        click.echo(f"Error: {problem} (the merged results are in {out})", err=True)
    if problems:
        sys.exit(1)
