"""What a reviewer of the pages found (issue 42): numbers the page shows are in its JSON, the sweep page names its
sweep, seeds, spec, version and commit, no absolute working directory, "no success signal" said once per place."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

import pytest

from tests.report_fixtures import NO_SIGNAL_ENV, SWEEP, cli, load, make_run, make_sweep


def visible_text(html: str) -> str:
    html = re.sub(r"<(script|style)[^>]*>.*?</\1>", " ", html, flags=re.S)
    return unescape(re.sub(r"<[^>]+>", " ", html))


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    from fasteval.doors.sweep.report import write_report

    folder = tmp_path_factory.mktemp("sweep")
    make_sweep(folder)
    write_report(folder)
    return folder


def test_the_sweep_pages_iqm_column_is_in_report_json(sweep_dir):
    doc = load(sweep_dir / "report.json")
    html = (sweep_dir / "report.html").read_text()
    shown = 0
    for cell in doc["cells"]:
        if not cell["episodes"]:
            continue
        row = re.search(rf'<tr data-policy="{cell["policy"]}" data-env="{cell["env"]}">(.*?)</tr>', html, flags=re.S)
        assert row, cell["policy"]
        iqm_cell = re.findall(r'data-value="([^"]*)" data-label="IQM return"', row.group(1))
        assert iqm_cell and float(iqm_cell[0]) == pytest.approx(cell["return_iqm"])
        shown += 1
    assert shown >= 4


def test_the_sweep_page_names_its_sweep_seeds_spec_version_and_commit(sweep_dir):
    from fasteval.version import __version__

    doc = load(sweep_dir / "report.json")
    assert doc["sweep"]["name"] == SWEEP["name"] and doc["sweep"]["seeds"] == SWEEP["seeds"]
    assert doc["sweep"]["spec"]["policies"][0]["name"] == "zero" and doc["sweep"]["fasteval_version"] == __version__
    html = (sweep_dir / "report.html").read_text()
    text = visible_text(html)
    assert f"sweep {SWEEP['name']}" in text and "0, 100" in text and __version__ in text
    assert 'id="sweep-spec"' in html and '"report-test"' in unescape(html)
    if doc["sweep"]["git"]:
        assert doc["sweep"]["git"]["commit"] in text
    assert str(sweep_dir) not in text  # the store by its name, not the machine's folders


def test_provenance_shows_the_working_directory_relative_to_the_page(tmp_path, monkeypatch):
    from fasteval.render.html import write_run_report
    from fasteval.run.provenance import collect_provenance

    folder = make_run(tmp_path / "runs" / "r", "--no-report")
    monkeypatch.chdir(tmp_path)
    prov = collect_provenance(["fasteval", "-n", "3"])
    write_run_report(folder, provenance=prov)
    html = (folder / "report.html").read_text()
    rows = dict(re.findall(r"<dt>([^<]*)</dt><dd>([^<]*)</dd>", html))
    assert rows["working directory (from this page)"] == "../.."
    assert str(tmp_path) not in rows.values()  # the absolute working directory is shown nowhere as a value


def test_no_success_signal_is_said_once_per_place_on_a_run_page(tmp_path):
    folder = tmp_path / "out"
    result = cli("--env", NO_SIGNAL_ENV, "--policy", "zero", "-n", "6", "-b", "3", "--videos", "3", "-o", str(folder))
    assert result.exit_code == 0, result.output
    text = visible_text((folder / "report.html").read_text())
    # the glance card, the note under the per-task table, the videos' heading, the plot left out: not per cell
    # and not per video
    assert text.count("no success signal") <= 4
    html = (folder / "report.html").read_text()
    assert html.count('data-outcome="no success signal"') == 4  # the gallery and its 3 figures keep their outcome


def test_forest_plot_tick_labels_keep_clear_of_the_axis_title():
    """The ranking's "policy" axis title (rotated, at x = 13) overlapped long tick labels: each label now ends
    left of the plot and starts right of the title, estimated at 7 units a character (a long one is cut)."""
    from fasteval.render.html import svg

    rows = [("outputs/train/act_pusht/checkpoints/020000/pretrained_model", 50.0, 40.0, 60.0),
            ("a_rather_long_policy_name_that_goes_on_and_on_and_on_and_on", 30.0, 20.0, 40.0), ("zero", 10.0, 5.0, 15.0)]
    plot = svg.intervals(rows, "success %", "each policy", ylabel="policy")
    labels = re.findall(r'<text class="ticklabel name" x="([0-9.]+)" y="[0-9.]+" text-anchor="end">([^<]*)</text>', plot)
    assert len(labels) == 3
    title_x = float(re.search(r'<text class="ylabel" x="([0-9.]+)"', plot).group(1))
    for x, text in labels:
        assert float(x) - 7 * len(unescape(text)) >= title_x + 6, text  # the title's glyphs reach about x = 13 + 4
    assert "zero" in [t for _, t in labels] and any("…" in unescape(t) for _, t in labels)


def test_titles_name_a_checkpoint_folder_not_its_relative_path(tmp_path, monkeypatch):
    from fasteval.render.html.compare_page import label_title
    from fasteval.render.html.run_input import policy_title

    assert policy_title("src/fasteval/assets/cartpole_mlp") == "cartpole_mlp"
    assert policy_title("outputs/train/act/checkpoints/005000/pretrained_model") == "5000"
    assert policy_title("tests.helpers:parity") == "parity" and policy_title("zero") == "zero"
    assert label_title("runs/baseline") == "baseline" and label_title("sweeps/s::parity::known") == "parity::known"
    monkeypatch.chdir(tmp_path)
    ck = Path("ckpts") / "cartpole_mlp"
    import shutil

    shutil.copytree(Path(__file__).resolve().parents[1] / "src" / "fasteval" / "assets" / "cartpole_mlp", ck)
    result = cli("--env", "CartPole-v1", "--policy", str(ck), "-n", "2", "-o", "out")
    assert result.exit_code == 0, result.output
    html = (tmp_path / "out" / "report.html").read_text()
    assert re.search(r"<title>fasteval: cartpole_mlp on CartPole-v1</title>", html)


def test_the_compare_card_keeps_the_names_case(tmp_path):
    from fasteval.render.html import write_compare_report
    from tests.report_fixtures import compare_document

    doc = compare_document()
    doc["a"]["label"], doc["b"]["label"] = "runs/Baseline", "runs/Candidate"
    html = write_compare_report(doc, tmp_path).read_text()
    assert 'B (<span class="name">Candidate</span>) against A (<span class="name">Baseline</span>)' in html
    assert ".card .label .name{text-transform:none" in html


def test_the_run_pages_return_intervals_are_read_from_eval_info(tmp_path, monkeypatch):
    """The page's return intervals (tasks, groups, the run) were computed on the page and in no JSON file; eval_info
    records them, and the page reads them (it computes one only for a document written before)."""
    from fasteval.render.html import page, run_input, write_run_report
    from fasteval.testing import KNOWN_ANSWER_ID

    folder = tmp_path / "r"
    result = cli("--env", KNOWN_ANSWER_ID, "--policy", "zero", "-n", "9", "-b", "3", "-o", str(folder), "--no-report")
    assert result.exit_code == 0, result.output
    info = load(folder / "eval_info.json")
    task_ci = info["per_task"][0]["aggregated"]["avg_sum_reward_ci95"]
    assert info["per_task"][0]["aggregated"]["avg_sum_reward_ci95_method"] == "bootstrap"
    assert info["overall"]["avg_sum_reward_ci95"] == task_ci  # one task: the same episodes
    assert all(g["avg_sum_reward_ci95"] == task_ci for g in info["per_group"].values())

    def computed(values):
        raise AssertionError("the page computed an interval eval_info.json records")

    monkeypatch.setattr(run_input, "mean_interval", computed)
    html = write_run_report(folder).read_text()
    assert page.fmt_interval(task_ci, 3) in unescape(html)


def test_each_sweep_cell_page_has_its_document_beside_it(sweep_dir):
    """A cell page's numbers (its speed: ep/s from the cell's engine time) are in the eval_info.json beside it."""
    from fasteval.render.words import rate_text

    pages = sorted((sweep_dir / "cells").glob("*/report.html"))
    assert pages
    for path in pages:
        info = load(path.parent / "eval_info.json")
        html = path.read_text()
        assert 'href="eval_info.json"' in html
        if info["overall"]["n_episodes"]:
            assert f"{rate_text(info['overall']['episodes_per_s'], grouping=True)} ep/s" in html


def test_no_page_shows_an_absolute_output_path(tmp_path, monkeypatch):
    """``-o /abs/path`` was in the page's resolved config (and its command line): every absolute path is written
    from the page's folder, as the working directory is."""
    from fasteval.render.html import write_run_report
    from fasteval.render.html.run_facts import relative_paths
    from fasteval.run.provenance import collect_provenance

    folder = make_run(tmp_path / "runs" / "r", "--no-report")
    assert load(folder / "config.json")["output_dir"] == str(folder)  # the record keeps it; the page must not
    monkeypatch.chdir(tmp_path)
    write_run_report(folder, provenance=collect_provenance(["fasteval", "-n", "3", "-o", str(folder)]))
    html = unescape((folder / "report.html").read_text())
    assert str(tmp_path) not in html
    config = json.loads(re.search(r'<pre id="config">(.*?)</pre>', html, flags=re.S).group(1))
    assert config["output_dir"] == "."
    assert relative_paths({"a": ["/x/y/ck", "ws://127.0.0.1:1/p", "rel"]}, "/x/y/run") == {"a": ["../ck", "ws://127.0.0.1:1/p", "rel"]}
    assert relative_paths("fasteval --policy=/x/ck -o /x/y/run", "/x/y/run") == "fasteval --policy=../../ck -o ."


