"""The shard contract: shard ``K`` of ``N`` of one evaluation, by episode index (``--shard K/N``).

An evaluation is its *what* (env, policy, seed, ``n_episodes``...): episode ``i`` is defined by its seed
``seed + i`` alone, so any set of episode indices can run anywhere, and the records of disjoint sets that
cover ``0..n-1`` merge into the one record of the whole evaluation (:mod:`fasteval.run.merge`,
``fasteval merge``). A shard is a run over a subset of episode indices, as a resumed run is a run over
the missing ones.

**Strided, not contiguous**: shard ``K`` runs the episodes ``i`` with ``i % N == K`` (``K`` counts from 0,
as SLURM's ``--array=0-(N-1)`` and Kubernetes' ``JOB_COMPLETION_INDEX``). Why:

* a larger ``-n`` keeps every episode in its shard (``i % N`` does not depend on ``n``), so each shard's
  folder can be extended with ``--resume DIR -n M`` and the extended shards still merge; contiguous blocks
  (``[K n / N, (K + 1) n / N)``) move their boundaries with ``n``;
* cost or difficulty that drifts with the index (an env whose init states are ordered, long episodes late)
  is spread over every shard, so the shards end at about the same time.

A many-policy run (``--policy A --policy B``) shards by episode index too: shard ``K`` runs those episodes
of every policy, so each shard keeps the policies paired on the same seeds, and the merge rebuilds the one
many-policy record (each policy's episodes, its aggregates, the ranking).

Neither choice changes a result: the merged record depends on the seeds only. (vla-evaluation-harness
issue 128: a modulo over a task-major list of (task, episode) pairs folds onto the episode index within
each task when ``N`` shares a factor with the episodes per task; a fasteval shard splits one env's episode
indices, and ``--shard`` is refused for a list of tasks.)

A shard's run folder records its shard in ``manifest.json`` (``shard``: ``{"index", "count", "scheme"}``)
beside the full evaluation's *what* (``n_episodes`` is the whole evaluation's); a ``--resume`` of the
folder runs only the shard's missing episodes. Stop rules decide on index prefixes, which only a driver
that sees every episode has: they are refused with ``--shard`` (exit 2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from fasteval.types.errors import UserInputError

SCHEME = "strided"
"""How a shard picks its episodes: ``i % count == index``."""


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` (0-based) of ``count``: the episodes ``i`` with ``i % count == index``."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if not (isinstance(self.count, int) and self.count >= 1 and isinstance(self.index, int)
                and 0 <= self.index < self.count):
            raise UserInputError(f"--shard: expected K/N with 0 <= K < N (K counts from 0, as SLURM's "
                                 f"--array=0-(N-1) and Kubernetes' JOB_COMPLETION_INDEX), got {self.index}/{self.count}.")

    def episodes(self, n_episodes: int) -> range:
        """The episode indices of this shard among ``0..n_episodes-1``."""
        return range(self.index, n_episodes, self.count)

    def size(self, n_episodes: int) -> int:
        return len(self.episodes(n_episodes))

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "count": self.count, "scheme": SCHEME}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> "Shard":
        if doc.get("scheme", SCHEME) != SCHEME:
            raise UserInputError(f"shard scheme {doc.get('scheme')!r}: this fasteval knows {SCHEME!r} only.")
        return cls(int(doc["index"]), int(doc["count"]))

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """``"K/N"`` -> :class:`Shard`; anything else raises UserInputError (exit 2) with the expected form."""
    k, sep, n = str(text).partition("/")
    try:
        if not sep:
            raise ValueError
        index, count = int(k), int(n)
    except ValueError:
        raise UserInputError(f"--shard: expected K/N (shard K of N, 0 <= K < N, e.g. --shard 0/4 or "
                             f"--shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT), got {text!r}.") from None
    return Shard(index, count)


def check_shardable(shard: Shard, spec: Any, suite: bool = False) -> None:
    """Refuse (UserInputError, exit 2) what a shard cannot be: a stop rule or race (it decides on index
    prefixes, which need one driver), a list of tasks, an empty shard. Several policies shard as one: shard K
    runs episodes ``i % N == K`` of every policy."""
    if spec.stop_when is not None:
        raise UserInputError(f"--shard {shard} with --stop-when {spec.stop_when}: a stop rule decides on the prefix "
                             f"of episodes 0..k-1, which no single shard sees. Drop --stop-when (run a fixed -n), or "
                             f"run one process (or --backend ray, whose driver sees every episode).")
    if suite:
        raise UserInputError(f"--shard {shard} shards one env's episodes; this run is a list of tasks. Shard each "
                             f"task's evaluation on its own.")
    if shard.size(spec.n_episodes) == 0:
        raise UserInputError(f"--shard {shard}: -n {spec.n_episodes} has no episode i with i % {shard.count} == "
                             f"{shard.index}. Use at most {spec.n_episodes} shards.")


def shard_of_folder(manifest: Mapping[str, Any], asked: Shard | None, folder: Any) -> Shard | None:
    """The shard of a resumed run: its manifest's. ``asked`` (``--shard`` given again with ``--resume``)
    must be the same; a run folder of no shard cannot become one."""
    saved = Shard.from_dict(manifest["shard"]) if manifest.get("shard") else None
    if asked is not None and asked != saved:
        had = f"shard {saved}" if saved is not None else "no shard (every episode)"
        raise UserInputError(f"--resume {folder} --shard {asked}: the run in {folder} has {had}. Drop --shard "
                             f"(the run's is used), or start a new run with another --output-dir.")
    return saved
