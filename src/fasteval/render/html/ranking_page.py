"""A many-policy run's page (``report.html``): which checkpoint is best, by how much, and where the race
dropped the others; and each policy's own run page under ``policies/<name>/report.html``.

Read from the run's ``eval_info.json`` (:class:`~fasteval.types.many_result.ManyPolicyResult`'s document):
the ``ranking`` rows, the ``race`` block and the ``trajectory`` of every policy's anytime-valid interval
over its episodes. Nothing is computed here: every number on the page is one of the document's (each
number cell holds it exactly in ``data-value``; intervals in ``data-low`` / ``data-high``).

Sections: the answer at a glance (the best policy, the policies dropped, the episodes the race used
against the fixed n at the cap); the ranking table (policies sorted; estimate and interval; paired
difference to the best and its interval; where each was dropped and by whom); the intervals as a
forest plot; the intervals over episodes as a plot (one band per policy, ending where it was dropped);
the race's eliminations; the policies' videos side by side on the seeds they share (one row per seed, one
column per policy in ranked order; rendered after the race); time, errors and provenance as on a run page. Below 640 px the tables stack,
one block per row, so nothing runs off a phone's screen.
"""

from __future__ import annotations

import math
from html import escape
from pathlib import Path
from typing import Any, Mapping, Sequence

from fasteval.render.html import page, svg
from fasteval.render.html.run_facts import errors_section, provenance_section, time_section
from fasteval.render.html.run_input import RunPageInput, short_name, status_of
from fasteval.render.html.run_videos import side_by_side
from fasteval.render.words import plural

STACK_CSS = """<style>
.ranking-plots{display:flex;flex-direction:column;gap:8px}
header h1,header .sub,header code{overflow-wrap:anywhere}
@media (max-width:640px){
 table.stacked thead{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0)}
 table.stacked,table.stacked tbody,table.stacked tr{display:block;width:100%}
 table.stacked tr{border:1px solid var(--line);border-radius:6px;margin:0 0 8px;padding:4px 0}
 table.stacked td{display:grid;grid-template-columns:8.5em minmax(0,1fr);gap:8px;border:0;padding:2px 9px;
   text-align:left;white-space:normal;overflow-wrap:anywhere}
 table.stacked td:before{content:attr(data-label);color:var(--muted)}
}
</style>
<script>document.addEventListener('DOMContentLoaded',function(){
  document.querySelectorAll('table').forEach(function(t){if(!t.tHead||!t.tBodies.length)return;
    var heads=Array.prototype.map.call(t.tHead.rows[0].cells,function(th){return th.textContent.trim();});
    Array.prototype.forEach.call(t.tBodies[0].rows,function(r){Array.prototype.forEach.call(r.cells,function(td,i){
      if(!td.hasAttribute('data-label'))td.setAttribute('data-label',heads[i]||'');});});
    t.classList.add('stacked');});});</script>"""
"""Narrow screens: every table of the page stacks, one block per row, each cell under its header's name
(the shared time and provenance tables get their labels from their headers when the page loads)."""
POLICY_PAGES = "policies"
"""Each policy's own page: ``policies/<name>/report.html`` beside the run's."""


def _pct(metric: str) -> bool:
    return metric == "success"


def _what(metric: str) -> str:
    return {"success": "success rate", "return": "mean return", "max_reward": "mean max reward"}.get(metric, metric)


