"""The HTML reports without a browser: what the pages say, against the data they were made from.

The browser half (loading, console, videos, sorting, screenshots) is tests/test_report_browser.py.
"""

from __future__ import annotations

import math
from html import unescape
import re
from pathlib import Path

import numpy as np
import pytest

from fasteval.doors.sweep.report import build_report, write_report
from fasteval.doors.sweep.retry import cell_retry_verdict, retry_verdict
from fasteval.doors.sweep.store import Store
from fasteval.run.provenance import collect_provenance, command_line
from fasteval.render.html import write_compare_report, write_run_report
from fasteval.render.html import svg
from fasteval.testing import expected_episode
from fasteval.types.results import EpisodeTable, EvalResult
from fasteval.testing import KNOWN_ANSWER_ID
from tests.report_fixtures import (FAULT_SEEDS, PARITY, Tables, compare_document, load, make_faulty_run, make_run, make_sweep,
                                   value)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("run") / "out")  # the CLI writes report.html


def test_the_cli_writes_report_html_unless_told_not_to(run_dir, tmp_path):
    from tests.report_fixtures import cli

    assert (run_dir / "report.html").is_file()
    quiet = cli("--env", "CartPole-v1", "-n", "3", "--no-report", "-o", str(tmp_path / "q"))
    assert quiet.exit_code == 0 and not (tmp_path / "q" / "report.html").exists()
    again = cli("report", str(tmp_path / "q"))  # `fasteval report DIR` writes it later
    assert again.exit_code == 0 and (tmp_path / "q" / "report.html").is_file(), again.output
    assert cli("report", str(tmp_path / "q"), "-o", str(tmp_path / "elsewhere")).exit_code == 2
    (tmp_path / "empty").mkdir()
    nothing = cli("report", str(tmp_path / "empty"))
    assert nothing.exit_code == 2 and "no results store" in nothing.output and "eval_info.json" in nothing.output


def parity(obs):
    return int(round(float(obs[-1])))


def test_the_task_table_shows_eval_info_numbers_and_the_known_answers(run_dir):
    info = load(run_dir / "eval_info.json")
    page = Tables((run_dir / "report.html").read_text())
    [row] = page.tables["per-task"]
    agg = info["per_task"][0]["aggregated"]
    cells = dict(zip(page.headers["per-task"], row["cells"]))
    assert value(cells["n"]) == agg["n_episodes"] == 24
    assert value(cells["successes"]) == agg["n_success"]
    assert value(cells["success %"]) == agg["pc_success"]
    assert value(cells["mean return"]) == agg["avg_sum_reward"]
    assert value(cells["mean length"]) == agg["avg_length"]
    assert cells["success %"][0] == f"{agg['pc_success']:.1f}"
    expected = [expected_episode(3 + i, parity) for i in range(24)]
    assert agg["n_success"] == sum(e["success"] for e in expected)
    assert math.isclose(agg["avg_sum_reward"], np.mean([e["sum_reward"] for e in expected]))
    lo, hi = (float(x) for x in re.findall(r"[-\d.]+", cells["success 95% CI"][0]))
    assert (lo, hi) == tuple(round(x, 1) for x in agg["pc_success_ci95"])


def test_the_page_is_self_contained(run_dir):
    html = (run_dir / "report.html").read_text()
    assert "<script src" not in html and "<link rel=\"stylesheet\"" not in html
    urls = re.findall(r"""(?:src|href)="([^"]*)\"""", html)
    assert urls and all(not re.match(r"[a-z]+://", u) for u in urls if not u.startswith(("#", "data:"))), urls
    assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", html)
    videos = re.findall(r'<video[^>]* src="([^"]+)"', html)
    assert len(videos) == 4 and all((run_dir / v).is_file() for v in videos)


def test_videos_are_grouped_by_outcome_with_episode_and_seed(run_dir):
    html = (run_dir / "report.html").read_text()
    info = load(run_dir / "eval_info.json")
    by_ix = {r["episode_ix"]: r for r in info["per_episode"]}
    figures = re.findall(r'<figure data-episode="(\d+)" data-seed="(\d+)" data-outcome="(\w+)">', html)
    assert sorted(int(e) for e, _, _ in figures) == [0, 1, 2, 3]  # --videos 4 --video-select first
    for episode, seed, outcome in figures:
        record = by_ix[int(episode)]
        assert int(seed) == record["seed"] == 3 + int(episode)
        assert outcome == ("success" if record["success"] else "failure")
    galleries = re.findall(r'<div class="gallery" data-outcome="(\w+)">', html)
    assert galleries == [g for g in ("failure", "success") if any(o == g for _, _, o in figures)]


