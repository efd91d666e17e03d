"""The HTML reports in a real headless Chromium (DevTools protocol over a pipe, see tests/browser.py).

Every page (a run with videos, a run of an env without a success signal, a ``--stop-when`` run, a
sweep, a comparison of two run folders and a live comparison's document) is opened at 1400 and at
400 px wide, and at each width:

* it loads with no console error and no failed resource, and fetches nothing but its own folder's files;
* nothing sticks out: the page never scrolls sideways, no table is wider than its box, no cell's
  content overflows the cell, no cell, card, plot or video lies outside the viewport;
* no word or number is broken across lines ("4|9 episodes", "be|rnoulli"), unless it is wider
  than its box on its own (a sha256 digest at 400 px);
* a screenshot is written (under the test's temp folder, and under ``$FASTEVAL_SCREENSHOTS`` when set,
  to look at).

And once per page: its numbers (read from the live DOM's ``data-value``) equal the JSON it was made
from, every ``<video>`` plays (``play()`` resolves with frames ready), a click on a column header
reorders the rows. Without Chromium (``scripts/install_browser.sh`` installs it) every test here
skips with that message.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import struct
from pathlib import Path

import pytest

from fasteval.doors.sweep.report import build_report, write_report
from fasteval.doors.sweep.store import Store
from fasteval.render.html import write_compare_report, write_run_report
from fasteval.testing import KNOWN_ANSWER_ID
from tests.browser import HEADERS_JS, LAYOUT_JS, ROWS_JS, WIDTHS, browser, needs_browser  # noqa: F401 (a fixture)
from tests.report_fixtures import NO_SIGNAL_ENV, PARITY, cli, compare_document, load, make_run, make_sweep

pytestmark = needs_browser

PLAY_JS = """Promise.all(Array.from(document.querySelectorAll('video')).map(function(v){return new Promise(function(done){
  var timer=setTimeout(function(){done({src:v.currentSrc,ok:false,why:'timeout',state:v.readyState});},15000);
  v.muted=true;v.play().then(function(){clearTimeout(timer);done({src:v.currentSrc,ok:v.readyState>=2,state:v.readyState,
    width:v.videoWidth});},function(e){clearTimeout(timer);done({src:v.currentSrc,ok:false,why:String(e),
    error:v.error&&v.error.code});});});}))"""
BROKEN_WORDS_JS = """(function(){
  var bad=[], runs=/\\S+/g, words=/[\\p{L}\\p{N}]+(?:[.,][\\p{N}]+)*%?/gu, n;
  function lines(node, start, end){var r=document.createRange(); r.setStart(node,start); r.setEnd(node,end);
    var rects=Array.from(r.getClientRects()).filter(function(x){return x.width>0;});
    return {lines:new Set(rects.map(function(x){return Math.round(x.top);})).size,
            width:rects.reduce(function(a,x){return a+x.width;},0)};}
  var walker=document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while((n=walker.nextNode())){
    var el=n.parentElement; if(!el||el.closest('pre,svg,script,style,title')) continue;
    var head=el.closest('thead'); if(head&&head.getBoundingClientRect().width<=2) continue;  // stacked: headers hidden
    var block=el; while(block&&getComputedStyle(block).display.indexOf('inline')===0) block=block.parentElement;
    var room=block.clientWidth, style=getComputedStyle(block);
    if(style.display==='grid'){var tracks=style.gridTemplateColumns.split(' ');room=parseFloat(tracks[tracks.length-1]);}  // a stacked cell's value column
    var text=n.textContent, run; runs.lastIndex=0;
    while((run=runs.exec(text))){
      var whole=lines(n, run.index, run.index+run[0].length);
      if(whole.lines<2||whole.width>room) continue;  // on one line, or too wide for any line: breaks must fall somewhere
      var w; words.lastIndex=0;
      while((w=words.exec(run[0]))){
        if(w[0].length>1&&lines(n, run.index+w.index, run.index+w.index+w[0].length).lines>1)
          bad.push(w[0]+' in <'+el.tagName.toLowerCase()+'> "'+text.trim().slice(0,60)+'"');}}}
  return bad;})()"""


def table(page, table_id):
    headers = page.evaluate(HEADERS_JS % table_id)
    return [dict(zip(headers, row)) for row in page.evaluate(ROWS_JS % table_id)]


def number(cell):
    return None if cell[1] in (None, "") else float(cell[1])


def bounds(cell):
    return [float(cell[2]), float(cell[3])] if cell[2] not in (None, "") else None


def same(shown, expected):
    """A page number against its JSON: exact (``repr`` round-trips), NaN and null alike."""
    if expected is None or (isinstance(expected, float) and math.isnan(expected)):
        return shown is None or math.isnan(shown)
    return shown == float(expected)


def check_numbers(rows, expected_rows, columns):
    """Every numeric cell of ``rows`` (the DOM's) equals ``expected(row)`` of its column; a numeric
    column of the table that ``columns`` does not name fails (no number goes unchecked)."""
    assert len(rows) == len(expected_rows) > 0
    for row, want in zip(rows, expected_rows):
        numeric = {h for h, c in row.items() if c[1] not in (None, "") and _is_float(c[1])}
        assert numeric <= set(columns), f"unchecked numbers in columns {sorted(numeric - set(columns))}"
        for header, expected in columns.items():
            value = expected(want)
            cell = row[header]
            if isinstance(value, (list, tuple)):
                assert bounds(cell) == [float(v) for v in value] if value[0] is not None else bounds(cell) is None, (header, cell, value)
            else:
                assert same(number(cell), value), (header, cell, value)


def _is_float(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


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


def check_at_both_widths(browser, path: Path, folder: Path, tmp_path: Path, name: str):
    """Open ``path`` at each width: a clean load, nothing off-screen or overflowing, no broken
    word; a screenshot of each. Returns the page opened at the last width (400 px)."""
    for width in WIDTHS:
        page = browser.open(path, width=width)
        check_clean_load(page, folder)
        assert page.evaluate("document.documentElement.clientWidth") == width
        assert page.evaluate(LAYOUT_JS) == [], f"{name} at {width} px"
        assert page.evaluate(BROKEN_WORDS_JS) == [], f"{name} at {width} px"
        shot = page.screenshot(tmp_path / f"{name}-{width}.png", width=width)
        assert png_width(shot) == width and shot.stat().st_size > 5_000
        if os.environ.get("FASTEVAL_SCREENSHOTS"):
            Path(os.environ["FASTEVAL_SCREENSHOTS"]).mkdir(parents=True, exist_ok=True)
            shutil.copy(shot, Path(os.environ["FASTEVAL_SCREENSHOTS"]) / shot.name)
    return page


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


def check_videos_play(page, count):
    played = page.evaluate(PLAY_JS, await_promise=True, timeout=60)
    assert len(played) == count and all(v["ok"] and v["width"] > 0 for v in played), played


TASK_COLUMNS = {
    "n": lambda t: t["aggregated"]["n_episodes"],
    "successes": lambda t: t["aggregated"]["n_success"],
    "success %": lambda t: t["aggregated"]["pc_success"],
    "success 95% CI": lambda t: t["aggregated"]["pc_success_ci95"],
    "mean return": lambda t: t["aggregated"]["avg_sum_reward"],
    "mean length": lambda t: t["aggregated"]["avg_length"],
    "NaN-return episodes": lambda t: t["aggregated"]["n_nan_reward_episodes"],
}


def check_run_numbers(page, info, failed=0):
    from fasteval.render.html.run_input import mean_interval

    columns = dict(TASK_COLUMNS, **{"failed episodes": lambda t: failed,  # the interval the page computes from the returns
                                    "return 95% CI": lambda t: list(mean_interval(t["metrics"]["sum_rewards"])[:2])})
    rows = table(page, "per-task")
    if not info["overall"].get("has_success_signal", True):
        for key in ("successes", "success %", "success 95% CI"):
            columns.pop(key)
    check_numbers(rows, info["per_task"], columns)
    o = info["overall"]
    glance = page.evaluate("Object.fromEntries(Array.from(document.querySelectorAll('.card[data-value]'))"
                           ".map(function(c){return [c.id, c.dataset.value];}))")
    assert glance["glance-n"] == repr(o["n_episodes"]) and glance["glance-return"] == repr(o["avg_sum_reward"])
    assert glance["glance-success"] == (repr(o["pc_success"]) if o.get("has_success_signal", True) else "")
    stages = table(page, "stages")
    assert {r["stage"][0]: number(r["seconds"]) for r in stages} == info["timings"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    folder = make_run(tmp_path_factory.mktemp("run") / "out", "-n", "30")
    write_run_report(folder)
    return folder


def test_run_page_in_chromium(browser, run_dir, tmp_path):
    page = check_at_both_widths(browser, run_dir / "report.html", run_dir, tmp_path, "run")
    info = load(run_dir / "eval_info.json")
    assert info["per_task"][0]["aggregated"]["n_episodes"] == 30
    check_run_numbers(page, info)
    check_videos_play(page, 4)
    check_sort(browser.open(run_dir / "report.html", width=1400), "stages", 1)


def test_a_run_without_a_success_signal_shows_its_videos_in_chromium(browser, tmp_path_factory, tmp_path):
    """MuJoCo's case: no is_success, videos named ep<i>_seed<s>.mp4; the page lists and plays them."""
    folder = tmp_path_factory.mktemp("nosignal") / "out"
    result = cli("--env", NO_SIGNAL_ENV, "--policy", "zero", "-n", "8", "-b", "4", "--videos", "3", "-o", str(folder))
    assert result.exit_code == 0, result.output
    info = load(folder / "eval_info.json")
    assert len(info["overall"]["video_paths"]) == 3 and not info["overall"]["has_success_signal"]
    page = check_at_both_widths(browser, folder / "report.html", folder, tmp_path, "nosignal")
    check_run_numbers(page, info)
    check_videos_play(page, 3)
    outcomes = page.evaluate("Array.from(document.querySelectorAll('figure')).map(function(f){return f.dataset.outcome;})")
    assert outcomes == ["no success signal"] * 3


def test_stop_when_page_in_chromium(browser, tmp_path_factory, tmp_path):
    folder = tmp_path_factory.mktemp("stop") / "out"
    result = cli("--env", KNOWN_ANSWER_ID, "--policy", PARITY, "-n", "400", "-b", "8", "--stop-when", "above=0.3", "-o", str(folder))
    assert result.exit_code == 0, result.output
    info = load(folder / "eval_info.json")
    page = check_at_both_widths(browser, folder / "report.html", folder, tmp_path, "stop-when")
    check_run_numbers(page, info)
    block = info["per_task"][0]["stopping"]
    [row] = table(page, "stopping")
    assert row["stop rule"][0] == "above=0.3" and number(row["k"]) == block["k"] == info["overall"]["n_episodes"]
    assert row["stopped by"][0] == "rule" and row["decision"][0] == "above 30.0%"
    assert bounds(row["anytime-valid bounds"]) == [100 * block["cs_low"], 100 * block["cs_high"]]
    decision = page.evaluate("document.querySelector('#glance-decision').dataset.value")
    assert decision == "above 30.0%"
    first = page.evaluate("document.querySelector('#glance .card').id")
    assert first == "glance-decision"  # the answer comes first
    # the decision card and the stopping table are on screen at 400 px without scrolling sideways
    right = page.evaluate("Math.max(document.querySelector('#glance-decision').getBoundingClientRect().right,"
                          "document.querySelector('#stopping').getBoundingClientRect().right)")
    assert right <= 400


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sweep")
    make_sweep(folder)
    write_report(folder)
    return folder


def test_sweep_page_in_chromium(browser, sweep_dir, tmp_path):
    page = check_at_both_widths(browser, sweep_dir / "report.html", sweep_dir, tmp_path, "sweep")
    with Store(sweep_dir, create=False) as store:
        doc = build_report(store)
    rows = table(page, "cells")
    by_cell = {(r["policy"][0], r["env"][0]): r for r in rows}
    cells = [c for c in doc["cells"]]
    signal = {c["env"]: c["success_signal"] for c in cells if c["episodes"]}
    check_numbers([by_cell[(c["policy"], c["env"])] for c in cells], cells, {
        "episodes": lambda c: c["episodes"], "planned": lambda c: c["expected_episodes"],
        "successes": lambda c: c["successes"] if c["episodes"] and c["success_signal"] else None,
        "success %": lambda c: c["success_pct"] if c["episodes"] and c["success_signal"] else None,
        "success 95% CI": lambda c: c["success_ci95"] if c["episodes"] and c["success_signal"] else [None],
        "mean return": lambda c: c["mean_return"] if c["episodes"] else None,
        "return 95% CI": lambda c: c["return_ci95"] if c["episodes"] else [None],
        "IQM return": lambda c: __import__("fasteval.types.stats", fromlist=["iqm"]).iqm(c["returns"]) if c["episodes"] else None,
        "NaN-return eps": lambda c: c["nan_reward_episodes"]})
    best = table(page, "best-per-env")
    check_numbers(best, doc["best_per_env"], {
        "best's value": lambda r: r["ranking"][0]["value"], "best's 95% CI": lambda r: r["ranking"][0]["ci"],
        "runner-up's value": lambda r: r["ranking"][1]["value"], "runner-up's 95% CI": lambda r: r["ranking"][1]["ci"],
        "paired: best against runner-up (B - A)": lambda r: (r["versus"]["success_mcnemar"]["p_value"] if r["metric"] == "success"
                                                          else r["versus"]["return_diff"]["mean_diff"])})
    for row, r in zip(best, doc["best_per_env"]):
        assert row["env"][0] == r["env"] and row["judged by"][0] == ("success %" if signal[r["env"]] else "mean return")
    assert [r["best"][0] for r in best] == ["parity = zero (tied)", "parity"]  # cartpole: parity's return is higher
    overall = table(page, "overall")
    ranked = sorted(doc["across_envs"], key=lambda a: -a["iqm_success_pct"])
    check_numbers(overall, ranked, {"rank": lambda a: 1 + sum(b["iqm_success_pct"] > a["iqm_success_pct"] for b in ranked), "envs": lambda a: a["envs"],
                                    "IQM success %": lambda a: a["iqm_success_pct"], "IQM 95% CI": lambda a: a["iqm_success_ci95"],
                                    "mean success %": lambda a: a["mean_success_pct"], "mean 95% CI": lambda a: a["mean_success_ci95"]})
    check_numbers(table(page, "improvement"), doc["improvement"], {"envs": lambda p: p["envs"], "P(B > A)": lambda p: p["value"],
                                                                   "95% CI": lambda p: p["ci"]})
    paired = table(page, "paired")
    check_numbers(paired, doc["paired"], {
        "paired episodes": lambda p: p["episodes"],
        "only A succeeded": lambda p: p["success_mcnemar"]["only_a"] if p["success_mcnemar"] else None,
        "only B succeeded": lambda p: p["success_mcnemar"]["only_b"] if p["success_mcnemar"] else None,
        "McNemar p": lambda p: p["success_mcnemar"]["p_value"] if p["success_mcnemar"] else None,
        "p (Holm)": lambda p: p["success_mcnemar"]["p_holm"] if p["success_mcnemar"] else None,
        "return B - A": lambda p: p["return_diff"]["mean_diff"], "B - A 95% CI": lambda p: p["return_diff"]["ci"]})
    assert page.evaluate("document.querySelectorAll('#plot-profiles svg polyline.line').length") == 2
    page = browser.open(sweep_dir / "report.html", width=1400)
    headers = page.evaluate(HEADERS_JS % "cells")
    check_sort(page, "cells", headers.index("mean return"))
    links = page.evaluate("Array.from(document.querySelectorAll('#cells a')).map(function(a){return a.getAttribute('href');})")
    assert len(links) == len(doc["cells"])
    # every cell link is on screen at 1400 px (the last column used to be cut off)
    right = page.evaluate("Math.max.apply(null, Array.from(document.querySelectorAll('#cells a')).map("
                          "function(a){return a.getBoundingClientRect().right;}))")
    assert right <= page.evaluate("document.querySelector('#cells').parentElement.getBoundingClientRect().right")
    for link in links[:2] + links[-1:]:  # a working cell, and the failed one (listed last)
        cell = browser.open(sweep_dir / link)
        check_clean_load(cell, sweep_dir)
        assert cell.evaluate("document.body.dataset.report") == "run"


def check_compare_numbers(page, doc):
    tasks = doc["tasks"]
    check_numbers(table(page, "compare-tasks"), tasks, {"pairs": lambda t: t["n_pairs"], "p (Holm)": lambda t: t["p_holm"]})
    assert [r["verdict"][0] for r in table(page, "compare-tasks")] == [t["verdict"] for t in tasks]
    with_success = [t for t in tasks if t.get("success")]
    pct = lambda x: 100 * x  # noqa: E731
    check_numbers(table(page, "compare-success"), with_success, {
        "A successes": lambda t: t["success"]["a_successes"], "B successes": lambda t: t["success"]["b_successes"],
        "A success %": lambda t: pct(t["success"]["a_rate"]), "B success %": lambda t: pct(t["success"]["b_rate"]),
        "B - A (pp)": lambda t: pct(t["success"]["diff"]), "B - A 95% CI": lambda t: [pct(v) for v in t["success"]["diff_ci"]],
        "only A": lambda t: t["success"]["only_a"], "only B": lambda t: t["success"]["only_b"],
        "McNemar p": lambda t: t["success"]["p_value"], "p (Holm)": lambda t: t["success"]["p_holm"]})
    check_numbers(table(page, "compare-return"), tasks, {
        "A mean return": lambda t: t["return"]["a_mean"], "B mean return": lambda t: t["return"]["b_mean"],
        "B - A": lambda t: t["return"]["diff"], "B - A 95% CI": lambda t: t["return"]["diff_ci"],
        "t-test p": lambda t: t["return"]["p_value"], "p (Holm)": lambda t: t["return"]["p_holm"],
        "signed-rank p (secondary)": lambda t: t["return"].get("signed_rank_p"),
        "P(B > A)": lambda t: t["return"]["prob_improvement"], "P(B > A) 95% CI": lambda t: t["return"]["prob_improvement_ci"]})


def test_compare_page_in_chromium(browser, tmp_path):
    doc = compare_document()
    (tmp_path / "compare.json").write_text(json.dumps(doc))
    write_compare_report(json.loads((tmp_path / "compare.json").read_text()), tmp_path)
    page = check_at_both_widths(browser, tmp_path / "compare.html", tmp_path, tmp_path, "compare-live")
    check_compare_numbers(page, doc)
    assert page.evaluate("document.querySelectorAll('.trajectory svg').length") == 1
    # at 400 px the verdicts are on screen (they were off to the right)
    rights = page.evaluate("Array.from(document.querySelectorAll('#compare-tasks td:last-child')).map("
                           "function(td){return td.getBoundingClientRect().right;})")
    assert len(rights) == 2 and max(rights) <= 400
    page = browser.open(tmp_path / "compare.html", width=1400)
    check_sort(page, "compare-return", 3)


def test_compare_of_two_run_folders_in_chromium(browser, tmp_path_factory, tmp_path):
    root = tmp_path_factory.mktemp("cmp")
    for name, policy in (("a", "zero"), ("b", PARITY)):
        assert cli("--env", KNOWN_ANSWER_ID, "--policy", policy, "-n", "40", "-o", str(root / name)).exit_code == 0
    result = cli("compare", str(root / "a"), str(root / "b"), "-o", str(root / "cmp"))
    assert result.exit_code == 0, result.output
    doc = load(root / "cmp" / "compare.json")
    page = check_at_both_widths(browser, root / "cmp" / "compare.html", root, tmp_path, "compare-runs")
    check_compare_numbers(page, doc)
    assert page.evaluate("document.title") == "fasteval compare: ParityPolicy (B) vs zero (A)"
