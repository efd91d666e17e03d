"""The sweep report, built from the results store alone (``fasteval report DIR``).

Writes into the folder:

* ``report.json``: cells (policy x env) with episodes, success % and its Wilson 95% interval
  (``success_signal`` False and the success numbers ``null`` when no env of the cell ever reported
  ``info["is_success"]``: its 0% would be an artefact, so the report says "no success signal"),
  mean return and its bootstrap 95% interval, NaN-reward episodes, env steps, failed jobs and
  their errors; per policy, the mean and IQM across envs of the env success rates, with intervals
  for a fixed set of envs (:mod:`fasteval.types.stratified`: each env's episodes a stratum; envs with
  a success signal only); paired comparisons of policies on the same episodes, by the one paired
  test of ``fasteval compare`` (:func:`fasteval.types.comparison.compare_task`: McNemar's exact test
  for success, where the env has a success signal, and the paired t-test and t-interval of the mean
  return difference B - A, B the policy listed later: the verdicts test the mean difference shown; the
  signed-rank p stays beside it as a secondary statistic), with Holm's adjustment across every test the report
  shows (``p_holm``); per env, its policies ranked with the best named (``best_per_env``);
  rliable's performance profiles (``profiles``) and average probability of improvement (``improvement``);
  totals (episodes, env steps, wall time, episodes/s). NaN is written as ``null``.

  A sweep whose jobs stopped on their data (``options.stop_when``) chose each seed block's n from its
  episodes: its success intervals are then the anytime-valid betting confidence sequence (a cell's
  blocks, in seed order, feed one sequence; across envs each env's at ``1 - 0.05 / E``, Bonferroni),
  and its paired tests are descriptive (``interval_basis``, ``paired_tests``): no paired verdict is given.
* ``report.md``: the same as tables, under a one-sentence summary (cells complete, partial and
  failed, and whether a retry could help the failed ones: :mod:`fasteval.doors.sweep.retry`),
  rendered by :mod:`fasteval.render.sweep_markdown`.
* ``report.html``: the same as one self-contained page (sortable tables, per-env plots), with a
  run page per cell under ``cells/`` (:mod:`fasteval.render.html`; each cell's document is built by
  :mod:`fasteval.doors.sweep.cells` from its stored episodes).
* ``success.png`` and ``returns.png`` (:mod:`fasteval.render.sweep_plots`). Without matplotlib
  the plots are skipped and the report says so.

This module computes; the views render the document it returns.

Bootstrap intervals use ``seed=0``, so a report built twice from one store is identical apart
from its ``generated_at`` time.
"""

from __future__ import annotations

import math
import time
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

from fasteval.types.comparison import DESCRIPTIVE, compare_task, finish
from fasteval.types.sequential.stopped import METHOD as STOPPED_METHOD, sequence_bounds, simultaneous_bounds
from fasteval.types.stats import (
    average_probability_of_improvement,
    bootstrap_mean_ci,
    iqm,
    performance_profile,
    wilson_interval,
)
from fasteval.types.stratified import IQM_METHOD, MEAN_METHOD, iqm_interval, stratified_interval
from fasteval.doors.sweep.cells import cell_documents
from fasteval.doors.sweep.retry import cell_retry_verdict
from fasteval.doors.sweep.store import Store
from fasteval.render.html import write_sweep_report
from fasteval.render.sweep_markdown import render_markdown
from fasteval.render.sweep_plots import PLOTS_MISSING, plot_report
from fasteval.render.words import plural
from fasteval.types.files import write_text_atomic
from fasteval.types.results import write_json_atomic


DIRECTION = "B - A"
"""The one direction of every difference fasteval reports (sweep and compare alike): the later
policy (B, the candidate) minus the earlier one (A, the baseline); positive means B did better."""


def _cell_key(row: dict[str, Any]) -> tuple[str, str, str]:
    return (row["policy_digest"], row["env_id"], row["env_kwargs"])