@pytest.mark.parametrize("layout", ["fasteval", "lerobot"])
def test_a_run_without_a_success_signal_lists_its_videos(tmp_path, layout):
    """MuJoCo's case (no is_success: files ``ep<i>_seed<s>.mp4``) and lerobot-eval's names
    (``eval_episode_<i>.mp4``): the page lists every video eval_info.json lists, with its episode, its
    seed (the record's, for lerobot's names that carry none) and no outcome. The page used to match
    only ``_success``/``_failure`` names and showed none."""
    from tests.report_fixtures import NO_SIGNAL_ENV, cli

    folder = tmp_path / "out"
    result = cli("--env", NO_SIGNAL_ENV, "--policy", "zero", "-n", "6", "-b", "3", "--seed", "7", "--videos", "3",
                 "--video-layout", layout, "-o", str(folder))
    assert result.exit_code == 0, result.output
    info = load(folder / "eval_info.json")
    listed = info["overall"]["video_paths"]
    assert len(listed) == 3 and not info["overall"]["has_success_signal"]
    html = (folder / "report.html").read_text()
    shown = re.findall(r'<video[^>]* src="([^"]+)"', html)
    assert sorted((folder / v).resolve() for v in shown) == sorted(Path(v).resolve() for v in listed)
    figures = re.findall(r'<figure data-episode="(\d+)" data-seed="(-?\d+)" data-outcome="([^"]+)">', html)
    by_ix = {r["episode_ix"]: r for r in info["per_episode"]}
    assert sorted(int(e) for e, _, _ in figures) == [0, 1, 2]
    for episode, seed, outcome in figures:
        assert int(seed) == by_ix[int(episode)]["seed"] == 7 + int(episode) and outcome == "no success signal"


def test_every_plot_has_labelled_axes(run_dir):
    html = (run_dir / "report.html").read_text()
    plots = re.findall(r'<svg class="plot".*?</svg>', html, flags=re.S)
    assert len(plots) >= 4  # returns per task, success per task, length vs return, time per stage
    for plot in plots:
        assert re.search(r'class="xlabel"[^>]*>[^<]+<', plot) and re.search(r'class="ylabel"[^>]*>[^<]+<', plot)


def test_provenance_names_command_digest_seeds_and_versions(run_dir):
    html = (run_dir / "report.html").read_text()
    manifest = load(run_dir / "manifest.json")
    assert manifest["policy_digest"] in html
    assert "3 .. 26 (episode i uses seed 3 + i)" in html
    for name in ("fasteval version", "torch version", "gymnasium version", "lerobot version"):
        assert f"<dt>{name}</dt>" in html
    assert 'id="config"' in html and '"n_episodes": 24' in unescape(html)
    assert 'href="episodes.jsonl"' in html


def test_the_run_records_its_provenance_and_the_page_shows_it(run_dir):
    import sys

    manifest = load(run_dir / "manifest.json")
    prov = manifest["provenance"]
    assert prov["command"] == command_line(sys.argv)  # the process's own command line (pytest's, here)
    assert prov["versions"]["fasteval"] and prov["versions"]["torch"] and prov["machine"]["python"]
    assert manifest["segments"][0]["command"] == prov["command"]
    html = unescape((run_dir / "report.html").read_text())
    assert prov["command"] in html and prov["date"] in html and "were read when this page was" not in html


def test_provenance_given_is_shown_as_is(tmp_path):
    folder = make_run(tmp_path / "r", "--no-report")
    prov = collect_provenance(["/usr/bin/fasteval", "--env", "X", "-n", "3"])
    assert prov["command"] == "fasteval --env X -n 3"
    write_run_report(folder, provenance=prov)
    html = (folder / "report.html").read_text()
    assert "fasteval --env X -n 3" in html and "were read when this page was" not in html
    assert command_line(["/x/fasteval/doors/cli.py", "-n", "2 3"]) == "python -m fasteval.doors.cli -n '2 3'"


