"""A sweep's page, from the sweep report document (``fasteval.doors.sweep.report.build_report``):
one row per policy x env cell with intervals and IQM, the across-env aggregates, the paired
comparisons, per-env plots, the failed cells (why, and whether a retry could help), and a link
to each cell's own run page (written under ``cells/`` by :func:`write_cell_pages`).

A cell may carry ``"retry"``: ``{"helps": true | false | null, "why": "..."}`` (the doors layer
decides it from the job's error); the page shows it and decides nothing itself.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from fasteval.render.html import page, svg
from fasteval.render.words import NO_SIGNAL
from fasteval.render.html.run_page import RunPageInput, render_run_page
from fasteval.types.files import safe_filename, write_text_atomic
from fasteval.types.stats import iqm

CellKey = tuple[str, str]


def cell_folder(policy: str, env: str) -> str:
    return f"cells/{safe_filename(policy)}__{safe_filename(env)}"


def write_cell_pages(cell_docs: Mapping[CellKey, Mapping[str, Any]], out_dir: Path, name: str) -> dict[CellKey, str]:
    """One run page per cell (``out_dir/cells/<policy>__<env>/report.html``); returns the links."""
    links: dict[CellKey, str] = {}
    taken: set[str] = set()
    for (policy, env), doc in cell_docs.items():
        folder = cell_folder(policy, env)
        while folder in taken:  # two names that sanitise alike
            folder += "_"
        taken.add(folder)
        page_dir = out_dir / folder
        inp = RunPageInput(doc=doc, page_dir=page_dir, provenance=doc.get("provenance"), files=(),
                           title=f"sweep cell: {policy} x {env}", manifest={"status": doc.get("status", "unknown"),
                                                                  "policy_digest": doc.get("policy_digest")})
        html = render_run_page(inp).replace('<div class="sub">', f'<div class="sub"><a href="../../{escape(name)}">&larr; the sweep</a> · ', 1)
        write_text_atomic(page_dir / name, html)
        links[(policy, env)] = f"{folder}/{name}"
    return links


def _cell_status(c: Mapping[str, Any]) -> str:
    """The cell's status as the sweep report decided it (done, partial, failed)."""
    return str(c.get("status") or ("failed" if c.get("errors") else "done"))


def summary(doc: Mapping[str, Any]) -> str:
    cells = doc.get("cells") or []
    t = doc.get("totals") or {}
    counts = {s: sum(1 for c in cells if _cell_status(c) == s) for s in ("done", "partial", "failed")}
    expected = sum(c.get("expected_episodes", 0) for c in cells)
    cards = [
        page.card("cells", page.fmt(len(cells)), f"{counts['done']} complete, {counts['failed']} failed", "glance-cells"),
        page.card("episodes", page.fmt(t.get("episodes")), f"of {page.fmt(expected)} planned", "glance-episodes",
                  {"value": t.get("episodes")}),
        page.card("wall time", f"{page.fmt(t.get('wall_s'), 1)} s", f"over {page.fmt(t.get('runs'))} sweep run(s)"),
        page.card("speed", f"{page.fmt(t.get('episodes_per_s'))} ep/s", f"{page.fmt(t.get('steps_per_s'), 0)} env steps/s"),
    ]
    return f'<p id="summary-line">{escape(str(doc.get("summary") or ""))}</p><div class="cards">{"".join(cards)}</div>'


