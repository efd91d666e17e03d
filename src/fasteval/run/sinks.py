"""Where results go besides ``eval_info.json``: TensorBoard, Weights & Biases, and table exports.

* ``--log tensorboard:DIR``: the overall aggregates, the per-group and per-task aggregates as
  scalars (step 0), the resolved config as text, and the videos of ``result.video_paths`` as video
  summaries (best effort: TensorBoard's video encoder needs ``moviepy``; a video that cannot be
  written is reported and skipped). Needs ``pip install tensorboard`` (extra ``tensorboard``).
* ``--log wandb:PROJECT``: the same scalars logged and put in the run summary, the config as the
  run config, videos as ``wandb.Video``. Honours ``WANDB_MODE=offline`` and ``WANDB_DIR``.
  Needs ``pip install wandb`` (extra ``wandb``).
* ``--export parquet`` / ``--export csv``: the per-episode table as ``episodes.parquet`` (needs
  ``pyarrow``, extra ``parquet``) or ``episodes.csv``, one row per episode, the columns of
  ``fasteval.types.results.EPISODE_FIELDS`` in episode order.

Names of the scalars (``prefix`` defaults to ``eval/``)::

    eval/avg_sum_reward, eval/pc_success, eval/pc_success_ci95_low, ...      (result.to_dict)
    eval/per_group/<group>/avg_sum_reward, ...
    eval/per_task/<group>/<task_id>/avg_sum_reward, ...

Missing packages are found when the options are read, before anything runs.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import math
import sys
from pathlib import Path
from typing import Any, Iterable

from fasteval.types.errors import UserInputError
from fasteval.types.files import atomic_file
from fasteval.types.results import EPISODE_FIELDS, EpisodeTable

LOG_KINDS = ("tensorboard", "wandb")
EXPORT_FORMATS = ("parquet", "csv")


def metrics(result: Any, prefix: str = "eval/") -> dict[str, float]:
    """Flat scalars: overall (``result.to_dict``), per group and per task."""
    out = dict(result.to_dict(prefix=prefix))
    for group, agg in result.per_group().items():
        out.update(_scalars(agg, f"{prefix}per_group/{group}/"))
    for task in result.per_task():
        out.update(_scalars(task["aggregated"], f"{prefix}per_task/{task['task_group']}/{task['task_id']}/"))
    return out


def _scalars(agg: dict[str, Any], prefix: str) -> dict[str, float]:
    out = {f"{prefix}{k}": float(v) for k, v in agg.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    ci = agg.get("pc_success_ci95")
    if isinstance(ci, (list, tuple)) and len(ci) == 2:
        out[f"{prefix}pc_success_ci95_low"], out[f"{prefix}pc_success_ci95_high"] = float(ci[0]), float(ci[1])
    return out


def _need(module: str, pip_name: str, what: str, extra: str | None = None) -> None:
    """Refuse ``what`` when ``module`` is missing, naming the package and fasteval's extra that installs it
    (``extra``: the extra's name where it differs from the package's, as ``parquet`` for pyarrow)."""
    if importlib.util.find_spec(module) is None:
        raise UserInputError(f"{what} needs the {pip_name!r} package, which is not installed: pip install {pip_name} "
                             f"(or, in the fasteval checkout, ./scripts/install.sh {extra or pip_name}).")


class TensorBoardSink:
    """``tensorboard:DIR``: an event file in DIR (see the module docstring)."""

    name = "tensorboard"

    def __init__(self, log_dir: str):
        _need("tensorboard", "tensorboard", "--log tensorboard:DIR")
        self.log_dir = Path(log_dir)

    def write(self, result: Any, spec: Any, out_dir: Path | None = None, step: int = 0) -> str:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(log_dir=str(self.log_dir))
        try:
            for tag, value in metrics(result).items():
                writer.add_scalar(tag, value, global_step=step)
            if spec is not None:
                writer.add_text("eval/config", "```\n" + json.dumps(_config(spec, out_dir), indent=2) + "\n```", step)
            videos = list(result.video_paths)
            if videos and importlib.util.find_spec("moviepy") is None:  # add_video would print and write nothing
                print(f"fasteval: tensorboard: skipped video summaries of {len(videos)} videos (they need moviepy: "
                      "pip install moviepy); the videos are in the output folder.", file=sys.stderr)
                videos = []
            for i, path in enumerate(videos):
                try:
                    frames = _read_video(path)
                    writer.add_video(f"eval/video/{i}", frames, global_step=step, fps=_fps(path))
                except Exception as exc:  # best effort: say which video and why
                    print(f"fasteval: tensorboard: skipped video {path} ({type(exc).__name__}: {exc})", file=sys.stderr)
        finally:
            writer.close()
        return str(self.log_dir)


class WandbSink:
    """``wandb:PROJECT``: one W&B run (offline when ``WANDB_MODE=offline``)."""

    name = "wandb"

    def __init__(self, project: str):
        _need("wandb", "wandb", "--log wandb:PROJECT")
        self.project = project

    def write(self, result: Any, spec: Any, out_dir: Path | None = None, step: int = 0) -> str:
        import wandb

        run = wandb.init(project=self.project, name=Path(out_dir).name if out_dir is not None else None,
                         job_type="eval", config=_config(spec, out_dir) if spec is not None else None)
        try:
            scalars = metrics(result)
            run.log(scalars, step=step)
            run.summary.update(scalars)
            for i, path in enumerate(result.video_paths):
                try:
                    run.log({f"eval/video/{i}": wandb.Video(str(path), format=Path(path).suffix.lstrip(".") or "mp4")},
                            step=step)
                except Exception as exc:
                    print(f"fasteval: wandb: skipped video {path} ({type(exc).__name__}: {exc})", file=sys.stderr)
            where = f"wandb project {self.project!r} ({run.dir})"
        finally:
            run.finish()
        return where


def parse_log_target(text: str) -> TensorBoardSink | WandbSink:
    """``tensorboard:DIR`` or ``wandb:PROJECT`` -> a sink (checks that its package is installed)."""
    kind, sep, target = text.partition(":")
    kind = kind.strip().lower()
    if kind not in LOG_KINDS:
        close = difflib.get_close_matches(kind, LOG_KINDS, n=1, cutoff=0.5)
        raise UserInputError(f"--log {text!r}: expected tensorboard:DIR or wandb:PROJECT, got kind {kind!r}."
                             + (f" Did you mean {close[0]}:{target or '...'}?" if close else ""))
    if not sep or not target.strip():
        raise UserInputError(f"--log {text!r}: expected {kind}:{'DIR' if kind == 'tensorboard' else 'PROJECT'} "
                             f"(e.g. --log {kind}:{'runs/eval' if kind == 'tensorboard' else 'my-project'}).")
    return TensorBoardSink(target) if kind == "tensorboard" else WandbSink(target)


def check_export_formats(formats: Iterable[str]) -> None:
    for fmt in formats:
        if fmt not in EXPORT_FORMATS:
            raise UserInputError(f"--export {fmt!r}: expected one of {', '.join(EXPORT_FORMATS)}.")
        if fmt == "parquet":
            _need("pyarrow", "pyarrow", "--export parquet", extra="parquet")


def export_tables(result: Any, out_dir: str | Path, formats: Iterable[str]) -> list[tuple[str, Path]]:
    """Write ``episodes.<fmt>`` for each format into ``out_dir``; returns ``[(format, path)]``."""
    written = []
    for fmt in dict.fromkeys(formats):
        path = Path(out_dir) / f"episodes.{fmt}"
        (write_parquet if fmt == "parquet" else write_csv)(result.per_episode, path)
        written.append((fmt, path))
    return written


def _columns(records: Any) -> list[str]:
    if isinstance(records, EpisodeTable):
        return list(records.fields)
    extra = [k for r in records for k in r if k not in EPISODE_FIELDS]
    return [*EPISODE_FIELDS, *dict.fromkeys(extra)]


def write_parquet(records: Any, path: str | Path) -> Path:
    """The per-episode table (an :class:`~fasteval.types.results.EpisodeTable` or a list of dicts) as
    Parquet, one row per episode; NaN rewards stay NaN. A table's columns go over without rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = _columns(records)
    if isinstance(records, EpisodeTable):
        table = pa.table({c: (records.column(c) if c in records.columns else records.column(c).tolist()) for c in columns})
    else:
        table = pa.table({c: [_plain(r.get(c)) for r in records] for c in columns})
    with atomic_file(path, "wb") as f:
        pq.write_table(table, f)
    return Path(path)


