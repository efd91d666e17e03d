"""Stage timers: where an evaluation's wall time goes.

Stages (the same names appear in the loop, ``eval_info.json``, ``--profile`` and
``fasteval bench``):

* ``env_step``: stepping and resetting envs (includes the env's own Python layers);
* ``h2d``: host-to-device copies of observations (zero on CPU: the policy reads the host buffer;
  on a GPU, the time the copy takes there);
* ``policy``: the policy forward pass, including action post-processing; on a GPU, the time the
  GPU spends on it (see :class:`CudaStageTimers`);
* ``d2h``: device-to-host copies of actions, and the sync they need;
* ``bookkeeping``: the metrics kernel, ledger refills and result callbacks;
* ``render``: the recorders' work on the loop's thread (``--videos``: the frames ``env.render()``
  draws and their hand-off to the encoder; episode data), taken out of the bookkeeping span it
  happens in (:meth:`StageTimers.add_within`); zero without recorders;
* ``encode``: the time the run waits for its videos' background encoder after the last episode
  (the encoding itself runs beside the loop); zero without videos.

A timer is two ``perf_counter`` calls (~0.1 us), cheap enough to leave always on.
"""

from __future__ import annotations

from time import perf_counter
from typing import Any

import torch

STAGES = ("env_step", "h2d", "policy", "d2h", "bookkeeping", "render", "encode")


class StageTimers:
    """Accumulated seconds per stage. ``add(stage, since)`` adds ``perf_counter() - since``.

    The loop calls :meth:`start_h2d` right before the observation copy (nothing here; CUDA timers
    mark the device's stream there).
    """

    __slots__ = ("seconds",)

    marks_h2d = False
    """Whether :meth:`start_h2d` does anything (the loop skips the call when it does not)."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(STAGES, 0.0)

    def start_h2d(self) -> None:
        return None

    def add(self, stage: str, since: float) -> float:
        now = perf_counter()
        self.seconds[stage] += now - since
        return now

    def add_within(self, stage: str, since: float, outer: str) -> float:
        """Add ``perf_counter() - since`` to ``stage`` and take it out of ``outer``: a span timed inside one
        of ``outer``'s (the loop adds that span later, this one included), so the two never count it twice.
        ``outer`` may read below its true value until its span is added."""
        now = perf_counter()
        seconds = self.seconds
        seconds[stage] += now - since
        seconds[outer] -= now - since
        return now

    def take_out(self, stage: str, seconds: float) -> None:
        """Remove ``seconds`` from ``stage`` (never below 0): time spent there that is timed apart
        (graph capture, compilation: ``meta["capture_s"]``)."""
        self.seconds[stage] = max(self.seconds[stage] - seconds, 0.0)

    def reset(self) -> None:
        for stage in self.seconds:
            self.seconds[stage] = 0.0

    def as_dict(self) -> dict[str, float]:
        return dict(self.seconds)


class CudaStageTimers(StageTimers):
    """Stage timers for a CUDA policy: GPU time the host did not wait for in its own stage is moved
    out of ``d2h``, into ``h2d`` (the observation copy) and ``policy`` (the forward pass).

    A non-blocking copy and a policy call return as soon as their work is queued; the action
    copy's sync then waits for all of it, so host clocks alone would count the observation
    transfer and the GPU compute as ``d2h`` (``h2d`` would read about 0, and ``fasteval bench``'s
    overhead, ``eval_s - env_step - policy``, would include the compute). Three CUDA events are
    recorded on the policy device's current stream (``torch.cuda.current_stream(device)``, looked
    up at each record: the stream current at call time, and never device 0's for ``cuda:N``):
    before the observation copy (:meth:`start_h2d`), when ``h2d`` ends (the policy is about to be
    queued) and when ``policy`` ends. When ``d2h`` ends the action sync has completed them, so
    reading their elapsed times adds no wait (the last event is synchronized first, which costs
    nothing then, and covers actions that came back on the host without a sync). Per step:
    ``h2d += max(0, gpu_h2d - h2d_wall)`` and ``policy += max(0, gpu_policy - policy_wall)``, taken
    out of that step's ``d2h`` (never more than it). Cost: three event records and two
    elapsed-time reads per policy call (a few us), whether ``--profile`` is on or not.

    The sequence ``start_h2d, h2d, policy, d2h`` is the loop's launch (:func:`fasteval.core.loop.launch`);
    an ``h2d`` without a following ``policy`` (a step with nothing to run) is simply overwritten.
    """

    __slots__ = ("device", "_before", "_start", "_end", "_h2d_wall", "_policy_wall", "_armed", "_marked")

    marks_h2d = True

    def __init__(self, device: torch.device, event_factory: Any = None) -> None:
        super().__init__()
        self.device = device
        make = event_factory or (lambda: torch.cuda.Event(enable_timing=True))
        with torch.cuda.device(device):
            self._before, self._start, self._end = make(), make(), make()
        self._h2d_wall = self._policy_wall = 0.0
        self._armed = self._marked = False

    def start_h2d(self) -> None:
        self._before.record(torch.cuda.current_stream(self.device))
        self._marked = True

    def add(self, stage: str, since: float) -> float:
        now = perf_counter()
        seconds = self.seconds
        wall = now - since
        if stage == "h2d":
            self._start.record(torch.cuda.current_stream(self.device))
            self._h2d_wall, self._armed = wall, False
        elif stage == "policy":
            self._end.record(torch.cuda.current_stream(self.device))
            self._policy_wall, self._armed = wall, True
        elif stage == "d2h" and self._armed:
            self._armed = False
            self._end.synchronize()  # done already after an action sync; actions on the host had none
            if self._marked:  # ms -> s
                self._marked = False
                gpu_h2d = self._before.elapsed_time(self._start) / 1000.0
                move = min(max(gpu_h2d - self._h2d_wall, 0.0), wall)
                seconds["h2d"] += move
                wall -= move
            gpu = self._start.elapsed_time(self._end) / 1000.0
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
