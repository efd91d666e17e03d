"""One ``eval_info``-shaped document per sweep cell (policy x env), built from its stored episodes.

:func:`fasteval.doors.sweep.report.write_report` hands them to :mod:`fasteval.render.html`, which
draws a run page per cell (``cells/<policy>__<env>/report.html``) beside the sweep's page.
"""

from __future__ import annotations

import json
from typing import Any

from fasteval.types.results import EPISODE_FIELDS, EvalResult

CellKey = tuple[str, str]


def cell_documents(jobs: list[dict[str, Any]], episodes: list[dict[str, Any]],
                   stop_when: str | None = None) -> dict[CellKey, dict[str, Any]]:
    """``(policy name, env name) -> eval_info document`` of each cell's stored episodes (in seed order), with
    its failed jobs as errors (``"kind": "job"``) and a status (done, partial, failed). ``stop_when``: the rule
    the jobs stopped by (``meta["stop_when"]``: the cell's success interval is then the anytime-valid one)."""
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
        records = [{k: ep.get(k) for k in EPISODE_FIELDS} for ep in sorted(eps, key=lambda ep: (ep["task"], ep["seed"]))]
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
                "seeds": ", ".join(f"{s}..{s + n - 1}" for s, n in blocks) + " (seed blocks; episode i of a block uses its first seed + i)",
                **({"stop_when": stop_when} if stop_when is not None else {})}
        result = EvalResult(records, eval_s=float(sum(j["eval_s"] for j in js)), meta=meta, errors=errors)
        doc = result.to_eval_info()
        doc["policy_digest"] = key[0]
        doc["status"] = "failed" if errors else ("done" if len(records) >= expected else "partial")
        doc["overall"]["n_failed_episodes"] = max(0, expected - len(records))
        out[names[key]] = doc
    return out

