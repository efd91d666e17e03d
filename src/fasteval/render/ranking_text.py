"""The terminal's view of a many-policy run: the ranking table and the race's line (``fasteval`` prints it).

Reads the ranking rows and the race block of ``eval_info.json`` (:mod:`fasteval.types.ranking`), computes
nothing: every number is the record's.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from fasteval.render.words import plural


WHAT = {"success": "success rate", "return": "mean return", "max_reward": "mean max reward"}


def _value(x: Any, metric: str) -> str:
    if x is None:
        return "-"
    return f"{100.0 * x:.1f}%" if metric == "success" else f"{x:.4g}"


def _points(x: Any, metric: str) -> str:
    if x is None:
        return "-"
    return f"{100.0 * x:+.1f}" if metric == "success" else f"{x:+.4g}"


def ranking_rows(ranking: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    """The table's rows (header first): rank, policy, episodes, estimate [interval], difference to the best
    [interval], and where the race dropped it."""
    rows = [["rank", "policy", "episodes", "estimate", "interval", "vs best", "interval", "dropped"]]
    for r in ranking:
        m = r["metric"]
        vs = r.get("vs_best") or {}
        dropped = f"at k={r['dropped_at']} by {r['dropped_by']}" if r.get("dropped_at") is not None else ""
        rows.append([str(r["rank"]), str(r["policy"]), str(r["episodes"]), _value(r["estimate"], m),
                     f"{_value(r['ci_low'], m)} - {_value(r['ci_high'], m)}",
                     _points(vs.get("difference"), m) if vs else "best",
                     f"{_points(vs.get('ci_low'), m)} - {_points(vs.get('ci_high'), m)}" if vs else "",
                     dropped])
    return rows


def format_ranking(ranking: Sequence[Mapping[str, Any]], race: Mapping[str, Any] | None = None,
                   verdict: Mapping[str, Any] | None = None) -> str:
    """The verdict first (the best, the policies tied for best, or an undecided race), then the ranking as
    aligned text, with the race's outcome under it."""
    rows = ranking_rows(ranking)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    if verdict:
        lines = [f"verdict: {verdict['headline']}"] + ([f"({verdict['metric_note']})"] if verdict.get("metric_note")
                                                         else []) + lines
    if ranking:
        m = ranking[0]["metric"]
        what = WHAT.get(m, m)
        lines.append(f"({what}; intervals: {ranking[0]['interval']}; vs best: {(ranking[1]['vs_best'] or {}).get('interval', '')})"
                     if len(ranking) > 1 else f"({what})")
    if race is not None:
        lines.append(race_line(race))
    return "\n".join(lines)


def race_line(race: Mapping[str, Any]) -> str:
    """``race: one_left at k=54 ...``: how the race ended, and what it cost."""
    reason = {"one_left": "one policy left", "tied": "the remaining policies are tied (within eps)",
              "cap": "the cap was reached", "incomplete": "not decided yet"}.get(race["reason"], race["reason"])
    past = race.get("n_computed_past_stop") or 0
    return (f"race {race['rule']}: {reason} at k={race['k']}; leader {race.get('leader_name')}; "
            f"{plural(race['total_episodes'], 'episode')} counted of {race['cap'] * race['n_policies']} at the cap"
            + (f"; {past} computed past a stop (not counted)" if past else ""))