def planned_rows(store: Store) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The store's jobs and episodes that belong to the latest sweep spec run into it: the cells the
    report shows. A cell no longer in the spec (an env id fixed after a typo, a dropped policy) leaves the
    report; its rows stay in the store. A store written before plans were kept: every row."""
    jobs, episodes = store.jobs(), store.episodes()
    plan = store.planned_job_ids()
    if plan is None:
        return jobs, episodes
    jobs = [j for j in jobs if j["job_id"] in plan]
    blocks: dict[tuple[str, str, str, str], list[range]] = {}
    for j in jobs:  # an episode belongs by its key and seed (an earlier plan's job may have stored it)
        blocks.setdefault((*_cell_key(j), j["task"]), []).append(range(j["seed"], j["seed"] + j["n_episodes"]))
    return jobs, [e for e in episodes if any(e["seed"] in r for r in blocks.get((*_cell_key(e), e["task"]), ()))]



def stopped_rule(store: Store) -> str | None:
    """The ``stop_when`` rule the store's episodes were made with (its remembered settings), or None."""
    import json

    settings = store.meta("settings")
    return (json.loads(settings) or {}).get("stop_when") if settings else None


def ranked_by(store: Store) -> str | None:
    """The ``rank_by`` option the store's sweep was planned with (its remembered settings), or None."""
    import json

    settings = store.meta("settings")
    return (json.loads(settings) or {}).get("rank_by") if settings else None


def build_report(store: Store) -> dict[str, Any]:
    """The report document (plain data) from the store's jobs, episodes and runs (:func:`planned_rows`)."""
    return report_document(*planned_rows(store), store.runs(), store.path, stop_when=stopped_rule(store),
                           rank_by=ranked_by(store))


def report_document(jobs: list[dict[str, Any]], episodes: list[dict[str, Any]], runs: list[dict[str, Any]],
                    store_file: Any, stop_when: str | None = None, rank_by: str | None = None) -> dict[str, Any]:
    """:func:`build_report` from rows already read (the HTML pages reuse the same rows). ``stop_when``: the
    rule the jobs stopped by (their n came from the data: the intervals are then anytime-valid ones)."""
    policies: dict[str, str] = {}  # digest -> name, in first-seen (spec) order; later names win
    envs: dict[tuple[str, str], str] = {}
    for job in jobs:
        policies[job["policy_digest"]] = job["policy_name"]
        envs[(job["env_id"], job["env_kwargs"])] = job["env_name"]
    by_cell: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for ep in episodes:
        by_cell.setdefault(_cell_key(ep), []).append(ep)
    jobs_by_cell: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for job in jobs:
        jobs_by_cell.setdefault(_cell_key(job), []).append(job)

    cells = []
    for digest, policy_name in policies.items():
        for (env_id, env_kwargs), env_name in envs.items():
            key = (digest, env_id, env_kwargs)
            if key not in jobs_by_cell and key not in by_cell:
                continue
            cells.append(_cell(policy_name, env_name, env_id, env_kwargs, by_cell.get(key, []), jobs_by_cell.get(key, []),
                               stopped=stop_when is not None))

    paired = _paired(policies, envs, by_cell)
    if stop_when is not None:  # fixed-n tests after a data-dependent stop are description: no verdict rests on them
        for row in paired:
            row["verdict"] = None
    n = len(episodes)
    steps = int(sum(ep["length"] for ep in episodes))
    wall_s = float(sum(max(0.0, (r["finished_at"] or r["last_commit_at"]) - r["started_at"]) for r in runs))
    status_counts = {s: sum(1 for j in jobs if j["status"] == s) for s in ("pending", "running", "done", "failed")}
    return {
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "store": str(store_file),
        "sweep": sweep_facts(runs),
        "summary": summary_line(cells, status_counts),
        "stop_when": stop_when,
        "interval_basis": STOPPED_METHOD if stop_when is not None else "fixed n",
        "paired_tests": DESCRIPTIVE if stop_when is not None else "fixed n",
        "cells": cells,
        "across_envs": _across_envs(policies, envs, episodes, stopped=stop_when is not None),
        "paired": paired,
        "rank_by": rank_by,
        "best_per_env": best_per_env(cells, paired, rank_by),
        "profiles": _profiles(policies, envs, episodes),
        "improvement": _improvement(policies, envs, by_cell),
        "totals": {
            "episodes": n,
            "env_steps": steps,
            "wall_s": wall_s,
            "engine_s": float(sum(j["eval_s"] for j in jobs)),
            "episodes_per_s": n / wall_s if wall_s > 0 else math.nan,
            "steps_per_s": steps / wall_s if wall_s > 0 else math.nan,
            "runs": len(runs),
            "jobs": status_counts,
        },
    }


