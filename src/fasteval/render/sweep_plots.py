"""A sweep's plots, drawn with matplotlib's Agg canvas from the report document
(:func:`fasteval.doors.sweep.report.report_document`):

* ``success.png``: success rate per policy and env, Wilson error bars (anytime-valid ones for a sweep stopped by ``stop_when``), one colour per policy; cells
  with episodes and a success signal only, and no file when there is none;
* ``returns.png``: the return distribution of each cell in its policy's colour: one column per env
  with a shared, labelled x-axis and shared bins; a cell whose returns are all equal shows a marker
  line at that value; a cell without episodes says so instead of an empty chart.

Without matplotlib, :func:`plot_report` raises ImportError and the report says so (:data:`PLOTS_MISSING`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fasteval.render.words import NO_SIGNAL

PLOTS = ("success.png", "returns.png")
PLOTS_MISSING = "plots skipped: matplotlib is not installed (./scripts/install.sh sweep)"


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
    ax.set_ylabel("success % (anytime-valid 95% CI)" if doc.get("stop_when") else "success % (Wilson 95% CI)")
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