def cells_table(doc: Mapping[str, Any], links: Mapping[CellKey, str]) -> str:
    rows = []
    for c in doc.get("cells") or []:
        returns = np.asarray(c.get("returns") or [], dtype=np.float64)
        signal = c.get("success_signal", True)
        status = _cell_status(c)
        href = links.get((c["policy"], c["env"]))
        cells = [page.text(c["policy"]), page.text(c["env"]), page.num(c["episodes"]), page.num(c.get("expected_episodes"))]
        if signal and c["episodes"]:
            cells += [page.num(c.get("successes")), page.num(c.get("success_pct")), page.interval(c.get("success_ci95"))]
        else:
            why = NO_SIGNAL if not signal else "no episodes"
            cells += [page.none(why), page.none(why), page.none("—")]
        if c["episodes"]:
            cells += [page.num(c.get("mean_return"), 3), page.interval(c.get("return_ci95"), 3), page.num(iqm(returns), 3)]
        else:
            cells += [page.none("no episodes"), page.none("—"), page.none("—")]
        cells += [page.num(c.get("nan_reward_episodes")),
                  page.Cell(page.badge(status), status, html=True), page.link("page", href) if href else page.none("—")]
        rows.append(({"policy": c["policy"], "env": c["env"]}, cells))
    headers = ["policy", "env", "episodes", "planned", "successes", "success %", "success 95% CI", "mean return",
               "return 95% CI", "IQM return", "NaN-return eps", "status", "cell page"]
    method = next((c["success_ci95_method"] for c in doc.get("cells") or [] if c.get("success_ci95_method")),
                  "Wilson score (fixed n)")
    caption = (f"Success: {method}, 95%. Return: percentile bootstrap of the mean (2000 resamples, seed 0)"
               + (", descriptive after the stop" if "anytime" in method else "")
               + ". IQM: mean of the middle 50% of the cell's returns. Click a header to sort.")
    return page.table("cells", headers, rows, caption=caption)


def across_table(doc: Mapping[str, Any]) -> str:
    rows = []
    for a in doc.get("across_envs") or []:
        rows.append(({"policy": a["policy"]}, [page.text(a["policy"]), page.num(a["envs"]), page.num(a["mean_success_pct"]),
                                               page.interval(a["mean_success_ci95"]), page.num(a["iqm_success_pct"]),
                                               page.interval(a["iqm_success_ci95"])]))
    if not rows:
        return ""
    first = (doc.get("across_envs") or [{}])[0]
    return (page.note("Per policy: the mean and the IQM over envs of each env's success rate (all its episodes), with 95% "
                      f"intervals for this fixed set of envs (mean: {first.get('mean_success_method', '')}; IQM: "
                      f"{first.get('iqm_success_method', '')}). Envs without a success signal are left out.")
            + page.table("across-envs", ["policy", "envs", "mean success %", "95% CI", "IQM success %", "95% CI"], rows))


def paired_table(doc: Mapping[str, Any]) -> str:
    paired = doc.get("paired") or []
    if not paired:
        return ""
    with_verdict = any(p.get("verdict") for p in paired)
    rows = []
    for p in paired:
        m, d = p.get("success_mcnemar"), p["return_diff"]
        cells = [page.text(p["env"]), page.text(p["a"]), page.text(p["b"]), page.num(p["episodes"])]
        if m is not None:
            cells += [page.num(m["only_a"]), page.num(m["only_b"]), page.pnum(m["p_value"]), page.pnum(m.get("p_holm")),
                      page.text(m["method"])]
        else:
            cells += [page.none(NO_SIGNAL)] * 4 + [page.none("—")]
        cells += [page.num(d["mean_diff"], 3), page.interval(d["ci"], 3)]
        if with_verdict:
            v = p.get("verdict")
            cells.append(page.Cell(page.badge(v), v, html=True) if v else page.none("—"))
        rows.append(({"env": p["env"], "a": p["a"], "b": p["b"]}, cells))
    headers = ["env", "A", "B", "paired episodes", "only A succeeded", "only B succeeded", "McNemar p", "p (Holm)", "method",
               "return B - A", "95% CI"] + (["compare verdict"] if with_verdict else [])
    stopped = f" Every job stopped on its data: these tests are {doc['paired_tests']}." if doc.get("stop_when") else ""
    return (page.note("Over the episodes both policies ran (same env, task and seed), with fasteval compare's tests: "
                      "McNemar's exact test, Holm-adjusted across every comparison of this report "
                      f"({paired[0].get('family', len(paired))}); verdicts from the Holm-adjusted p-values. Return: B - A "
                      f"(B listed later), paired bootstrap 95%.{stopped}")
            + page.table("paired", headers, rows))