def sweep_facts(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The sweep's name, seeds, spec, and the fasteval version and git commit of its last run (the store's ``runs``
    table), for the page's provenance (issue 42: the page lacked them); ``None`` before any run."""
    if not runs:
        return None
    import json

    spec = json.loads(runs[-1]["spec"])
    prov = spec.pop("provenance", None) or {}
    return {"name": spec.get("name"), "seeds": spec.get("seeds"), "episodes": spec.get("episodes"), "spec": spec,
            "fasteval_version": prov.get("fasteval_version"), "git": prov.get("git")}


def summary_line(cells: list[dict[str, Any]], jobs: dict[str, int]) -> str:
    """One sentence on the state of the sweep: cells complete, partial and failed (and whether a retry
    could help the failed ones), episodes stored against planned, and the jobs by status."""
    counts = {s: sum(1 for c in cells if c["status"] == s) for s in ("done", "partial", "failed")}
    stored, planned = sum(c["episodes"] for c in cells), sum(c["expected_episodes"] for c in cells)
    text = (f"{plural(len(cells), 'cell')} (policy x env): {counts['done']} complete, {counts['partial']} partial, "
            f"{counts['failed']} with failed jobs; {stored} of {planned} planned episodes stored. "
            f"Jobs: {jobs['done']} done, {jobs['failed']} failed, {jobs['pending'] + jobs['running']} not finished.")
    verdicts = [c["retry"] for c in cells if c.get("retry")]
    hopeless = sum(1 for v in verdicts if v["helps"] is False)
    if verdicts and hopeless == len(verdicts):
        text += (f" A retry cannot help the {plural(len(verdicts), 'failed cell')}: bad input, which fails the same way "
                 "every time (fix the sweep file or the checkpoint first).")
    elif hopeless:
        text += (f" A retry cannot help {hopeless} of the {len(verdicts)} failed cells (bad input: fix it first); "
                 "re-running the same command retries the others.")
    elif verdicts:
        text += " Re-running the same command retries the failed jobs."
    return text


def has_success_signal(eps: list[dict[str, Any]]) -> bool:
    """The one rule (:func:`fasteval.types.eval_result.has_success_signal`) on stored episodes: an unknown
    flag (``None``: a store written before it was recorded) counts as reporting; no episodes, no signal."""
    from fasteval.types.eval_result import has_success_signal as rule

    return rule([ep.get("has_success_signal") for ep in eps])


def _in_seed_order(eps: list[dict[str, Any]]) -> np.ndarray:
    """A cell's successes in seed order: its seed blocks one after another, each in episode order (the
    stream one confidence sequence reads across blocks that each stopped on their own)."""
    return np.asarray([bool(ep["success"]) for ep in sorted(eps, key=lambda ep: (ep["task"], ep["seed"]))], dtype=np.float64)


