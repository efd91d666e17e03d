"""A sweep's ``report.md``: the report document (:func:`fasteval.doors.sweep.report.report_document`)
as Markdown tables under its one-sentence summary: the cells, totals, across-env aggregates, paired
comparisons, errors (with whether a retry could help) and the plots. NaN is written ``NaN``.

Names and texts from the data (policies, envs, errors) are escaped as the HTML page escapes them
(``<``, ``>``, ``&`` as entities; and ``|``, which would end a table cell), so a policy called
``<script>`` is shown as text wherever the Markdown is rendered.
"""

from __future__ import annotations

import math
from typing import Any

from fasteval.render.words import NO_SIGNAL, competition_ranks, md_text as md, rate_text
from fasteval.render.sweep_plots import PLOTS


def _fmt(x: float, digits: int = 1) -> str:
    return "NaN" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _interval(ci: list[float], digits: int = 1) -> str:
    return f"[{_fmt(ci[0], digits)}, {_fmt(ci[1], digits)}]"


def render_markdown(doc: dict[str, Any], plots_note: str | None = None) -> str:
    """The Markdown report: the summary, the cells, totals, across-env aggregates, paired comparisons,
    errors (with whether a retry could help) and the plots."""
    parts = [
        ["# Sweep report", "", f"Built from `{doc['store']}` at {doc['generated_at']}."],
        [f"**{md(doc['summary'])}**"] if doc.get("summary") else [],
        [stopped_note(doc)] if doc.get("stop_when") else [],
        _glance_markdown(doc),
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


def _glance_markdown(doc: dict[str, Any]) -> list[str]:
    """The best policy per env (with the runner-up and their paired comparison), and overall."""
    best = doc.get("best_per_env") or []
    if not best:
        return []
    lines = ["## At a glance", "", "| env | judged by | best [95% CI] | runner-up [95% CI] | paired: best against runner-up (B - A) |",
             "|---|---|---|---|---|"]
    for r in best:
        digits = 1 if r["metric"] == "success" else 3
        first = r["ranking"][0]
        top = " = ".join(md(p) for p in r["best"]) + (" (tied)" if len(r["best"]) > 1 else "") if r["best"] else "-"
        cells = [md(r["env"]), {"success": "success %", "max_reward": "mean max reward"}.get(r["metric"], "mean return"),
                 f"{top} {_fmt(first['value'], digits)} {_interval(first['ci'], digits)}"]
        if len(r["ranking"]) > 1:
            second = r["ranking"][1]
            cells.append(f"{md(second['policy'])} {_fmt(second['value'], digits)} {_interval(second['ci'], digits)}")
            cells.append(_versus_markdown(r))
        else:
            cells += ["-", "-"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Judged by success % (the cell's 95% interval) where the env reports a success signal, else by mean return (bootstrap "
              "95%). B is the policy listed later in the sweep; the paired column is one comparison, not corrected for the others."]
    across = sorted(doc.get("across_envs") or [], key=lambda a: -_num(a["iqm_success_pct"]))
    if across:
        lines += ["", "Best overall, by IQM success % across the envs with a success signal (95%, for this fixed set of envs): "
                  + "; ".join(f"{rank}.{' (tied)' if tied else ''} {md(a['policy'])} {_fmt(a['iqm_success_pct'])} "
                              f"{_interval(a['iqm_success_ci95'])}"
                              for (rank, tied), a in zip(competition_ranks([a["iqm_success_pct"] for a in across]), across))
                  + "." + left_out_markdown(best, bool(doc.get("improvement")))]
    for p in doc.get("improvement") or []:
        lines.append(f"- P({md(p['b'])} > {md(p['a'])}), averaged over {p['envs']} envs on paired episodes: "
                     f"{_fmt(p['value'], 3)} {_interval(p['ci'], 3)}")
    return lines


def left_out_markdown(best: list[dict[str, Any]], improvement: bool) -> str:
    """The envs the best overall leaves out (judged by return), and where every env is covered."""
    left = [md(r["env"]) for r in best if r["metric"] != "success"]
    if not left:
        return ""
    return f" Left out: {', '.join(left)} ({NO_SIGNAL})" + ("; the probability of improvement below covers every env."
                                                           if improvement else ".")


def _num(x: Any) -> float:
    return -math.inf if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def _versus_markdown(row: dict[str, Any]) -> str:
    p = row.get("versus")
    if not p:
        return "-"
    if row["metric"] == "success":
        m = p.get("success_mcnemar")
        return (f"{md(p['a'])} alone succeeded on {m['only_a']}, {md(p['b'])} alone on {m['only_b']}; McNemar p = {m['p_value']:.3g}"
                if m else "-")
    d = p["return_diff"]
    return f"{md(p['b'])} - {md(p['a'])}: {_fmt(d['mean_diff'], 3)} {_interval(d['ci'], 3)}"


def _cells_markdown(cells: list[dict[str, Any]]) -> list[str]:
    lines = ["## Cells", "", "| policy | env | success % [95% CI] | mean return [95% CI] | episodes | NaN-reward eps | errors |",
             "|---|---|---|---|---|---|---|"]
    for c in cells:
        episodes = f"{c['episodes']}" + ("" if c["episodes"] == c["expected_episodes"] else f" of {c['expected_episodes']}")
        if not c["episodes"]:
            success = ret = "no episodes" + (" (failed)" if c["errors"] else "")
        else:
            success = (f"{_fmt(c['success_pct'])} {_interval(c['success_ci95'])}" if c.get("success_signal", True)
                       else NO_SIGNAL)
            ret = f"{_fmt(c['mean_return'], 3)} {_interval(c['return_ci95'], 3)}"
        lines.append(f"| {md(c['policy'])} | {md(c['env'])} | {success} | {ret} | {episodes} | {c['nan_reward_episodes']} | {c['errors']} |")
    method = next((c["success_ci95_method"] for c in cells if c.get("success_ci95_method")), "Wilson score (fixed n)")
    lines += ["", f"Success intervals: {method}, 95%. Return intervals: percentile bootstrap of the mean (2000 resamples, "
              "seed 0)" + (", descriptive after the stop" if "anytime" in method else "")
              + ". A NaN reward makes an episode's return NaN, and the cell's mean NaN."]
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
            f"- episodes/s: {rate_text(t['episodes_per_s'])}; env steps/s: {rate_text(t['steps_per_s'])}",
            "- jobs: " + ", ".join(f"{k} {v}" for k, v in t["jobs"].items())]


def _across_markdown(across: list[dict[str, Any]]) -> list[str]:
    if not across:
        return []
    lines = ["## Across envs", "",
             "Per policy: the mean and the IQM over envs of each env's success rate (all its episodes). Intervals, 95%, "
             f"for this fixed set of envs: mean: {across[0].get('mean_success_method', '')}; IQM: "
             f"{across[0].get('iqm_success_method', '')}.", "",
             "| policy | envs | mean success % [95% CI] | IQM success % [95% CI] |", "|---|---|---|---|"]
    for a in across:
        lines.append(f"| {md(a['policy'])} | {a['envs']} | {_fmt(a['mean_success_pct'])} {_interval(a['mean_success_ci95'])} | "
                     f"{_fmt(a['iqm_success_pct'])} {_interval(a['iqm_success_ci95'])} |")
    return lines


def _paired_markdown(paired: list[dict[str, Any]]) -> list[str]:
    if not paired:
        return []
    lines = ["## Paired comparisons", "",
             "Over the episodes both policies ran (same env, task and seed), with `fasteval compare`'s tests. Success: "
             "McNemar's exact test, its p-value Holm-adjusted across every test of this report "
             f"({paired[0].get('family', len(paired))} comparisons). Return: mean difference B - A (B the policy "
             "listed later) with its paired t 95% interval, and the paired t-test of that mean (Holm).", "",
             "| env | A | B | episodes | only A / only B succeeded | McNemar p (Holm) | method | return B - A [95% CI] | t p (Holm) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for p in paired:
        m, d = p["success_mcnemar"], p["return_diff"]
        holm = f" ({m['p_holm']:.4g})" if m is not None and m.get("p_holm") is not None else ""
        success = (f"{m['only_a']} / {m['only_b']} | {m['p_value']:.4g}{holm} | {m['method']}" if m is not None
                   else f"{NO_SIGNAL} | - | -")
        t_p = (f"{d['p_value']:.4g} ({d['p_holm']:.4g})" if d.get("p_value") is not None and d.get("p_holm") is not None
               else "-")
        lines.append(f"| {md(p['env'])} | {md(p['a'])} | {md(p['b'])} | {p['episodes']} | {success} | "
                     f"{_fmt(d['mean_diff'], 3)} {_interval(d['ci'], 3)} | {t_p} |")
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
        lines.append(f"- **{md(c['policy'])} x {md(c['env'])}** ({verdict}: {md(retry['why'])}):")
        for e in c["error_texts"]:
            lines.append(f"  - {md(e.splitlines()[0]) if e else ''}")
    return lines


def _plots_markdown(doc: dict[str, Any], plots_note: str | None) -> list[str]:
    lines = ["## Plots", ""]
    if plots_note:
        return [*lines, plots_note]
    plots = doc.get("plots") or list(PLOTS)
    if "success.png" in plots:
        lines += ["![success rate](success.png)", ""]
    return [*lines, "![returns](returns.png)"]


def stopped_note(doc: dict[str, Any]) -> str:
    """What a sweep whose jobs stopped on their data (``options.stop_when``) reports: its intervals are
    anytime-valid, its paired tests descriptive."""
    return (f"Every job stopped by `--stop-when {doc['stop_when']}`: each seed block chose its n from its episodes, so "
            "the success intervals are anytime-valid betting confidence sequences (valid at a data-dependent stop), "
            "and the paired p-values and intervals are descriptive, not valid after the stop.")
