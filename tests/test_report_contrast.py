"""WCAG contrast of every colour the HTML reports use, against the background it is drawn on.

Text needs 4.5:1 (WCAG 2.1, 1.4.3); graphics that carry data (bars, points, lines, interval
whiskers, axes, the 2-D histogram's cells and its colour scale) need 3:1 (1.4.11). Colours that
carry nothing are listed in :data:`DECORATIVE` with the reason, and nothing else is exempt: a new
colour in the CSS or the SVG fails here until it is checked.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from fasteval.render.html import page, svg

TEXT, GRAPHIC = 4.5, 3.0
DECORATIVE = {
    "svg .grid": "grid lines behind the data; the tick labels carry the values",
    "polygon.band": "a band's tint; its bounds (or its curve) are drawn as lines in the full colour",
    "--line": "table rules and panel borders",
}


def luminance(colour: str) -> float:
    h = colour.lstrip("#")
    if len(h) == 3:
        h = "".join(c * 2 for c in h)
    rgb = [int(h[i:i + 2], 16) / 255 for i in (0, 2, 4)]
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def contrast(a: str, b: str) -> float:
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def over(colour: str, opacity: float, background: str = "#ffffff") -> str:
    """``colour`` at ``opacity`` painted over ``background``."""
    def rgb(c: str) -> list[int]:
        c = c.lstrip("#")
        c = "".join(x * 2 for x in c) if len(c) == 3 else c
        return [int(c[i:i + 2], 16) for i in (0, 2, 4)]
    fg, bg = rgb(colour), rgb(background)
    return "#" + "".join(f"{round(opacity * f + (1 - opacity) * b):02x}" for f, b in zip(fg, bg))


def test_contrast_helpers_match_wcag():
    assert contrast("#000", "#fff") == pytest.approx(21.0)
    assert contrast("#777", "#fff") == pytest.approx(4.48, abs=0.01)
    assert contrast("#4e79a7", "#f5f7fa") == pytest.approx(4.24, abs=0.01)  # the old nav links (too low)
    assert contrast("#f28e2b", "#fff") == pytest.approx(2.42, abs=0.01)  # the old orange (too low)
    assert over("#000000", 0.5) == "#808080"


def css_rules() -> tuple[dict[str, str], list[tuple[str, dict[str, str]]]]:
    """``(variables, [(selector, declarations)])`` of the pages' stylesheet, variables resolved."""
    css = re.sub(r"@media[^{]*\{", "", page.CSS)  # the narrow layout's rules are checked like the others
    rules = []
    for selector, body in re.findall(r"([^{}]+)\{([^{}]*)\}", css):
        decls = {}
        for decl in body.split(";"):
            if ":" in decl:
                k, v = decl.split(":", 1)
                decls[k.strip()] = v.strip()
        rules.append((selector.strip(), decls))
    variables = {k: v for sel, d in rules if sel == ":root" for k, v in d.items()}

    def resolve(v: str) -> str:
        return re.sub(r"var\((--[\w-]+)\)", lambda m: variables[m.group(1)], v)
    return variables, [(sel, {k: resolve(v) for k, v in d.items()}) for sel, d in rules if sel != ":root"]


def hexes(value: str) -> list[str]:
    return re.findall(r"#[0-9a-fA-F]{6}\b|#[0-9a-fA-F]{3}\b", value)


def test_every_text_colour_of_the_stylesheet_reads_on_every_background():
    variables, rules = css_rules()
    backgrounds = [variables["--bg"], variables["--panel"], variables["--stripe"]]
    badge_backgrounds = [hexes(d["background"])[0] for sel, d in rules if sel.startswith(".badge") and "background" in d]
    checked = 0
    for selector, decls in rules:
        for key in ("color", "fill"):
            if key not in decls or not hexes(decls[key]):
                continue
            if key == "fill" and not selector.startswith("svg"):
                continue
            [fg] = hexes(decls[key])
            if selector == ".badge":  # white on each badge colour
                on = badge_backgrounds
            elif selector == "body":  # inherited by everything, on every background
                on = backgrounds
            elif "background" in decls and hexes(decls["background"]):
                on = hexes(decls["background"])
            elif selector.startswith("svg"):
                on = ["#fff"]  # plots are drawn on white
            else:
                on = backgrounds
            for bg in on:
                assert contrast(fg, bg) >= TEXT, f"{selector} {{{key}: {fg}}} on {bg}: {contrast(fg, bg):.2f} < {TEXT}"
                checked += 1
    assert checked >= 20