def _cell(policy: str, env: str, env_id: str, env_kwargs: str, eps: list[dict[str, Any]], jobs: list[dict[str, Any]],
          stopped: bool = False) -> dict[str, Any]:
    n = len(eps)
    wins = sum(ep["success"] for ep in eps)
    returns = np.asarray([ep["sum_reward"] for ep in eps], dtype=np.float64)
    max_rewards = np.asarray([ep.get("max_reward", math.nan) for ep in eps], dtype=np.float64)
    lo, hi = sequence_bounds(_in_seed_order(eps), 0.95) if stopped and n else wilson_interval(wins, n)
    failed = [j for j in jobs if j["status"] == "failed"]
    signal = has_success_signal(eps)
    if not signal:  # 0 of n by construction: not a measurement
        wins, lo, hi = None, math.nan, math.nan
    expected = int(sum(j["n_episodes"] for j in jobs))
    error_texts = [f"seeds {j['seed']}..{j['seed'] + j['n_episodes'] - 1}: {j['error']}" for j in failed]
    return {
        "policy": policy,
        "env": env,
        "env_id": env_id,
        "env_kwargs": env_kwargs,
        "episodes": n,
        "expected_episodes": expected,
        "status": "failed" if failed else ("done" if n >= expected else "partial"),
        "success_signal": signal,
        "successes": None if wins is None else int(wins),
        "success_pct": 100.0 * wins / n if n and wins is not None else math.nan,
        "success_ci95": [100.0 * lo, 100.0 * hi],
        "success_ci95_method": STOPPED_METHOD if stopped else "Wilson score (fixed n)",
        "mean_return": float(returns.mean()) if n else math.nan,
        "return_ci95": list(bootstrap_mean_ci(returns)),
        "mean_max_reward": float(max_rewards.mean()) if n else math.nan,
        "max_reward_ci95": list(bootstrap_mean_ci(max_rewards)),
        "return_iqm": float(iqm(returns)) if n else math.nan,  # the page's IQM column, in report.json too
        "nan_reward_episodes": int(sum(1 for ep in eps if ep["nan_rewards"] > 0)),
        "env_steps": int(sum(ep["length"] for ep in eps)),
        "errors": len(failed),
        "error_texts": error_texts,
        "retry": cell_retry_verdict(error_texts),
        "returns": returns.tolist(),
    }


def _across_envs(policies: dict[str, str], envs: dict[tuple[str, str], str], episodes: list[dict[str, Any]],
                 stopped: bool = False) -> list[dict[str, Any]]:
    """Per policy: the mean and the IQM over envs of the env success rates (all of an env's episodes, every seed
    block), with intervals for a fixed set of envs (:mod:`fasteval.types.stratified`), or, for a sweep that
    stopped on its data, from each env's anytime-valid sequence at ``1 - 0.05 / E`` (Bonferroni over envs: the
    mean of the bounds, and the IQM of the bounds, which the IQM's monotonicity makes valid)."""
    cell_eps: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for ep in episodes:
        cell_eps.setdefault(_cell_key(ep), []).append(ep)
    out = []
    for digest, name in policies.items():
        keys = [(digest, env_id, kw) for (env_id, kw) in envs
                if (digest, env_id, kw) in cell_eps and has_success_signal(cell_eps[(digest, env_id, kw)])]
        if not keys:  # no env with a success signal: its 0% would drag every aggregate down
            continue
        wins = [int(sum(bool(ep["success"]) for ep in cell_eps[k])) for k in keys]
        counts = [len(cell_eps[k]) for k in keys]
        if stopped:
            bounds = np.array(simultaneous_bounds([_in_seed_order(cell_eps[k]) for k in keys], 0.95))
            rates = np.asarray(wins) / np.asarray(counts)
            mean = (float(rates.mean()), float(bounds[:, 0].mean()), float(bounds[:, 1].mean()))
            middle = (iqm(rates), iqm(bounds[:, 0]), iqm(bounds[:, 1]))
            methods = (f"{STOPPED_METHOD}, each env at 1 - 0.05/E, the mean of the bounds",
                       f"{STOPPED_METHOD}, each env at 1 - 0.05/E, the IQM of the bounds")
        else:
            mean, middle, methods = stratified_interval(wins, counts), iqm_interval(wins, counts), (MEAN_METHOD, IQM_METHOD)
        out.append({
            "policy": name,
            "envs": len(keys),
            "runs_per_env": [len({ep["job_id"] for ep in cell_eps[k]}) for k in keys],
            "episodes_per_env": counts,
            "mean_success_pct": 100.0 * mean[0],
            "mean_success_ci95": [100.0 * mean[1], 100.0 * mean[2]],
            "mean_success_method": methods[0],
            "iqm_success_pct": 100.0 * middle[0],
            "iqm_success_ci95": [100.0 * middle[1], 100.0 * middle[2]],
            "iqm_success_method": methods[1],
        })
    return out


