"""A comparison's page, from ``fasteval compare``'s document (``compare.json``, schema
``fasteval.compare/1``): the overall verdict, one row per task with the paired differences and
their intervals, McNemar and paired t p-values (signed-rank as a secondary statistic) (raw and Holm-adjusted), the probability of
improvement and the verdict; forest plots of the differences; and, for a live comparison, the
sequential test (its e-values over episodes when the document carries a ``trajectory``).

Differences are B - A (A = baseline, B = candidate: "the new one minus the baseline", the one
direction of every fasteval page and table), and every header that shows one says so: positive
means B is better. Rates in the document are fractions; the page shows them in percent
(differences in percentage points). The page and its title name each side by its label, or by its
policy's short name when the label is the default "A" / "B".
"""

from __future__ import annotations

import json
import math
from html import escape
from pathlib import Path
from typing import Any, Mapping, Sequence

from fasteval.render.compare_text import stopped_runs_line
from fasteval.render.html import page, svg

VERDICT_KIND = {"better": "better", "worse": "worse", "no difference": "neutral"}


def _pct(x: Any) -> Any:
    return 100.0 * x if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _pct_ci(ci: Sequence[Any] | None) -> list[Any] | None:
    return [_pct(v) for v in ci] if ci else None


def _task_label(t: Mapping[str, Any]) -> str:
    if t.get("task_group") is None and t.get("task") is None:
        return "all episodes"
    name = t.get("task")
    return f"{t.get('task_group')}/{t.get('task_id')}" + (f" {name}" if name is not None and str(name) != str(t.get("task_group")) else "")


def label_title(label: str) -> str:
    """A side's label for a title: a run folder's name rather than its raw relative path (``runs/baseline`` ->
    ``baseline``), a sweep cell ``SWEEP_DIR::POLICY[::ENV]`` as ``POLICY[::ENV]`` (issue 42)."""
    if "::" in label:
        return label.split("::", 1)[1]
    name = Path(label.rstrip("/")).name
    return name or label


def side_names(doc: Mapping[str, Any]) -> tuple[str, str]:
    """``(A's name, B's name)``: each side's label, or its policy's short name when the label is the
    default; two sides with the same policy name are told apart by their sources (run folders)."""
    from fasteval.render.html.run_input import policy_title, short_name

    def name(s: Mapping[str, Any], default: str) -> str:
        label = s.get("label")
        if label and str(label) != default:
            return label_title(str(label))
        policy = s.get("policy")
        if isinstance(policy, str):
            return short_name(policy_title(policy), 40)
        return short_name(json.dumps(policy, default=str), 40) if policy else default

    a, b = doc.get("a") or {}, doc.get("b") or {}
    na, nb = name(a, "A"), name(b, "B")
    if na == nb:
        sa, sb = (Path(str(s.get("source"))).name if s.get("source") else None for s in (a, b))
        na, nb = (f"{na} ({sa})" if sa else f"{na} (A)"), (f"{nb} ({sb})" if sb and sb != sa else f"{nb} (B)")
    return na, nb


def glance(doc: Mapping[str, Any]) -> str:
    o = doc.get("overall") or {}
    a, b = doc.get("a") or {}, doc.get("b") or {}
    na, nb = side_names(doc)
    verdict = o.get("verdict", "unknown")
    gate = ""
    if o.get("fail_if_worse"):
        gate = f"gate --fail-if-worse: exit code {o.get('exit_code')}"
    cards = [
        f'<div class="card" id="glance-verdict" data-value="{escape(str(verdict))}"><div class="label">'
        f'B (<span class="name">{escape(nb)}</span>) against A (<span class="name">{escape(na)}</span>)</div>'
        f'<div class="value">{page.badge(str(verdict), VERDICT_KIND.get(verdict))}</div><div class="detail">{escape(gate)}</div></div>',
        page.card("tasks", page.fmt(o.get("n_tasks")), f"{page.fmt(o.get('n_better'))} better, {page.fmt(o.get('n_worse'))} worse",
                  "glance-tasks"),
        page.card("significance", f"α = {doc.get('alpha')}", f"{escape(str(doc.get('correction', '')))} correction across tasks; "
                  f"two-sided tests"),
    ]
    if o.get("non_inferior") is not None:
        cards.append(page.card("non-inferiority", "shown" if o["non_inferior"] else "not shown",
                               f"margin {doc.get('margin')}", "glance-noninferior"))
    who = page.kv([(f"A (baseline): {na}", _side(a)), (f"B (candidate): {nb}", _side(b)), ("mode", doc.get("mode"))])
    return f'<div class="cards">{"".join(cards)}</div>{who}' + page.note(
        f"Differences are B - A ({nb} minus {na}): positive means B is better. " + verdict_basis_text(doc))


