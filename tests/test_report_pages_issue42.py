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
