"""The sweep report, built from the results store alone (``fasteval report DIR``).

Writes into the folder:

* ``report.json``: cells (policy x env) with episodes, success % and its Wilson 95% interval
  (``success_signal`` False and the success numbers ``null`` when no env of the cell ever reported
  ``info["is_success"]``: its 0% would be an artefact, so the report says "no success signal"),
  mean return and its bootstrap 95% interval, NaN-reward episodes, env steps, failed jobs and
  their errors; per policy, the mean and IQM across envs of per-seed-block success rates with
  stratified bootstrap intervals (envs with a success signal only); paired comparisons of policies
  on the same episodes (McNemar for success, where the env has a success signal; paired bootstrap
  for return); totals (episodes, env steps, wall time, episodes/s).
  NaN is written as ``null``.
* ``report.md``: the same as tables, under a one-sentence summary (cells complete, partial and
  failed, and whether a retry could help the failed ones: :mod:`fasteval.doors.sweep.retry`).
* ``report.html``: the same as one self-contained page (sortable tables, per-env plots), with a
  run page per cell under ``cells/`` (:mod:`fasteval.doors.sweep.report_html`).
* ``success.png`` (success rate per policy and env, Wilson error bars, one colour per policy; cells
  with episodes and a success signal only, and no file when there is none) and ``returns.png`` (the
  return distribution of each cell in its policy's colour: one column per env with a shared,
  labelled x-axis and shared bins; a cell whose returns are all equal shows a marker line at that
  value; a cell without episodes says so instead of an empty chart), drawn with matplotlib's Agg canvas. Without matplotlib
  the plots are skipped and the report says so.

Bootstrap intervals use ``seed=0``, so a report built twice from one store is identical apart
from its ``generated_at`` time.
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

from fasteval.types.results import write_json_atomic
from fasteval.types.stats import (
    aggregate_iqm,
    aggregate_mean,
    bootstrap_mean_ci,
    mcnemar,
    paired_bootstrap_ci,
    stratified_bootstrap_ci,
    wilson_interval,
)
from fasteval.doors.sweep.retry import cell_retry_verdict
from fasteval.doors.sweep.store import Store

PLOTS = ("success.png", "returns.png")
NO_SIGNAL = "no success signal"
PLOTS_MISSING = "plots skipped: matplotlib is not installed (pip install 'fasteval[sweep]')"


def _cell_key(row: dict[str, Any]) -> tuple[str, str, str]:
    return (row["policy_digest"], row["env_id"], row["env_kwargs"])


def build_report(store: Store) -> dict[str, Any]:
    """The report document (plain data) from the store's jobs, episodes and runs."""
    return report_document(store.jobs(), store.episodes(), store.runs(), store.path)


