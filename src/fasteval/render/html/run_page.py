"""A run's page: the answer at a glance, per-task and per-group tables, plots, videos, where the
time went, errors and provenance, from the run's ``eval_info.json`` document (plain JSON or the
columnar document :meth:`~fasteval.types.results.EvalResult.eval_info_document` gives in memory).

The page aggregates and never lists every episode (a 100,000-episode run's page is the size of
a 100-episode one); it links ``episodes.jsonl`` for the per-episode records.

Numbers shown: success rates with their 95% interval as ``eval_info.json`` has them (Wilson's for a
run of fixed n; for a ``--stop-when`` run, which chose its n from its data, the anytime-valid
sequence at the stop, named by ``pc_success_ci95_method``, with Wilson's only as
``pc_success_ci95_fixed_n``); mean returns with the interval of
:func:`~fasteval.render.html.run_input.mean_interval` (descriptive after a stop, and labelled so).
A suite's per-task rule claims are each at the run's level, not corrected for the number of tasks:
the page says so.
"""

from __future__ import annotations

import json
import math
from html import escape
from typing import Any, Mapping

import numpy as np

from fasteval.render.words import NO_SIGNAL, rate_text
from fasteval.render.html import page, svg
from fasteval.render.html.run_facts import errors_section, provenance_section, time_section
from fasteval.render.html.run_input import (
    BOOTSTRAP_UP_TO,
    MAX_TASK_PLOTS,
    RunPageInput,
    all_returns,
    failed_by_task,
    metric,
    overall,
    policy_title,
    short_name,
    status_of,
    task_label,
    tasks_of,
)
from fasteval.render.html.run_videos import find_videos, videos_section

__all__ = ["RunPageInput", "render_run_page"]


DESCRIPTIVE_RACE = "fixed n: descriptive, the race chose this policy's n from its data"


def _race_card(race: Mapping[str, Any]) -> str:
    """A raced policy's own page leads with the interval valid at the race's stop (the ranking's, adjusted for
    the best of K or labelled as not); the Wilson and bootstrap intervals below it are descriptive."""
    pct = race.get("metric") == "success"
    scale, digits, unit = (100.0, None, "%") if pct else (1.0, 3, "")

    def f(v: Any) -> str:
        return "—" if v is None else (page.fmt(scale * float(v)) if digits is None else page.fmt(float(v), digits))

    words = {"success": "success rate", "return": "mean return", "max_reward": "mean max reward"}.get(
        str(race.get("metric")), str(race.get("metric")))
    detail = (f"{escape(str(race.get('interval')))}: [{f(race.get('ci_low'))}{unit}, {f(race.get('ci_high'))}{unit}] "
              f"(valid at the race's stop); {escape(str(race.get('rule')))}, rank {page.fmt(race.get('rank'))}, "
              f"{page.fmt(race.get('episodes'))} episodes")
    if race.get("dropped_at") is not None:
        detail += f"; dropped at k = {page.fmt(race['dropped_at'])} by {escape(str(race.get('dropped_by')))}"
    return page.card(f"{words}, raced (valid interval)", f"{f(race.get('estimate'))}{unit}", detail,
                     "glance-valid", {"value": race.get("estimate"), "low": race.get("ci_low"), "high": race.get("ci_high"),
                                      "metric": race.get("metric")})


