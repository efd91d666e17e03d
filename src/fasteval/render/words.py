"""The words every view of a run uses, defined once."""

from __future__ import annotations

import math
from typing import Any

NO_SIGNAL = "no success signal"
"""What every view says instead of a success rate when no env of a run or cell ever reported
``info["is_success"]`` (its 0% would be an artefact)."""


def progress_outcome(n: int, successes: int, sum_return: float, signal: bool) -> str:
    """What a progress line knows of ``n`` finished episodes: their success rate when the env reports a
    success signal (``success 62.5%``), else their mean return (``mean return -280``, never a
    ``success 0.0%`` that only says the env is silent), as the final summary does."""
    if not n:
        return "no episode yet"
    if signal:
        return f"success {100.0 * successes / n:.1f}%"
    return f"mean return {sum_return / n:.4g} ({NO_SIGNAL})"


def rate_text(value: Any, grouping: bool = False) -> str:
    """A rate (episodes/s, env steps/s) with the precision it needs: three significant digits below 100
    (``0.283``, ``5.2``, ``32.3``), whole numbers from 100 (``16167``; ``16,167`` with ``grouping``). A slow run's
    rate never reads ``0`` (a LIBERO run's 0.28 steps/s did, issue 42); ``n/a`` for none or NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if abs(value) >= 100 or value == 0:
        return f"{value:,.0f}" if grouping else f"{value:.0f}"
    return f"{value:.3g}"


EVAL_S_MEANING = ("eval_s: seconds of the episodes (stepping, the policy, resets, videos' encoding); the envs' "
                  "building, env workers' start-up, the dry run and graph capture are not in it (setup_s, dry_run_s, "
                  "capture_s in the meta). lerobot-eval's eval_s starts after its envs are made: with async LIBERO "
                  "or Meta-World envs, whose workers start lazily, it includes their start-up.")
"""What ``eval_s`` covers, beside LeRobot's meaning (said once, for the docs' table and the pages' notes)."""


def competition_ranks(values: list[Any]) -> list[tuple[int, bool]]:
    """Each value's rank, highest first, as ``(rank, tied)``: 1 + the count of values strictly above
    it, so equal values share a rank (``[50, 50, 20]`` -> ``1, 1, 3``) and ``tied`` says another
    value has the same rank. ``None`` and NaN rank last, tied among themselves."""
    keys = [-math.inf if v is None or (isinstance(v, float) and math.isnan(v)) else float(v) for v in values]
    ranks = [1 + sum(other > key for other in keys) for key in keys]
    return [(r, ranks.count(r) > 1) for r in ranks]


def plural(n: int, word: str) -> str:
    """``plural(1, "episode")`` -> ``"1 episode"``; ``plural(2, "episode")`` -> ``"2 episodes"``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def md_text(value: object) -> str:
    """``value`` as Markdown text that renders as itself (``report.md``, ``compare.md``): HTML's
    specials as entities, as the HTML pages write them (a policy called ``<script>`` stays text),
    ``|`` escaped (it would end a table cell), line breaks as spaces."""
    from html import escape

    return escape(str(value), quote=False).replace("\r", " ").replace("\n", " ").replace("|", "\\|")
