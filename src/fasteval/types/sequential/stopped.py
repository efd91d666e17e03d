"""Intervals for the mean of a run that stopped on its own data: valid at the stop.

A fixed-n interval (Wilson's score interval, a bootstrap) is a 95% interval only when the number of
episodes was fixed before any was seen. A run that stops when a rule holds (``--stop-when``, a
truncated design) chose its n from the data, and such an interval then misses more often than it
says: with ``above=0.8`` and a true rate of 0.82, Wilson's interval at the stop excluded the rate
in 15% of runs (the betting confidence sequence: 1.3%). The betting confidence sequence of
:mod:`.betting` covers the mean at *every* n at once with probability >= confidence, so it also
covers it at any stopping time, whatever decided the stop (another metric's rule, a truncated
design's boundaries, a signal): it is *the* interval of a stopped run.

Several groups of episodes with their own means (a suite's tasks, a sweep's envs), each stopped on
its own: each group's sequence is run at ``1 - (1 - confidence) / G`` (Bonferroni over the G
groups), so that with probability >= confidence every group's mean lies in its interval at its
stop, all at once. Any average of the group means with nonnegative weights that sum to 1, even
weights read from the data (the groups' episode counts), then lies in the same average of the
bounds: :func:`combined_interval`.

Values are in [0, 1] (successes as 0/1; returns mapped with ``--return-bounds``). A group with no
values has the bounds 0 and 1 (and weight 0 when weighted by counts).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from fasteval.types.sequential.betting import BettingCS, check_confidence

METHOD = "betting confidence sequence (anytime-valid: valid at a data-dependent stop)"
"""What the interval of a stopped run is, in words (``pc_success_ci95_method`` says it)."""
FIXED_N_METHOD = "Wilson score (fixed n)"
"""What a run's interval is when its n was fixed in advance."""


def sequence_bounds(values: Any, confidence: float) -> tuple[float, float]:
    """The betting confidence sequence's bounds after all of ``values`` (1-D, in [0, 1]): (0, 1) for none."""
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    cs = BettingCS(check_confidence(confidence))
    if x.size:
        cs.update(x)
    return cs.lower, cs.upper


def simultaneous_bounds(groups: Sequence[Any], confidence: float) -> list[tuple[float, float]]:
    """Each group's sequence bounds at ``1 - (1 - confidence) / len(groups)``: with probability >=
    confidence, every group's mean is inside its bounds at its stop, all at once (one group: its own
    sequence at ``confidence``)."""
    level = check_confidence(confidence)
    if len(groups) > 1:
        level = 1.0 - (1.0 - level) / len(groups)
    return [sequence_bounds(g, level) for g in groups]


def combined_interval(groups: Sequence[Any], confidence: float, weights: str = "count",
                      bounds: Sequence[tuple[float, float]] | None = None) -> tuple[float, float]:
    """An interval for an average of the groups' means, valid at the groups' stops.

    ``weights="count"``: each group weighs its number of values (the pooled mean of all values, as a
    run's ``pc_success`` is); ``"equal"``: each group weighs the same (the mean over tasks of the task
    means). ``bounds``: the groups' :func:`simultaneous_bounds`, when already computed. No values at
    all: (0, 1)."""
    if weights not in ("count", "equal"):
        raise ValueError(f"weights: expected 'count' or 'equal', got {weights!r}.")
    sizes = np.array([np.asarray(g).size for g in groups], dtype=np.float64)
    if not len(groups) or sizes.sum() == 0:
        return 0.0, 1.0
    if bounds is None:
        bounds = simultaneous_bounds(groups, confidence)
    w = sizes / sizes.sum() if weights == "count" else np.full(len(groups), 1.0 / len(groups))
    lows, highs = (np.array([b[i] for b in bounds]) for i in (0, 1))
    return float(np.clip(w @ lows, 0.0, 1.0)), float(np.clip(w @ highs, 0.0, 1.0))
