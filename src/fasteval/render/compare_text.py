"""``fasteval compare``'s views of the ``compare.json`` document (:func:`fasteval.doors.compare.build_document`):
the terminal table (:func:`render_table`) and the Markdown section of ``compare.md`` (:func:`render_markdown`).
Missing values are written ``-``."""

from __future__ import annotations

import math
from typing import Any, Sequence

from fasteval.render.words import md_text

def _num(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def _ci(pair: Sequence[float] | None, digits: int = 3) -> str:
    return "-" if not pair else f"[{_num(pair[0], digits)}, {_num(pair[1], digits)}]"


def _task_name(task: dict[str, Any]) -> str:
    group, tid = task.get("task_group"), task.get("task_id")
    return str(group) if tid in (None, 0) and str(group) == str(task.get("task")) else f"{group}/{tid}"


def table_rows(doc: dict[str, Any]) -> list[list[str]]:
    rows = []
    for t in doc["tasks"]:
        s, r = t.get("success"), t["return"]
        rows.append([
            _task_name(t), str(t["n_pairs"]),
            _num(s["a_rate"]) if s else "-", _num(s["b_rate"]) if s else "-",
            f"{_num(s['diff'])} {_ci(s['diff_ci'])}" if s else "-",
            f"{_num(s['p_value'], 4)} ({_num(s['p_holm'], 4)})" if s else "-",
            f"{_num(r['diff'])} {_ci(r['diff_ci'])}", f"{_num(r['p_value'], 4)} ({_num(r['p_holm'], 4)})",
            _num(r.get("signed_rank_p"), 4), _num(r["prob_improvement"]), t["verdict"],
        ])
    return rows


HEADERS = ["task", "n", "A rate", "B rate", "success B-A [CI]", "McNemar p (Holm)", "return B-A [t CI]",
           "mean t p (Holm)", "signed-rank p (2nd)", "P(B>A) (2nd)", "verdict"]


def render_markdown(doc: dict[str, Any]) -> str:
    """The Markdown section: a heading, one row per task, the overall verdict."""
    a, b = md_text(doc["a"]["label"]), md_text(doc["b"]["label"])
    lines = [f"## Comparison: {b} vs {a}", "",
             f"{b} = {md_text(doc['b']['policy'])}, {a} = {md_text(doc['a']['policy'])}, env {md_text(doc['a']['env'])}; "
             f"differences are {b} - {a} (positive: {b} did better); alpha = {doc['alpha']} with Holm's correction across tasks.",
             "", "| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(md_text(c) for c in row) + " |" for row in table_rows(doc)]
    o = doc["overall"]
    lines += ["", f"**Overall: {o['verdict']}** ({o['n_better']} better, {o['n_worse']} worse of {o['n_tasks']} tasks)"
              + (f"; non-inferior within {doc['margin']}: {o['non_inferior']}" if doc["margin"] is not None else "")
              + (f"; gate: {'FAILED (exit 3)' if o['exit_code'] else 'passed'}" if o["fail_if_worse"] else "") + "."]
    seq = sequential_lines(doc, name=lambda t: md_text(_task_name(t)))
    lines += [""] + seq if seq else []
    lines += ["", stopped_runs_line(doc)] if stopped_runs_line(doc) else []
    return "\n".join(lines) + "\n"


def stopped_runs_line(doc: dict[str, Any]) -> str:
    """For two run folders of which one stopped on its data: why its fixed-n tests are descriptive ("" otherwise)."""
    stopped = (doc.get("overall") or {}).get("stopped_runs")
    if not stopped:
        return ""
    rules = ", ".join(f"{label}: --stop-when {doc[label.lower()]['stop_when']}" for label in stopped
                      if isinstance(doc.get(label.lower()), dict))
    return (f"Run {' and '.join(stopped)} stopped on its data ({rules}): its n was not fixed in advance, so the p-values, "
            f"intervals and verdicts above are descriptive. To decide with a stop, use the live comparison "
            f"(--policy-a/--policy-b/--env --stop-when decided).")


def sequential_lines(doc: dict[str, Any], name: Any = None) -> list[str]:
    """A live comparison's sequential test in words, per task: where it stopped and why, what decided, the
    anytime-valid interval of B - A, and that the fixed-n numbers above are descriptive after the stop.
    ``name(task)`` writes a task's name (``compare.md``: escaped)."""
    name = name or _task_name
    out = []
    for t in doc["tasks"]:
        q = t.get("sequential")
        if not q:
            continue
        evidence = (f"e-values {_num(q['e_value_better'], 2)} (better) / {_num(q['e_value_worse'], 2)} (worse), "
                    f"reject at e >= {q['threshold']:g}" if "e_value_better" in q else
                    f"{q.get('b_wins')} of {q.get('n_discordant')} discordant pairs won by B")
        diff = q.get("difference") or {}
        interval = (f"; B - A in [{_num(diff.get('low'))}, {_num(diff.get('high'))}] "
                    f"({_num(100 * diff['confidence'], 0)}% anytime-valid, valid at the stop)" if diff else "")
        out.append(f"Sequential ({name(t)}): stopped at k = {q['k']} ({q['reason']}), decision "
                   f"{q['decision'] or 'none'}; decided by {q.get('decided_by', q.get('method'))}; {evidence}{interval}. "
                   f"The p-values and bootstrap intervals above are {t.get('fixed_n_tests', 'fixed-n')}.")
    return out


def render_table(doc: dict[str, Any]) -> str:
    rows = [HEADERS] + table_rows(doc)
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADERS))]
    text = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    o = doc["overall"]
    text.append(f"overall: {o['verdict']} ({o['n_better']} better, {o['n_worse']} worse of {o['n_tasks']} tasks; "
                f"B = {doc['b']['source']}, A = {doc['a']['source']}; differences B - A)")
    return "\n".join(text + sequential_lines(doc) + ([stopped_runs_line(doc)] if stopped_runs_line(doc) else []))