def test_every_graphic_colour_of_the_stylesheet_stands_out_from_white():
    variables, rules = css_rules()
    for selector, decls in rules:
        for key in ("stroke", "border-color"):
            for colour in hexes(decls.get(key, "")):
                if selector in DECORATIVE:
                    continue
                assert contrast(colour, "#fff") >= GRAPHIC, f"{selector} {{{key}: {colour}}}: {contrast(colour, '#fff'):.2f}"
    for name in ("--ok", "--bad", "--warn", "--accent", "--muted", "--fg"):  # text, badges and decision borders
        for bg in (variables["--bg"], variables["--panel"], variables["--stripe"]):
            assert contrast(variables[name], bg) >= TEXT, (name, bg)
    assert contrast(variables["--accent"], variables["--panel"]) >= TEXT  # nav links on the header's panel


def sample_plots() -> str:
    """One of every plot the pages draw, with several series (every palette colour in use)."""
    rng = np.random.default_rng(0)
    k = np.arange(1, 60)
    parts = [
        svg.histogram(rng.normal(size=50), "return", "h"),
        svg.histograms([(f"p{i}", rng.normal(i, 1, 40)) for i in range(len(svg.PALETTE))], "return", "hs"),
        svg.intervals([(f"t{i}", 50.0, 40.0, 60.0) for i in range(4)], "success %", "iv",
                      colours=list(svg.PALETTE[:4]), ref=50.0),
        svg.scatter(rng.integers(1, 50, 300), rng.normal(size=300), "length", "return", "sc",
                    groups=np.arange(300) % len(svg.PALETTE), group_names=[f"g{i}" for i in range(len(svg.PALETTE))]),
        svg.scatter(rng.integers(1, 500, 20_000), rng.normal(size=20_000), "length", "return", "binned"),
        svg.bars([(f"s{i}", float(i + 1)) for i in range(len(svg.PALETTE))], "seconds", "bars"),
        svg.band(k, [("e-value", np.exp(k / 20))], [("bounds", 50 - 100 / np.sqrt(k), 50 + 100 / np.sqrt(k))],
                 "k", "success %", "band", hlines=[("threshold 30%", 30.0)], estimate=("estimate", 50 + 0 * k)),
        svg.profiles([(f"p{i}", [0, 50, 100], [100, 50, 0], [90, 40, 0], [100, 60, 10], svg.colour(i)) for i in range(3)],
                     "tau", "runs", "profiles"),
    ]
    return "".join(parts)


ELEMENT = re.compile(r"<(?P<tag>rect|circle|line|polyline|polygon|text|i)\b(?P<attrs>[^>]*)>")


def test_every_colour_in_the_plots_stands_out_from_white():
    html = sample_plots()
    seen = 0
    for m in ELEMENT.finditer(html):
        attrs = m["attrs"]
        cls = re.search(r'class="([^"]+)"', attrs)
        name = f"{m['tag']}.{cls.group(1) if cls else ''}"
        if name in DECORATIVE:
            continue
        for key in ("fill", "stroke"):
            v = re.search(rf'\b{key}="(#[0-9a-fA-F]{{3,6}})"', attrs)
            if not v:
                continue
            opacity = re.search(rf'{key}-opacity="([\d.]+)"', attrs)
            shown = over(v.group(1), float(opacity.group(1))) if opacity else v.group(1)
            assert contrast(shown, "#fff") >= GRAPHIC, f"{name} {key}={v.group(1)} (shown {shown}): {contrast(shown, '#fff'):.2f}"
            seen += 1
        style = re.search(r'style="background:(#[0-9a-fA-F]{6})', attrs)  # legend swatches
        if style:
            assert contrast(style.group(1), "#fff") >= GRAPHIC, name
            seen += 1
    assert seen > 100


def test_a_band_is_drawn_by_lines_its_tint_only_decorates():
    html = sample_plots()
    for colour in re.findall(r'<polygon class="band"[^>]* fill="(#[0-9a-f]+)"', html):
        assert re.search(rf'<polyline class="(bound|line)"[^>]* stroke="{colour}"', html), colour