def verdict_basis_text(doc: Mapping[str, Any]) -> str:
    """What decided the verdicts, as ``compare.json`` says (``overall.verdict_basis``)."""
    basis = (doc.get("overall") or {}).get("verdict_basis")
    if basis in ("e-process", "truncated design", "mixed"):
        test = {"e-process": "the anytime-valid e-process", "truncated design": "the truncated design",
                "mixed": "the sequential test"}[basis]
        return (f"The verdict comes from {test} that stopped the comparison (see Sequential test); the McNemar and "
                f"signed-rank p-values and the bootstrap intervals are descriptive, not valid after the stop.")
    if stopped_runs_line(dict(doc)):
        return "The verdict of a task uses its primary metric's Holm-adjusted p-value. " + stopped_runs_line(dict(doc))
    return "The verdict of a task uses its primary metric's Holm-adjusted p-value."


def _side(s: Mapping[str, Any]) -> str:
    parts = [f"{k} {s[k]}" for k in ("label", "policy", "env", "source") if s.get(k) is not None]
    if s.get("seed") is not None:
        parts.append(f"seeds from {s['seed']}" + (f", {s['n_episodes']} episodes" if s.get("n_episodes") else ""))
    return "; ".join(str(p) for p in parts)


def _verdict_cell(v: str | None) -> page.Cell:
    v = v or "—"
    return page.Cell(page.badge(v, VERDICT_KIND.get(v)), v, html=True)


