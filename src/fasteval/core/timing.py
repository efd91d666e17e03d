"""Stage timers: where an evaluation's wall time goes.

Stages (the same names appear in the loop, ``eval_info.json``, ``--profile`` and
``fasteval bench``):

* ``env_step``: stepping and resetting envs (includes the env's own Python layers);
* ``h2d``: host-to-device copies of observations (zero on CPU: the policy reads the host buffer);
* ``policy``: the policy forward pass, including action post-processing;
* ``d2h``: device-to-host copies of actions, and the sync they need;
* ``bookkeeping``: the metrics kernel, ledger refills and result callbacks.

A timer is two ``perf_counter`` calls (~0.1 us), cheap enough to leave always on.
"""

from __future__ import annotations

from time import perf_counter

STAGES = ("env_step", "h2d", "policy", "d2h", "bookkeeping")


class StageTimers:
    """Accumulated seconds per stage. ``add(stage, since)`` adds ``perf_counter() - since``."""

    __slots__ = ("seconds",)

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(STAGES, 0.0)

    def add(self, stage: str, since: float) -> float:
        now = perf_counter()
        self.seconds[stage] += now - since
        return now

    def reset(self) -> None:
        for stage in self.seconds:
            self.seconds[stage] = 0.0

    def as_dict(self) -> dict[str, float]:
        return dict(self.seconds)