def test_the_palette_and_the_ramp_pass_for_graphics():
    for colour in (*svg.PALETTE, *svg.RAMP, svg.ESTIMATE):
        assert contrast(colour, "#fff") >= GRAPHIC, colour
    assert len(set(svg.PALETTE)) == len(svg.PALETTE)
    for a, b, colour in svg.count_levels(10_000):
        assert contrast(colour, "#fff") >= GRAPHIC and a <= b


# -- colour-blind readers (issue 42: two of the race's band colours were nearly the same) ------------------------
MACHADO = {  # Machado, Oliveira and Fernandes (2009), severity 1.0, on linear RGB
    "deuteranopia": ((0.367322, 0.860646, -0.227968), (0.280085, 0.672501, 0.047413), (-0.011820, 0.042940, 0.968881)),
    "protanopia": ((0.152286, 1.052583, -0.204868), (0.114503, 0.786281, 0.099216), (-0.003882, -0.048116, 1.051998)),
    "tritanopia": ((1.255528, -0.076749, -0.178779), (-0.078411, 0.930809, 0.147602), (0.004733, 0.691367, 0.303900)),
}


def lab(colour: str, vision: str | None = None) -> np.ndarray:
    """CIELAB (D65) of ``colour`` as a reader with ``vision`` (None: typical) sees it."""
    h = colour.lstrip("#")
    c = np.array([int(h[i:i + 2], 16) / 255 for i in (0, 2, 4)])
    lin = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    if vision is not None:
        lin = np.clip(np.array(MACHADO[vision]) @ lin, 0.0, 1.0)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ lin
    xyz = xyz / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def delta_e(a: str, b: str, vision: str | None = None) -> float:
    return float(np.linalg.norm(lab(a, vision) - lab(b, vision)))


DISTINCT = 12.0
"""CIELAB units two series colours differ by at least, for every reader (the old palette's red and olive: 3.9
under deuteranopia; 2.3 is a just-noticeable difference; the first four of Okabe-Ito's hues, darkened to 3:1,
keep 14)."""


def test_cvd_simulation_sees_red_and_green_alike_under_deuteranopia():
    assert delta_e("#d62728", "#2ca02c") > 70 and delta_e("#d62728", "#2ca02c", "deuteranopia") < 30
    assert delta_e("#d62728", "#8c7000", "deuteranopia") < 5  # the old palette's pair


def race_page_plot() -> str:
    from fasteval.render.html.ranking_page import over_episodes

    # a document made here: five policies whose intervals overlap in the first episodes
    n = list(range(1, 41))
    series = [{"policy": f"p{i}", "n": n, "estimate": [0.2 * i] * 40,
               "ci_low": [max(0.0, 0.2 * i - 3 / k ** 0.5) for k in n], "ci_high": [min(1.0, 0.2 * i + 3 / k ** 0.5) for k in n]}
              for i in range(5)]
    doc = {"ranking": [{}], "race": {"eliminations": []},
           "trajectory": {"metric": "success", "interval": "betting", "series": series}}
    return over_episodes(doc)


def test_the_race_bands_are_drawn_by_lines_of_colour_blind_safe_colours():
    html = race_page_plot()
    bands = re.findall(r'<polygon class="band"[^>]* fill="(#[0-9a-f]{6})"', html)
    assert len(bands) == 5
    for c in bands:  # each band's bounds are lines in its full colour (3:1), not a 1.2:1 tint alone
        bounds = re.findall(rf'<polyline class="bound"[^>]* stroke="{c}"([^>]*)/>', html)
        assert len(bounds) == 2 and contrast(c, "#fff") >= GRAPHIC, c
    for i, a in enumerate(bands[:4]):  # four colours stay apart for every reader; the fifth and on by dashes too
        for b in bands[i + 1:4]:
            for vision in (None, *MACHADO):
                assert delta_e(a, b, vision) >= DISTINCT, (a, b, vision, delta_e(a, b, vision))
    dashes = re.findall(r'<polyline class="bound"[^>]*?(?: stroke-dasharray="([^"]+)")?/>', html)
    assert len(set(dashes)) == 5  # a second cue: each policy's bounds have their own dash pattern
    assert html.count('class="band-key"') == 5  # the legend shows bands


def test_the_palettes_first_four_colours_stay_apart_for_every_reader():
    first = svg.PALETTE[:4]
    for i, a in enumerate(first):
        for b in first[i + 1:]:
            for vision in (None, *MACHADO):
                assert delta_e(a, b, vision) >= DISTINCT, (a, b, vision)
    assert len(set(svg.DASHES)) == len(svg.DASHES)
