"""Small inline SVG plots for the HTML reports: no plotting library, no network, a few kB each.

Every plot has a labelled x axis (``<text class="xlabel">``) and y axis (``<text class="ylabel">``),
tick labels, a ``<title>`` (what the plot shows, for screen readers and hover) and the class
``plot``. Sizes are fixed in SVG units and scale with the page (``viewBox``).

Large inputs are aggregated, never drawn point by point: a histogram has at most
:data:`MAX_BINS` bars, a scatter of more than :data:`MAX_POINTS` points becomes a 2-D histogram,
and a line of more than :data:`MAX_LINE_POINTS` points is thinned. So a 100,000-episode run
draws plots of the same size as a 100-episode one.
"""

from __future__ import annotations

import math
from html import escape
from typing import Any, Sequence

import numpy as np

PALETTE = ("#0072b2", "#d55e00", "#c46398", "#00966d", "#1a8ccb", "#ae7800", "#6b6b6b")
"""Distinct colours, one per series (the page's legends use the same order): Okabe and Ito's colour-blind-safe
hues (blue, vermillion, reddish purple, bluish green, sky blue, orange; then grey), the light ones darkened until
each keeps WCAG's 3:1 contrast for graphics against the plots' white, also as a scatter point's 85% blend, in the
order that keeps the first ones furthest apart for every reader: the first four differ by at least 12 CIELAB units
under simulated deuteranopia, protanopia and tritanopia (tests/test_report_contrast.py). Lines tell series apart
by :data:`DASHES` too."""
DASHES = ("", "6 3", "2 2", "8 3 2 3", "1 3", "10 4", "4 2 1 2")
"""A line's dash pattern per series (``stroke-dasharray``), a second cue beside the colour."""


def dash(i: int) -> str:
    """The ``stroke-dasharray`` attribute of series ``i`` (empty for a solid line)."""
    d = DASHES[i % len(DASHES)]
    return f' stroke-dasharray="{d}"' if d else ""


RAMP = ("#5d8fca", "#0b1f4d")
"""The 2-D histogram's colour scale, from one episode (lightest; still 3:1 against white) to
the fullest cell (darkest)."""
BAND_OPACITY = 0.16
"""A confidence band's fill: a light tint, decorative; its bounds are drawn as lines in the
series colour (3:1), so the band reads without the fill."""
ESTIMATE = "#1d2330"
"""The estimate's line inside a band."""
MAX_BINS = 30
MAX_POINTS = 2000
MAX_LINE_POINTS = 500
MARGIN = (34, 12, 46, 58)
WIDE = 400
"""Plots wider than this (SVG units) shrink on a 400 px screen to about 0.6 of their size; they get the larger text
of the page's narrow-screen CSS (issue 42: 6-7 px text)."""
"""Space around the plot area in SVG units: top, right, bottom, left."""


def colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def fmt_tick(x: float) -> str:
    """A tick label: short, no float noise (``0.30000000000000004`` -> ``0.3``)."""
    if x == 0:
        return "0"
    if abs(x) >= 1e5 or abs(x) < 1e-3:
        return f"{x:.2g}"
    return f"{x:.6g}" if abs(x - round(x)) > 1e-9 else str(int(round(x)))


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values covering ``[lo, hi]`` (1, 2 or 5 times a power of ten)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo] if math.isfinite(lo) else []
    raw = (hi - lo) / max(1, count)
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    ticks = []
    x = first
    while x <= hi + step * 1e-9:
        ticks.append(round(x, 12))
        x += step
    return ticks


