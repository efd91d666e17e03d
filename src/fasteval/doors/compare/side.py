"""One side of ``fasteval compare``: one policy's episodes and what identifies its run (:class:`Side`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CELL_SEPARATOR = "::"


@dataclass
class Side:
    """One policy's episodes: ``records`` (per-episode dicts) plus what identifies the run."""

    label: str
    source: str
    policy: Any
    env: str
    env_kwargs: Any
    seed: int | None
    records: list[dict[str, Any]] = field(default_factory=list)
    stop_when: str | None = None
    """The ``--stop-when`` rule the run stopped by (its n came from its data), or None (n fixed in advance)."""
    policy_block: int | None = None
    """Rows per policy call of the run (``policy_block``; 0: the whole batch; None: not recorded, a sweep cell)."""

    def header(self) -> dict[str, Any]:
        return {"label": self.label, "source": self.source, "policy": self.policy, "env": self.env,
                "env_kwargs": self.env_kwargs, "seed": self.seed, "n_episodes": len(self.records),
                "stop_when": self.stop_when, "policy_block": self.policy_block}
