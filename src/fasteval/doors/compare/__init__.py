"""``fasteval compare RUN_A RUN_B``: two policies on the same episodes, tested in pairs.

Inputs: two run folders (``eval_info.json``, or ``episodes.jsonl`` + ``manifest.json`` of a run
that did not finish), or two sweep cells written ``SWEEP_DIR::POLICY`` (``::ENV`` when the sweep
has several envs). Both must share the env (id and kwargs) and the seeds: episode i of a task is
paired with episode i of the same task in the other run (same reset seed). Anything else is
refused before any test runs.

Output: a table in the terminal, ``compare.json`` (schema ``fasteval.compare/1``, see
docs/how-many-episodes.md), ``compare.md`` (a Markdown section) and ``compare.html`` in ``-o/--output-dir``
(default: the current folder); the last line names that folder.

Exit codes: 0 done (and the gate passed); 2 bad input (unreadable or unpaired runs, bad options);
3 ``--fail-if-worse`` and B is significantly worse than A on some task (or, with ``--margin``,
not shown non-inferior on some task).
"""

from fasteval.doors.compare.command import compare
from fasteval.doors.compare.document import build_document, write_outputs
from fasteval.doors.compare.inputs import Side, load_side, pair_episodes
from fasteval.render.compare_text import render_markdown, render_table

__all__ = ["Side", "build_document", "compare", "load_side", "pair_episodes", "render_markdown", "render_table", "write_outputs"]