def glance(inp: RunPageInput) -> str:
    doc, o = inp.doc, overall(inp.doc)
    stopping = doc.get("stopping")
    race = (doc.get("meta") or {}).get("race")
    race = race if isinstance(race, Mapping) and race.get("ci_low") is not None else None
    cards = []
    if not o.get("n_episodes"):
        cards.append(page.card("success rate", "no episodes", "no episode finished", "glance-success", {"value": ""}))
    elif o.get("has_success_signal", True):
        lo, hi = o.get("pc_success_ci95") or [math.nan, math.nan]
        anytime = o.get("pc_success_ci95_fixed_n") is not None  # the record's interval is the one valid at the stop
        older = bool(stopping) and not anytime  # a stopped run's document written before it was: Wilson's, descriptive
        label = ("anytime-valid 95% (valid at the stop)" if anytime else
                 "Wilson 95% (fixed n: descriptive after the stop)" if older else "Wilson 95%")
        if race is not None:
            label += f" ({DESCRIPTIVE_RACE})"
        detail = f"{label} [{page.fmt(lo)}, {page.fmt(hi)}]; {page.fmt(o.get('n_success'))} of {page.fmt(o.get('n_episodes'))}"
        if older and stopping.get("metric", "success") == "success":
            detail += (f"<br>anytime-valid {int(round(100 * stopping.get('confidence', 0.95)))}%: "
                       f"[{page.fmt(100 * stopping['cs_low'])}, {page.fmt(100 * stopping['cs_high'])}]")
        cards.append(page.card("success rate", f"{page.fmt(o.get('pc_success'))}%", detail, "glance-success",
                               {"value": o.get("pc_success")}))
    else:
        cards.append(page.card("success rate", NO_SIGNAL, "the env never reported info[\"is_success\"]; compare by return",
                               "glance-success", {"value": ""}))
    returns = all_returns(doc)
    tasks = tasks_of(doc)
    key = 0 if len(tasks) == 1 else "all"  # one task: the same episodes, the same interval
    lo, hi, method = inp.return_interval(key, returns) if returns.size else (None, None, "")
    detail = f"95% {method} [{page.fmt(lo, 3)}, {page.fmt(hi, 3)}]" if returns.size else "no episode finished"
    if race is not None and returns.size:
        detail += f" ({DESCRIPTIVE_RACE})"
    elif stopping and returns.size:
        detail += " (fixed n: descriptive after the stop)"
    if stopping and stopping.get("metric") == "return":  # a return rule: the valid interval leads
        conf = int(round(100 * stopping.get("confidence", 0.95)))
        detail = (f'<span class="valid">anytime-valid {conf}% (valid at the stop) [{page.fmt(stopping["cs_low"], 3)}, '
                  f'{page.fmt(stopping["cs_high"], 3)}]</span><br>{detail}')
    cards.append(page.card("mean return", page.fmt(o.get("avg_sum_reward"), 3) if returns.size else "—", detail, "glance-return",
                           {"value": o.get("avg_sum_reward")}))
    requested = (inp.manifest or {}).get("n_episodes") or (doc.get("meta") or {}).get("n_episodes")
    n = o.get("n_episodes")
    n_detail = f"of {page.fmt(requested)} requested" if requested not in (None, n) else "every requested episode"
    if o.get("n_failed_episodes"):
        n_detail += f"; {page.fmt(o['n_failed_episodes'])} failed for good"
    cards.append(page.card("episodes", page.fmt(n), n_detail, "glance-n", {"value": n}))
    status = status_of(inp)
    status_detail = ""
    if status == "interrupted":
        status_detail = "resume with <code>fasteval --resume DIR</code>"
    elif o.get("n_failed_episodes"):
        status_detail = f"{page.fmt(o['n_failed_episodes'])} episodes failed (see Errors)"
    if stopping:
        status_detail += f"{'<br>' if status_detail else ''}stopped by {escape(str(stopping.get('reason')))} at k={page.fmt(stopping.get('k'))}"
    cards.append(f'<div class="card" id="glance-status"><div class="label">status</div><div class="value">'
                 f'{page.badge(status)}</div><div class="detail">{status_detail}</div></div>')
    if n:
        cards.append(page.card("speed", f"{rate_text(o.get('episodes_per_s'), grouping=True)} ep/s",
                               f"{rate_text(o.get('steps_per_s'), grouping=True)} env steps/s; {page.fmt(o.get('eval_s'), 2)} s",
                               "glance-speed"))
    if stopping:
        cards.insert(0, _decision_card(stopping))
    if race is not None:
        cards.insert(0, _race_card(race))
    return f'<div class="cards">{"".join(cards)}</div>' + _stopping_note(stopping) + stopping_table(tasks)


