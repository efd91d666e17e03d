"""Plain NumPy/Python kernels: the executable specification.

Every other backend (Cython in ``csrc/``, Numba in ``numba_ops.py``) must return
exactly what these functions return, for every input, including the edge cases
listed in each docstring. They are written to be obviously right, not fast.

Conventions shared by all backends
----------------------------------
* ``B`` is the number of env slots, ``N`` the number of episodes in the ledger.
* Rewards are ``float64``; flags are ``bool``; counts and indices are ``int64``.
* An episode covers the steps from its reset to the first step where
  ``terminated or truncated`` (or the engine's step cap) is true, inclusive,
  and nothing after.
* ``sum`` and ``max`` follow IEEE rules: a NaN reward makes the episode's sum and
  max NaN (it is never dropped); the step is also counted in the NaN counter.
  ``max`` starts at ``-inf``, so a max over negative rewards is right (the classic
  loop zero-fills before taking the max and reports 0 instead).
"""

from __future__ import annotations

import math

IDLE = -1
"""Value of ``slot_episode`` for a slot that runs no episode."""


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
    """Fold one env step into per-slot accumulators; retire finished episodes.

    Args (all arrays are updated in place where noted):
        rewards: float64[B], this step's reward per slot.
        terminated, truncated, success: bool[B], this step's flags per slot.
        slot_episode: int64[B], ledger index of the episode in each slot, or
            ``IDLE`` (-1). Idle slots are ignored entirely. Updated in place: a
            finished slot gets the next ledger episode (if ``refill`` and any are
            left) or becomes ``IDLE``.
        acc_sum, acc_max: float64[B]; acc_len, acc_nan: int64[B];
            acc_success: bool[B]. Running per-slot accumulators. Reset to the
            empty-episode state (0, -inf, 0, 0, False) when a slot is retired.
        max_steps: int. The engine's step cap: an episode whose length reaches
            ``max_steps`` is over (truncated). ``0`` means no cap.
        res_sum, res_max: float64[N]; res_len, res_nan: int64[N];
            res_success: bool[N]. The results table, indexed by episode. A
            finished episode's row is written once.
        next_episode: int, the first ledger index not yet started.
        n_episodes: int, ``N``.
        refill: bool. ``True`` (continuous batching) hands the next ledger
            episode to a freed slot at once; ``False`` (wave mode) leaves it idle.
        finished_out: int64[B], out: ledger indices finished at this step, in
            slot order, in its first ``n_finished`` entries.
        reset_out: int64[B], out: slots that were handed a new episode and must
            be reset now, in slot order, in its first ``n_reset`` entries.

    Returns:
        ``(n_finished, n_reset, next_episode)``.

    Edge cases: an episode that ends at its first step has length 1; terminated
    and truncated on the same step end the episode once; a NaN reward makes sum
    and max NaN and counts one NaN step.
    """
    n_finished = 0
    n_reset = 0
    for slot in range(len(slot_episode)):
        episode = slot_episode[slot]
        if episode == IDLE:
            continue
        reward = float(rewards[slot])
        acc_sum[slot] += reward
        if math.isnan(reward):
            acc_nan[slot] += 1
            acc_max[slot] = math.nan
        elif reward > acc_max[slot]:
            acc_max[slot] = reward
        acc_len[slot] += 1
        if success[slot]:
            acc_success[slot] = True
        done = bool(terminated[slot]) or bool(truncated[slot])
        if max_steps > 0 and acc_len[slot] >= max_steps:
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
        acc_max[slot] = -math.inf
        acc_len[slot] = 0
        acc_success[slot] = False
        acc_nan[slot] = 0
        if refill and next_episode < n_episodes:
            slot_episode[slot] = next_episode
            next_episode += 1
            reset_out[n_reset] = slot
            n_reset += 1
        else:
            slot_episode[slot] = IDLE
    return n_finished, n_reset, next_episode

