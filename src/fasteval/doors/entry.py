"""The ``fasteval`` console script: :func:`fasteval.doors.cli.main`, with a Ctrl-C during its imports (about a
second: click, gymnasium) ending in one line and exit 130, as every other interrupt does (README, exit codes),
instead of a ``KeyboardInterrupt`` traceback. Imports nothing of fasteval before it is inside the guard."""

from __future__ import annotations

import sys

EXIT_SIGINT = 130
INTERRUPTED_LINE = "Error: interrupted by SIGINT (Ctrl-C) while fasteval was starting; nothing ran."


def main() -> None:
    try:
        from fasteval.doors.cli import main as cli_main
    except KeyboardInterrupt:
        sys.stderr.write(INTERRUPTED_LINE + "\n")
        sys.exit(EXIT_SIGINT)
    cli_main()


if __name__ == "__main__":  # `python -m fasteval.doors.cli` runs this module so (see its first lines)
    main()
