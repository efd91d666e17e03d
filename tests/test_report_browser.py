"""The HTML reports in a real headless Chromium (DevTools protocol over a pipe, see tests/browser.py).

For a run folder (with videos), a sweep and a comparison made here, each page: loads with no
console error and no failed resource, and fetches nothing but its own folder's files; its
table's numbers (read from the live DOM) equal the JSON it was made from; every ``<video>``
plays; a click on a column header reorders the rows; a 1280-px-wide screenshot is written under
the test's temp folder. Without Chromium (``scripts/install_browser.sh`` installs it) every test
here skips with that message.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest

from fasteval.doors.sweep.report import build_report, write_report
from fasteval.doors.sweep.store import Store
from fasteval.render.html import write_compare_report, write_run_report
from tests.browser import Browser, find_chromium
from tests.report_fixtures import compare_document, load, make_run, make_sweep

CHROMIUM = find_chromium()
MISSING = "Chromium is not installed (scripts/install_browser.sh installs it, or set FASTEVAL_CHROMIUM)"
REQUIRED = os.environ.get("FASTEVAL_REQUIRE_BROWSER") == "1"
"""CI can ask for the browser: then a missing Chromium fails these tests instead of skipping them."""
pytestmark = pytest.mark.skipif(CHROMIUM is None and not REQUIRED, reason=MISSING)

ROWS_JS = """Array.from(document.querySelectorAll('#%s tbody tr')).map(function(tr){
  return Array.from(tr.cells).map(function(td){return [td.textContent.trim(), td.getAttribute('data-value')];});})"""
HEADERS_JS = "Array.from(document.querySelectorAll('#%s thead th')).map(function(th){return th.textContent.trim();})"
PLAY_JS = """Promise.all(Array.from(document.querySelectorAll('video')).map(function(v){return new Promise(function(done){
  var timer=setTimeout(function(){done({src:v.currentSrc,ok:false,why:'timeout',state:v.readyState});},15000);
  v.muted=true;v.play().then(function(){clearTimeout(timer);done({src:v.currentSrc,ok:v.readyState>=2,state:v.readyState,
    width:v.videoWidth});},function(e){clearTimeout(timer);done({src:v.currentSrc,ok:false,why:String(e),
    error:v.error&&v.error.code});});});}))"""


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if CHROMIUM is None:
        pytest.fail(MISSING + "; FASTEVAL_REQUIRE_BROWSER=1 asks for it")
    with Browser.launch(CHROMIUM, tmp_path_factory.mktemp("chromium")) as b:
        yield b


def table(page, table_id):
    headers = page.evaluate(HEADERS_JS % table_id)
    return [dict(zip(headers, row)) for row in page.evaluate(ROWS_JS % table_id)]


def number(cell):
    return None if cell[1] in (None, "") else float(cell[1])


def check_clean_load(page, folder: Path):
    assert page.console_errors == []
    assert page.failed_requests == []
    own = folder.resolve().as_uri()
    for url in page.requests:
        assert url.startswith(own) or url.startswith("data:"), url  # nothing from the network, nothing from elsewhere


def png_width(path: Path) -> int:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">I", head[16:20])[0]


def check_sort(page, table_id, header_index):
    """Click a header twice: the column's values come out ascending, then descending (no-value cells last)."""
    before = [r[header_index][1] for r in page.evaluate(ROWS_JS % table_id)]
    results = []
    for _ in range(2):
        page.click(f"#{table_id} thead th:nth-child({header_index + 1})")
        values = [r[header_index][1] for r in page.evaluate(ROWS_JS % table_id)]
        numbers = [float(v) for v in values if v not in (None, "", "NaN")]
        assert sorted(values, key=lambda v: v in (None, "", "NaN")) == values  # blanks last
        results.append(numbers)
    assert results[0] == sorted(results[0]) and results[1] == sorted(results[1], reverse=True)
    assert sorted(before, key=str) == sorted(values, key=str)  # the same rows, reordered
    return results


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    folder = make_run(tmp_path_factory.mktemp("run") / "out", "-n", "30")
    write_run_report(folder)
    return folder