def report_document(jobs: list[dict[str, Any]], episodes: list[dict[str, Any]], runs: list[dict[str, Any]],
                    store_file: Any) -> dict[str, Any]:
    """:func:`build_report` from rows already read (the HTML pages reuse the same rows)."""
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
            cells.append(_cell(policy_name, env_name, env_id, env_kwargs, by_cell.get(key, []), jobs_by_cell.get(key, [])))

    n = len(episodes)
    steps = int(sum(ep["length"] for ep in episodes))
    wall_s = float(sum(max(0.0, (r["finished_at"] or r["last_commit_at"]) - r["started_at"]) for r in runs))
    status_counts = {s: sum(1 for j in jobs if j["status"] == s) for s in ("pending", "running", "done", "failed")}
    return {
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "store": str(store_file),
        "summary": summary_line(cells, status_counts),
        "cells": cells,
        "across_envs": _across_envs(policies, envs, episodes),
        "paired": _paired(policies, envs, by_cell),
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


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def has_success_signal(eps: list[dict[str, Any]]) -> bool:
    """The one rule (:func:`fasteval.types.eval_result.has_success_signal`) on stored episodes: an unknown
    flag (``None``: a store written before it was recorded) counts as reporting; no episodes, no signal."""
    from fasteval.types.eval_result import has_success_signal as rule

    return rule([ep.get("has_success_signal") for ep in eps])


def _cell(policy: str, env: str, env_id: str, env_kwargs: str, eps: list[dict[str, Any]], jobs: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(eps)
    wins = sum(ep["success"] for ep in eps)
    returns = np.asarray([ep["sum_reward"] for ep in eps], dtype=np.float64)
    lo, hi = wilson_interval(wins, n)
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
        "mean_return": float(returns.mean()) if n else math.nan,
        "return_ci95": list(bootstrap_mean_ci(returns)),
        "nan_reward_episodes": int(sum(1 for ep in eps if ep["nan_rewards"] > 0)),
        "env_steps": int(sum(ep["length"] for ep in eps)),
        "errors": len(failed),
        "error_texts": error_texts,
        "retry": cell_retry_verdict(error_texts),
        "returns": returns.tolist(),
    }


def _across_envs(policies: dict[str, str], envs: dict[tuple[str, str], str], episodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per policy: per-seed-block success rates per env (runs x tasks), mean and IQM with stratified CIs."""
    blocks: dict[tuple[str, str, str], dict[str, list[bool]]] = {}
    cell_eps: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for ep in episodes:
        blocks.setdefault(_cell_key(ep), {}).setdefault(ep["job_id"], []).append(ep["success"])
        cell_eps.setdefault(_cell_key(ep), []).append(ep)
    for key in [k for k, eps in cell_eps.items() if not has_success_signal(eps)]:
        del blocks[key]  # no success signal: its 0% would drag every aggregate down
    out = []
    for digest, name in policies.items():
        per_task = [
            [float(np.mean(s)) for s in blocks[(digest, env_id, kw)].values()]
            for (env_id, kw) in envs if (digest, env_id, kw) in blocks
        ]
        if not per_task:
            continue
        out.append({
            "policy": name,
            "envs": len(per_task),
            "runs_per_env": [len(t) for t in per_task],
            "mean_success_pct": 100.0 * aggregate_mean(per_task),
            "mean_success_ci95": [100.0 * x for x in stratified_bootstrap_ci(per_task, aggregate_mean)],
            "iqm_success_pct": 100.0 * aggregate_iqm(per_task),
            "iqm_success_ci95": [100.0 * x for x in stratified_bootstrap_ci(per_task, aggregate_iqm)],
        })
    return out


def _paired(policies: dict[str, str], envs: dict[tuple[str, str], str], by_cell: dict[tuple[str, str, str], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Every pair of policies on every env, over the episodes both have (same task and seed)."""
    out = []
    for (env_id, kw), env_name in envs.items():
        for (da, na), (db, nb) in combinations(policies.items(), 2):
            a = {(ep["task"], ep["seed"]): ep for ep in by_cell.get((da, env_id, kw), [])}
            b = {(ep["task"], ep["seed"]): ep for ep in by_cell.get((db, env_id, kw), [])}
            common = sorted(set(a) & set(b))
            if not common:
                continue
            signal = has_success_signal([*a.values(), *b.values()])
            test = mcnemar([a[k]["success"] for k in common], [b[k]["success"] for k in common]) if signal else None
            diff = paired_bootstrap_ci([a[k]["sum_reward"] for k in common], [b[k]["sum_reward"] for k in common])
            out.append({"env": env_name, "a": na, "b": nb, "episodes": len(common), "success_signal": signal,
                        "success_mcnemar": test, "return_diff": diff})
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


def _fmt(x: float, digits: int = 1) -> str:
    return "NaN" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _interval(ci: list[float], digits: int = 1) -> str:
    return f"[{_fmt(ci[0], digits)}, {_fmt(ci[1], digits)}]"


def render_markdown(doc: dict[str, Any], plots_note: str | None = None) -> str:
    """The Markdown report: the summary, the cells, totals, across-env aggregates, paired comparisons,
    errors (with whether a retry could help) and the plots."""
    parts = [
        ["# Sweep report", "", f"Built from `{doc['store']}` at {doc['generated_at']}."],
        [f"**{doc['summary']}**"] if doc.get("summary") else [],
        _cells_markdown(doc["cells"]),
        _totals_markdown(doc["totals"]),
        _across_markdown(doc["across_envs"]),
        _paired_markdown(doc["paired"]),
        _errors_markdown(doc["cells"]),
        _plots_markdown(doc, plots_note),
    ]
    lines: list[str] = []
    for part in parts:
        if part:
            lines += [*part, ""]
    return "\n".join(lines).rstrip() + "\n"


def _cells_markdown(cells: list[dict[str, Any]]) -> list[str]:
    lines = ["| policy | env | success % [95% CI] | mean return [95% CI] | episodes | NaN-reward eps | errors |",
             "|---|---|---|---|---|---|---|"]
    for c in cells:
        episodes = f"{c['episodes']}" + ("" if c["episodes"] == c["expected_episodes"] else f" of {c['expected_episodes']}")
        if not c["episodes"]:
            success = ret = "no episodes" + (" (failed)" if c["errors"] else "")
        else:
            success = (f"{_fmt(c['success_pct'])} {_interval(c['success_ci95'])}" if c.get("success_signal", True)
                       else NO_SIGNAL)
            ret = f"{_fmt(c['mean_return'], 3)} {_interval(c['return_ci95'], 3)}"
        lines.append(f"| {c['policy']} | {c['env']} | {success} | {ret} | {episodes} | {c['nan_reward_episodes']} | {c['errors']} |")
    lines += ["", "Success intervals: Wilson score, 95%. Return intervals: percentile bootstrap of the mean (2000 resamples, "
              "seed 0). A NaN reward makes an episode's return NaN, and the cell's mean NaN."]
    if any(not c.get("success_signal", True) for c in cells if c["episodes"]):
        lines.append(f"{NO_SIGNAL}: no env of the cell ever reported `info[\"is_success\"]`, so there is no success "
                     "rate to show (it would read 0%); compare those cells by return. They are left out of the "
                     "success plot, the across-env success aggregates and the McNemar tests.")
    return lines


def _totals_markdown(t: dict[str, Any]) -> list[str]:
    return ["## Totals", "",
            f"- episodes: {t['episodes']}",
            f"- env steps: {t['env_steps']}",
            f"- wall time: {t['wall_s']:.2f} s over {t['runs']} sweep run(s); engine time {t['engine_s']:.2f} s",
            f"- episodes/s: {_fmt(t['episodes_per_s'])}; env steps/s: {_fmt(t['steps_per_s'], 0)}",
            "- jobs: " + ", ".join(f"{k} {v}" for k, v in t["jobs"].items())]


def _across_markdown(across: list[dict[str, Any]]) -> list[str]:
    if not across:
        return []
    lines = ["## Across envs", "",
             "Per policy: the per-seed-block success rate on each env, aggregated across envs (rliable's definitions); "
             "intervals: stratified bootstrap (seed blocks resampled within each env), 95%.", "",
             "| policy | envs | mean success % [95% CI] | IQM success % [95% CI] |", "|---|---|---|---|"]
    for a in across:
        lines.append(f"| {a['policy']} | {a['envs']} | {_fmt(a['mean_success_pct'])} {_interval(a['mean_success_ci95'])} | "
                     f"{_fmt(a['iqm_success_pct'])} {_interval(a['iqm_success_ci95'])} |")
    return lines


def _paired_markdown(paired: list[dict[str, Any]]) -> list[str]:
    if not paired:
        return []
    lines = ["## Paired comparisons", "",
             "Over the episodes both policies ran (same env, task and seed). Success: McNemar's test (exact binomial when "
             "fewer than 25 discordant pairs, else chi-square with continuity correction; the method column says which). "
             "Return: mean difference A - B with a paired bootstrap 95% interval.", "",
             "| env | A | B | episodes | only A / only B succeeded | McNemar p | method | return A - B [95% CI] |",
             "|---|---|---|---|---|---|---|---|"]
    for p in paired:
        m, d = p["success_mcnemar"], p["return_diff"]
        success = (f"{m['only_a']} / {m['only_b']} | {m['p_value']:.4g} | {m['method']}" if m is not None
                   else f"{NO_SIGNAL} | - | -")
        lines.append(f"| {p['env']} | {p['a']} | {p['b']} | {p['episodes']} | {success} | "
                     f"{_fmt(d['mean_diff'], 3)} {_interval(d['ci'], 3)} |")
    return lines


def _errors_markdown(cells: list[dict[str, Any]]) -> list[str]:
    """Each failed cell once: its failed jobs' first error lines, and whether a retry could help."""
    failed = [c for c in cells if c["error_texts"]]
    if not failed:
        return []
    lines = ["## Errors", ""]
    for c in failed:
        retry = c.get("retry") or {"helps": None, "why": ""}
        verdict = {True: "a retry may help", False: "a retry cannot help", None: "a retry may or may not help"}[retry["helps"]]
        lines.append(f"- **{c['policy']} x {c['env']}** ({verdict}: {retry['why']}):")
        for e in c["error_texts"]:
            lines.append(f"  - {e.splitlines()[0] if e else ''}")
    return lines


def _plots_markdown(doc: dict[str, Any], plots_note: str | None) -> list[str]:
    lines = ["## Plots", ""]
    if plots_note:
        return [*lines, plots_note]
    plots = doc.get("plots") or list(PLOTS)
    if "success.png" in plots:
        lines += ["![success rate](success.png)", ""]
    return [*lines, "![returns](returns.png)"]


def _write_text_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_report(store_dir: str | Path, out_dir: str | Path | None = None) -> dict[str, Any]:
    """Build the report from ``store_dir``'s store and write it into ``out_dir`` (default: ``store_dir``).

    Returns the report document plus ``paths`` (the files written).
    """
    from fasteval.doors.sweep.report_html import write_sweep_html

    with Store(store_dir, create=False) as store:
        jobs, episodes = store.jobs(), store.episodes()
        doc = report_document(jobs, episodes, store.runs(), store.path)
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
    _write_text_atomic(md, render_markdown(doc, note))
    paths["md"] = md
    paths["html"] = write_sweep_html(doc, out, jobs, episodes)  # and one page per cell under cells/
    umask = os.umask(0)
    os.umask(umask)
    for path in paths.values():  # temp-file writes are private (0600); give them the usual mode
        os.chmod(path, 0o666 & ~umask)
    doc["paths"] = {k: str(v) for k, v in paths.items()}
    return doc


# -- plots ------------------------------------------------------------------------------------------

def plot_report(doc: dict[str, Any], out: Path) -> dict[str, Path]:
    """``success.png`` (only when some cell has a success signal) and ``returns.png``; raises
    ImportError without matplotlib."""
    paths = {}
    fig = success_figure(doc)
    if fig is not None:
        paths["success_png"] = out / "success.png"
        fig.savefig(paths["success_png"])
    paths["returns_png"] = out / "returns.png"
    returns_figure(doc).savefig(paths["returns_png"])
    return paths


def policy_colours(doc: dict[str, Any]) -> dict[str, str]:
    """One matplotlib colour per policy, in the report's policy order, the same in every plot."""
    return {p: f"C{i % 10}" for i, p in enumerate(dict.fromkeys(c["policy"] for c in doc["cells"]))}


def success_figure(doc: dict[str, Any]) -> Any:
    """Bars of success % per env and policy (Wilson error bars), one colour per policy, for the
    cells with episodes and a success signal; ``None`` when there is none. An env none of whose
    cells has such episodes is not on the axis (the title names the envs without a signal)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    cells = [c for c in doc["cells"] if c["episodes"] and c.get("success_signal", True)]
    if not cells:
        return None
    colours = policy_colours(doc)
    policies = [p for p in colours if any(c["policy"] == p for c in cells)]
    envs = list(dict.fromkeys(c["env"] for c in cells))
    lookup = {(c["policy"], c["env"]): c for c in cells}
    fig = Figure(figsize=(max(4.0, 1.2 + 1.1 * len(envs) * max(1, len(policies)) * 0.6), 3.6), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(policies))
    for i, policy in enumerate(policies):
        xs, ys, lo, hi = [], [], [], []
        for j, env in enumerate(envs):
            c = lookup.get((policy, env))
            if c is None:
                continue
            xs.append(j - 0.4 + width * (i + 0.5))
            ys.append(c["success_pct"])
            lo.append(c["success_pct"] - c["success_ci95"][0])
            hi.append(c["success_ci95"][1] - c["success_pct"])
        ax.bar(xs, ys, width=width, yerr=[lo, hi], capsize=3, label=policy, color=colours[policy])
    ax.set_xticks(range(len(envs)), envs, rotation=20, ha="right")
    ax.set_xlabel("env")
    ax.set_ylabel("success % (Wilson 95% CI)")
    ax.set_ylim(0, 105)
    silent = [c["env"] for c in doc["cells"] if c["episodes"] and not c.get("success_signal", True)]
    left_out = [e for e in dict.fromkeys(silent) if e not in envs]
    if left_out:
        ax.set_title(f"not shown ({NO_SIGNAL}): {', '.join(left_out)}", fontsize="small")
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


def _bin_edges(values: np.ndarray) -> np.ndarray | None:
    """Shared histogram bins of one env's finite returns (all policies); None when they are all equal."""
    if values.size == 0 or values.min() == values.max():
        return None
    return np.histogram_bin_edges(values, bins=min(30, max(5, int(np.sqrt(values.size)) + 1)))


def returns_figure(doc: dict[str, Any]) -> Any:
    """A grid of return histograms: one row per policy that has episodes, one column per env, each
    policy in its own colour (as in the success plot). Each column shares its x-axis and its bins,
    so the policies of an env compare at a glance, and envs keep their own scales; the bottom row is
    labelled "return", the left column "episodes". A cell whose finite returns are all equal gets a
    vertical marker line (``gid="constant-return"``) and its value in the title, since a one-value
    histogram would be a bar too thin to see. A cell without episodes (its jobs failed) is no empty
    chart: its panel is switched off and says so (``gid="no-episodes"``)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    cells = doc["cells"]
    colours = policy_colours(doc)
    policies = [p for p in colours if any(c["policy"] == p and c["episodes"] for c in cells)] or list(colours)[:1]
    envs = list(dict.fromkeys(c["env"] for c in cells if c["episodes"])) or list(dict.fromkeys(c["env"] for c in cells))[:1]
    lookup = {(c["policy"], c["env"]): c for c in cells}
    rows, cols = max(1, len(policies)), max(1, len(envs))
    fig = Figure(figsize=(min(3.2 * cols, 30), min(2.6 * rows, 30)), dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False, sharex="col")
    for j, env in enumerate(envs):
        finite = {p: _finite(lookup.get((p, env))) for p in policies}
        everything = np.concatenate([v for v in finite.values()]) if finite else np.zeros(0)
        edges = _bin_edges(everything)
        if edges is None and everything.size:  # every policy's returns on this env are one value
            v = float(everything[0])
            axes[0][j].set_xlim(v - max(1.0, abs(v) * 0.05), v + max(1.0, abs(v) * 0.05))
        for i, policy in enumerate(policies):
            _returns_panel(axes[i][j], lookup.get((policy, env)), finite[policy], edges, colours[policy], f"{policy} x {env}")
            if i == rows - 1:
                axes[i][j].set_xlabel("return", fontsize="small")
            if j == 0:
                axes[i][j].set_ylabel("episodes", fontsize="small")
    fig.tight_layout()
    return fig


def _returns_panel(ax: Any, cell: dict[str, Any] | None, values: np.ndarray, edges: np.ndarray | None, colour: str,
                   title: str) -> None:
    """One cell's histogram (or constant-return marker, or "no episodes" note) on ``ax``."""
    x = np.asarray(cell["returns"] if cell else [], dtype=np.float64)
    if x.size == 0:
        why = "its jobs failed" if cell and cell.get("errors") else "not run"
        ax.text(0.5, 0.5, f"{title}\nno episodes ({why})", ha="center", va="center", fontsize="small",
                color="0.4", transform=ax.transAxes, gid="no-episodes")
        ax.set_axis_off()
        return
    notes = [f"{x.size} eps"] + ([f"{x.size - values.size} NaN"] if x.size != values.size else [])
    if values.size and values.min() == values.max():
        ax.axvline(values[0], color=colour, linewidth=2.5, gid="constant-return")
        ax.plot([values[0]], [values.size], marker="v", color=colour, markersize=8, gid="constant-return")
        ax.set_ylim(0, values.size * 1.15)
        notes.append(f"all = {values[0]:.4g}")
    elif values.size:
        ax.hist(values, bins=edges if edges is not None else "auto", color=colour)
    ax.set_title(f"{title}\n{', '.join(notes)}", fontsize="small")
    ax.tick_params(labelsize="x-small")
    ax.tick_params(labelbottom=True)


def _finite(cell: dict[str, Any] | None) -> np.ndarray:
    values = np.asarray(cell["returns"] if cell else [], dtype=np.float64)
    return values[np.isfinite(values)]
