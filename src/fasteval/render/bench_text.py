"""``fasteval bench``'s terminal report, rendered from its JSON document
(:func:`fasteval.doors.bench.report.report_document`: the machine header, the spec's facts, one
summary per cell, the fastest cell), so the text and ``--json`` can never disagree.

* :func:`format_report` — the whole report: header, throughput, stage breakdown, the fastest;
* :func:`format_machine` — the machine header as two readable lines;
* :func:`fmt_rate`, :func:`text_table` — the number format and the aligned plain table.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

STAGES = ("env_step", "policy", "transfers", "bookkeeping", "other")
"""The stage breakdown's columns, in the loop's order (``other``: loop time outside the stage timers)."""
RECORDING_STAGES = ("render", "encode")
"""Shown before ``other`` when some cell spent time in them (a run with videos)."""


def fmt_rate(value: float) -> str:
    """12345.6 -> '12.3k', 1234567 -> '1.23M', small values with 3 significant digits."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    a = abs(value)
    if a >= 1e6:
        return f"{value / 1e6:.2f}M"
    if a >= 1e4:
        return f"{value / 1e3:.1f}k"
    if a >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}"


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]], align: str | None = None) -> str:
    """A plain aligned table (``align``: one ``l``/``r`` per column; default: first two left)."""
    align = align or ("ll" + "r" * (len(headers) - 2))
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h)) for i, h in enumerate(headers)]

    def line(cells: Sequence[Any]) -> str:
        return "  ".join(str(c).ljust(w) if a == "l" else str(c).rjust(w) for c, w, a in zip(cells, widths, align)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def _range(stats: Mapping[str, float]) -> str:
    return f"{fmt_rate(stats['median'])} [{fmt_rate(stats['min'])}-{fmt_rate(stats['max'])}]"


def label(cell: Mapping[str, Any]) -> str:
    """A cell's name: ``batch 16, sync``."""
    return f"batch {cell['batch_size']}, {cell['vectorization']}"


def throughput_table(cells: Sequence[Mapping[str, Any]]) -> str:
    """One row per cell summary: episodes/s and env steps/s (median [min-max]), overhead, eval_s, return."""
    rows = [[
        str(s["batch_size"]), s["vectorization"], _range(s["episodes_per_s"]), _range(s["steps_per_s"]),
        f"{s['overhead_us_per_step']['median']:.2f}", f"{s['eval_s']['median']:.4f}", f"{s['avg_sum_reward']:.4g}",
    ] for s in cells]
    return text_table(
        ["batch", "vec", "episodes/s median [min-max]", "env steps/s median [min-max]", "overhead us/step",
         "eval_s", "avg return"],
        rows,
    )


def breakdown_table(cells: Sequence[Mapping[str, Any]]) -> str:
    """Median seconds per repeat by stage, each with its share of eval_s and its us per env step."""
    rows = []
    recording = tuple(part for part in RECORDING_STAGES if any(s["stages_s"].get(part) for s in cells))
    stages = (*STAGES[:-1], *recording, STAGES[-1])  # render and encode when a cell recorded videos
    for s in cells:
        eval_s = s["eval_s"]["median"]
        row = [str(s["batch_size"]), s["vectorization"], f"{eval_s:.4f}"]
        for part in stages:
            sec = s["stages_s"][part]
            share = 100.0 * sec / eval_s if eval_s > 0 else math.nan
            row.append(f"{sec:.4f} ({share:.0f}%, {s['stages_us_per_step'][part]:.2f} us)")
        rows.append(row)
    return text_table(["batch", "vec", "eval_s", *stages], rows)


def format_machine(info: Mapping[str, Any], run_threads: Sequence[int] | None = None) -> str:
    """The header as two readable lines (``info``: :func:`fasteval.doors.bench.machine.machine_info`).

    ``run_threads``: the torch intra-op thread counts the timed runs used (``EvalResult.meta
    ["torch_threads"]``; the engine sets ``spec.cpu_threads``, 1 by default, for CPU policies).
    Given, the header names them; otherwise it names the process default as such.
    """
    load = info.get("load_avg")
    load_s = " ".join(f"{x:.2f}" for x in load) if load else "n/a"
    used = sorted({int(t) for t in run_threads or () if t is not None})
    if used:
        threads = f"{'/'.join(map(str, used))} thread{'s' if used != [1] else ''} in the runs"
    else:
        threads = f"{info['torch_threads']} threads by default"
    return (
        f"machine: {info['cpu']}; {info['cores']} cores ({info['usable_cores']} usable), load {load_s}; "
        f"GPU: {info['gpu']}; {info['os']}, Python {info['python']}\n"
        f"versions: torch {info['torch']} ({threads}), gymnasium {info['gymnasium']}, "
        f"numpy {info['numpy']}, fasteval {info['fasteval']} (kernel backend {info['kernel_backend']})"
    )


def format_report(doc: Mapping[str, Any]) -> str:
    """The whole stdout report from the bench document: header, throughput, stage breakdown, the fastest."""
    cells, spec = doc["cells"], doc["spec"]
    first = cells[0]
    lines = [
        f"fasteval bench: env {spec['env']}, policy {spec['policy']}, device {first['device']}, "
        f"CUDA graph {first.get('cuda_graph', 'off')}; "
        f"{first['n_episodes']} episodes (seeds {spec['seed']}..{spec['seed'] + first['n_episodes'] - 1}) "
        f"x {first['repeats']} timed repeats per configuration, after an untimed build and warm-up run",
        format_machine(doc["machine"], run_threads=doc["torch_threads"]),
        "",
        throughput_table(cells),
        "",
        "stage breakdown: median seconds per repeat (share of eval_s, us per env step); "
        "transfers = h2d + d2h; other = loop time outside the stage timers",
        breakdown_table(cells),
        "",
        "overhead us/step = (eval_s - env_step - policy) / env steps: what the evaluator adds around env and policy.",
    ]
    if any(not c["exact_across_repeats"] for c in cells):
        bad = ", ".join(label(c) for c in cells if not c["exact_across_repeats"])
        lines.append(f"WARNING: the average return changed between repeats ({bad}); the policy or env is not deterministic.")
    if len(cells) > 1:
        fast = doc["fastest"]
        best = next(c for c in cells if (c["batch_size"], c["vectorization"]) == (fast["batch_size"], fast["vectorization"]))
        lines.append(
            f"fastest: {label(best)} "
            f"({fmt_rate(best['episodes_per_s']['median'])} episodes/s, {fmt_rate(best['steps_per_s']['median'])} env steps/s)"
        )
    return "\n".join(lines)