def decision_words(block: Mapping[str, Any]) -> tuple[str, str, str | None]:
    """What a ``--stop-when`` block decided, in words: ``(answer, why, kind)`` with kind ``"ok"``
    (the rule held), ``"bad"`` (the cap came first) or None. ``above=0.8`` that held reads
    "above 80%", with the anytime-valid lower bound that decided it."""
    success = block.get("metric", "success") == "success"
    scale, unit, digits = (100.0, "%", 1) if success else (1.0, "", 3)
    what = "the success rate" if success else "the mean return"
    conf = int(round(100 * float(block.get("confidence") or 0.95)))
    lo, hi = block.get("cs_low"), block.get("cs_high")
    bounds = (f"[{page.fmt(scale * lo, digits)}{unit}, {page.fmt(scale * hi, digits)}{unit}]"
              if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) else "—")
    threshold, epsilon = block.get("threshold"), block.get("epsilon")
    t_text = f"{page.fmt(scale * threshold, digits)}{unit}" if isinstance(threshold, (int, float)) else ""
    decision, reason = block.get("decision"), block.get("reason")
    if decision in ("above", "below") and block.get("decision_bound"):  # a truncated design decided
        return (f"{decision} {t_text}", f"{what} is {decision} {t_text} by the truncated design: "
                f"{block['decision_bound']} after k = {page.fmt(block.get('k'))} episodes; the anytime-valid {conf}% "
                f"interval {bounds} is wider than that test (it holds at any stop)", "ok")
    if decision in ("above", "below"):
        side, bound = ("lower", lo) if decision == "above" else ("upper", hi)
        sign = ">" if decision == "above" else "<"
        return (f"{decision} {t_text}", f"{what} is {decision} {t_text}: its anytime-valid {conf}% {side} bound "
                f"{page.fmt(scale * bound, digits)}{unit} {sign} {t_text} after k = {page.fmt(block.get('k'))} episodes", "ok")
    if decision in ("not_above", "not_below"):  # an anytime futility stop: surely not on the rule's side
        side, bound = ("upper", hi) if decision == "not_above" else ("lower", lo)
        sign = "<" if decision == "not_above" else ">"
        return (f"surely not {decision[4:]} {t_text}", f"{what} is surely not {decision[4:]} {t_text} (a futility "
                f"stop, no claim of {decision[4:]}): its anytime-valid {conf}% {side} bound "
                f"{page.fmt(scale * bound, digits)}{unit} {sign} {t_text} after k = {page.fmt(block.get('k'))} episodes",
                None)
    if block.get("fired") and isinstance(epsilon, (int, float)):
        return (f"±{page.fmt(scale * epsilon, digits)}{unit} reached", f"{what}'s anytime-valid {conf}% interval {bounds} "
                f"is within ±{page.fmt(scale * epsilon, digits)}{unit} after k = {page.fmt(block.get('k'))} episodes", "ok")
    if reason == "mixed":
        return (f"{page.fmt(block.get('n_fired'))} of {page.fmt(block.get('n_tasks'))} tasks decided",
                f"the rule held on {page.fmt(block.get('n_fired'))} tasks; the others reached the cap undecided "
                "(see Stopping, per task)", None)
    undecided = "undecided at the cap" if reason == "cap" else "undecided"
    if isinstance(threshold, (int, float)):
        why = f"the anytime-valid {conf}% interval {bounds} still contains {t_text}"
    elif isinstance(epsilon, (int, float)):
        why = f"the anytime-valid {conf}% interval {bounds} is still wider than ±{page.fmt(scale * epsilon, digits)}{unit}"
    else:
        why = f"the anytime-valid {conf}% interval is {bounds}"
    if reason != "cap":
        why += " (the run ended before the rule held or the cap was reached)"
    return undecided, why + f" at k = {page.fmt(block.get('k'))}", "bad"


def _decision_card(stopping: Mapping[str, Any]) -> str:
    """The decision of the run's (overall) stopping block, first in At a glance."""
    answer, why, kind = decision_words(stopping)
    cls = f"card decision {kind}" if kind else "card decision"
    return (f'<div class="{cls}" id="glance-decision" data-value="{escape(answer)}"><div class="label">--stop-when '
            f'{escape(str(stopping.get("rule")))}</div><div class="value">{escape(answer)}</div>'
            f'<div class="detail">{escape(why)}</div></div>')