def plots(doc: Mapping[str, Any]) -> str:
    """Per env, its own axes: the success rate of each policy (distinct colours, Wilson
    intervals) and the return distribution of each policy (shared bins within the env). Cells
    without episodes are not drawn (they are listed under Failed cells)."""
    cells = [c for c in doc.get("cells") or [] if c["episodes"]]
    policies = list(dict.fromkeys(c["policy"] for c in doc.get("cells") or []))
    colour_of = {p: svg.colour(i) for i, p in enumerate(policies)}
    envs = list(dict.fromkeys(c["env"] for c in cells))
    if not envs:
        return page.note("No cell has episodes yet: nothing to draw.")
    drawn = [p for p in policies if any(c["policy"] == p for c in cells)]
    out = [svg.legend(drawn, colours=[colour_of[p] for p in drawn]) if len(drawn) > 1 else "", '<div class="plots" id="plot-envs">']
    for env in envs:
        members = [c for c in cells if c["env"] == env]
        parts = []
        signal = [c for c in members if c.get("success_signal", True)]
        if signal:
            rows = [(c["policy"], c["success_pct"], *c["success_ci95"]) for c in signal]
            axis = "success % (anytime-valid 95% CI)" if doc.get("stop_when") else "success % (Wilson 95% CI)"
            parts.append(svg.intervals(rows, axis, f"{env}: success rate", width=420,
                                       colours=[colour_of[c["policy"]] for c in signal], ylabel="policy"))
        else:
            parts.append(page.note(f"{env}: {NO_SIGNAL}; compare by return."))
        series = [(c["policy"], c.get("returns") or []) for c in members]
        parts.append(svg.histograms(series, "return", f"{env}: return per policy", width=420,
                                    colours=[colour_of[c["policy"]] for c in members]))
        out.append(f'<div class="env-plots" data-env="{escape(env)}">{"".join(parts)}</div>')
    out.append("</div>")
    return "".join(out)


def failed_section(doc: Mapping[str, Any]) -> str:
    failed = [c for c in doc.get("cells") or [] if c.get("errors")]
    if not failed:
        return ""
    rows = []
    for c in failed:
        retry = c.get("retry") or {}
        helps = retry.get("helps")
        verdict = {True: "a retry may help", False: "a retry cannot help", None: "unknown"}[helps]
        first = (c.get("error_texts") or [""])[0]
        rows.append(({"policy": c["policy"], "env": c["env"], "retry-helps": "" if helps is None else helps},
                     [page.text(c["policy"]), page.text(c["env"]), page.num(c["errors"]), page.num(c["episodes"]),
                      page.text(first.splitlines()[0] if first else ""), page.text(f"{verdict}: {retry.get('why', '')}".rstrip(": "))]))
    return page.table("failed-cells", ["policy", "env", "failed jobs", "episodes stored", "why", "retry"], rows, sortable=False)


def render_sweep_page(doc: Mapping[str, Any], links: Mapping[CellKey, str] | None = None) -> str:
    links = links or {}
    t = doc.get("totals") or {}
    subtitle = f"built from {escape(str(doc.get('store', '')))} at {escape(str(doc.get('generated_at', '')))}"
    facts = page.kv([("store", doc.get("store")), ("generated at", doc.get("generated_at")), ("runs", t.get("runs")),
                     ("engine time", f"{page.fmt(t.get('engine_s'), 2)} s"), ("env steps", page.fmt(t.get("env_steps")))])
    sections = [
        ("glance", "At a glance", summary(doc)),
        ("cells", "Cells", cells_table(doc, links)),
        ("across", "Across envs", across_table(doc)),
        ("paired", "Paired comparisons", paired_table(doc)),
        ("plots", "Plots", plots(doc)),
        ("failed", "Failed cells", failed_section(doc)),
        ("provenance", "Provenance", facts),
    ]
    return page.document("fasteval sweep report", subtitle, sections, "sweep")
