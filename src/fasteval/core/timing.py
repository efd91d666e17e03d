"""Stage timers: where an evaluation's wall time goes.

Stages (the same names appear in the loop, ``eval_info.json``, ``--profile`` and
``fasteval bench``):

* ``env_step``: stepping and resetting envs (includes the env's own Python layers);
* ``h2d``: host-to-device copies of observations (zero on CPU: the policy reads the host buffer);
* ``policy``: the policy forward pass, including action post-processing; on a GPU, the time the
  GPU spends on it (see :class:`CudaStageTimers`);
* ``d2h``: device-to-host copies of actions, and the sync they need;
* ``bookkeeping``: the metrics kernel, ledger refills and result callbacks.

A timer is two ``perf_counter`` calls (~0.1 us), cheap enough to leave always on.
"""

from __future__ import annotations

from time import perf_counter
from typing import Any

import torch

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


class CudaStageTimers(StageTimers):
    """Stage timers for a CUDA policy: the policy's GPU time is moved out of ``d2h`` into ``policy``.

    A policy call returns as soon as its kernels are queued; the action copy's sync then waits
    for them, so host clocks alone would count GPU compute as ``d2h`` (and ``fasteval bench``'s
    overhead, ``eval_s - env_step - policy``, would include it). Two CUDA events are recorded on
    the policy device's current stream, when ``h2d`` ends (the policy is about to be queued) and
    when ``policy`` ends; when ``d2h`` ends the action sync has completed both, so reading their
    elapsed time adds no sync. Per step: ``policy += max(0, gpu - policy_wall)`` moved out of
    that step's ``d2h`` (never more than it). Cost: two event records and one elapsed-time read
    per policy call (a few us), whether ``--profile`` is on or not, and no extra sync.

    The sequence ``h2d, policy, d2h`` is the loop's launch (:func:`fasteval.core.loop.launch`);
    an ``h2d`` without a following ``policy`` (a step with nothing to run) is simply overwritten.
    """

    __slots__ = ("_start", "_end", "_policy_wall", "_armed")

    def __init__(self, device: torch.device, event_factory: Any = None) -> None:
        super().__init__()
        make = event_factory or (lambda: torch.cuda.Event(enable_timing=True))
        with torch.cuda.device(device):
            self._start, self._end = make(), make()
        self._policy_wall = 0.0
        self._armed = False

    def add(self, stage: str, since: float) -> float:
        now = perf_counter()
        seconds = self.seconds
        wall = now - since
        if stage == "h2d":
            self._start.record()
            self._armed = False
        elif stage == "policy":
            self._end.record()
            self._policy_wall, self._armed = wall, True
        elif stage == "d2h" and self._armed:
            self._armed = False
            gpu = self._start.elapsed_time(self._end) / 1000.0  # ms -> s; both events done after the sync
            move = min(max(gpu - self._policy_wall, 0.0), wall)
            seconds["policy"] += move
            wall -= move
        seconds[stage] += wall
        return now


def make_stage_timers(device: torch.device) -> StageTimers:
    """:class:`CudaStageTimers` for a CUDA policy device, else plain :class:`StageTimers`."""
    if device.type == "cuda" and torch.cuda.is_available():
        return CudaStageTimers(device)
    return StageTimers()