def write_csv(records: Any, path: str | Path) -> Path:
    import csv

    columns = _columns(records)
    with atomic_file(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for record in records:
            writer.writerow({c: _plain(record.get(c)) for c in columns})
    return Path(path)


def _plain(value: Any) -> Any:
    """NumPy scalars -> Python scalars (pyarrow and csv want plain values)."""
    return value.item() if hasattr(value, "item") and not isinstance(value, (list, dict, str)) else value


def _config(spec: Any, out_dir: Path | None) -> dict[str, Any]:
    from fasteval.run.config import config_document

    return config_document(spec, out_dir)


def _read_video(path: str | Path) -> Any:
    """A video file -> a ``(1, T, C, H, W)`` uint8 tensor for ``SummaryWriter.add_video``."""
    import imageio.v3 as iio
    import numpy as np
    import torch

    frames = np.asarray(iio.imread(str(path)))  # (T, H, W, C)
    if frames.ndim != 4:
        raise ValueError(f"expected frames of shape (T, H, W, C), got {frames.shape}")
    return torch.from_numpy(np.ascontiguousarray(frames[..., :3].transpose(0, 3, 1, 2)))[None]


def _fps(path: str | Path) -> int:
    try:
        import imageio.v3 as iio

        fps = iio.immeta(str(path)).get("fps")
        return int(round(fps)) if fps and math.isfinite(fps) else 10
    except Exception:
        return 10