def padded_range(values: Any, pad: float = 0.05) -> tuple[float, float]:
    """``(lo, hi)`` of the finite ``values`` with a margin; a one-value range gets width 2 (or 10%)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return (0.0, 1.0)
    lo, hi = float(v.min()), float(v.max())
    if lo == hi:
        half = max(1.0, abs(lo) * 0.05)
        return (lo - half, hi + half)
    span = hi - lo
    return (lo - pad * span, hi + pad * span)


class Axes:
    """A plot area of ``width`` x ``height`` SVG units mapping data ranges to pixels."""

    def __init__(self, width: int, height: int, xrange: tuple[float, float], yrange: tuple[float, float],
                 margin: tuple[int, int, int, int] = MARGIN):
        self.width, self.height = width, height
        self.top, self.right, self.bottom, self.left = margin
        self.x0, self.x1 = xrange
        self.y0, self.y1 = yrange
        self.parts: list[str] = []

    def sx(self, x: float) -> float:
        span = (self.x1 - self.x0) or 1.0
        return self.left + (x - self.x0) / span * (self.width - self.left - self.right)

    def sy(self, y: float) -> float:
        span = (self.y1 - self.y0) or 1.0
        return self.height - self.bottom - (y - self.y0) / span * (self.height - self.top - self.bottom)

    def add(self, element: str) -> None:
        self.parts.append(element)

    def frame(self, xlabel: str, ylabel: str, title: str, xticks: Sequence[float] | None = None,
              yticks: Sequence[float] | None = None, ytick_labels: Sequence[str] | None = None) -> None:
        """Axis lines, ticks with labels, grid lines, axis labels and the title."""
        b, l_ = self.height - self.bottom, self.left
        r = self.width - self.right
        out = [f'<line class="axis" x1="{l_}" y1="{b}" x2="{r}" y2="{b}"/>',
               f'<line class="axis" x1="{l_}" y1="{self.top}" x2="{l_}" y2="{b}"/>']
        for x in (nice_ticks(self.x0, self.x1) if xticks is None else xticks):
            px = self.sx(x)
            out.append(f'<line class="tick" x1="{px:.1f}" y1="{b}" x2="{px:.1f}" y2="{b + 4}"/>'
                       f'<text class="ticklabel" x="{px:.1f}" y="{b + 15}" text-anchor="middle">{fmt_tick(x)}</text>')
        ys = nice_ticks(self.y0, self.y1) if yticks is None else list(yticks)
        for i, y in enumerate(ys):
            py = self.sy(y)
            label = escape(ytick_labels[i]) if ytick_labels is not None else fmt_tick(y)
            kind = "ticklabel name" if ytick_labels is not None else "ticklabel"  # names: a smaller bump on phones
            out.append(f'<line class="grid" x1="{l_}" y1="{py:.1f}" x2="{r}" y2="{py:.1f}"/>'
                       f'<text class="{kind}" x="{l_ - 5}" y="{py + 3.5:.1f}" text-anchor="end">{label}</text>')
        out.append(f'<text class="xlabel" x="{(l_ + r) / 2:.1f}" y="{self.height - 8}" text-anchor="middle">{escape(xlabel)}</text>')
        cy = (self.top + b) / 2
        out.append(f'<text class="ylabel" x="13" y="{cy:.1f}" text-anchor="middle" transform="rotate(-90 13 {cy:.1f})">{escape(ylabel)}</text>')
        out.append(f'<text class="ptitle" x="{l_}" y="18">{escape(title)}</text>')
        self.parts[:0] = out

    def svg(self, description: str, css_class: str = "plot") -> str:
        wide = " data-wide" if self.width > WIDE else ""  # scaled down on a phone: larger text there (page.py's CSS)
        return (f'<svg class="{css_class}" viewBox="0 0 {self.width} {self.height}" width="{self.width}" '
                f'height="{self.height}"{wide} role="img" xmlns="http://www.w3.org/2000/svg"><title>{escape(description)}</title>'
                + "".join(self.parts) + "</svg>")


def histogram(values: Any, xlabel: str, title: str, width: int = 300, height: int = 190, colour_: str = PALETTE[0]) -> str:
    """Histogram of the finite ``values`` (at most :data:`MAX_BINS` bins); NaNs are counted in the
    title. All-equal values show one bar at that value with the count."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    finite = v[np.isfinite(v)]
    notes = [f"n={v.size}"] + ([f"{v.size - finite.size} NaN"] if finite.size != v.size else [])
    full_title = f"{title} ({', '.join(notes)})"
    if finite.size == 0:
        ax = Axes(width, height, (0.0, 1.0), (0.0, 1.0))
        ax.add(f'<text class="empty" x="{width / 2}" y="{height / 2}" text-anchor="middle">no finite values</text>')
        ax.frame(xlabel, "episodes", full_title, xticks=[], yticks=[])
        return ax.svg(full_title)
    lo, hi = float(finite.min()), float(finite.max())
    if lo == hi:
        half = max(0.5, abs(lo) * 0.02)
        edges, counts = np.array([lo - half, lo + half]), np.array([finite.size])
        notes.append(f"all = {fmt_tick(lo)}")
        full_title = f"{title} ({', '.join(notes)})"
    else:
        bins = min(MAX_BINS, max(5, int(math.sqrt(finite.size)) + 1))
        counts, edges = np.histogram(finite, bins=bins)
    top = float(counts.max())
    ax = Axes(width, height, padded_range(edges, 0.02), (0.0, top * 1.1))
    for c, e0, e1 in zip(counts.tolist(), edges[:-1].tolist(), edges[1:].tolist()):
        if c == 0:
            continue
        x0, x1 = ax.sx(e0), ax.sx(e1)
        y = ax.sy(c)
        ax.add(f'<rect class="bar" x="{x0:.1f}" y="{y:.1f}" width="{max(1.0, x1 - x0 - 0.5):.1f}" '
               f'height="{ax.sy(0) - y:.1f}" fill="{colour_}"><title>{fmt_tick(e0)} to {fmt_tick(e1)}: {c}</title></rect>')
    ax.frame(xlabel, "episodes", full_title, yticks=[t for t in nice_ticks(0, top) if t == int(t)])
    return ax.svg(full_title)


