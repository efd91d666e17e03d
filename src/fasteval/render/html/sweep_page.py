"""A sweep's page, from the sweep report document (``fasteval.doors.sweep.report.build_report``):
the answer at a glance (the best policy per env with its interval and the runner-up's, the
paired difference between them, and the best overall), one row per policy x env cell with
intervals and IQM, the aggregates across envs (rliable's IQM, performance profiles and
probability of improvement, each with what it assumes), the paired comparisons (B - A), per-env
plots, the failed cells (why, and whether a retry could help), and a link to each cell's own run
page (written under ``cells/`` by :func:`write_cell_pages`).

A cell may carry ``"retry"``: ``{"helps": true | false | null, "why": "..."}`` (the doors layer
decides it from the job's error); the page shows it and decides nothing itself.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from fasteval.render.html import page, svg
from fasteval.render.words import NO_SIGNAL, competition_ranks, rate_text
from fasteval.render.html.run_facts import relative_paths
from fasteval.render.html.run_page import RunPageInput, render_run_page
from fasteval.types.files import safe_filename, write_text_atomic

CellKey = tuple[str, str]


def cell_folder(policy: str, env: str) -> str:
    return f"cells/{safe_filename(policy)}__{safe_filename(env)}"


def write_cell_pages(cell_docs: Mapping[CellKey, Mapping[str, Any]], out_dir: Path, name: str) -> dict[CellKey, str]:
    """One run page per cell (``out_dir/cells/<policy>__<env>/report.html``), with the document it renders beside it
    (``eval_info.json``: the page's numbers, its speed included, are in a JSON file; issue 42); returns the links."""
    from fasteval.types.json_writer import write_json_atomic

    links: dict[CellKey, str] = {}
    taken: set[str] = set()
    for (policy, env), doc in cell_docs.items():
        folder = cell_folder(policy, env)
        while folder in taken:  # two names that sanitise alike
            folder += "_"
        taken.add(folder)
        page_dir = out_dir / folder
        write_json_atomic(page_dir / "eval_info.json", doc)
        inp = RunPageInput(doc=doc, page_dir=page_dir, provenance=doc.get("provenance"), files=("eval_info.json",),
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
        page.card("speed", f"{rate_text(t.get('episodes_per_s'), grouping=True)} ep/s",
                  f"{rate_text(t.get('steps_per_s'), grouping=True)} env steps/s"),
    ]
    return (f'<p id="summary-line">{escape(str(doc.get("summary") or ""))}</p><div class="cards">{"".join(cards)}</div>'
            + best_table(doc) + overall_table(doc))


def _value_text(metric: str, value: Any) -> str:
    return f"{page.fmt(value)}%" if metric == "success" else page.fmt(value, 3)


def _versus_text(row: Mapping[str, Any]) -> page.Cell:
    """The paired comparison of the best with the runner-up, in its own direction (B - A)."""
    p = row.get("versus")
    if not p:
        return page.none("—")
    if row["metric"] == "success":
        m = p.get("success_mcnemar")
        if not m:
            return page.none("—")
        return page.Cell(f"{p['a']} alone succeeded on {page.fmt(m['only_a'])}, {p['b']} alone on {page.fmt(m['only_b'])}; McNemar p = "
                         f"{page.fmt_sig(m['p_value'], 3)}", m["p_value"])
    d = p["return_diff"]
    lo, hi = d["ci"]
    return page.Cell(f"{p['b']} - {p['a']}: {page.fmt(d['mean_diff'], 3)} [{page.fmt(lo, 3)}, {page.fmt(hi, 3)}]", d["mean_diff"])


def best_table(doc: Mapping[str, Any]) -> str:
    """Per env: the best policy (by success % where the env has a success signal, else by mean
    return) with its interval, the runner-up with its own, and the paired difference of the two."""
    rows = []
    for r in doc.get("best_per_env") or []:
        ranking, metric = r["ranking"], r["metric"]
        first, second = ranking[0], ranking[1] if len(ranking) > 1 else None
        tie = len(r["best"]) > 1
        cells = [page.text(r["env"]), page.text({"success": "success %", "max_reward": "mean max reward"}.get(metric, "mean return")),
                 page.text(" = ".join(r["best"]) + (" (tied)" if tie else "") if r["best"] else "—"),
                 page.num(first["value"], 1 if metric == "success" else 3),
                 page.interval(first["ci"], 1 if metric == "success" else 3)]
        if second is not None:
            cells += [page.text(second["policy"] + (" (tied)" if second["policy"] in r["best"] else "")), page.num(second["value"], 1 if metric == "success" else 3),
                      page.interval(second["ci"], 1 if metric == "success" else 3), _versus_text(r)]
        else:
            cells += [page.none("one policy")] + [page.none("—")] * 3
        rows.append(({"env": r["env"], "best": first["policy"]}, cells))
    if not rows:
        return ""
    headers = ["env", "judged by", "best", "best's value", "best's 95% CI", "runner-up", "runner-up's value",
               "runner-up's 95% CI", "paired: best against runner-up (B - A)"]
    return ("<h3>Best policy per env</h3>" + page.table("best-per-env", headers, rows, sortable=False) + page.note(
        "Judged by success % (the cell's 95% interval: Wilson's, or the anytime-valid one where the sweep stopped on "
        "its data) where the env reports a success signal, else by mean return "
        "(bootstrap 95% interval of the mean). The best is the highest estimate; the last column is the paired "
        "comparison of the two on the same seeds (McNemar for success; for return, the mean difference B - A, B the "
        "policy listed later in the sweep, with its paired bootstrap 95% interval), one comparison, not corrected "
        "for the others on this page. Overlapping intervals mean the order may not hold on other seeds."))


def overall_table(doc: Mapping[str, Any]) -> str:
    """The best overall: the policies ranked by their IQM success % across the envs with a success
    signal (rliable's aggregate; the intervals of :mod:`fasteval.types.stratified`)."""
    across = sorted(doc.get("across_envs") or [], key=lambda a: -a["iqm_success_pct"]
                    if isinstance(a["iqm_success_pct"], (int, float)) and not np.isnan(a["iqm_success_pct"]) else np.inf)
    if not across:
        if doc.get("improvement"):
            return ("<h3>Best overall</h3>" + page.note("No env reports a success signal, so no success rate is "
                                                          "aggregated; see the probability of improvement under "
                                                          "Aggregates across envs."))
        return ""
    ranks = competition_ranks([a["iqm_success_pct"] for a in across])  # equal IQMs share a rank
    rows = [({"policy": a["policy"]}, [page.Cell(f"{rank} (tied)" if tied else str(rank), rank),
                                      page.text(a["policy"]), page.num(a["envs"]),
                                      page.num(a["iqm_success_pct"]), page.interval(a["iqm_success_ci95"]),
                                      page.num(a["mean_success_pct"]), page.interval(a["mean_success_ci95"])])
            for (rank, tied), a in zip(ranks, across)]
    return ("<h3>Best overall</h3>" + page.table("overall", ["rank", "policy", "envs", "IQM success %", "IQM 95% CI",
                                                             "mean success %", "mean 95% CI"], rows, sortable=False)
            + page.note("Ranked by the interquartile mean over the envs with a success signal of each env's success rate "
                        "(all its episodes), with 95% intervals for this fixed set of envs (IQM: "
                        f"{across[0].get('iqm_success_method', '')}; mean: {across[0].get('mean_success_method', '')}); "
                        "equal IQMs share a rank. It assumes the envs' success rates are comparable (one scale, 0 to "
                        "100%); it says nothing of the envs it leaves out." + left_out_sentence(doc)))


def left_out_sentence(doc: Mapping[str, Any]) -> str:
    """`` Left out: ENV, ... (no success signal); ...`` when the best overall ranks only some envs: those
    judged by return, which the probability of improvement still covers (empty when none is left out)."""
    left = [r["env"] for r in doc.get("best_per_env") or [] if r["metric"] != "success"]
    if not left:
        return ""
    return (f" Left out: {', '.join(left)} ({NO_SIGNAL})" + ("; the probability of improvement under Aggregates "
            "across envs covers every env, each judged on its own metric." if doc.get("improvement") else "."))


def cells_table(doc: Mapping[str, Any], links: Mapping[CellKey, str]) -> str:
    rows = []
    for c in doc.get("cells") or []:
        signal = c.get("success_signal", True)
        status = _cell_status(c)
        href = links.get((c["policy"], c["env"]))
        cells = [page.text(c["policy"]), page.text(c["env"]), page.num(c["episodes"]), page.num(c.get("expected_episodes"))]
        if signal and c["episodes"]:
            cells += [page.num(c.get("successes")), page.num(c.get("success_pct")), page.interval(c.get("success_ci95"))]
        else:
            cells += [page.none("—" if not signal else "no episodes"), page.none("—"), page.none("—")]
        if c["episodes"]:
            cells += [page.num(c.get("mean_return"), 3), page.interval(c.get("return_ci95"), 3), page.num(c.get("return_iqm"), 3)]
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
               + ". IQM: mean of the middle 50% of the cell's returns."
               + (f" — in the success columns: {NO_SIGNAL}." if any(not c.get("success_signal", True)
                                                                     for c in doc.get("cells") or []) else "")
               + " Click a header to sort.")
    return page.table("cells", headers, rows, caption=caption)


