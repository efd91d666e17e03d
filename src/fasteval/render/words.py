"""The words every view of a run uses, defined once."""

from __future__ import annotations

NO_SIGNAL = "no success signal"
"""What every view says instead of a success rate when no env of a run or cell ever reported
``info["is_success"]`` (its 0% would be an artefact)."""


def plural(n: int, word: str) -> str:
    """``plural(1, "episode")`` -> ``"1 episode"``; ``plural(2, "episode")`` -> ``"2 episodes"``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"