def _shown(x: Any, metric: str, sign: bool = False) -> str:
    """A value for reading: a rate in percent (a difference in points), a return to 4 digits; ``—`` for none."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    if _pct(metric):
        return f"{100.0 * x:+.1f}" if sign else f"{100.0 * x:.1f}%"
    return f"{x:+.4g}" if sign else f"{x:.4g}"


def _cell(label: str, text: str, value: Any = None, low: Any = None, high: Any = None, html: bool = False,
          css: str = "") -> str:
    attrs = f' data-label="{escape(label)}"'
    if value is not None:
        attrs += f' data-value="{escape(page.value_attr(value))}"'
    if low is not None and high is not None:
        attrs += f' data-low="{escape(page.value_attr(low))}" data-high="{escape(page.value_attr(high))}"'
    cls = css or ("num" if value is not None and not isinstance(value, str) else "")
    return f'<td{f" class={chr(34)}{cls}{chr(34)}" if cls else ""}{attrs}>{text if html else escape(text)}</td>'


def _table(table_id: str, headers: Sequence[str], rows: Sequence[tuple[Mapping[str, Any], Sequence[str]]],
           caption: str | None = None, sortable: bool = True) -> str:
    head = "".join(f'<th scope="col">{escape(h)}</th>' for h in headers)
    body = "".join("<tr" + "".join(f' data-{escape(k)}="{escape(page.value_attr(v))}"' for k, v in attrs.items()) + ">"
                   + "".join(cells) + "</tr>" for attrs, cells in rows)
    cls = "stacked sortable" if sortable else "stacked"
    return (f'<div class="scroll"><table id="{escape(table_id)}" class="{cls}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>" + (page.note(caption) if caption else ""))


def policy_href(name: str, page_name: str = "report.html") -> str:
    from fasteval.types.files import safe_filename

    return f"{POLICY_PAGES}/{safe_filename(name)}/{page_name}"


# -- sections ------------------------------------------------------------------------------------------------
def glance(doc: Mapping[str, Any], status: str) -> str:
    ranking = doc.get("ranking") or []
    race = doc.get("race")
    cards = []
    verdict = doc.get("verdict") or {}
    if ranking:
        best = ranking[0]
        m = best["metric"]
        what = _what(m)
        detail = (f"{escape(what)} {escape(_shown(best['estimate'], m))}, {escape(best['interval'])} "
                  f"[{escape(_shown(best['ci_low'], m))}, {escape(_shown(best['ci_high'], m))}]; "
                  f"{escape(plural(best['episodes'], 'episode'))}")
        state = verdict.get("state", "best")
        if state == "best":
            cards.append(page.card("best policy", str(best["policy"]), detail, "glance-best",
                                   {"value": best["estimate"], "policy": best["policy"], "state": state}))
        else:  # a tie, or an undecided race: no best is named, and that is said first
            title = "undecided at the cap" if state == "undecided" and (doc.get("race") or {}).get("reason") == "cap" \
                else ("undecided" if state == "undecided" else "tied for best")
            cards.append(page.card(title, " = ".join(str(n) for n in verdict.get("tied_for_best") or []),
                                   escape(verdict.get("headline", "")), "glance-best",
                                   {"value": best["estimate"], "policy": "", "state": state}))
    dropped = [r for r in ranking if r.get("dropped_at") is not None]
    cards.append(page.card("policies", page.fmt(len(ranking)),
                           f"{len(dropped)} dropped by the race" if race else "all run to the same n",
                           "glance-policies", {"value": len(ranking)}))
    used = sum(r["episodes"] for r in ranking)
    if race:
        cap_total = int(race["cap"]) * int(race["n_policies"])
        saved = 1.0 - used / cap_total if cap_total else 0.0
        cards.append(page.card("episodes counted", page.fmt(used),
                               f"of {page.fmt(cap_total)} at the cap ({page.fmt(100.0 * saved)}% saved)",
                               "glance-episodes", {"value": used}))
        reason = {"one_left": "one policy left", "tied": "the rest tied", "cap": "cap reached",
                  "incomplete": "not decided yet"}.get(race["reason"], race["reason"])
        cards.append(page.card("race", reason, f"{escape(race['rule'])} at k = {page.fmt(race['k'])}; "
                               f"{int(round(100 * race['confidence']))}% family-wise", "glance-race",
                               {"value": race["k"], "reason": race["reason"]}))
    else:
        cards.append(page.card("episodes", page.fmt(used), "every policy on the same seeds", "glance-episodes",
                               {"value": used}))
    cards.append(page.card("status", status, "", "glance-status", {"value": status}))
    return '<div class="cards">' + "".join(cards) + "</div>"


def ranking_table(doc: Mapping[str, Any], links: Mapping[str, str]) -> str:
    ranking = doc.get("ranking") or []
    if not ranking:
        return page.note("No policy finished an episode.")
    m = ranking[0]["metric"]
    unit = "success %" if _pct(m) else _what(m)
    diff = "vs best (points)" if _pct(m) else "vs best"
    headers = ["rank", "policy", "episodes", unit, "interval", diff, "difference interval", "dropped at", "dropped by"]
    rows = []
    for r in ranking:
        vs = r.get("vs_best")
        name = str(r["policy"])
        href = links.get(name)
        scale = 100.0 if _pct(m) else 1.0
        est = None if r["estimate"] is None else scale * r["estimate"]
        lo = None if r["ci_low"] is None else scale * r["ci_low"]
        hi = None if r["ci_high"] is None else scale * r["ci_high"]
        cells = [
            _cell("rank", str(r["rank"]), r["rank"]),
            _cell("policy", f'<a href="{escape(href)}">{escape(name)}</a>' if href else escape(name), name, html=True, css=""),
            _cell("episodes", page.fmt(r["episodes"]), r["episodes"]),
            _cell(unit, _shown(r["estimate"], m), est if est is not None else ""),
            _cell("interval", f"[{_shown(r['ci_low'], m)}, {_shown(r['ci_high'], m)}]", lo if lo is not None else "",
                  lo, hi) if lo is not None else _cell("interval", "—", "", css="num none"),
        ]
        if vs:
            d, dl, dh = (None if vs[k] is None else scale * vs[k] for k in ("difference", "ci_low", "ci_high"))
            cells.append(_cell(diff, _shown(vs["difference"], m, sign=True), d if d is not None else ""))
            cells.append(_cell("difference interval", f"[{_shown(vs['ci_low'], m, True)}, {_shown(vs['ci_high'], m, True)}]",
                               dl if dl is not None else "", dl, dh) if dl is not None else
                         _cell("difference interval", "—", "", css="num none"))
        else:
            cells.append(_cell(diff, "best", "", css="none"))
            cells.append(_cell("difference interval", "", "", css="none"))
        if r.get("dropped_at") is not None:
            cells.append(_cell("dropped at", f"k = {page.fmt(r['dropped_at'])}", r["dropped_at"]))
            cells.append(_cell("dropped by", str(r["dropped_by"]), str(r["dropped_by"]), css=""))
        else:
            cells.append(_cell("dropped at", "—" if doc.get("race") else "", "", css="none"))
            cells.append(_cell("dropped by", "", "", css="none"))
        rows.append(({"policy": name, "rank": r["rank"]}, cells))
    intervals = ranking[0]["interval"]
    pair = next((r["vs_best"]["interval"] for r in ranking if r.get("vs_best")), "")
    caption = (f"Intervals: {intervals}. Differences: the policy minus the first-ranked, {pair}, on the episodes "
               f"both ran.")
    verdict = doc.get("verdict") or {}
    lead = ""
    if verdict.get("headline"):
        lead = (f'<p id="verdict" data-state="{escape(str(verdict.get("state")))}"><strong>'
                f'{escape(verdict["headline"])}</strong></p>')
        if verdict.get("metric_note"):
            lead += page.note(verdict["metric_note"])
    return lead + _table("ranking", headers, rows, caption)


def forest(doc: Mapping[str, Any]) -> str:
    ranking = doc.get("ranking") or []
    if not ranking:
        return ""
    m = ranking[0]["metric"]
    scale = 100.0 if _pct(m) else 1.0

    def f(x: Any) -> float:
        return math.nan if x is None else scale * float(x)

    rows = [(str(r["policy"]), f(r["estimate"]), f(r["ci_low"]), f(r["ci_high"])) for r in ranking]
    label = "success rate (%)" if _pct(m) else _what(m)
    plots = [svg.intervals(rows, label, "each policy: estimate and interval", xrange=(0.0, 100.0) if _pct(m) else None,
                           ylabel="policy")]
    diffs = [(str(r["policy"]), f(r["vs_best"]["difference"]), f(r["vs_best"]["ci_low"]), f(r["vs_best"]["ci_high"]))
             for r in ranking if r.get("vs_best")]
    if diffs:
        plots.append(svg.intervals(diffs, ("points " if _pct(m) else "") + "(policy minus the best)",
                                   f"paired difference to the best ({ranking[0]['policy']})", xrange=None, ref=0.0,
                                   ylabel="policy"))
    return '<div class="ranking-plots">' + "".join(plots) + "</div>"


def over_episodes(doc: Mapping[str, Any]) -> str:
    """The intervals over episodes: one shaded band and one line per policy, ending where it stopped."""
    traj = doc.get("trajectory")
    if not traj or not traj.get("series"):
        return page.note("No anytime-valid interval for a mean return without --return-bounds.") if doc.get("ranking") else ""
    pct = _pct(traj["metric"])
    scale = 100.0 if pct else 1.0
    series = [s for s in traj["series"] if s["n"]]
    if not series:
        return ""
    xmax = max(s["n"][-1] for s in series)
    lows = [v * scale for s in series for v in s["ci_low"]]
    highs = [v * scale for s in series for v in s["ci_high"]]
    yr = (0.0, 100.0) if pct else svg.padded_range(lows + highs)
    ax = svg.Axes(620, 300, (0.0, float(xmax)), yr)
    race = doc.get("race") or {}
    dropped = {e["name"]: e for e in race.get("eliminations") or []}
    names = []
    for i, s in enumerate(series):
        x, lo, hi, est = s["n"], [v * scale for v in s["ci_low"]], [v * scale for v in s["ci_high"]], \
            [v * scale for v in s["estimate"]]
        c = svg.colour(i)
        pts = [f"{ax.sx(a):.1f},{ax.sy(b):.1f}" for a, b in zip(x, hi)] + \
              [f"{ax.sx(a):.1f},{ax.sy(b):.1f}" for a, b in zip(x[::-1], lo[::-1])]
        ax.add(f'<polygon class="band" points="{" ".join(pts)}" fill="{c}" fill-opacity="{svg.BAND_OPACITY}">'
               f'<title>{escape(s["policy"])}: interval after each episode</title></polygon>')
        for bound in (hi, lo):  # the band is read from its bounds, in full colour and the series' dashes (issue 42:
            # tints alone had 1.2:1 contrast and merged where the bands overlap, in the first episodes)
            path = " ".join(f"{ax.sx(a):.1f},{ax.sy(b):.1f}" for a, b in zip(x, bound))
            ax.add(f'<polyline class="bound" points="{path}" fill="none" stroke="{c}" stroke-width="1.2"{svg.dash(i)}/>')
        line = " ".join(f"{ax.sx(a):.1f},{ax.sy(b):.1f}" for a, b in zip(x, est))
        ax.add(f'<polyline class="line" points="{line}" fill="none" stroke="{c}" stroke-width="2"/>')
        e = dropped.get(s["policy"])
        if e is not None:
            px = ax.sx(e["k"])
            ax.add(f'<line class="ref" x1="{px:.1f}" y1="{ax.top}" x2="{px:.1f}" y2="{ax.height - ax.bottom}" stroke="{c}">'
                   f'<title>{escape(s["policy"])} dropped at k = {e["k"]} (beaten by {escape(e["by_name"])})</title></line>')
        names.append(s["policy"] + (f" (dropped at {e['k']})" if e is not None else ""))
    ax.frame("episodes per policy", "success rate (%)" if pct else _what(traj["metric"]),
             f"{traj['interval']} interval after each episode")
    return (ax.svg("each policy's interval over its episodes") + svg.legend(names, first_is_band=len(names))
            + page.note("Each band is a policy's anytime-valid interval after its first n episodes (valid at every n "
                        "at once), drawn by its two bounds in the policy's colour and dash pattern around its estimate;"
                        " a vertical line marks where the race dropped a policy."))


def eliminations(doc: Mapping[str, Any]) -> str:
    race = doc.get("race")
    if not race:
        return ""
    rows = []
    for e in race.get("eliminations") or []:
        rows.append(({"policy": e["name"]}, [_cell("policy", e["name"], e["name"], css=""),
                                             _cell("dropped at k", page.fmt(e["k"]), e["k"]),
                                             _cell("beaten by", e["by_name"], e["by_name"], css=""),
                                             _cell("e-value", page.fmt_sig(e["e_value"]), e["e_value"])]))
    line = (f"Rule {race['rule']} (eps {page.fmt_sig(race['eps'])}), {int(round(100 * race['confidence']))}% family-wise: "
            f"each pair's paired interval at alpha/(K(K-1)/2) = {page.fmt_sig(race['alpha_per_pair'])}"
            + ("; drops by Holm's step-down (line K(K-1)/alpha for the first, (K-1)(K-d)/alpha after d drops)"
               if race.get("holm") else "") + f". The race ended "
            f"{race['reason']} at k = {race['k']}; {race.get('n_computed_past_stop', 0)} episodes were computed past a "
            f"stop and are not counted.")
    body = page.note(line)
    if rows:
        body += _table("eliminations", ["policy", "dropped at k", "beaten by", "e-value"], rows)
    else:
        body += page.note("No policy was dropped.")
    return body


def videos_side_by_side(doc: Mapping[str, Any], folder: Path, provenance: Mapping[str, Any] | None) -> str:
    """The policies' videos side by side, one row per seed they share (ranked order; empty without videos)."""
    policies = doc.get("policies") or {}
    columns = [(str(r["policy"]), RunPageInput(doc=policies[str(r["policy"])], page_dir=folder, provenance=provenance))
               for r in doc.get("ranking") or [] if str(r["policy"]) in policies]
    return side_by_side(columns, folder)