def test_a_run_without_a_success_signal_says_so_instead_of_zero(tmp_path):
    from tests.report_fixtures import cli

    assert cli("--env", "CartPole-v1", "-n", "5", "-o", str(tmp_path)).exit_code == 0
    page = Tables((tmp_path / "report.html").read_text())
    cells = dict(zip(page.headers["per-task"], page.tables["per-task"][0]["cells"]))
    # a dash in the cells, and the note under the table says why once (issue 42: not once per cell)
    assert cells["success %"] == ("—", "") and cells["successes"][0] == "—"
    html = (tmp_path / "report.html").read_text()
    assert "— in the success columns: no success signal" in html and "0.0%" not in html


def test_failed_episodes_are_listed_with_seed_and_cause(tmp_path):
    folder = make_faulty_run(tmp_path / "f")  # exit 1: the CLI still writes the page
    page = Tables((folder / "report.html").read_text())
    rows = page.tables["errors"]
    assert sorted(int(value(r["cells"][1])) for r in rows) == sorted(FAULT_SEEDS)
    assert all("planted" in r["cells"][6][0] for r in rows)
    cells = dict(zip(page.headers["per-task"], page.tables["per-task"][0]["cells"]))
    assert value(cells["failed episodes"]) == len(FAULT_SEEDS)
    assert value(cells["n"]) == 12 - len(FAULT_SEEDS)


def test_a_suite_gets_a_page_per_task_linked_from_its_own(tmp_path):
    from tests.report_fixtures import cli

    out = tmp_path / "suite"
    result = cli("--env", "tests.test_suites:make_named_task_env", "--env-kwarg", 'task=["open", "close"]', "--policy", "zero",
                 "-n", "4", "-o", str(out))
    assert result.exit_code == 0 and (out / "tasks").is_dir(), result.output
    page = Tables((out / "report.html").read_text())
    links = re.findall(r'<a href="(tasks/[^"]+/report.html)">', (out / "report.html").read_text())
    assert len(page.tables["per-task"]) == 2 and len(links) == 2
    assert all((out / link).is_file() for link in links)


def _big_result(n: int) -> EvalResult:
    rng = np.random.default_rng(0)
    columns = {"episode_ix": np.arange(n), "seed": np.arange(n), "sum_reward": rng.normal(10, 3, n),
               "max_reward": np.ones(n), "length": rng.integers(5, 300, n), "success": rng.random(n) < 0.7,
               "nan_rewards": np.zeros(n, np.int64), "has_success_signal": np.ones(n, bool)}
    codes = np.arange(n) % 4
    tasks = [("suite", i, f"task-{i}") for i in range(4)]
    errors = [{"episode_ix": n + i, "seed": n + i, "stage": "step", "step": 3, "attempt": 1, "final": True,
               "error": f"planted {i}", "traceback": "Traceback ...\n" * 20, "exit_code": None, "task_group": "suite",
               "task_id": i % 4} for i in range(3000)]
    return EvalResult(EpisodeTable(columns, codes, tasks), eval_s=100.0, timings={"env_step": 60.0, "policy": 30.0},
                      meta={"env": "synthetic", "policy": "p", "n_episodes": n + 3000, "seed": 0}, errors=errors, n_failed=3000)


def test_a_100k_episode_report_stays_small_and_lists_no_episode(tmp_path):
    big = _big_result(100_000)
    path = write_run_report(tmp_path, big.eval_info_document(), manifest={"status": "complete", "n_episodes": 103_000})
    size = path.stat().st_size
    assert size < 5 * 2**20, size
    small = write_run_report(tmp_path / "small", _big_result(1000).eval_info_document(), manifest={"status": "complete"})
    assert size < 1.6 * small.stat().st_size  # aggregated: it does not grow with the episodes
    page = Tables(path.read_text())
    assert len(page.tables["errors"]) == 1000 and "2000 more failed episodes" in path.read_text()
    assert [value(r["cells"][1]) for r in page.tables["per-task"]] == [25_000.0] * 4
    assert "2-D histogram of 100000 episodes" in path.read_text()


