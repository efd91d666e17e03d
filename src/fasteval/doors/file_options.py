"""The options that read and write files around a run: ``--config``, ``--print-config``, ``--log``, ``--export``.

``--config FILE`` sets EvalSpec fields (command-line options win); ``--print-config`` prints the
resolved config and exits; ``--log KIND:TARGET`` and ``--export FORMAT`` write the results to
metric loggers and tables once the run is over (:mod:`fasteval.run.config`, :mod:`fasteval.run.sinks`).
"""

from __future__ import annotations

from typing import Any, Callable

import click

from fasteval.doors.lerobot_options import FASTEVAL, LEROBOT


class FileOptions:
    """The values of ``--config``, ``--print-config``, ``--log`` and ``--export``, popped off the CLI's options."""

    def __init__(self, options: dict[str, Any]):
        self.config_file = options.pop("config_file", None)
        self.print_config = bool(options.pop("print_config", False))
        self.log_targets = tuple(options.pop("log_targets", ()) or ())
        self.export_formats = tuple(options.pop("export_formats", ()) or ())
        self.sinks: list[Any] = []
        self.defaults = FASTEVAL
        """Which defaults the command line got (``lerobot`` / ``fasteval``): saved in ``config.json``."""
        self.backend: dict[str, Any] = {}
        """The run's backend keys (``backend``, ``address``, ...: :data:`fasteval.run.config.BACKEND_DEFAULTS`),
        saved in ``config.json`` for a run on Ray."""

    def resolve(self, ctx: click.Context, spec: Any, output_dir: Any, resume: bool) -> tuple[Any, Any]:
        """Apply ``--config`` (command-line options win) and check the sinks; returns ``(spec, output_dir)``."""
        from fasteval.run.config import apply_config
        from fasteval.types.errors import UserInputError
        from fasteval.run.sinks import check_export_formats, parse_log_target

        if self.config_file is not None:
            if resume:
                raise UserInputError("--resume takes its settings from the run's manifest.json; do not pass --config with it.")
            spec, output_dir = apply_config(ctx, spec, output_dir, self.config_file)
            if self.defaults != LEROBOT:  # the file's values came from the set it names
                from fasteval.run.config import load_config

                self.defaults = load_config(self.config_file).get("defaults", self.defaults)
        self.sinks = [parse_log_target(t) for t in self.log_targets]
        check_export_formats(self.export_formats)
        return spec, output_dir

    def finish(self, spec: Any, out_dir: Any, result: Any) -> list[str]:
        """Write ``config.json``, the exports and the log sinks; returns the problems (empty: all written)."""
        from pathlib import Path

        from fasteval.run.config import CONFIG_FILE_NAME, save_config
        from fasteval.run.sinks import export_tables

        out_dir = Path(out_dir)
        save_config(out_dir / CONFIG_FILE_NAME, spec, out_dir, defaults=self.defaults, backend=self.backend)
        problems = []
        for fmt, path in export_tables(result, out_dir, self.export_formats):
            click.echo(f"wrote {path}")
        from fasteval.types.many_result import ManyPolicyResult

        if self.defaults == LEROBOT and isinstance(result, ManyPolicyResult):  # a many-policy run with LeRobot's flags
            try:
                where = write_lerobot_per_policy(result, out_dir)
                click.echo(f"wrote each checkpoint's eval_info.json in LeRobot's layout under {where}")
            except OSError as exc:  # the run's own eval_info.json holds every number
                problems.append(f"a checkpoint's eval_info.json was not written ({exc})")
        for sink in self.sinks:
            try:
                where = sink.write(result, spec, out_dir)
                click.echo(f"logged to {where}")
            except Exception as exc:  # the results are on disk already; say what failed
                problems.append(f"logging to {sink.name} failed: {type(exc).__name__}: {exc}")
        return problems


def write_lerobot_per_policy(result: Any, out_dir: Any) -> Any:
    """Each policy's own one-policy ``eval_info.json`` (LeRobot's layout: ``per_episode``, ``per_task``,
    ``per_group``, ``overall``), as its own ``lerobot-eval`` run would have written it, in
    ``policies/<name>/eval_info.json`` beside its page; returns the ``policies`` folder."""
    from pathlib import Path

    from fasteval.types.files import safe_filename
    from fasteval.types.results import write_json_atomic

    root = Path(out_dir) / "policies"
    for name in result.names:
        folder = root / safe_filename(name)
        folder.mkdir(parents=True, exist_ok=True)
        write_json_atomic(folder / "eval_info.json", result.policy(name).to_eval_info())
    return root


def file_options(fn: Callable) -> Callable:
    """The click options of :class:`FileOptions`, for ``fasteval.doors.cli.main``."""
    from fasteval.run.paths import UsablePath
    from fasteval.run.sinks import EXPORT_FORMATS

    decorators = [
        click.option("--config", "config_file", type=UsablePath("file", must_exist=True), default=None,
                     help="YAML/JSON/TOML file of EvalSpec fields (plus output_dir); options given on the "
                          "command line win. LeRobot-style flags (--policy.path=..., --env.type=pusht, "
                          "eval.batch_size=8) are accepted too: see docs/lerobot.md."),
        click.option("--print-config", is_flag=True,
                     help="Print the resolved config (JSON, loadable with --config) and exit without running."),
        click.option("--log", "log_targets", multiple=True, metavar="KIND:TARGET",
                     help="Also log the metrics: tensorboard:DIR or wandb:PROJECT (repeatable)."),
        click.option("--export", "export_formats", multiple=True, type=click.Choice(EXPORT_FORMATS),
                     help="Also write the per-episode table as episodes.parquet / episodes.csv (repeatable)."),
    ]
    for decorator in reversed(decorators):
        fn = decorator(fn)
    return fn