def render_ranking_page(doc: Mapping[str, Any], folder: Path, manifest: Mapping[str, Any] | None,
                        config: Mapping[str, Any] | None, provenance: Mapping[str, Any] | None, current: bool,
                        links: Mapping[str, str]) -> str:
    meta = doc.get("meta") or {}
    inp = RunPageInput(doc=doc, page_dir=folder, manifest=manifest, config=config, provenance=provenance,
                       provenance_is_current=current)
    status = status_of(inp)
    n_pol = len(doc.get("ranking") or [])
    race = doc.get("race")
    sub = (f"{page.badge(status)} {escape(plural(n_pol, 'policy').replace('policys', 'policies'))} on "
           f"<code>{escape(str(meta.get('env')))}</code>, the same seeds {escape(str(meta.get('seed')))}.. for each"
           + (f"; race <code>{escape(race['rule'])}</code>" if race else ""))
    sections = [
        ("glance", "At a glance", glance(doc, status) + STACK_CSS),
        ("ranking-section", "Ranking", ranking_table(doc, links)),
        ("intervals", "Intervals", forest(doc)),
        ("over-episodes", "Intervals over episodes", over_episodes(doc)),
        ("race", "The race", eliminations(doc)),
        ("side-by-side", "Side by side, on the same seeds", videos_side_by_side(doc, folder, provenance)),
        ("time", "Where the time went", time_section(inp)),
        ("errors", "Errors", errors_section(inp)),
        ("provenance", "Provenance", provenance_section(inp)),
    ]
    return page.document(f"fasteval ranking: {short_name(meta.get('env'))}", sub, sections, kind="ranking")


def write_ranking_report(folder: Path, doc: Mapping[str, Any], manifest: Any, config: Any, provenance: Any,
                         current: bool, name: str) -> Path:
    """The run's ranking page and each policy's own run page (``policies/<name>/report.html``)."""
    from fasteval.render.html.run_page import render_run_page
    from fasteval.types.files import write_text_atomic

    links = {}
    digests = (manifest or {}).get("policy_digests") if isinstance(manifest, dict) else None
    for policy, entry in (doc.get("policies") or {}).items():
        href = policy_href(policy, name)
        target = folder / href
        target.parent.mkdir(parents=True, exist_ok=True)
        own = {"policy_digest": digests[policy]} if isinstance(digests, dict) and policy in digests else None
        inp = RunPageInput(doc=entry, page_dir=target.parent, manifest=own, config=None, provenance=provenance,
                           provenance_is_current=current, title=f"fasteval: policy {policy}", files=())
        write_text_atomic(target, render_run_page(inp))
        links[policy] = href
    html = render_ranking_page(doc, folder, manifest if isinstance(manifest, dict) else None,
                               config if isinstance(config, dict) else None, provenance, current, links)
    return write_text_atomic(folder / name, html)
