"""Plot text on a phone (issue 42: 6-7 px at 400 px wide): in a real Chromium, the wide plots' text is at least 8 px
on screen at 400 px (their names 7 px), and the desktop's sizes are unchanged at 1400 px."""

from __future__ import annotations

from tests.browser import browser, needs_browser  # noqa: F401 (a fixture)
from tests.report_fixtures import PARITY, cli

pytestmark = needs_browser

SIZES_JS = """(() => { const out = {}; for (const t of document.querySelectorAll('svg.plot text')) {
  const s = t.ownerSVGElement; const k = s.getBoundingClientRect().width / s.viewBox.baseVal.width;
  const c = t.getAttribute('class') || 'none'; const px = parseFloat(getComputedStyle(t).fontSize) * k;
  out[c] = Math.min(out[c] ?? 99, Math.round(px * 10) / 10); } return out; })()"""


def test_plot_text_stays_readable_at_400_px(browser, tmp_path):
    from fasteval.testing import KNOWN_ANSWER_ID

    folder = tmp_path / "r"
    assert cli("--env", KNOWN_ANSWER_ID, "--policy", PARITY, "-n", "24", "-b", "4", "-o", str(folder)).exit_code == 0
    phone = browser.open(folder / "report.html", width=400).evaluate(SIZES_JS)
    assert {"ticklabel", "xlabel", "ylabel", "ptitle", "ticklabel name"} <= set(phone)
    assert all(px >= 8 for cls, px in phone.items() if cls != "ticklabel name"), phone
    assert phone["ticklabel name"] >= 7, phone
    desktop = browser.open(folder / "report.html", width=1400).evaluate(SIZES_JS)
    assert desktop["ticklabel"] == 10 and desktop["xlabel"] == 11.5 and desktop["ptitle"] == 12, desktop
