"""Self-contained HTML reports (``report.html``) for runs, sweeps and comparisons.

One file per page: styles, the sort script and the plots (inline SVG) are in the file, nothing is
fetched from the network, and videos are linked by relative path, so the folder can be zipped
and shared. Pages aggregate instead of listing every episode: a 100,000-episode run's page stays
well under 5 MB and links ``episodes.jsonl``.

* :func:`write_run_report` — a run folder (``fasteval`` CLI output) or a suite folder (one page
  per task under ``tasks/``, and the suite's page linking them);
* :func:`write_sweep_report` — a sweep's page from the sweep report document;
* :func:`write_compare_report` — a comparison's page from ``compare.json``'s document.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from fasteval.render.html.run_page import RunPageInput, render_run_page
from fasteval.types.files import write_text_atomic

REPORT_NAME = "report.html"
COMPARE_NAME = "compare.html"

__all__ = ["REPORT_NAME", "COMPARE_NAME", "write_run_report", "write_sweep_report", "write_compare_report",
           "render_run_page", "RunPageInput"]


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return None


def write_run_report(folder: str | Path, doc: Mapping[str, Any] | None = None, manifest: Mapping[str, Any] | None = None,
                     config: Mapping[str, Any] | None = None, provenance: Mapping[str, Any] | None = None,
                     name: str = REPORT_NAME, title: str | None = None) -> Path:
    """Write ``folder/report.html`` for a run folder and return its path.

    ``doc`` (the eval_info document, plain or columnar), ``manifest`` and ``config`` are read from
    the folder when not given. The provenance is the manifest's ``"provenance"`` (recorded when
    the run started); without one, the current process's versions and machine are shown, marked
    as such. A suite folder (``tasks/<label>/`` run folders) gets a page per task first, and
    its own page links them. Raises :class:`~fasteval.types.errors.UserInputError` when the
    folder holds no ``eval_info.json``.
    """
    from fasteval.types.errors import UserInputError

    folder = Path(folder)
    if doc is None:
        doc = _read_json(folder / "eval_info.json")
        if not isinstance(doc, dict):
            raise UserInputError(f"{folder}: no readable eval_info.json there; expected the output folder of a fasteval run "
                                 "(or a sweep folder holding results.sqlite).")
    if manifest is None:
        manifest = _read_json(folder / "manifest.json")
    if manifest is None and (folder / "tasks").is_dir():
        manifest = _suite_manifest(folder, doc)
    if config is None:
        config = _read_json(folder / "config.json")
    provenance, current = _provenance(provenance, manifest, folder / "eval_info.json")
    if isinstance(doc.get("policies"), dict):  # a many-policy run: the ranking, and each policy's own page
        from fasteval.render.html.ranking_page import write_ranking_report

        return write_ranking_report(folder, doc, manifest, config, provenance, current, name)
    task_pages = _task_pages(folder, doc, name) if (folder / "tasks").is_dir() else {}
    inp = RunPageInput(doc=doc, page_dir=folder, manifest=manifest if isinstance(manifest, dict) else None,
                       config=config if isinstance(config, dict) else None, provenance=provenance,
                       provenance_is_current=current, task_pages=task_pages, title=title)
    return write_text_atomic(folder / name, render_run_page(inp))


def _suite_manifest(folder: Path, doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """What a suite folder's page needs from its tasks' manifests (a suite has no manifest of its
    own): the first task's policy, digest, seed, provenance; the per-task episode count; the
    status (complete only when every task is)."""
    manifests = [m for m in (_read_json(p / "manifest.json") for p in sorted((folder / "tasks").iterdir()))
                 if isinstance(m, dict)]
    if not manifests:
        return None
    first = dict(manifests[0])
    statuses = [m.get("status") for m in manifests]
    n_tasks = len((doc.get("meta") or {}).get("tasks") or manifests)
    first.update(status=next((st for st in statuses if st != "complete"), "complete"),
                 n_episodes_per_task=first.get("n_episodes"),
                 n_episodes=(first.get("n_episodes") or 0) * n_tasks, env=None, env_kwargs=None)
    if len({m.get("policy_digest") for m in manifests}) > 1:
        first["policy_digest"] = "differs between tasks (see each task's page)"
    return first


def _provenance(given: Mapping[str, Any] | None, manifest: Any, results: Path) -> tuple[Mapping[str, Any] | None, bool]:
    if given is not None:
        return given, False
    if isinstance(manifest, dict) and isinstance(manifest.get("provenance"), dict):
        return manifest["provenance"], False
    from fasteval.run.provenance import collect_provenance

    now = collect_provenance()
    now["command"] = None  # this process's command wrote the page, it did not run the evaluation
    now["cwd"] = None
    try:
        import time

        now["date"] = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(results.stat().st_mtime)) + " (when eval_info.json was written)"
    except OSError:
        now["date"] = None
    return now, True


def _task_pages(folder: Path, doc: Mapping[str, Any], name: str) -> dict[tuple[Any, Any], str]:
    """Write the page of every task run under ``folder/tasks/`` and return their links by task.

    A task folder's own ``eval_info.json`` is not labelled with the suite's task group and id;
    it is matched to the suite's task list (``meta["tasks"]``) by its manifest's env and env
    kwargs."""
    tasks = (doc.get("meta") or {}).get("tasks") or []

    def key(env: Any, kwargs: Any) -> str:
        return json.dumps([env, {k: v for k, v in dict(kwargs or {}).items() if k != "_key"}], sort_keys=True, default=str)

    by_key = {key(t.get("env"), t.get("env_kwargs")): t for t in tasks}
    pages: dict[tuple[Any, Any], str] = {}
    for sub in sorted(p for p in (folder / "tasks").iterdir() if (p / "eval_info.json").is_file()):
        manifest = _read_json(sub / "manifest.json")
        task = by_key.get(key(manifest.get("env"), manifest.get("env_kwargs"))) if isinstance(manifest, dict) else None
        title = f"fasteval task {task['task_group']}/{task['task_id']} {task.get('task') or ''}".rstrip() if task else None
        write_run_report(sub, name=name, title=title)
        if task is not None:
            pages[(task.get("task_group"), task.get("task_id"))] = f"tasks/{sub.name}/{name}"
    return pages


def write_sweep_report(doc: Mapping[str, Any], out_dir: str | Path, cell_docs: Mapping[tuple[str, str], Mapping[str, Any]] | None = None,
                       name: str = REPORT_NAME) -> Path:
    """Write ``out_dir/report.html`` for a sweep (``doc``: :func:`fasteval.doors.sweep.report.build_report`'s
    document) and one run page per cell under ``out_dir/cells/`` from ``cell_docs``
    (``(policy, env) -> eval_info-like document``). Returns the sweep page's path."""
    from fasteval.render.html.sweep_page import render_sweep_page, write_cell_pages

    out_dir = Path(out_dir)
    links = write_cell_pages(cell_docs or {}, out_dir, name)
    return write_text_atomic(out_dir / name, render_sweep_page(doc, links))


def write_compare_report(compare_dict: Mapping[str, Any], out_dir: str | Path, name: str = COMPARE_NAME) -> Path:
    """Write ``out_dir/compare.html`` for ``fasteval compare``'s document (compare.json's schema
    ``fasteval.compare/1``) and return its path."""
    from fasteval.render.html.compare_page import render_compare_page

    out_dir = Path(out_dir)
    return write_text_atomic(out_dir / name, render_compare_page(compare_dict, out_dir))