def test_the_stopping_block_shows_anytime_valid_bounds(run_dir, tmp_path):
    doc = load(run_dir / "eval_info.json")
    block = {"rule": "above=0.3", "metric": "success", "confidence": 0.95, "return_bounds": None, "cap": 24, "k": 24,
             "reason": "cap", "fired": False, "estimate": 0.5, "cs_low": 0.21, "cs_high": 0.79, "half_width": 0.29,
             "decision": None, "threshold": 0.3, "epsilon": None, "n_computed_past_stop": 0, "computed_past_stop": [],
             "n_cancelled": 0, "method": "betting confidence sequence"}
    doc["stopping"] = dict(block, n_tasks=1, n_fired=0, n_capped=1, resumable=True)
    k = list(range(1, 25))
    block["trajectory"] = {"k": k, "cs_low": [max(0.0, 0.5 - 1 / i ** 0.5) for i in k],
                           "cs_high": [min(1.0, 0.5 + 1 / i ** 0.5) for i in k]}
    doc["per_task"][0]["stopping"] = block
    write_run_report(tmp_path, doc)
    html = (tmp_path / "report.html").read_text()
    assert "anytime-valid 95%: [21.0, 79.0]" in html
    page = Tables(html)
    cells = dict(zip(page.headers["stopping"], page.tables["stopping"][0]["cells"]))
    assert cells["stop rule"][0] == "above=0.3" and cells["anytime-valid bounds"][0] == "[21.0, 79.0]"
    assert cells["decision"][0] == "undecided at the cap" and "stop rule" not in page.headers["per-task"]
    assert re.search(r'id="glance-decision" data-value="undecided at the cap">.*?still contains 30.0%', html)
    [plot] = re.findall(r'<div class="plots" id="plot-stopping">(.*?)</div>', html, flags=re.S)
    assert 'class="band"' in plot and 'class="ref"' in plot and "stopped by cap at k=24" in plot
    assert '>threshold 30%</text>' in plot  # the dashed line says what it is
    assert 'class="estimate"' not in plot  # this trajectory carries no estimate: none is drawn


def test_a_stop_when_page_states_the_decision_and_draws_the_estimate(tmp_path):
    from tests.report_fixtures import cli

    result = cli("--env", KNOWN_ANSWER_ID, "--policy", PARITY, "-n", "400", "-b", "8", "--stop-when", "above=0.3",
                 "-o", str(tmp_path))
    assert result.exit_code == 0, result.output
    info, html = load(tmp_path / "eval_info.json"), (tmp_path / "report.html").read_text()
    stop = info["stopping"]
    assert stop["decision"] == "above" and stop["reason"] == "rule"
    [card] = re.findall(r'<div class="card decision ok" id="glance-decision" data-value="([^"]+)">(.*?)</div></div>', html)
    assert card[0] == "above 30.0%" and f"lower bound {100 * stop['cs_low']:.1f}% &gt; 30.0%" in card[1]
    assert html.index('id="glance-decision"') < html.index('id="glance-success"')  # the decision comes first
    tr = info["per_task"][0]["stopping"]["trajectory"]
    assert tr["estimate"][-1] == pytest.approx(stop["estimate"]) and len(tr["estimate"]) == len(tr["k"])
    [plot] = re.findall(r'<div class="plots" id="plot-stopping">(.*?)</div>', html, flags=re.S)
    assert 'class="estimate"' in plot and "estimate (mean of the first k)" in html


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sweep")
    make_sweep(folder)
    write_report(folder)  # report.md, report.json, plots and report.html
    return folder


def test_the_sweep_page_has_a_row_per_cell_with_the_report_numbers(sweep_dir):
    with Store(sweep_dir, create=False) as store:
        doc = build_report(store)
    page = Tables((sweep_dir / "report.html").read_text())
    rows = {(r["attrs"]["policy"], r["attrs"]["env"]): dict(zip(page.headers["cells"], r["cells"])) for r in page.tables["cells"]}
    assert len(rows) == len(doc["cells"]) == 6
    for c in doc["cells"]:
        row = rows[(c["policy"], c["env"])]
        assert value(row["episodes"]) == c["episodes"]
        if c["episodes"] and c["success_signal"]:
            assert value(row["success %"]) == c["success_pct"]
            assert value(row["mean return"]) == c["mean_return"]
        elif c["episodes"]:
            assert row["success %"][0] == "—"  # the table's caption says why, once (issue 42)
    assert "— in the success columns: no success signal." in (sweep_dir / "report.html").read_text()
    assert rows[("broken", "known")]["status"][0] == "failed"
    for r in page.tables["cells"]:
        link = re.search(r'href="([^"]+)"', (sweep_dir / "report.html").read_text().split(r["attrs"]["policy"], 1)[1])
        assert link and (sweep_dir / link.group(1)).is_file()