def aggregates(doc: Mapping[str, Any]) -> str:
    """The aggregates across envs beyond the ranking in At a glance (IQM and mean, rliable's):
    performance profiles and the average probability of improvement, each with what it assumes."""
    return profiles_plot(doc) + improvement_table(doc)


def profiles_plot(doc: Mapping[str, Any]) -> str:
    prof = doc.get("profiles")
    if not prof or not prof.get("policies"):
        return ""
    policies = list(dict.fromkeys(c["policy"] for c in doc.get("cells") or []))
    series = [(p["policy"], p["tau"], [100 * v for v in p["fraction"]], [100 * v for v in p["low"]],
               [100 * v for v in p["high"]], svg.colour(policies.index(p["policy"]) if p["policy"] in policies else i))
              for i, p in enumerate(prof["policies"])]
    plot = svg.profiles([(n, [100 * t for t in tau], f, lo, hi, c) for n, tau, f, lo, hi, c in series],
                        "success rate of a seed block, τ (%)", "runs with success rate > τ (%)",
                        "performance profile (score distribution)")
    runs = ", ".join(f"{p['policy']}: {p['runs']} runs on {p['envs']} envs" for p in prof["policies"])
    return ("<h3>Performance profiles</h3>" + f'<div id="plot-profiles">{plot}</div>' + page.note(
        "For each τ, the share of runs (a run: one seed block on one env with a success signal) whose success rate is "
        "above τ, rliable's score distribution; the band is its stratified bootstrap 95% interval. A curve above "
        "another everywhere is better at every level. It assumes the envs share one scale (success rates do) and "
        f"counts each env by its runs ({runs}); with one seed block per env the band has no width."))


