"""The ranking page of a many-policy run (``report.html``) in a real headless Chromium (tests/browser.py).

Two runs of the known-answer checkpoint family, made with the CLI: a race (``--stop-when best``, two
policies dropped) and a fixed-n run with videos. Each page, at 1400 and at 400 px wide: loads with no
console error and no failed request, fetches nothing outside its folder; nothing sticks out (the page
never scrolls sideways, no table is wider than its box, no cell's content overflows it, no cell, card or
plot lies off-screen); the ranking table's numbers (the DOM's ``data-value``, ``data-low``, ``data-high``)
equal ``eval_info.json``'s ranking, every one of them; the cards name the best policy; the intervals over
episodes are drawn, one band per policy; each policy's own page loads; a click on a header sorts.
Without Chromium every test here skips, as tests/test_report_browser.py's do.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fasteval.render.html import write_run_report
from fasteval.testing.checkpoints import CheckpointFamily
from tests.browser import HEADERS_JS, LAYOUT_JS, ROWS_JS, WIDTHS, browser, needs_browser  # noqa: F401 (a fixture)
from tests.report_fixtures import cli

pytestmark = needs_browser
FAMILY = CheckpointFamily((0.3, 0.5, 0.8), share=0.5)


def run_cli(folder: Path, *extra: str) -> Path:
    policies = [a for p in FAMILY.policies() for a in ("--policy", p)]
    result = cli("--env", FAMILY.env_ref, "--env-kwarg", f"p={json.dumps(list(FAMILY.rates))}", "--env-kwarg",
                 f"share={FAMILY.share}", *policies, "-b", "7", *extra, "-o", str(folder))
    assert result.exit_code == 0, result.output
    return folder


@pytest.fixture(scope="module")
def race_dir(tmp_path_factory):
    return run_cli(tmp_path_factory.mktemp("race") / "out", "-n", "400", "--stop-when", "best")


@pytest.fixture(scope="module")
def fixed_dir(tmp_path_factory):
    return run_cli(tmp_path_factory.mktemp("fixed") / "out", "-n", "40")


def rows_of(page, table_id):
    headers = page.evaluate(HEADERS_JS % table_id)
    return [dict(zip(headers, row)) for row in page.evaluate(ROWS_JS % table_id)]


def value(cell):
    return None if cell[1] in (None, "") else float(cell[1])


def check_clean(page, folder: Path):
    assert page.console_errors == [] and page.failed_requests == []
    own = folder.resolve().as_uri()
    assert all(url.startswith(own) or url.startswith("data:") for url in page.requests), page.requests


def check_ranking_numbers(page, info):
    """Every number of the ranking table is the JSON's (percent for a success rate, points for a difference)."""
    rows = rows_of(page, "ranking")
    ranking = info["ranking"]
    assert len(rows) == len(ranking) == 3
    scale = 100.0
    for row, want in zip(rows, ranking):
        assert value(row["rank"]) == want["rank"] and row["policy"][1] == want["policy"]
        assert value(row["episodes"]) == want["episodes"]
        assert value(row["success %"]) == scale * want["estimate"]
        assert [float(row["interval"][2]), float(row["interval"][3])] == [scale * want["ci_low"], scale * want["ci_high"]]
        vs = want["vs_best"]
        if vs is None:
            assert row["vs best (points)"][0] == "best"
        else:
            assert value(row["vs best (points)"]) == scale * vs["difference"]
            cell = row["difference interval"]
            assert [float(cell[2]), float(cell[3])] == [scale * vs["ci_low"], scale * vs["ci_high"]]
        if want["dropped_at"] is not None:
            assert value(row["dropped at"]) == want["dropped_at"] and row["dropped by"][0] == want["dropped_by"]
        numeric = {h for h, c in row.items() if c[1] not in (None, "")}
        assert numeric <= {"rank", "policy", "episodes", "success %", "interval", "vs best (points)",
                           "difference interval", "dropped at", "dropped by"}


@pytest.mark.parametrize("which", ["race", "fixed"])
def test_ranking_page_in_chromium(browser, which, race_dir, fixed_dir, tmp_path):
    folder = race_dir if which == "race" else fixed_dir
    write_run_report(folder)  # again, from the files (the CLI wrote it already)
    info = json.loads((folder / "eval_info.json").read_text())
    for width in WIDTHS:
        page = browser.open(folder / "report.html", width=width)
        check_clean(page, folder)
        assert page.evaluate("document.body.dataset.report") == "ranking"
        assert page.evaluate("document.documentElement.clientWidth") == width
        assert page.evaluate(LAYOUT_JS) == [], f"{which} at {width} px"
        check_ranking_numbers(page, info)
        # the card names a best only where the verdict does (a tie or an undecided race names none)
        assert page.evaluate("document.querySelector('#glance-best').dataset.policy") == (info["verdict"]["best"] or "")
        assert page.evaluate("document.querySelectorAll('#over-episodes polygon.band').length") == 3
        shot = page.screenshot(tmp_path / f"{which}-{width}.png", width=width)
        assert shot.stat().st_size > 5_000
    if which == "race":
        race = info["race"]
        assert race["reason"] == "one_left" and len(race["eliminations"]) == 2
        drops = rows_of(page, "eliminations")
        assert [(r["policy"][1], value(r["dropped at k"]), r["beaten by"][1]) for r in drops] == \
            [(e["name"], e["k"], e["by_name"]) for e in race["eliminations"]]
        assert page.evaluate("document.querySelectorAll('#over-episodes line.ref').length") == 2
    headers = page.evaluate(HEADERS_JS % "ranking")
    page = browser.open(folder / "report.html", width=1400)
    page.click(f"#ranking thead th:nth-child({headers.index('success %') + 1})")
    shown = [value(r["success %"]) for r in rows_of(page, "ranking")]
    assert shown == sorted(shown)
    links = page.evaluate("Array.from(document.querySelectorAll('#ranking a')).map(function(a){return a.getAttribute('href');})")
    assert len(links) == 3
    for link in links:
        sub = browser.open(folder / link, width=400)
        check_clean(sub, folder)
        assert sub.evaluate("document.body.dataset.report") == "run"