def test_policies_with_equal_iqm_share_their_rank_overall(sweep_dir):
    """zero and parity have the same IQM success % on the one env with a success signal: both rank 1,
    marked tied, on the page and in report.md (a 1 and a 2 said one was better). Fails without the fix."""
    with Store(sweep_dir, create=False) as store:
        doc = build_report(store)
    iqms = {a["policy"]: a["iqm_success_pct"] for a in doc["across_envs"]}
    assert iqms["zero"] == iqms["parity"]  # the fixture's tie
    page = Tables((sweep_dir / "report.html").read_text())
    ranks = {r["attrs"]["policy"]: r["cells"][0] for r in page.tables["overall"]}
    assert ranks == {"zero": ("1 (tied)", "1"), "parity": ("1 (tied)", "1")}
    md = (sweep_dir / "report.md").read_text()
    assert "1. (tied) zero" in md and "1. (tied) parity" in md and "2. " not in md.split("Best overall", 1)[1].split("\n")[0]


def test_the_best_overall_names_the_envs_it_leaves_out(sweep_dir):
    """cartpole has no success signal: the IQM ranking leaves it out (where parity is best), and both the
    page and report.md say so, pointing to the probability of improvement, which covers it."""
    html = unescape((sweep_dir / "report.html").read_text())
    overall = html.split('id="overall"', 1)[1].split("</p>", 1)[0]
    assert "Left out: cartpole (no success signal); the probability of improvement" in overall
    md = (sweep_dir / "report.md").read_text()
    line = next(x for x in md.splitlines() if x.startswith("Best overall"))
    assert line.endswith("Left out: cartpole (no success signal); the probability of improvement below covers every env.")


def test_competition_ranks():
    from fasteval.render.words import competition_ranks

    assert competition_ranks([50.0, 20.0, 50.0, math.nan, None]) == [(1, True), (3, False), (1, True), (4, True), (4, True)]
    assert competition_ranks([3, 2, 1]) == [(1, False), (2, False), (3, False)]
    assert competition_ranks([]) == []


def test_a_failed_cell_says_why_and_that_a_retry_cannot_help(sweep_dir):
    page = Tables((sweep_dir / "report.html").read_text())
    rows = page.tables["failed-cells"]
    assert {r["attrs"]["policy"] for r in rows} == {"broken"}
    for r in rows:
        assert r["attrs"]["retry-helps"] == "0"
        assert "refuses to load" in r["cells"][4][0] and r["cells"][5][0].startswith("a retry cannot help")
    assert "blank" not in (sweep_dir / "report.html").read_text()
    assert 'data-env="known"' in (sweep_dir / "report.html").read_text()


def test_sweep_plots_give_each_policy_its_colour_and_each_env_its_axes(sweep_dir):
    html = (sweep_dir / "report.html").read_text()
    blocks = re.findall(r'<div class="env-plots" data-env="([^"]+)">(.*?)</div></div>', html, flags=re.S)
    assert {env for env, _ in blocks} == {"known", "cartpole"}
    for env, body in blocks:
        fills = re.findall(r'<rect class="bar"[^>]* fill="(#[0-9a-f]+)"', body)
        assert len(set(fills)) == 2, (env, set(fills))  # zero and parity, never the broken policy (no episodes)
    titles = re.findall(r'class="ptitle"[^>]*>([^<]+)<', html)
    assert titles.count("known: success rate") == 1 and "cartpole: success rate" not in titles  # no signal: no empty panel


def test_retry_verdicts():
    assert retry_verdict("PolicyLoadError: no such checkpoint")["helps"] is False
    assert retry_verdict("EnvNotFoundError: no env 'X'")["helps"] is False
    assert retry_verdict("2 of 8 episodes failed after the engine's retries; the others are stored.")["helps"] is True
    assert retry_verdict("the worker process died (killed, out of memory, or crashed).")["helps"] is True
    assert retry_verdict("ZeroDivisionError: x")["helps"] is None
    assert cell_retry_verdict(["seeds 0..9: the worker process died", "seeds 10..19: PolicyLoadError: bad"])["helps"] is False
    assert cell_retry_verdict([]) is None