def improvement_table(doc: Mapping[str, Any]) -> str:
    rows = []
    for p in doc.get("improvement") or []:
        basis = []
        if p.get("by_success"):
            basis.append(f"{p['by_success']} by success")
        if p.get("by_return"):
            basis.append(f"{p['by_return']} by return")
        rows.append(({"a": p["a"], "b": p["b"]}, [page.text(p["a"]), page.text(p["b"]), page.num(p["envs"]),
                                                  page.text(", ".join(basis)), page.num(p["value"], 3),
                                                  page.interval(p["ci"], 3)]))
    if not rows:
        return ""
    return ("<h3>Probability of improvement</h3>" + page.table(
        "improvement", ["A", "B", "envs", "judged by", "P(B > A)", "95% CI"], rows) + page.note(
        "P(B > A): in each env, the chance that B beats A on an episode both ran with the same seed (ties count "
        "half), averaged over the envs (rliable's average probability of improvement, on paired episodes); 0.5 "
        "means neither is ahead. It needs no common scale (each env is judged on its own: success where it reports "
        "a success signal, else return) and weighs every env the same; the interval is a stratified bootstrap "
        "95% (pairs resampled within each env). B is the policy listed later in the sweep."))


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
            cells += [page.none("—")] * 5  # the note above says why, once
        cells += [page.num(d["mean_diff"], 3), page.interval(d["ci"], 3)]
        if with_verdict:
            v = p.get("verdict")
            cells.append(page.Cell(page.badge(v), v, html=True) if v else page.none("—"))
        rows.append(({"env": p["env"], "a": p["a"], "b": p["b"]}, cells))
    headers = ["env", "A", "B", "paired episodes", "only A succeeded", "only B succeeded", "McNemar p", "p (Holm)", "method",
               "return B - A", "B - A 95% CI"] + (["compare verdict"] if with_verdict else [])
    stopped = (f" Every job stopped on its data: these tests are {doc['paired_tests']}, and no verdict is given."
               if doc.get("stop_when") else "")
    return (page.note("Over the episodes both policies ran (same env, task and seed), with fasteval compare's tests: "
                      "McNemar's exact test, Holm-adjusted across every comparison of this report "
                      f"({paired[0].get('family', len(paired))}); verdicts from the Holm-adjusted p-values. Return: B - A "
                      f"(B listed later), paired t 95%, its verdict from the paired t-test of that mean.{stopped}"
                      + (f" — in the McNemar columns: {NO_SIGNAL}." if any(p.get("success_mcnemar") is None
                                                                          for p in paired) else ""))
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


def _store_name(store: Any) -> str | None:
    """The store's file name only: a page is shared, and the absolute path names the machine's folders."""
    return Path(str(store)).name if store else None


def render_sweep_page(doc: Mapping[str, Any], links: Mapping[CellKey, str] | None = None) -> str:
    links = links or {}
    t = doc.get("totals") or {}
    name = (doc.get("sweep") or {}).get("name")
    subtitle = (f"{'sweep ' + escape(str(name)) + ', ' if name else ''}built from "
                f"{escape(str(_store_name(doc.get('store')) or ''))} at {escape(str(doc.get('generated_at', '')))}")
    sweep = doc.get("sweep") or {}
    git = sweep.get("git") or {}
    facts = page.kv([("sweep", sweep.get("name")), ("seeds", ", ".join(str(s) for s in sweep.get("seeds") or []) or None),
                     ("episodes per seed block", sweep.get("episodes")), ("fasteval version", sweep.get("fasteval_version")),
                     ("git commit", (git.get("commit") or "") + (" (uncommitted changes)" if git.get("dirty") else "")
                      if git else None),
                     ("store", _store_name(doc.get("store"))), ("generated at", doc.get("generated_at")),
                     ("runs", t.get("runs")), ("engine time", f"{page.fmt(t.get('engine_s'), 2)} s"),
                     ("env steps", page.fmt(t.get("env_steps")))])
    if sweep.get("spec"):
        facts += ("<h3>Sweep spec (its last run)</h3><pre id=\"sweep-spec\">"
                  + escape(json.dumps(relative_paths(sweep["spec"], Path(str(doc["store"])).parent if doc.get("store")
                                                     else None), indent=2, default=str)) + "</pre>")
    sections = [
        ("glance", "At a glance", summary(doc)),
        ("cells", "Cells", cells_table(doc, links)),
        ("across", "Aggregates across envs", aggregates(doc)),
        ("paired", "Paired comparisons", paired_table(doc)),
        ("plots", "Plots", plots(doc)),
        ("failed", "Failed cells", failed_section(doc)),
        ("provenance", "Provenance", facts),
    ]
    return page.document("fasteval sweep report", subtitle, sections, "sweep")