def _paired(policies: dict[str, str], envs: dict[tuple[str, str], str], by_cell: dict[tuple[str, str, str], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Every pair of policies on every env, over the episodes both have (same task and seed): A is the policy
    listed first, B the later one, differences B - A. The tests are ``fasteval compare``'s
    (:func:`~fasteval.types.comparison.compare_task`: McNemar's exact test, the paired t-test of the mean return
    difference), and Holm's
    adjustment runs across the whole family the report shows (:func:`~fasteval.types.comparison.finish`):
    every success test, and every return test, of every pair on every env."""
    rows, tasks = [], []
    for (env_id, kw), env_name in envs.items():
        for (da, na), (db, nb) in combinations(policies.items(), 2):
            a = {(ep["task"], ep["seed"]): ep for ep in by_cell.get((da, env_id, kw), [])}
            b = {(ep["task"], ep["seed"]): ep for ep in by_cell.get((db, env_id, kw), [])}
            common = sorted(set(a) & set(b))
            if not common:
                continue
            signal = has_success_signal([*a.values(), *b.values()])
            tasks.append(compare_task([bool(a[k]["success"]) for k in common], [bool(b[k]["success"]) for k in common],
                                      [a[k]["sum_reward"] for k in common], [b[k]["sum_reward"] for k in common],
                                      has_success=signal))
            rows.append({"env": env_name, "a": na, "b": nb, "episodes": len(common), "success_signal": signal})
    if tasks:
        finish(tasks)
    out = []
    for row, task in zip(rows, tasks):
        s, r = task["success"], task["return"]
        test = None if s is None else {
            "only_a": s["only_a"], "only_b": s["only_b"], "n_discordant": s["n_discordant"], "n_pairs": row["episodes"],
            "p_value": s["p_value"], "p_holm": s["p_holm"], "method": "exact binomial",
            "success_diff": s["diff"], "success_diff_ci": s["diff_ci"]}
        out.append({**row, "success_mcnemar": test,
                    "return_diff": {"mean_diff": r["diff"], "ci": r["diff_ci"], "ci_method": r["diff_ci_method"],
                                    "n_pairs": row["episodes"], "direction": DIRECTION, "test": r["test"],
                                    "p_value": r["p_value"], "p_holm": r["p_holm"],
                                    "signed_rank_p": r["signed_rank_p"], "secondary": r["secondary"]},
                    "verdict": task["verdict"], "family": len(tasks)})
    return out


def best_per_env(cells: list[dict[str, Any]], paired: list[dict[str, Any]], rank_by: str | None = None) -> list[dict[str, Any]]:
    """Per env, its policies ranked by ``rank_by`` (the sweep's option: ``return`` or ``max_reward``), else by
    the env's metric (success % where the env has a success signal, else mean return), each with its interval (Wilson 95%, or the bootstrap 95% of the mean
    return); ``best`` names the policies tied at the top; ``versus`` is the paired comparison of the
    best with the runner-up as :func:`_paired` computed it (its direction B - A, B listed later).
    Cells without episodes are left out."""
    out = []
    for env in dict.fromkeys(c["env"] for c in cells):
        members = [c for c in cells if c["env"] == env and c["episodes"]]
        if not members:
            continue
        success = any(c["success_signal"] for c in members)
        metric = rank_by if rank_by in ("return", "max_reward") else ("success" if success else "return")
        key, ci_key = {"success": ("success_pct", "success_ci95"), "return": ("mean_return", "return_ci95"),
                       "max_reward": ("mean_max_reward", "max_reward_ci95")}[metric]
        ranked = sorted(members, key=lambda c: (-_orderable(c[key]), c["policy"]))
        ranking = [{"policy": c["policy"], "value": c[key], "ci": c[ci_key], "episodes": c["episodes"]} for c in ranked]
        top = ranking[0]["value"]
        best = [r["policy"] for r in ranking if r["value"] == top and not math.isnan(top)]
        versus = None
        if len(ranking) > 1:
            pair = {ranking[0]["policy"], ranking[1]["policy"]}
            versus = next((p for p in paired if p["env"] == env and {p["a"], p["b"]} == pair), None)
        out.append({"env": env, "metric": metric, "ranking": ranking, "best": best,
                    "versus": versus})
    return out


def _orderable(x: Any) -> float:
    return -math.inf if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


PROFILE_TAUS = [i / 20 for i in range(21)]
"""Thresholds of the success-rate performance profile: 0, 0.05, ..., 1."""


def _block_rates(envs: dict[tuple[str, str], str], episodes: list[dict[str, Any]]) -> dict[tuple[str, str, str], list[float]]:
    """Per cell with a success signal: the success rate of each seed block (job), the sweep's runs."""
    blocks: dict[tuple[str, str, str], dict[str, list[bool]]] = {}
    cell_eps: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for ep in episodes:
        blocks.setdefault(_cell_key(ep), {}).setdefault(ep["job_id"], []).append(ep["success"])
        cell_eps.setdefault(_cell_key(ep), []).append(ep)
    return {k: [float(np.mean(s)) for s in v.values()] for k, v in blocks.items() if has_success_signal(cell_eps[k])}


def _profiles(policies: dict[str, str], envs: dict[tuple[str, str], str], episodes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """rliable's performance profiles of the per-seed-block success rates, per policy, over the envs
    with a success signal (:func:`~fasteval.types.stats.performance_profile`); None without any."""
    rates = _block_rates(envs, episodes)
    out = []
    for digest, name in policies.items():
        per_task = [rates[(digest, e, kw)] for (e, kw) in envs if (digest, e, kw) in rates]
        if per_task:
            out.append({"policy": name, "envs": len(per_task), "runs": int(sum(len(t) for t in per_task)),
                        **performance_profile(per_task, PROFILE_TAUS)})
    return {"score": "success rate of a seed block", "policies": out} if out else None


def _improvement(policies: dict[str, str], envs: dict[tuple[str, str], str],
                 by_cell: dict[tuple[str, str, str], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Every pair of policies (A listed first): rliable's average probability of improvement of B
    over A across the envs both ran, over paired episodes (same task and seed), on each env's metric
    (success where the env has a success signal, else return)."""
    out = []
    for (da, na), (db, nb) in combinations(policies.items(), 2):
        tasks, metrics = [], []
        for (env_id, kw) in envs:
            a = {(ep["task"], ep["seed"]): ep for ep in by_cell.get((da, env_id, kw), [])}
            b = {(ep["task"], ep["seed"]): ep for ep in by_cell.get((db, env_id, kw), [])}
            common = sorted(set(a) & set(b))
            if not common:
                continue
            field = "success" if has_success_signal([*a.values(), *b.values()]) else "sum_reward"
            tasks.append(([float(a[k][field]) for k in common], [float(b[k][field]) for k in common]))
            metrics.append("success" if field == "success" else "return")
        if tasks:
            poi = average_probability_of_improvement(tasks)
            out.append({"a": na, "b": nb, "direction": DIRECTION, "value": poi["value"], "ci": poi["ci"],
                        "envs": poi["tasks"], "by_success": metrics.count("success"), "by_return": metrics.count("return")})
    return out


# -- writing --------------------------------------------------------------------------------------

def _json_safe(value: Any) -> Any:
    if isinstance(value, float):
        return None if math.isnan(value) else value
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def write_report(store_dir: str | Path, out_dir: str | Path | None = None) -> dict[str, Any]:
    """Build the report from ``store_dir``'s store and write it into ``out_dir`` (default: ``store_dir``).

    Returns the report document plus ``paths`` (the files written).
    """
    with Store(store_dir, create=False) as store:
        jobs, episodes = planned_rows(store)
        rule = stopped_rule(store)
        doc = report_document(jobs, episodes, store.runs(), store.path, stop_when=rule, rank_by=ranked_by(store))
    out = Path(out_dir) if out_dir is not None else store.path.parent
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    try:
        paths.update(plot_report(doc, out))
        note = None
    except ImportError:
        note = PLOTS_MISSING
    doc["plots"] = sorted(p.name for p in paths.values()) if paths else note
    public = {**doc, "cells": [{k: v for k, v in c.items() if k != "returns"} for c in doc["cells"]]}
    paths["json"] = write_json_atomic(out / "report.json", _json_safe(public))
    md = out / "report.md"
    write_text_atomic(md, render_markdown(doc, note))
    paths["md"] = md
    paths["html"] = write_sweep_report(doc, out, cell_documents(jobs, episodes, stop_when=rule))  # and a page per cell
    doc["paths"] = {k: str(v) for k, v in paths.items()}
    return doc

