"""The README's and docs' option lists against ``--help`` (issue 32: help and docs that drifted).

* every option the README's synopsis names is an option of ``fasteval``, and a choice option there
  lists exactly its choices (``--amp none|bf16|fp16`` without ``auto`` fails);
* every option a docs table names in its first column is an option of ``fasteval`` or of one of its
  commands (LeRobot's option table is LeRobot's names: tests/test_cli_compat.py checks those), and a
  table headed by an option lists only that option's choices;
* every option of ``fasteval`` and its commands (``--help``, ``--version`` aside), and every LeRobot
  name the ``--help`` lists, is named somewhere in the README or docs/.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import click
import pytest

from fasteval.doors.cli import SUBCOMMANDS, lerobot_name_rows, main

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9_-]*(?:\.[a-z_<>]+)*)")
STANDARD = {"--help", "--version"}


def commands() -> dict[str, click.Command]:
    found = {"fasteval": main}
    for name, ref in SUBCOMMANDS.items():
        module, _, attr = ref.partition(":")
        found[f"fasteval {name}"] = getattr(importlib.import_module(module), attr)
    return found


def options_of(command: click.Command) -> dict[str, click.Option]:
    """Every name of every option: ``--report`` and ``--no-report`` -> the one option."""
    return {name: p for p in command.params if isinstance(p, click.Option) for name in (*p.opts, *p.secondary_opts)}


def all_options() -> dict[str, click.Option]:
    out: dict[str, click.Option] = {}
    for command in commands().values():
        out.update(options_of(command))
    return out


def synopsis() -> str:
    """The code block under the README's "## The command line"."""
    text = (REPO / "README.md").read_text()
    block = re.search(r"## The command line\s+```\n(.*?)```", text, re.S)
    assert block, "README.md: no synopsis block under '## The command line'"
    return block.group(1)


def test_the_readme_synopsis_names_only_options_of_fasteval_with_all_their_choices():
    own = options_of(main)
    text = synopsis()
    wrong = []
    for bracket in re.findall(r"\[([^\]]+)\]", text):
        head, _, value = bracket.partition(" ")
        for name in head.split("/"):
            if name.startswith("-") and name not in own:
                wrong.append(f"{name} is not an option of fasteval")
        param = own.get(head)
        if param is not None and isinstance(param.type, click.Choice) and "|" in value:
            listed, choices = set(value.split("|")), {str(c) for c in param.type.choices}
            if listed != choices:
                wrong.append(f"{head} lists {sorted(listed)}, --help has {sorted(choices)}")
    first = re.findall(r"(?<![\w\[])(-{1,2}[a-z][\w-]*)", text.split("[", 1)[0])
    wrong += [f"{name} is not an option of fasteval" for name in first if name not in own]
    assert not wrong, "README.md synopsis vs fasteval --help:\n" + "\n".join(wrong)


def tables(path: Path) -> list[tuple[list[str], list[list[str]]]]:
    """The Markdown tables of ``path``: ``(header cells, body rows)``."""
    found, lines = [], path.read_text().splitlines()
    i = 0
    while i < len(lines) - 1:
        if lines[i].startswith("|") and re.match(r"^\|[-| :]+\|$", lines[i + 1].strip()):
            header = [c.strip() for c in lines[i].strip().strip("|").split("|")]
            rows, i = [], i + 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append([c.strip() for c in lines[i].strip().strip("|").split("|")])
                i += 1
            found.append((header, rows))
        else:
            i += 1
    return found


def test_every_option_a_docs_table_names_is_an_option_of_a_fasteval_command():
    known = all_options()
    wrong = []
    for path in DOCS:
        for header, rows in tables(path):
            if "lerobot" in header[0].lower():
                continue  # LeRobot's own option names, and what fasteval does with each
            head = re.fullmatch(r"`(--[a-z][\w-]*)`", header[0])
            param = known.get(head.group(1)) if head else None
            for row in rows:
                for name in OPTION.findall(" ".join(re.findall(r"`([^`]*)`", row[0]))):
                    if name not in known and not name.startswith(("--env.", "--policy.", "--eval.")):
                        wrong.append(f"{path.name}: {name} (a table row) is no option of any fasteval command")
                if param is not None and isinstance(param.type, click.Choice):
                    value = re.match(r"`([^`]+)`", row[0])
                    if value and value.group(1) not in {str(c) for c in param.type.choices}:
                        wrong.append(f"{path.name}: {value.group(1)!r} is not a choice of {head.group(1)}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("name", sorted(commands()))
def test_every_option_of_the_help_is_documented_somewhere(name):
    text = "\n".join(path.read_text() for path in DOCS)
    mentioned = set(OPTION.findall(text))
    undocumented = []
    for param in {id(p): p for p in options_of(commands()[name]).values()}.values():
        names = [n for n in (*param.opts, *param.secondary_opts) if n.startswith("--")]
        if set(names) & STANDARD or set(names) & mentioned:
            continue
        undocumented.append("/".join(names))
    assert not undocumented, f"`{name} --help` options that no README or docs page names: {undocumented}"


def test_every_lerobot_name_of_the_help_is_documented():
    text = "\n".join(path.read_text() for path in DOCS)
    mentioned = set(OPTION.findall(text))
    names = {m for term, _ in lerobot_name_rows() for m in OPTION.findall(term)}
    assert names and not names - mentioned, sorted(names - mentioned)


def test_the_checks_can_fail():
    """The parsers find what they look for: a synopsis block, the docs' tables, LeRobot rows."""
    assert "--policy" in synopsis() and "--amp" in synopsis()
    robot = dict((h[0], rows) for h, rows in tables(REPO / "docs" / "robot.md"))
    assert "`--obs-dtype`" in robot and any(r[0].startswith("`auto`") for r in robot["`--obs-dtype`"])
    assert OPTION.findall("`--policy.path=DIR` and --no-report, not a-b--c") == ["--policy.path", "--no-report"]