def stopping_table(tasks: list[Mapping[str, Any]]) -> str:
    """One row per early-stopped task: the rule, k, what stopped it, the decision and the
    anytime-valid bounds (a table of its own, beside the answer, so that no column of it is off-screen)."""
    rows = []
    for t in tasks:
        block = t.get("stopping")
        if not block:
            continue
        answer, _, _ = decision_words(block)
        rows.append(({"task-group": t.get("task_group"), "task-id": t.get("task_id")},
                     [page.text(task_label(t)), *_stop_cells(block)[:3], page.text(answer), _stop_cells(block)[3]]))
    if not rows:
        return ""
    return "<h3>Stopping, per task</h3>" + page.table("stopping", ["task", "stop rule", "k", "stopped by", "decision",
                                                                   "anytime-valid bounds"], rows)


def _stopping_note(stopping: Mapping[str, Any] | None) -> str:
    if not stopping:
        return ""
    past = stopping.get("n_computed_past_stop") or 0
    valid = ("its return's anytime-valid interval at the stop leads (valid whatever decided the stop); the bootstrap "
             "and normal return intervals are fixed-n ones, descriptive only" if stopping.get("metric") == "return" else
             "its success intervals are the anytime-valid sequence at the stop (valid whatever decided the stop); the "
             "return intervals are fixed-n ones, descriptive only")
    text = (f"Early stopping: rule {stopping.get('rule')!s}, {stopping.get('method') or 'anytime-valid confidence sequence'}; "
            f"the reported episodes are exactly the first k of each task. The run chose its n from its data, so {valid}.")
    if (stopping.get("n_tasks") or 1) > 1:
        text += (f" Each of the {stopping['n_tasks']} tasks' above/below claims is at the run's level on its own, not "
                 f"corrected for the number of tasks: the chance that some task's claim is wrong can be up to "
                 f"{stopping['n_tasks']} times that level. The overall interval is simultaneous (each task's sequence "
                 f"at 1 - 0.05/T).")
    if past:
        text += f" {past} episodes finished past the stop and are in no aggregate."
    return page.note(text)


def task_table(inp: RunPageInput) -> str:
    doc = inp.doc
    tasks = tasks_of(doc)
    if not tasks:
        return page.note("No episode finished, so there is nothing to tabulate.")
    failed = failed_by_task(doc)
    single = len(tasks) == 1
    headers = ["task", "n", "successes", "success %", "success 95% CI", "mean return", "return 95% CI", "mean length",
               "failed episodes", "NaN-return episodes"]
    rows = []
    for i, t in enumerate(tasks):
        a = t.get("aggregated") or {}
        key = (str(t.get("task_group")), str(t.get("task_id")))
        href = inp.task_pages.get((t.get("task_group"), t.get("task_id")))
        label = task_label(t)
        cells = [page.link(label, href) if href else page.text(label), page.num(a.get("n_episodes"))]
        if a.get("has_success_signal", True):
            cells += [page.num(a.get("n_success")), page.num(a.get("pc_success")), page.interval(a.get("pc_success_ci95"))]
        else:
            cells += [page.none("—"), page.none("—"), page.none("—")]  # the note below says why, once
        lo, hi, _ = inp.return_interval(i, metric(t, "sum_rewards"))
        n_failed = failed.get(key, 0) + (failed.get(("", ""), 0) if single else 0)
        cells += [page.num(a.get("avg_sum_reward"), 3), page.interval([lo, hi], 3), page.num(a.get("avg_length")),
                  page.num(n_failed), page.num(a.get("n_nan_reward_episodes"))]
        rows.append(({"task-group": t.get("task_group"), "task-id": t.get("task_id")}, cells))
    methods = {inp.return_interval(i, metric(t, "sum_rewards"))[2] for i, t in enumerate(tasks)}
    stopped = any((t.get("aggregated") or {}).get("pc_success_ci95_fixed_n") is not None for t in tasks)
    raced = isinstance((doc.get("meta") or {}).get("race"), Mapping)
    caption = (("Success: anytime-valid 95% interval at the stop (betting confidence sequence). Return, descriptive after "
                "the stop: " if stopped else
                f"Success: Wilson score 95% interval; return: ({DESCRIPTIVE_RACE}; the valid interval is at the top) "
                if raced else
                "Success: Wilson score 95% interval. Return, descriptive after the stop (the anytime-valid interval "
                "is at the top): " if doc.get("stopping") else "Success: Wilson score 95% interval. Return: ") + " / ".join(
        {"bootstrap": "percentile bootstrap of the mean (2000 resamples, seed 0)",
         "normal": f"normal approximation (above {BOOTSTRAP_UP_TO} episodes)"}[m] for m in sorted(methods))
        + ". Click a header to sort.")
    return page.table("per-task", headers, rows, caption=caption) + (
        page.note(f"— in the success columns: {NO_SIGNAL} (the env never reported info[\"is_success\"], so a rate "
                  "would read 0% by construction).")
        if any(not (t.get("aggregated") or {}).get("has_success_signal", True) for t in tasks) else "")


