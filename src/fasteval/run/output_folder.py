"""A new run's output folder: new, empty, or a fasteval run's; never a folder of other files.

A run writes ``config.json``, ``eval_info.json``, ``manifest.json``, ``report.html``, its record files and its
videos into its output folder, and replaces what has those names. In a checkpoint folder (``fasteval --policy
ck -o ck``) that is the checkpoint's ``config.json``. So a new run refuses a folder that holds files and no
fasteval run (:func:`new_folder_problem`); a folder that holds a run goes on to the run folder's own rules
(:func:`fasteval.run.durable.check_new_folder`: pass ``--resume``; a suite's task folders resume).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from fasteval.run.folder_lock import LOCK_NAME
from fasteval.run.rundir import EPISODES, ERRORS, MANIFEST

SUITE_TASKS = "tasks"
"""A suite's folder of task runs (``tasks/<group>_<task_id>/manifest.json``: :mod:`fasteval.doors.suites`)."""


def is_fasteval_manifest(path: Path) -> bool:
    """Whether ``path`` is a fasteval run's ``manifest.json`` (a JSON object with ``what``, or an older
    fasteval's ``spec``), as :meth:`fasteval.run.rundir.RunDirectory.read_manifest` accepts it."""
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeError):
        return False
    return isinstance(manifest, dict) and ("what" in manifest or "spec" in manifest)


def holds_fasteval_run(folder: str | os.PathLike) -> bool:
    """Whether ``folder`` holds a fasteval run: its manifest, its record files, or a suite's task runs."""
    folder = Path(folder)
    if is_fasteval_manifest(folder / MANIFEST) or any((folder / name).is_file() for name in (EPISODES, ERRORS)):
        return True
    tasks = folder / SUITE_TASKS
    try:
        return tasks.is_dir() and any(is_fasteval_manifest(task / MANIFEST) for task in tasks.iterdir())
    except OSError:
        return False


def new_folder_problem(folder: str | os.PathLike) -> str | None:
    """Why a new run must not write into ``folder`` (a sentence with the fix), or ``None``: the folder is new,
    empty (but for a fasteval lock file), or holds a fasteval run."""
    folder = Path(folder)
    try:
        names = sorted(entry.name for entry in os.scandir(folder) if entry.name != LOCK_NAME)
    except (FileNotFoundError, NotADirectoryError):
        return None  # a new folder (a file in its place is path_problem's to report)
    except OSError as exc:
        return f"the output folder {str(folder)!r} cannot be read: {exc.strerror or exc}. Choose another --output-dir."
    if not names or holds_fasteval_run(folder):
        return None
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    sibling = folder.absolute().parent / f"{folder.absolute().name}-eval"
    return (f"the output folder {str(folder)!r} is not empty and holds no fasteval run ({shown}): a run writes "
            f"config.json, eval_info.json, manifest.json, report.html and its records there, and would replace files "
            f"fasteval did not write. Choose a new or empty --output-dir (e.g. {sibling}).")