def test_the_compare_page_shows_verdicts_differences_and_the_sequence(tmp_path):
    doc = compare_document()
    path = write_compare_report(doc, tmp_path)
    html = path.read_text()
    page = Tables(html)
    rows = page.tables["compare-tasks"]
    assert [r["cells"][-1][0] for r in rows] == ["better", "no difference"]
    assert [value(r["cells"][3]) for r in rows] == [2.4e-6, 0.51]
    [success] = page.tables["compare-success"]  # the second task has no success signal
    first = dict(zip(page.headers["compare-success"], success["cells"]))
    assert value(first["B - A (pp)"]) == 25.0 and first["B - A 95% CI"][0] == "[14.0, 36.0]"
    assert value(first["McNemar p"]) == 1.2e-6 and first["McNemar p"][0] == "1.2e-06"
    ret = [dict(zip(page.headers["compare-return"], r["cells"])) for r in page.tables["compare-return"]]
    assert ret[0]["B - A 95% CI"][0] == "[0.500, 2.000]" and value(ret[0]["p (Holm)"]) == 0.002
    assert [value(r["P(B > A)"]) for r in ret] == [0.66, 0.48]
    assert "no success signal (compared by return): g/1 reach" in html
    assert "e-processes over episodes" in html and "(log scale)" in html
    assert 'id="glance-verdict" data-value="better"' in html


def test_every_difference_says_its_direction_b_minus_a(tmp_path, sweep_dir):
    """compare and sweep report the same direction, B - A (the later/candidate minus the baseline), and
    every header of a difference says so."""
    compare = Tables(write_compare_report(compare_document(), tmp_path).read_text())
    for table_id in ("compare-success", "compare-return"):
        diffs = [h for h in compare.headers[table_id] if "diff" in h or " - " in h]
        assert diffs and all("B - A" in h for h in diffs), compare.headers[table_id]
    with Store(sweep_dir, create=False) as store:
        doc = build_report(store)
    html = (sweep_dir / "report.html").read_text()
    sweep = Tables(html)
    assert [h for h in sweep.headers["paired"] if " - " in h] == ["return B - A", "B - A 95% CI"]
    assert "A - B" not in html and "A - B" not in (sweep_dir / "report.md").read_text()
    rows = {(r["attrs"]["a"], r["attrs"]["b"], r["attrs"]["env"]): dict(zip(sweep.headers["paired"], r["cells"]))
            for r in sweep.tables["paired"]}
    for p in doc["paired"]:
        assert p["return_diff"]["direction"] == "B - A"
        # parity (B, listed later) earns +0.5 per matching step that zero (A) does not: B - A > 0
        assert p["return_diff"]["mean_diff"] > 0 and value(rows[(p["a"], p["b"], p["env"])]["return B - A"]) == p["return_diff"]["mean_diff"]
    assert "| return B - A [95% CI] |" in (sweep_dir / "report.md").read_text()


def test_a_compare_page_is_titled_with_the_policies_names(tmp_path):
    doc = compare_document()
    html = write_compare_report(doc, tmp_path).read_text()
    assert "<title>fasteval compare: ParityPolicy (B) vs zero (A)</title>" in html
    assert 'B (<span class="name">ParityPolicy</span>) against A (<span class="name">zero</span>)' in html and "B vs A" not in html
    same = dict(doc, a=dict(doc["a"], policy="ckpt.pt", source="runs/old"), b=dict(doc["b"], policy="ckpt.pt", source="runs/new"))
    assert "<title>fasteval compare: ckpt.pt (new) (B) vs ckpt.pt (old) (A)</title>" in write_compare_report(same, tmp_path / "s").read_text()
    named = dict(doc, a=dict(doc["a"], label="baseline"), b=dict(doc["b"], label="candidate"))
    assert "<title>fasteval compare: candidate (B) vs baseline (A)</title>" in write_compare_report(named, tmp_path / "n").read_text()


def test_svg_ticks_and_ranges():
    assert svg.nice_ticks(0, 100) == [0, 20, 40, 60, 80, 100]
    assert svg.nice_ticks(0.1, 0.35)[0] >= 0.1 and svg.fmt_tick(0.30000000000000004) == "0.3"
    assert svg.padded_range([5, 5]) == (4.0, 6.0)
    constant = svg.histogram([7.0] * 10, "return", "t")
    assert "all = 7" in constant and constant.count('class="bar"') == 1
    assert "2 NaN" in svg.histogram([1.0, float("nan"), 2.0, float("nan")], "return", "t")
    assert svg.thin(10_000).size <= svg.MAX_LINE_POINTS


def test_the_report_benchmark_runs_at_tiny_size():
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, str(root / "benchmarks" / "bench_report.py"), "--tiny"], capture_output=True,
                          text=True, timeout=600, cwd=root)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert re.search(r"\| zero +\| +report only \|", proc.stdout), proc.stdout
    assert "PASS: page of a 1,000-episode run < 5 MB" in proc.stdout