def task_table(doc: Mapping[str, Any]) -> str:
    """Three tables: the verdicts, the success rates, the returns (one row per task each)."""
    tasks = doc.get("tasks") or []
    with_margin = doc.get("margin") is not None
    verdicts, success, returns = [], [], []
    for t in tasks:
        attrs = {"task-group": t.get("task_group"), "task-id": t.get("task_id")}
        label = page.text(_task_label(t))
        s, r = t.get("success"), t.get("return") or {}
        ni = t.get("non_inferiority")
        row = [label, page.num(t.get("n_pairs")), page.text(t.get("primary")), page.pnum(t.get("p_holm"))]
        if with_margin:
            row.append(page.text("non-inferior" if ni and ni.get("non_inferior") else ("not shown" if ni else "—")))
        verdicts.append((attrs, row + [_verdict_cell(t.get("verdict"))]))
        if s:
            success.append((attrs, [label, page.num(s.get("a_successes")), page.num(s.get("b_successes")),
                                    page.num(_pct(s.get("a_rate"))), page.num(_pct(s.get("b_rate"))), page.num(_pct(s.get("diff"))),
                                    page.interval(_pct_ci(s.get("diff_ci"))), page.num(s.get("only_a")), page.num(s.get("only_b")),
                                    page.pnum(s.get("p_value")), page.pnum(s.get("p_holm"))]))
        returns.append((attrs, [label, page.num(r.get("a_mean"), 3), page.num(r.get("b_mean"), 3), page.num(r.get("diff"), 3),
                                page.interval(r.get("diff_ci"), 3), page.pnum(r.get("p_value")), page.pnum(r.get("p_holm")),
                                page.pnum(r.get("signed_rank_p")),
                                page.num(r.get("prob_improvement"), 3), page.interval(r.get("prob_improvement_ci"), 3)]))
    stopped = any(t.get("fixed_n_tests") for t in tasks)
    after = ((" (descriptive, not valid after the stop)" if any(t.get("sequential") for t in tasks) else
              " (descriptive: a run stopped on its data)") if stopped else "")
    out = [page.table("compare-tasks", ["task", "pairs", "primary metric", "p (Holm)" + after]
                      + (["non-inferiority"] if with_margin else []) + ["verdict"], verdicts)]
    out.append("<h3>Success</h3>")
    if success:
        out.append(page.table("compare-success", ["task", "A successes", "B successes", "A success %", "B success %",
                                                  "B - A (pp)", "B - A 95% CI", "only A", "only B", "McNemar p", "p (Holm)"],
                              success, caption=f"McNemar's exact test on the discordant pairs; the rate difference's "
                                               f"interval is a paired bootstrap ({doc.get('n_boot', '')} resamples)"
                                               + (": fixed-n numbers, descriptive, not valid after the stop (the "
                                                  "anytime-valid interval is under Sequential test)." if stopped else ".")))
    missing = [_task_label(t) for t in tasks if not t.get("success")]
    if missing:
        out.append(page.note(f"no success signal (compared by return): {', '.join(missing)}"))
    out.append("<h3>Return</h3>")
    out.append(page.table("compare-return", ["task", "A mean return", "B mean return", "B - A", "B - A 95% CI",
                                             "t-test p", "p (Holm)", "signed-rank p (secondary)", "P(B > A)",
                                             "P(B > A) 95% CI"], returns,
                          caption="The verdict tests the mean difference shown: the paired t-test, with its t-interval (B - A 95% CI). "
                                  "Secondary, no verdict rests on them: Wilcoxon's signed-rank test and P(B > A), the "
                                  "probability of improvement over paired episodes (which policy usually wins)"
                                  + (". Fixed-n numbers: descriptive, not valid after the stop." if stopped else ".")))
    return "".join(out)


def plots(doc: Mapping[str, Any]) -> str:
    tasks = doc.get("tasks") or []
    out = []
    stopped = any(t.get("fixed_n_tests") for t in tasks)
    label = " (fixed-n, descriptive after the stop)" if stopped else ""
    success = [(_task_label(t), _pct(t["success"]["diff"]), *_pct_ci(t["success"]["diff_ci"]))
               for t in tasks if t.get("success") and t["success"].get("diff_ci")]
    if success:
        out.append(svg.intervals(success, f"success rate B - A (percentage points, 95% CI){label}",
                                 "success difference per task", xrange=None, ref=0.0))
    returns = [(_task_label(t), t["return"]["diff"], *t["return"]["diff_ci"]) for t in tasks
               if t.get("return") and t["return"].get("diff_ci")]
    if returns:
        out.append(svg.intervals(returns, f"mean return B - A (95% CI){label}", "return difference per task", xrange=None,
                                 ref=0.0))
    return f'<div class="plots" id="plot-differences">{"".join(out)}</div>' if out else ""


