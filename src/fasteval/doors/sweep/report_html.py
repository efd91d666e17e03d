"""The sweep's HTML page (``report.html``) and one run page per cell (``cells/<policy>__<env>/report.html``).

The pages are drawn by :mod:`fasteval.run.report_html` from plain documents: the sweep report
document (:func:`fasteval.doors.sweep.report.report_document`, written with the Markdown report
by :func:`fasteval.doors.sweep.report.write_report`), and an ``eval_info``-shaped document per
cell, built here from its stored episodes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from fasteval.types.results import EPISODE_FIELDS, EvalResult

CellKey = tuple[str, str]


def cell_documents(jobs: list[dict[str, Any]], episodes: list[dict[str, Any]]) -> dict[CellKey, dict[str, Any]]:
    """``(policy name, env name) -> eval_info document`` of each cell's stored episodes, with its
    failed jobs as errors (``"kind": "job"``) and a status (done, partial, failed)."""
    names: dict[tuple[str, str, str], CellKey] = {}
    cell_jobs: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for job in jobs:
        key = (job["policy_digest"], job["env_id"], job["env_kwargs"])
        names[key] = (job["policy_name"], job["env_name"])
        cell_jobs.setdefault(key, []).append(job)
    by_cell: dict[tuple[str, str, str], list[dict[str, Any]]] = {key: [] for key in names}
    for ep in episodes:
        by_cell.setdefault((ep["policy_digest"], ep["env_id"], ep["env_kwargs"]), []).append(ep)
    out = {}
    for key, eps in by_cell.items():
        if key not in names:
            continue
        js = cell_jobs[key]
        records = [{k: ep.get(k) for k in EPISODE_FIELDS} for ep in eps]
        for r in records:
            r["has_success_signal"] = True if r["has_success_signal"] is None else bool(r["has_success_signal"])
            r["success"] = bool(r["success"])
        errors = [{"kind": "job", "final": True, "stage": "job", "seed": j["seed"], "episode_ix": None,
                   "error": f"seeds {j['seed']}..{j['seed'] + j['n_episodes'] - 1}: {j['error']}"}
                  for j in js if j["status"] == "failed"]
        expected = sum(j["n_episodes"] for j in js)
        policy, env = names[key]
        blocks = sorted((j["seed"], j["n_episodes"]) for j in js)
        meta = {"policy": js[0]["policy_ref"], "env": key[1], "env_kwargs": json.loads(key[2]) if key[2] else {},
                "n_episodes": expected, "policy_digest": key[0],
                "seeds": ", ".join(f"{s}..{s + n - 1}" for s, n in blocks) + " (seed blocks; episode i of a block uses its first seed + i)"}
        result = EvalResult(records, eval_s=float(sum(j["eval_s"] for j in js)), meta=meta, errors=errors)
        doc = result.to_eval_info()
        doc["policy_digest"] = key[0]
        doc["status"] = "failed" if errors else ("done" if len(records) >= expected else "partial")
        doc["overall"]["n_failed_episodes"] = max(0, expected - len(records))
        out[names[key]] = doc
    return out


def write_sweep_html(doc: Mapping[str, Any], out_dir: str | Path, jobs: list[dict[str, Any]],
                     episodes: list[dict[str, Any]]) -> Path:
    """Write ``out_dir/report.html`` and the cell pages; ``doc``: the sweep report document (its cells
    keep their ``returns``), ``jobs`` and ``episodes``: the store's rows it was built from."""
    from fasteval.run.report_html import write_sweep_report

    return write_sweep_report(doc, Path(out_dir), cell_documents(jobs, episodes))