def test_names_from_the_data_are_escaped(tmp_path):
    evil = '<img src=x onerror="alert(1)">'
    table = EpisodeTable.from_records([{"episode_ix": 0, "seed": 0, "sum_reward": 1.0, "max_reward": 1.0, "length": 3,
                                        "success": True, "nan_rewards": 0, "task_group": evil, "task_id": 0, "task": evil}])
    errors = [{"episode_ix": 1, "seed": 1, "stage": "step", "final": True, "error": evil, "traceback": evil}]
    doc = EvalResult(table, 1.0, meta={"env": evil, "policy": evil}, errors=errors, n_failed=1).to_eval_info()
    html = write_run_report(tmp_path, doc, manifest={"status": evil}).read_text()
    assert "<img" not in html and "&lt;img src=x" in html


# -- the Markdown sweep report's plots and summary (issue 24) --------------------------------------------

def test_markdown_summary_and_errors_say_whether_a_retry_helps(sweep_dir):
    md = (sweep_dir / "report.md").read_text()
    assert ("**6 cells (policy x env): 4 complete, 0 partial, 2 with failed jobs; 64 of 96 planned episodes stored. "
            "Jobs: 8 done, 4 failed, 0 not finished. A retry cannot help the 2 failed cells") in md
    assert "| broken | known | no episodes (failed) | no episodes (failed) | 0 of 16 |" in md
    assert "NaN [NaN, NaN]" not in md
    assert "- **broken x known** (a retry cannot help: PolicyLoadError is bad input" in md


def test_sweep_cli_advice_does_not_suggest_retrying_bad_input():
    from fasteval.doors.sweep.cli import failure_advice

    bad = ("broken x known seeds 0..7", "PolicyLoadError: no checkpoint at x")
    flaky = ("zero x known seeds 0..7", "2 of 8 episodes failed after the engine's retries; the others are stored.")
    assert "a retry cannot help" in failure_advice([bad]) and "retry them" not in failure_advice([bad])
    assert "1 with bad input" in failure_advice([bad, flaky]) and "retry the other 1" in failure_advice([bad, flaky])
    assert "re-run the same command to retry it." in failure_advice([flaky])


def test_markdown_plots_colour_each_policy_and_leave_failed_cells_out(sweep_dir):
    pytest.importorskip("matplotlib")
    from matplotlib.colors import to_hex

    from fasteval.render.sweep_plots import returns_figure, success_figure

    with Store(sweep_dir, create=False) as store:
        doc = build_report(store)
    (ax,) = success_figure(doc).axes
    assert [t.get_text() for t in ax.get_xticklabels()] == ["known"]  # cartpole has no signal, broken no episodes
    bars = {c.get_label(): to_hex(c.patches[0].get_facecolor()) for c in ax.containers if hasattr(c, "patches")}
    assert set(bars) == {t.get_text() for t in ax.get_legend().get_texts()} == {"zero", "parity"}
    assert len(set(bars.values())) == 2  # one colour per policy
    fig = returns_figure(doc)
    axes = np.asarray(fig.axes).reshape(2, 2)  # rows: zero, parity (broken has no episodes anywhere); columns: envs
    fills = [{to_hex(p.get_facecolor()) for p in ax.patches} for ax in axes[:, 0]]
    assert all(len(f) == 1 for f in fills) and fills[0] != fills[1]
    assert not [t for ax in fig.axes for t in ax.texts if t.get_gid() == "no-episodes"]
    assert all("0 eps" not in ax.get_title() for ax in fig.axes)


def test_a_failed_cell_beside_working_ones_is_a_note_not_an_empty_chart():
    pytest.importorskip("matplotlib")
    from fasteval.render.sweep_plots import returns_figure

    cells = [{"policy": p, "env": e, "returns": r, "episodes": len(r), "errors": 0 if r else 2, "success_signal": True,
              "success_pct": 50.0, "success_ci95": [10.0, 90.0]}
             for p, e, r in [("a", "x", [1.0, 2.0]), ("b", "x", []), ("a", "y", [3.0]), ("b", "y", [4.0, 5.0])]]
    fig = returns_figure({"cells": cells})
    axes = np.asarray(fig.axes).reshape(2, 2)
    assert not axes[1, 0].axison and not axes[1, 0].patches
    [note] = [t for t in axes[1, 0].texts if t.get_gid() == "no-episodes"]
    assert "no episodes (its jobs failed)" in note.get_text()