def _stop_cells(stopping: Mapping[str, Any] | None) -> list[page.Cell]:
    if not stopping:
        return [page.none("—")] * 4
    scale = 100.0 if stopping.get("metric", "success") == "success" else 1.0
    bounds = [stopping.get("cs_low"), stopping.get("cs_high")]
    bounds = [b * scale if isinstance(b, (int, float)) else None for b in bounds]
    return [page.text(stopping.get("rule")), page.num(stopping.get("k")), page.text(stopping.get("reason")),
            page.interval(bounds, 1 if scale == 100.0 else 3)]


def group_table(inp: RunPageInput) -> str:
    """One row per task group (shown when some group holds several tasks), with the same columns as
    the task table; a group's return interval is over all its episodes."""
    groups = inp.doc.get("per_group") or {}
    tasks = tasks_of(inp.doc)
    if not groups or len(groups) >= len(tasks):
        return ""  # one task per group: the task table says it all
    failed = failed_by_task(inp.doc)
    members: dict[str, list[int]] = {}
    for i, t in enumerate(tasks):
        members.setdefault(str(t.get("task_group")), []).append(i)
    rows = []
    for name, a in groups.items():
        ix = members.get(str(name), [])
        returns = np.concatenate([metric(tasks[i], "sum_rewards") for i in ix]) if ix else np.zeros(0)
        lo, hi, _ = inp.return_interval(("group", str(name)), returns) if returns.size else (None, None, "")
        n_failed = sum(n for (group, _), n in failed.items() if group == str(name))
        cells = [page.text(name), page.num(len(ix)), page.num(a.get("n_episodes"))]
        cells += ([page.num(a.get("n_success")), page.num(a.get("pc_success")), page.interval(a.get("pc_success_ci95"))]
                  if a.get("has_success_signal", True) else [page.none("—")] * 3)
        cells += [page.num(a.get("avg_sum_reward"), 3), page.interval([lo, hi], 3), page.num(a.get("avg_length")),
                  page.num(n_failed)]
        rows.append(({"group": name}, cells))
    return page.table("per-group", ["group", "tasks", "n", "successes", "success %", "success 95% CI", "mean return",
                                    "return 95% CI", "mean length", "failed episodes"], rows)


def plots(inp: RunPageInput) -> str:
    """Three blocks side by side where the width allows: the return distribution of each task (its
    own axes), the success rate of each task with its interval, and episode length against return."""
    tasks = tasks_of(inp.doc)
    if not tasks:
        return ""
    hists = [svg.histogram(metric(t, "sum_rewards"), "return (sum of rewards)", task_label(t), colour_=svg.colour(i))
             for i, t in enumerate(tasks[:MAX_TASK_PLOTS])]
    more = page.note(f"{len(tasks) - MAX_TASK_PLOTS} more tasks not drawn; they are in the table above.") if len(tasks) > MAX_TASK_PLOTS else ""
    blocks = [_block("Return per task", f'<div class="plots" id="plot-returns">{"".join(hists)}</div>{more}')]
    has_signal = [bool((t.get("aggregated") or {}).get("has_success_signal", True)) for t in tasks]
    success = ""
    if any(has_signal):
        rows = [(task_label(t), *_rate_and_ci(t)) for t, ok in zip(tasks, has_signal) if ok]
        stopped = any((t.get("aggregated") or {}).get("pc_success_ci95_fixed_n") is not None for t in tasks)
        axis = f"success % ({'anytime-valid 95% CI at the stop' if stopped else 'Wilson 95% CI'})"
        success = f'<div class="plots" id="plot-success">{svg.intervals(rows, axis, "success rate per task", width=520)}</div>'
    left_out = [task_label(t) for t, ok in zip(tasks, has_signal) if not ok]
    if left_out:
        success += page.note(f"not drawn ({NO_SIGNAL}): {', '.join(left_out[:20])}" + (" ..." if len(left_out) > 20 else ""))
    blocks.append(_block("Success rate per task", success))
    lengths = np.concatenate([metric(t, "lengths") for t in tasks])
    groups = np.concatenate([np.full(metric(t, "lengths").size, i if len(tasks) <= len(svg.PALETTE) else 0) for i, t in enumerate(tasks)])
    names = [task_label(t) for t in tasks] if 1 < len(tasks) <= len(svg.PALETTE) else []
    scatter = svg.scatter(lengths, all_returns(inp.doc), "episode length (steps)", "return", "length against return", groups, names, width=520)
    blocks.append(_block("Episode length against return", f'<div id="plot-length-return">{scatter}</div>'))
    return f'<div class="plot-blocks">{"".join(blocks)}</div>' + stopping_plots(tasks)