def test_every_interval_of_the_ranking_page_and_its_policy_pages_is_in_eval_info_json(tmp_path):
    """A many-policy run: the ranking page's intervals are its ``ranking`` rows', and each policy's own page shows
    the return intervals its ``policies[NAME]`` entry records (``avg_sum_reward_ci95``: tasks, groups, the run),
    none computed by the renderer."""
    from fasteval.testing.checkpoints import CheckpointFamily

    family = CheckpointFamily((0.3, 0.8), share=0.5)
    folder = tmp_path / "out"
    result = cli("--env", family.env_ref, "--env-kwarg", f"p={json.dumps(list(family.rates))}", "--env-kwarg",
                 f"share={family.share}", *[a for p in family.policies() for a in ("--policy", p)], "-n", "20",
                 "-b", "5", "-o", str(folder))
    assert result.exit_code == 0, result.output
    doc = load(folder / "eval_info.json")

    def shown_intervals(html: str) -> list[tuple[float, float]]:
        return [(float(lo), float(hi)) for lo, hi in re.findall(r'data-low="([^"]+)" data-high="([^"]+)"', html)]

    ranking = shown_intervals((folder / "report.html").read_text())
    recorded = [(100 * r["ci_low"], 100 * r["ci_high"]) for r in doc["ranking"]]
    recorded += [(100 * r["vs_best"]["ci_low"], 100 * r["vs_best"]["ci_high"]) for r in doc["ranking"] if r["vs_best"]]
    assert ranking and sorted(ranking) == pytest.approx(sorted(recorded))
    for name, entry in doc["policies"].items():
        html = (folder / "policies" / name / "report.html").read_text()
        aggregates = [entry["overall"], *entry["per_group"].values(), *(t["aggregated"] for t in entry["per_task"])]
        success = {tuple(a["pc_success_ci95"]) for a in aggregates}  # in percent already
        returns = [i for i in shown_intervals(html) if not any(i == pytest.approx(s) for s in success)]
        stored = {tuple(a["avg_sum_reward_ci95"]) for a in aggregates}
        assert returns, name
        for interval in returns:
            assert any(interval == pytest.approx(s) for s in stored), (name, interval, stored)
