"""Rendering: every view of a finished run, sweep, comparison or benchmark, in one package.

Each renderer is a function of a plain document (the ``eval_info`` document, the sweep report
document, ``compare.json``'s document, ``fasteval bench``'s JSON document); none computes a
statistic or reads a store, so every door shows the same numbers the same way.

* :mod:`fasteval.render.html` — the self-contained HTML pages (``report.html``, ``compare.html``);
* :mod:`fasteval.render.sweep_markdown` — a sweep's ``report.md``;
* :mod:`fasteval.render.sweep_plots` — a sweep's ``success.png`` and ``returns.png`` (matplotlib);
* :mod:`fasteval.render.compare_text` — ``fasteval compare``'s terminal table and ``compare.md``;
* :mod:`fasteval.render.bench_text` — ``fasteval bench``'s terminal report and machine header;
* :mod:`fasteval.render.words` — the words they share (:data:`NO_SIGNAL`, :func:`plural`,
  :func:`~fasteval.render.words.progress_outcome`, :func:`~fasteval.render.words.md_text`).

The layer sits above ``run/`` (it may read a run folder's provenance) and below the doors.
"""

from fasteval.render.words import NO_SIGNAL, plural

__all__ = ["NO_SIGNAL", "plural"]
