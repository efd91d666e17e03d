"""The record of a many-policy run: one :class:`~fasteval.types.eval_result.EvalResult` per policy, plus the
ranking and the race.

:class:`ManyPolicyResult` is an :class:`EvalResult` (frozen, built once by
:func:`fasteval.run.record_many.build_many_record`) whose ``per_episode`` holds every policy's episodes (each record
names its ``policy``), and which adds:

* ``policies``: each policy's own record, as its own one-policy run would have made it (its episodes, its
  aggregates, its videos, its faults, its facts; ``result.policy("5000")``);
* ``ranking``: :mod:`fasteval.types.ranking`'s rows (estimate, interval, episodes, paired difference to the
  best, where it was dropped);
* ``race``: the race's block (``--stop-when best``), or ``None``.

``eval_info.json`` (:meth:`eval_info_document`)::

    {"policies": {NAME: {per_episode, per_task, per_group, overall, errors, meta}, ...},
     "ranking": [...], "verdict": {...}, "race": {...} | null, "trajectory": {...} | null,
     "overall": {run totals}, "timings": {...}, "errors": [...], "meta": {...}}

Each ``policies[NAME]`` entry holds the fields of a one-policy ``eval_info.json`` for that policy.
``overall`` has the run's totals only (episodes, steps, seconds, rates): averages over several policies
mean nothing, and each policy's are in its own entry.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from fasteval.types.eval_result import EvalResult, aggregate, lerobot_empty_keys


@dataclass(frozen=True)
class ManyPolicyResult(EvalResult):
    """See the module docstring."""

    policies: Sequence[EvalResult] = ()
    names: Sequence[str] = ()
    ranking: Sequence[Mapping[str, Any]] = ()
    race: Mapping[str, Any] | None = None
    trajectory: Mapping[str, Any] | None = None
    verdict: Mapping[str, Any] | None = None
    """:func:`fasteval.types.ranking.ranking_verdict`: the best, or the policies tied for best, or an
    undecided race; with its one-line headline."""

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "policies", tuple(self.policies))
        object.__setattr__(self, "names", tuple(self.names))
        object.__setattr__(self, "ranking", tuple(dict(r) for r in self.ranking))

    def policy(self, name: str) -> EvalResult:
        """The record of policy ``name`` (its short name)."""
        try:
            return self.policies[self.names.index(name)]
        except ValueError:
            raise KeyError(f"no policy {name!r} in this run; it has {list(self.names)}") from None

    @property
    def best(self) -> str | None:
        """The name of the best policy, only where an interval supports it (None on a tie or an undecided race:
        ``verdict["tied_for_best"]`` lists the policies that cannot be told apart)."""
        return (self.verdict or {}).get("best")

    @property
    def leader(self) -> str | None:
        """The policy ranked first (the highest estimate; the race's leader), best or not."""
        return self.ranking[0]["policy"] if self.ranking else None

    def overall(self) -> dict[str, Any]:
        """The run's totals (no average over policies: see each policy's own ``overall()``)."""
        agg = aggregate(self.per_episode)
        n, steps = agg["n_episodes"], agg["env_steps"]
        return {
            "n_policies": len(self.policies), "n_episodes": n, "env_steps": steps, "eval_s": self.eval_s,
            "eval_ep_s": self.eval_s / n if n else math.nan,
            "steps_per_s": steps / self.eval_s if self.eval_s > 0 else math.nan,
            "episodes_per_s": n / self.eval_s if self.eval_s > 0 else math.nan,
            "n_failed_episodes": self.n_failed, "n_env_errors": len(self.errors),
            "n_nan_reward_episodes": agg["n_nan_reward_episodes"], "has_success_signal": agg["has_success_signal"],
            "best": self.best, "tied_for_best": list((self.verdict or {}).get("tied_for_best") or []),
            "leader": self.leader, "video_paths": list(self.video_paths), **lerobot_empty_keys(),
        }

    def eval_info_document(self) -> dict[str, Any]:
        policies = {}
        for name, result in zip(self.names, self.policies):
            doc = result.eval_info_document()
            doc.pop("timings", None)
            policies[name] = doc
        return {"policies": policies, "ranking": list(self.ranking), "verdict": self.verdict, "race": self.race,
                "trajectory": self.trajectory,
                "overall": self.overall(), "timings": self.timings, "errors": list(self.errors), "meta": self.meta}

    def to_eval_info(self) -> dict[str, Any]:
        doc = self.eval_info_document()
        doc["policies"] = {name: r.to_eval_info() for name, r in zip(self.names, self.policies)}
        for entry in doc["policies"].values():
            entry.pop("timings", None)
        return doc

    def to_dict(self, prefix: str = "") -> dict[str, float]:
        """Flat scalars per policy (``{prefix}{name}/avg_sum_reward`` ...), for TensorBoard or W&B."""
        out: dict[str, float] = {}
        for name, result in zip(self.names, self.policies):
            out.update(result.to_dict(prefix=f"{prefix}{name}/"))
        return out

