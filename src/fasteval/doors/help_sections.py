"""``--help`` with the options under headings, by purpose (click has no option groups of its own).

A command lists its :class:`Section`\\ s in ``help_sections``: a title, the click parameter names
shown under it (in that order), and optionally a line of introduction and rows that are not click
options (the LeRobot spellings the command line rewrites, say). Options no section names come
last, under "Other options" (``--help``, ``--version``). Formatting only: parsing is click's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import click

OTHER = "Other options"


@dataclass(frozen=True)
class Section:
    """One heading of ``--help``: ``options`` are click parameter names (``param.name``), shown in order."""

    title: str
    options: tuple[str, ...]
    intro: str = ""
    """A paragraph under the title, before the rows."""
    extra_rows: Callable[[], Sequence[tuple[str, str]]] | None = None
    """Rows after the options: ``(term, help)`` of names that are not click options (called at --help time)."""


class SectionedHelp:
    """Mixin for a :class:`click.Command` (before it in the bases): its ``--help`` shows ``help_sections``
    instead of one "Options" list. A group calls :meth:`format_option_sections`, then its commands."""

    help_sections: Sequence[Section] = ()

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self.format_option_sections(ctx, formatter)

    def format_option_sections(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        records = {p.name: p.get_help_record(ctx) for p in self.get_params(ctx)  # type: ignore[attr-defined]
                   if isinstance(p, click.Option)}
        for section in self.help_sections:
            rows = [records[name] for name in section.options if records.get(name) is not None]
            rows += list(section.extra_rows()) if section.extra_rows is not None else []
            if not rows:
                continue
            with formatter.section(section.title):
                if section.intro:
                    formatter.write_text(section.intro)
                formatter.write_dl(rows)
        placed = {name for section in self.help_sections for name in section.options}
        rest = [record for name, record in records.items() if name not in placed and record is not None]
        if rest:
            with formatter.section(OTHER):
                formatter.write_dl(rest)