def _block(title: str, body: str) -> str:
    return f'<div class="plot-block"><h3>{escape(title)}</h3>{body}</div>'


def stopping_plots(tasks: list[Mapping[str, Any]]) -> str:
    """Each early-stopped task's anytime-valid confidence sequence over its episodes (the
    ``trajectory`` of its ``stopping`` block), with the rule's threshold as a dashed line."""
    drawn = []
    for t in tasks[:MAX_TASK_PLOTS]:
        block = t.get("stopping") or {}
        tr = block.get("trajectory") or {}
        if not (tr.get("k") and tr.get("cs_low") and tr.get("cs_high")):
            continue
        scale = 100.0 if block.get("metric", "success") == "success" else 1.0
        unit = "success %" if scale == 100.0 else "mean return"
        lo, hi = (np.asarray(tr[key], dtype=np.float64) * scale for key in ("cs_low", "cs_high"))
        threshold = block.get("threshold")
        refs = ([(f"threshold {svg.fmt_tick(float(threshold) * scale)}{'%' if scale == 100.0 else ''}", float(threshold) * scale)]
                if isinstance(threshold, (int, float)) else [])
        conf = int(round(100 * float(block.get("confidence") or 0.95)))
        est = tr.get("estimate")
        estimate = ("estimate (mean of the first k)", np.asarray(est, dtype=np.float64) * scale) if est else None
        drawn.append(svg.band(tr["k"], [], [(f"anytime-valid {conf}% bounds", lo, hi)], "episodes (index prefix)", unit,
                              f"{task_label(t)}: stopped by {block.get('reason')} at k={block.get('k')}", hlines=refs,
                              estimate=estimate))
    if not drawn:
        return ""
    return ('<h3>Confidence sequence over episodes (--stop-when)</h3><div class="plots" id="plot-stopping">'
            + "".join(drawn) + "</div>")


def _rate_and_ci(task: Mapping[str, Any]) -> tuple[float, float, float]:
    a = task.get("aggregated") or {}
    lo, hi = a.get("pc_success_ci95") or [math.nan, math.nan]
    return float(a.get("pc_success", math.nan)), float(lo), float(hi)


def render_run_page(inp: RunPageInput) -> str:
    """The whole page as one HTML string."""
    meta = inp.doc.get("meta") or {}
    o = overall(inp.doc)
    policy = (inp.manifest or {}).get("policy", meta.get("policy"))
    policy_text = policy if isinstance(policy, str) else json.dumps(policy, default=str)
    env = meta.get("env") or (inp.manifest or {}).get("env")
    title = inp.title or f"fasteval: {policy_title(policy_text)} on {short_name(env)}"
    date = (inp.provenance or {}).get("date")
    subtitle = (f"{page.badge(status_of(inp))} {page.fmt(o.get('n_episodes'))} episodes"
                + (f" · {escape(str(date))}" if date else ""))
    videos = find_videos(inp)
    sections = [
        ("glance", "At a glance", glance(inp)),
        ("tasks", "Per task", task_table(inp)),
        ("groups", "Per group", group_table(inp)),
        ("videos", f"Videos ({len(videos)})", videos_section(inp, videos)),
        ("plots", "Plots", plots(inp)),
        ("time", "Where the time went", time_section(inp)),
        ("errors", "Errors", errors_section(inp)),
        ("provenance", "Provenance", provenance_section(inp)),
    ]
    return page.document(title, subtitle, sections, "run")