def sequential_section(doc: Mapping[str, Any]) -> str:
    top = doc.get("sequential")
    blocks = [("all tasks", top)] + [(_task_label(t), t.get("sequential")) for t in doc.get("tasks") or []
                                     if t.get("sequential") != top]  # one task: the top block repeats it
    blocks = [(name, b) for name, b in blocks if b]
    if not blocks:
        return ""
    out = []
    for name, b in blocks:
        out.append(f"<h3>{escape(name)}</h3>")
        diff = b.get("difference") or {}
        rows = [("rule", b.get("rule")), ("decided by", b.get("decided_by") or b.get("method")),
                ("method", b.get("method")), ("confidence", b.get("confidence")),
                ("episodes (k) / cap", f"{b.get('k')} / {b.get('cap')}"), ("stopped by", b.get("reason")),
                ("decision", b.get("decision") or "none")]
        if "e_value_better" in b:
            threshold = b.get("threshold")
            rows += [("e-value, B better", page.fmt_sig(b.get("e_value_better"))),
                     ("e-value, B worse", page.fmt_sig(b.get("e_value_worse"))),
                     ("reject at e ≥", f"{threshold:g}" if isinstance(threshold, (int, float)) else threshold)]
        else:
            rows += [("discordant pairs (B won / all)", f"{b.get('b_wins')} / {b.get('n_discordant')}"),
                     ("alpha per side (spent)", f"{page.fmt_sig(b.get('alpha_per_side'))} ({page.fmt_sig(b.get('alpha_spent_per_side'))})"),
                     ("valid until", f"-n {b.get('valid_until')}")]
        if diff:
            scale = _pct if (b.get("metric") or "success") == "success" else (lambda v: v)
            unit = " pp" if (b.get("metric") or "success") == "success" else ""
            rows.append((f"B - A, {page.fmt(100 * diff.get('confidence', 0.95), 0)}% anytime-valid (valid at the stop)",
                         f"[{page.fmt(scale(diff.get('low')), 2)}, {page.fmt(scale(diff.get('high')), 2)}]{unit}"))
        rows.append(("computed past the stop (in no aggregate)", b.get("n_computed_past_stop")))
        out.append(page.kv(rows))
        out.append(_trajectory_plot(name, b))
    return "".join(out)


def _trajectory_plot(name: str, b: Mapping[str, Any]) -> str:
    """The sequence over episodes, when the document has it: e-values (log scale, with the
    rejection threshold), and anytime-valid bounds on the difference."""
    tr = b.get("trajectory")
    if not isinstance(tr, Mapping) or not (tr.get("k") or tr.get("diff_k")):
        return page.note("The document holds the sequence's values at the stop only (no trajectory).")
    k = tr["k"]
    out = []
    lines = [(label, tr[key]) for key, label in (("e_value_better", "e-value: B better"), ("e_value_worse", "e-value: B worse"))
             if tr.get(key)]
    if lines:
        refs = [("rejection threshold", float(b["threshold"]))] if isinstance(b.get("threshold"), (int, float)) else []
        out.append(svg.band(k, lines, [], "paired episodes", "e-value", f"{name}: e-processes over episodes", hlines=refs, log_y=True))
    if tr.get("diff_low") and tr.get("diff_high"):
        out.append(svg.band(tr.get("diff_k") or k, [], [("anytime-valid bounds on B - A", tr["diff_low"], tr["diff_high"])],
                            "paired episodes", "B - A", f"{name}: confidence sequence over episodes",
                            hlines=[("no difference", 0.0)]))
    return f'<div class="plots trajectory">{"".join(out)}</div>'


def render_compare_page(doc: Mapping[str, Any], page_dir: Path | None = None) -> str:
    na, nb = side_names(doc)
    verdict = (doc.get("overall") or {}).get("verdict", "unknown")
    title = f"fasteval compare: {nb} (B) vs {na} (A)"
    subtitle = f"{page.badge(str(verdict), VERDICT_KIND.get(verdict))} {escape(str(doc.get('mode', '')))} comparison"
    raw = "<details><summary>compare.json</summary><pre>" + escape(json.dumps(doc, indent=2, default=_plain)) + "</pre></details>"
    settings = page.kv([("schema", doc.get("schema")), ("alpha", doc.get("alpha")), ("margin", doc.get("margin") or "none"),
                        ("correction", doc.get("correction")), ("bootstrap", f"{doc.get('n_boot')} resamples, seed {doc.get('boot_seed')}"),
                        ("confidence", doc.get("confidence"))])
    sections = [
        ("glance", "At a glance", glance(doc)),
        ("tasks", "Per task", task_table(doc)),
        ("plots", "Paired differences", plots(doc)),
        ("sequential", "Sequential test", sequential_section(doc)),
        ("provenance", "Settings", settings + raw),
    ]
    return page.document(title, subtitle, sections, "compare")


def _plain(x: Any) -> Any:
    if isinstance(x, float) and math.isnan(x):
        return None
    return str(x)