def test_run_page_in_chromium(browser, run_dir, tmp_path):
    page = browser.open(run_dir / "report.html")
    check_clean_load(page, run_dir)
    info = load(run_dir / "eval_info.json")
    [row] = table(page, "per-task")
    agg = info["per_task"][0]["aggregated"]
    assert number(row["n"]) == agg["n_episodes"] == 30
    assert number(row["successes"]) == agg["n_success"]
    assert number(row["success %"]) == agg["pc_success"]
    assert number(row["mean return"]) == agg["avg_sum_reward"]
    assert number(row["mean length"]) == agg["avg_length"]
    assert page.evaluate("document.querySelector('#glance-success').dataset.value") == repr(info["overall"]["pc_success"])
    played = page.evaluate(PLAY_JS, await_promise=True, timeout=60)
    assert len(played) == 4 and all(v["ok"] for v in played), played
    stages = table(page, "stages")
    assert {r["stage"][0] for r in stages} == set(info["timings"])
    check_sort(page, "stages", 1)
    shot = page.screenshot(tmp_path / "run.png")
    assert png_width(shot) == 1280 and shot.stat().st_size > 10_000


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sweep")
    make_sweep(folder)
    write_report(folder)
    return folder


def test_sweep_page_in_chromium(browser, sweep_dir, tmp_path):
    page = browser.open(sweep_dir / "report.html")
    check_clean_load(page, sweep_dir)
    with Store(sweep_dir, create=False) as store:
        doc = build_report(store)
    rows = table(page, "cells")
    assert len(rows) == len(doc["cells"])
    by_cell = {(r["policy"][0], r["env"][0]): r for r in rows}
    for c in doc["cells"]:
        row = by_cell[(c["policy"], c["env"])]
        assert number(row["episodes"]) == c["episodes"]
        assert number(row["mean return"]) == (c["mean_return"] if c["episodes"] else None)
        if c["success_signal"] and c["episodes"]:
            assert number(row["success %"]) == c["success_pct"]
    headers = page.evaluate(HEADERS_JS % "cells")
    check_sort(page, "cells", headers.index("mean return"))
    page.screenshot(tmp_path / "sweep.png")
    assert png_width(tmp_path / "sweep.png") == 1280
    links = page.evaluate("Array.from(document.querySelectorAll('#cells a')).map(function(a){return a.getAttribute('href');})")
    assert len(links) == len(doc["cells"])
    for link in links[:2] + links[-1:]:  # a working cell, and the failed one (listed last)
        cell = browser.open(sweep_dir / link)
        check_clean_load(cell, sweep_dir)
        assert cell.evaluate("document.body.dataset.report") == "run"


def test_compare_page_in_chromium(browser, tmp_path):
    doc = compare_document()
    (tmp_path / "compare.json").write_text(json.dumps(doc))
    write_compare_report(json.loads((tmp_path / "compare.json").read_text()), tmp_path)
    page = browser.open(tmp_path / "compare.html")
    check_clean_load(page, tmp_path)
    verdicts, returns = table(page, "compare-tasks"), table(page, "compare-return")
    for verdict, ret, task in zip(verdicts, returns, doc["tasks"]):
        assert number(verdict["pairs"]) == task["n_pairs"]
        assert number(verdict["p (Holm)"]) == task["p_holm"]
        assert verdict["verdict"][0] == task["verdict"]
        assert number(ret["diff"]) == task["return"]["diff"]
        assert number(ret["p (Holm)"]) == task["return"]["p_holm"]
    [success] = table(page, "compare-success")
    assert number(success["diff (pp)"]) == 100 * doc["tasks"][0]["success"]["diff"]
    check_sort(page, "compare-return", 3)
    assert page.evaluate("document.querySelectorAll('.trajectory svg').length") == 1
    page.screenshot(tmp_path / "compare.png")
    assert png_width(tmp_path / "compare.png") == 1280
