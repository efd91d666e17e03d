"""Numba backend: the kernels of ``reference.py`` as JIT-compiled plain loops.

Same names, signatures, in-place effects and return values as
:mod:`fasteval.kernels.reference` (the specification; read its docstrings).
Nothing is compiled at import: each kernel compiles on first call (or loads from
numba's on-disk cache, ``cache=True``). Call :func:`warmup` to trigger that
outside a timed region.

Scalars may be Python ints/bools or NumPy scalars: numba types a Python ``int``
and an ``np.int64`` alike (``int64``), and a Python ``bool`` and an ``np.bool_``
alike (``boolean``), so both share one compiled specialisation.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from fasteval.kernels.reference import IDLE

__all__ = ["IDLE", "step_bookkeeping", "warmup"]


@njit(cache=True, nogil=True)
def step_bookkeeping(
    rewards,
    terminated,
    truncated,
    success,
    slot_episode,
    acc_sum,
    acc_max,
    acc_len,
    acc_success,
    acc_nan,
    max_steps,
    res_sum,
    res_max,
    res_len,
    res_success,
    res_nan,
    next_episode,
    n_episodes,
    refill,
    finished_out,
    reset_out,
):
    """See :func:`fasteval.kernels.reference.step_bookkeeping`."""
    n_finished = 0
    n_reset = 0
    nxt = np.int64(next_episode)
    cap = np.int64(max_steps)
    n_total = np.int64(n_episodes)
    do_refill = bool(refill)
    for slot in range(slot_episode.shape[0]):
        episode = slot_episode[slot]
        if episode == IDLE:
            continue
        reward = np.float64(rewards[slot])
        acc_sum[slot] += reward
        if math.isnan(reward):
            acc_nan[slot] += 1
            acc_max[slot] = np.nan
        elif reward > acc_max[slot]:
            acc_max[slot] = reward
        acc_len[slot] += 1
        if success[slot]:
            acc_success[slot] = True
        done = bool(terminated[slot]) or bool(truncated[slot])
        if cap > 0 and acc_len[slot] >= cap:
            done = True
        if not done:
            continue
        res_sum[episode] = acc_sum[slot]
        res_max[episode] = acc_max[slot]
        res_len[episode] = acc_len[slot]
        res_success[episode] = acc_success[slot]
        res_nan[episode] = acc_nan[slot]
        finished_out[n_finished] = episode
        n_finished += 1
        acc_sum[slot] = 0.0
        acc_max[slot] = -np.inf
        acc_len[slot] = 0
        acc_success[slot] = False
        acc_nan[slot] = 0
        if do_refill and nxt < n_total:
            slot_episode[slot] = nxt
            nxt += 1
            reset_out[n_reset] = slot
            n_reset += 1
        else:
            slot_episode[slot] = IDLE
    return n_finished, n_reset, nxt


def warmup() -> None:
    """Compile (or load from cache) the kernel for the usual argument types.

    Covers C-contiguous float64/bool/int64 arrays with Python-int/bool scalars
    (NumPy int64/bool scalars map to the same specialisation).
    """
    b, n = 2, 3
    f = np.zeros(b)
    flag = np.zeros(b, dtype=np.bool_)
    slot_episode = np.arange(b, dtype=np.int64)
    acc_max = np.full(b, -np.inf)
    step_bookkeeping(
        f, flag, flag.copy(), flag.copy(), slot_episode,
        f.copy(), acc_max, np.zeros(b, np.int64), flag.copy(), np.zeros(b, np.int64), 0,
        np.zeros(n), np.full(n, -np.inf), np.zeros(n, np.int64), np.zeros(n, np.bool_), np.zeros(n, np.int64),
        b, n, True, np.zeros(b, np.int64), np.zeros(b, np.int64),
    )  # fmt: skip