def intervals(rows: Sequence[tuple[str, float, float, float]], xlabel: str, title: str,
              xrange: tuple[float, float] | None = (0.0, 100.0), width: int = 620, row_height: int = 22,
              colours: Sequence[str] | None = None, ref: float | None = None, ylabel: str = "task") -> str:
    """A forest plot: one row per ``(label, estimate, low, high)``, a dot and its interval.
    ``xrange=None`` fits the data (and ``ref``); ``ref`` draws a dashed vertical line (e.g. 0 for
    a difference); ``colours`` gives each row its own colour."""
    n = max(1, len(rows))
    # Tick labels right-aligned at label_w - 5, about 7 units a character; the rotated axis title takes x < YTITLE_W:
    # labels longer than the cap are cut in the middle, so no label reaches the title (issue 42: they overlapped).
    shown = [_cut(r[0], (LABEL_CAP - YTITLE_W) // 7) for r in rows]
    label_w = YTITLE_W + 7 * max([len(s) for s in shown] or [4])
    height = MARGIN[0] + MARGIN[2] + row_height * n
    if xrange is None:
        xrange = padded_range([v for r in rows for v in r[1:]] + ([ref] if ref is not None else []))
    ax = Axes(width, height, xrange, (n - 0.5, -0.5), margin=(MARGIN[0], MARGIN[1], MARGIN[2], label_w))
    if ref is not None and math.isfinite(ref):
        ax.add(f'<line class="ref" x1="{ax.sx(ref):.1f}" y1="{ax.top}" x2="{ax.sx(ref):.1f}" y2="{height - ax.bottom}"/>')
    for i, (label, est, lo, hi) in enumerate(rows):
        y = ax.sy(i)
        c = colours[i] if colours else colour(0)
        if all(math.isfinite(x) for x in (lo, hi)):
            ax.add(f'<line class="ci" x1="{ax.sx(lo):.1f}" y1="{y:.1f}" x2="{ax.sx(hi):.1f}" y2="{y:.1f}" stroke="{c}"/>'
                   f'<line class="ci" x1="{ax.sx(lo):.1f}" y1="{y - 5:.1f}" x2="{ax.sx(lo):.1f}" y2="{y + 5:.1f}" stroke="{c}"/>'
                   f'<line class="ci" x1="{ax.sx(hi):.1f}" y1="{y - 5:.1f}" x2="{ax.sx(hi):.1f}" y2="{y + 5:.1f}" stroke="{c}"/>')
        if math.isfinite(est):
            ax.add(f'<circle class="dot" cx="{ax.sx(est):.1f}" cy="{y:.1f}" r="4" fill="{c}">'
                   f'<title>{escape(label)}: {est:.4g} [{lo:.4g}, {hi:.4g}]</title></circle>')
    ax.frame(xlabel, ylabel, title, yticks=list(range(len(rows))), ytick_labels=shown)
    return ax.svg(title)


LABEL_CAP = 284
"""The widest a forest plot's label column gets (SVG units)."""
YTITLE_W = 24
"""The units left of a forest plot's tick labels kept for its rotated y-axis title (drawn at x = 13)."""


def _cut(text: str, most: int) -> str:
    return text if len(text) <= most else text[: most // 2 - 1] + "…" + text[-(most // 2 - 1):]


def histograms(series: Sequence[tuple[str, Any]], xlabel: str, title: str, width: int = 300, height: int = 150,
               colours: Sequence[str] | None = None) -> str:
    """One histogram per ``(name, values)``, stacked, sharing one x axis and one set of bins
    (an env's policies side by side); each series in its own colour and with its own y axis."""
    finite = [np.asarray(v, dtype=np.float64).reshape(-1) for _, v in series]
    finite = [v[np.isfinite(v)] for v in finite]
    everything = np.concatenate(finite) if finite else np.zeros(0)
    if everything.size and everything.min() < everything.max():
        edges = np.histogram_bin_edges(everything, bins=min(MAX_BINS, max(5, int(math.sqrt(everything.size)) + 1)))
    elif everything.size:
        half = max(0.5, abs(float(everything[0])) * 0.02)
        edges = np.array([everything[0] - half, everything[0] + half])
    else:
        edges = np.array([0.0, 1.0])
    out = []
    for i, ((name, raw), v) in enumerate(zip(series, finite)):
        counts = np.histogram(v, bins=edges)[0] if v.size else np.zeros(len(edges) - 1, dtype=np.int64)
        top = float(counts.max()) if counts.size and counts.max() else 1.0
        n_all = np.asarray(raw, dtype=np.float64).size
        sub = f"{name} (n={n_all}" + (f", {n_all - v.size} NaN" if n_all != v.size else "") + ")"
        ax = Axes(width, height, padded_range(edges, 0.02), (0.0, top * 1.1))
        for c, e0, e1 in zip(counts.tolist(), edges[:-1].tolist(), edges[1:].tolist()):
            if c:
                x0, x1, y = ax.sx(e0), ax.sx(e1), ax.sy(c)
                ax.add(f'<rect class="bar" x="{x0:.1f}" y="{y:.1f}" width="{max(1.0, x1 - x0 - 0.5):.1f}" height="{ax.sy(0) - y:.1f}" '
                       f'fill="{colours[i] if colours else colour(i)}"><title>{escape(name)}: {fmt_tick(e0)} to {fmt_tick(e1)}: {c}</title></rect>')
        ax.frame(xlabel, "episodes", sub, yticks=[t for t in nice_ticks(0, top, 3) if t == int(t)])
        out.append(ax.svg(f"{title}: {sub}"))
    return f'<div class="stack"><div class="ptitle">{escape(title)}</div>{"".join(out)}</div>'


def scatter(x: Any, y: Any, xlabel: str, ylabel: str, title: str, groups: Any = None, group_names: Sequence[str] = (),
            width: int = 620, height: int = 300) -> str:
    """Points ``(x, y)`` (coloured by integer ``groups`` when given); above :data:`MAX_POINTS`
    points, a 2-D histogram (cell colour = episodes in the cell, on the stepped scale drawn at the
    right, :func:`count_levels`) instead. Non-finite points are left out and counted in the title."""
    xv = np.asarray(x, dtype=np.float64).reshape(-1)
    yv = np.asarray(y, dtype=np.float64).reshape(-1)
    g = np.zeros(xv.size, dtype=np.int64) if groups is None else np.asarray(groups, dtype=np.int64).reshape(-1)
    ok = np.isfinite(xv) & np.isfinite(yv)
    left_out = int(xv.size - ok.sum())
    xv, yv, g = xv[ok], yv[ok], g[ok]
    full_title = title + (f" ({left_out} non-finite left out)" if left_out else "")
    binned = xv.size > MAX_POINTS
    margin = (MARGIN[0], SCALE_WIDTH if binned else MARGIN[1], MARGIN[2], MARGIN[3])
    ax = Axes(width, height, padded_range(xv), padded_range(yv), margin=margin)
    if binned:
        full_title += f" (2-D histogram of {xv.size} episodes)"
        _binned(ax, xv, yv)
    else:
        for xi, yi, gi in zip(xv.tolist(), yv.tolist(), g.tolist()):
            ax.add(f'<circle class="pt" cx="{ax.sx(xi):.1f}" cy="{ax.sy(yi):.1f}" r="3" fill="{colour(gi)}" '
                   f'fill-opacity="{POINT_OPACITY}"/>')
    ax.frame(xlabel, ylabel, full_title)
    return ax.svg(full_title) + legend(group_names)


POINT_OPACITY = 0.85
"""Scatter points: nearly opaque (overlaps still show), and 3:1 against white once blended."""
SCALE_WIDTH = 92
"""Right margin of a 2-D histogram: room for its colour scale."""


def count_levels(top: int, most: int = 6) -> list[tuple[int, int, str]]:
    """The 2-D histogram's stepped colour scale: ``(first, last, colour)`` count ranges covering
    ``1 .. top`` on a log scale (at most ``most`` steps; a single count is one step), coloured along
    :data:`RAMP` from light (few episodes) to dark."""
    top = max(1, int(top))
    edges = sorted({int(round(e)) for e in np.geomspace(1, top + 1, most + 1)})
    if edges[-1] <= top:
        edges.append(top + 1)
    spans = [(a, b - 1) for a, b in zip(edges[:-1], edges[1:]) if b > a]
    n = len(spans)
    return [(a, b, _mix(RAMP[0], RAMP[1], i / (n - 1) if n > 1 else 1.0)) for i, (a, b) in enumerate(spans)]


def _mix(a: str, b: str, t: float) -> str:
    ca = [int(a[i:i + 2], 16) for i in (1, 3, 5)]
    cb = [int(b[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(x + (y - x) * t):02x}" for x, y in zip(ca, cb))


def _binned(ax: Axes, xv: np.ndarray, yv: np.ndarray, nx: int = 40, ny: int = 24) -> None:
    counts, xe, ye = np.histogram2d(xv, yv, bins=[nx, ny], range=[[ax.x0, ax.x1], [ax.y0, ax.y1]])
    levels = count_levels(int(counts.max()))
    firsts = np.array([a for a, _, _ in levels])
    for i, j in zip(*np.nonzero(counts)):
        c = int(counts[i, j])
        fill = levels[int(np.searchsorted(firsts, c, side="right")) - 1][2]
        x0, x1 = ax.sx(xe[i]), ax.sx(xe[i + 1])
        y0, y1 = ax.sy(ye[j + 1]), ax.sy(ye[j])
        ax.add(f'<rect class="cell" x="{x0:.1f}" y="{y0:.1f}" width="{x1 - x0:.1f}" height="{y1 - y0:.1f}" '
               f'fill="{fill}"><title>{c} episodes</title></rect>')
    # the colour scale: one swatch per step, labelled with its counts
    x = ax.width - ax.right + 14
    ax.add(f'<text class="reflabel" x="{x}" y="{ax.top - 6}">episodes</text>')
    for k, (a, b, fill) in enumerate(reversed(levels)):
        y = ax.top + 16 * k
        label = f"{a}" if a == b else f"{a}–{b}"
        ax.add(f'<rect class="scale" x="{x}" y="{y}" width="12" height="12" fill="{fill}"/>'
               f'<text class="ticklabel" x="{x + 16}" y="{y + 10}">{label}</text>')


def bars(rows: Sequence[tuple[str, float]], xlabel: str, title: str, width: int = 620, row_height: int = 22) -> str:
    """Horizontal bars, one per ``(label, value)`` (values >= 0)."""
    n = max(1, len(rows))
    label_w = min(220, 12 + 7 * max([len(r[0]) for r in rows] or [4]))
    top = max([v for _, v in rows if math.isfinite(v)] or [1.0]) or 1.0
    height = MARGIN[0] + MARGIN[2] + row_height * n
    ax = Axes(width, height, (0.0, top * 1.05), (n - 0.5, -0.5), margin=(MARGIN[0], MARGIN[1], MARGIN[2], label_w))
    for i, (label, value) in enumerate(rows):
        if not math.isfinite(value) or value <= 0:
            continue
        y = ax.sy(i)
        ax.add(f'<rect class="bar" x="{ax.sx(0):.1f}" y="{y - 7:.1f}" width="{ax.sx(value) - ax.sx(0):.1f}" height="14" '
               f'fill="{colour(i)}"><title>{escape(label)}: {value:.4g}</title></rect>')
    ax.frame(xlabel, "stage", title, yticks=list(range(len(rows))), ytick_labels=[r[0] for r in rows])
    return ax.svg(title)


def thin(n: int, most: int = MAX_LINE_POINTS) -> np.ndarray:
    """Indices of at most ``most`` points out of ``n``, evenly spread, first and last kept."""
    if n <= most:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, most).round().astype(np.int64))


def band(x: Any, lines: Sequence[tuple[str, Any]], bands: Sequence[tuple[str, Any, Any]], xlabel: str, ylabel: str, title: str,
         hlines: Sequence[tuple[str, float]] = (), log_y: bool = False, width: int = 620, height: int = 280,
         estimate: tuple[str, Any] | None = None) -> str:
    """Lines over ``x``, shaded bands between low and high arrays (e.g. a confidence sequence;
    each bound drawn as a line in the band's colour, the fill a light tint), the ``estimate`` inside
    them (a dark line, first in the legend), and dashed horizontal reference lines (e.g. a
    threshold), each labelled with its name at the right end. With ``log_y`` the y values are
    drawn on a log10 scale (positive values only)."""
    xv = np.asarray(x, dtype=np.float64).reshape(-1)
    keep = thin(xv.size)
    xv = xv[keep]

    def ys(values: Any) -> np.ndarray:
        v = np.asarray(values, dtype=np.float64).reshape(-1)[keep]
        if log_y:
            with np.errstate(divide="ignore", invalid="ignore"):
                v = np.where(v > 0, np.log10(np.where(v > 0, v, 1.0)), np.nan)
        return v

    series = [(name, ys(v)) for name, v in lines]
    shaded = [(name, ys(lo), ys(hi)) for name, lo, hi in bands]
    est = (estimate[0], ys(estimate[1])) if estimate is not None else None
    refs = [(name, math.log10(v) if log_y and v > 0 else v) for name, v in hlines]
    everything = ([v for _, v in series] + [a for _, a, _ in shaded] + [b for _, _, b in shaded]
                  + ([est[1]] if est else []) + [np.array([r for _, r in refs])])
    ax = Axes(width, height, padded_range(xv, 0.0), padded_range(np.concatenate(everything) if everything else [0, 1]))
    names: list[str] = []
    swatches: list[str] = []
    for i, (name, lo, hi) in enumerate(shaded):
        ok = np.isfinite(lo) & np.isfinite(hi)
        c = colour(i)
        if ok.any():
            top = [f"{ax.sx(a):.1f},{ax.sy(b):.1f}" for a, b in zip(xv[ok], hi[ok])]
            bottom = [f"{ax.sx(a):.1f},{ax.sy(b):.1f}" for a, b in zip(xv[ok], lo[ok])]
            ax.add(f'<polygon class="band" points="{" ".join(top + bottom[::-1])}" fill="{c}" fill-opacity="{BAND_OPACITY}"/>'
                   f'<polyline class="bound" points="{" ".join(top)}" fill="none" stroke="{c}" stroke-width="1.4"/>'
                   f'<polyline class="bound" points="{" ".join(bottom)}" fill="none" stroke="{c}" stroke-width="1.4"/>')
        names.append(name)
        swatches.append(c)
    if est is not None:
        ok = np.isfinite(est[1])
        if ok.any():
            pts = " ".join(f"{ax.sx(a):.1f},{ax.sy(b):.1f}" for a, b in zip(xv[ok], est[1][ok]))
            ax.add(f'<polyline class="estimate" points="{pts}" fill="none" stroke="{ESTIMATE}" stroke-width="1.8"/>')
        names.append(est[0])
        swatches.append(ESTIMATE)
    for i, (name, v) in enumerate(series, start=len(shaded)):
        ok = np.isfinite(v)
        if ok.any():
            pts = " ".join(f"{ax.sx(a):.1f},{ax.sy(b):.1f}" for a, b in zip(xv[ok], v[ok]))
            ax.add(f'<polyline class="line" points="{pts}" fill="none" stroke="{colour(i)}" stroke-width="1.8"/>')
        names.append(name)
        swatches.append(colour(i))
    for name, v in refs:
        if math.isfinite(v):
            y = ax.sy(v)
            ax.add(f'<line class="ref" x1="{ax.left}" y1="{y:.1f}" x2="{width - ax.right}" y2="{y:.1f}">'
                   f'<title>{escape(name)}</title></line>'
                   f'<text class="reflabel" x="{width - ax.right - 4}" y="{y - 4:.1f}" text-anchor="end">{escape(name)}</text>')
    yticks = nice_ticks(ax.y0, ax.y1)
    labels = [fmt_tick(10 ** t) for t in yticks] if log_y else None
    ax.frame(xlabel, ylabel + (" (log scale)" if log_y else ""), title, yticks=yticks, ytick_labels=labels)
    return ax.svg(title) + legend(names, first_is_band=len(shaded), colours=swatches)


def profiles(series: Sequence[tuple[str, Any, Any, Any, Any, str]], xlabel: str, ylabel: str, title: str,
             width: int = 620, height: int = 300) -> str:
    """Step curves with their bands, one per ``(name, x, y, low, high, colour)`` (performance
    profiles): the curve in its colour (3:1 against white), the band a light tint of it; a legend
    below names each."""
    xs = [np.asarray(x, dtype=np.float64) for _, x, _, _, _, _ in series]
    everything = np.concatenate(xs) if xs else np.array([0.0, 1.0])
    ax = Axes(width, height, padded_range(everything, 0.0), (0.0, 102.0))
    for (name, x, y, lo, hi, c), xv in zip(series, xs):
        yv, lov, hiv = (np.asarray(v, dtype=np.float64) for v in (y, lo, hi))
        ok = np.isfinite(yv)
        top = [f"{ax.sx(a):.1f},{ax.sy(b):.1f}" for a, b in zip(xv, hiv)]
        bottom = [f"{ax.sx(a):.1f},{ax.sy(b):.1f}" for a, b in zip(xv, lov)]
        ax.add(f'<polygon class="band" points="{" ".join(top + bottom[::-1])}" fill="{c}" fill-opacity="{BAND_OPACITY}"/>')
        pts = " ".join(f"{ax.sx(a):.1f},{ax.sy(b):.1f}" for a, b in zip(xv[ok], yv[ok]))
        ax.add(f'<polyline class="line" points="{pts}" fill="none" stroke="{c}" stroke-width="2">'
               f'<title>{escape(name)}</title></polyline>')
    ax.frame(xlabel, ylabel, title, yticks=[0, 25, 50, 75, 100])
    names = [s_[0] for s_ in series]
    return ax.svg(title) + legend(names, colours=[s_[5] for s_ in series]) if len(names) > 1 else ax.svg(title)


def legend(names: Sequence[str], first_is_band: int = 0, colours: Sequence[str] | None = None) -> str:
    """A legend line below a plot: a colour swatch per series name (empty for one unnamed series)."""
    if len(names) < 2 and not first_is_band:
        return ""
    def swatch(i: int) -> str:
        c = colours[i] if colours else colour(i)
        if i < first_is_band:  # a band: its tint inside its bounds' colour
            return f'<i class="band-key" style="background:{c}29;border:2px solid {c}"></i>'
        return f'<i style="background:{c}"></i>'

    items = "".join(f'<span class="key">{swatch(i)}{escape(str(n))}</span>' for i, n in enumerate(names))
    return f'<div class="legend">{items}</div>'