def test_a_resumed_run_lists_its_segments(run_dir, tmp_path):
    manifest = load(run_dir / "manifest.json")
    first = manifest["segments"][0]
    manifest["segments"] = [dict(first, episodes=10, status="interrupted"),
                            dict(first, episodes=14, command="fasteval --resume out", started_at="2026-01-02T03:04:05+0000")]
    html = write_run_report(tmp_path, load(run_dir / "eval_info.json"), manifest=manifest).read_text()
    rows = Tables(html).tables["segments"]
    assert [value(r["cells"][1]) for r in rows] == [10, 14]
    assert rows[1]["cells"][5][0] == "fasteval --resume out" and rows[0]["cells"][3][0] == "interrupted"


def test_groups_of_several_tasks_get_their_own_table(tmp_path):
    import dataclasses

    big = _big_result(400)
    tasks = [("g1", 0, "a"), ("g1", 1, "b"), ("g2", 0, "c"), ("g2", 1, "d")]
    table = EpisodeTable(big.per_episode.columns, big.per_episode.task_codes, tasks)
    # the planted failures of task k go to that task's group (a record is built once: build another)
    errors = [{**e, "task_group": tasks[e["task_id"]][0], "task_id": tasks[e["task_id"]][1]} for e in big.errors]
    big = dataclasses.replace(big, per_episode=table, errors=errors)
    doc = big.eval_info_document()
    page = Tables(write_run_report(tmp_path, doc, manifest={"status": "complete"}).read_text())
    rows = {r["attrs"]["group"]: dict(zip(page.headers["per-group"], r["cells"])) for r in page.tables["per-group"]}
    assert set(rows) == {"g1", "g2"}
    for name, row in rows.items():
        agg = doc["per_group"][name]
        assert value(row["n"]) == agg["n_episodes"] == 200 and value(row["tasks"]) == 2
        assert value(row["success %"]) == agg["pc_success"] and value(row["mean return"]) == agg["avg_sum_reward"]
        assert value(row["failed episodes"]) == 1500  # 3,000 planted failures, spread evenly over the 4 tasks


def test_report_md_and_compare_md_escape_names_as_the_html_does(sweep_dir):
    from fasteval.render.compare_text import render_markdown as compare_markdown
    from fasteval.render.sweep_markdown import render_markdown

    evil = "<script>alert(1)</script>|x"
    with Store(sweep_dir, create=False) as store:
        doc = build_report(store)
    for c in doc["cells"]:
        c["policy"] = evil if c["policy"] == "parity" else c["policy"]
    for p in doc["paired"]:
        p["b"] = evil if p["b"] == "parity" else p["b"]
    for r in doc["best_per_env"]:
        r["best"] = [evil if b == "parity" else b for b in r["best"]]
    md = render_markdown(doc)
    assert "<script>" not in md and "&lt;script&gt;alert(1)&lt;/script&gt;\\|x" in md
    rows = [line for line in md.splitlines() if "&lt;script" in line and line.startswith("|")]
    assert rows and all(line.count(" | ") == line.replace("\\|", "").count(" | ") for line in rows)
    cdoc = compare_document()
    cdoc["b"] = dict(cdoc["b"], label=evil, policy=evil)
    cmd = compare_markdown(cdoc)
    assert "<script>" not in cmd and "&lt;script&gt;" in cmd


def test_a_2d_histogram_has_its_colour_scale():
    rng = np.random.default_rng(1)
    plot = svg.scatter(rng.integers(1, 300, 30_000), rng.normal(size=30_000), "length", "return", "t")
    scale = re.findall(r'<rect class="scale"[^>]* fill="(#[0-9a-f]+)"/><text class="ticklabel"[^>]*>([^<]+)</text>', plot)
    assert len(scale) >= 3 and ">episodes</text>" in plot
    fills = set(re.findall(r'<rect class="cell"[^>]* fill="(#[0-9a-f]+)"', plot))
    assert fills <= {f for f, _ in scale}  # every cell's colour is on the scale
    counts = [int(c) for c in re.findall(r"<title>(\d+) episodes</title>", plot)]
    labels = [label for _, label in scale]
    assert labels[-1].startswith("1") and labels[0].endswith(str(max(counts)))  # darkest on top: up to the fullest cell
