"""The episode ledger: episode ``i`` -> seed ``seed + i``; slots; exact-n accounting.

The ledger owns every array the bookkeeping kernel touches: per-slot accumulators
and the per-episode results table. Episodes are handed out in index order, but
results are stored by episode index, so the table does not depend on which slot
ran an episode or in which order episodes finished.

A many-policy run (:mod:`fasteval.core.policy_set`) has one row per (policy, episode) pair: row ``r`` runs
episode ``episode_ids[r]`` of policy ``policy_ids[r]``, and the rows are interleaved by episode index
(:func:`interleaved_rows`: episode 0 of every policy, then episode 1 ...), so that every policy's prefix of
episode indices grows at the same pace. A race drops a policy with :meth:`Ledger.drop_policies`: its rows
not started yet move past ``limit`` (no slot gets them), and the loop abandons its episodes in flight at
the next step boundary (:func:`fasteval.core.loop.at_stop_request`).
"""

from __future__ import annotations

import numpy as np

from fasteval.kernels import IDLE
from fasteval.types.errors import UserInputError

EPISODE_COLUMNS = {"episode_ids": np.int64, "sum_reward": np.float64, "max_reward": np.float64, "length": np.int64,
                   "nan_rewards": np.int64, "success": np.bool_, "finished": np.bool_, "failed": np.bool_,
                   "attempts": np.int64}
"""The ledger's per-episode arrays (their bytes decide how many episodes one run can hold)."""
RESULT_COPIES = 2
"""The ledger's columns, plus one copy of them for the results (a resumed run's merge, a partial run's table)."""


def interleaved_rows(n_episodes: int, n_policies: int, pairs=None) -> tuple[np.ndarray, np.ndarray]:
    """``(episode_ids, policy_ids)`` of a many-policy ledger: every policy's episodes ``0..n-1`` (or the
    ``(policy, episode)`` ``pairs`` given: a resumed run's missing ones), ordered by episode index, then
    policy."""
    if pairs is None:
        return (np.repeat(np.arange(n_episodes, dtype=np.int64), n_policies),
                np.tile(np.arange(n_policies, dtype=np.int64), n_episodes))
    arr = np.asarray(sorted({(int(i), int(p)) for p, i in pairs}), dtype=np.int64).reshape(-1, 2)
    return arr[:, 0].copy(), arr[:, 1].copy()


def episode_memory_bytes(n_episodes: int) -> int:
    """Bytes of memory the per-episode results of ``n_episodes`` episodes take (an estimate from above)."""
    per_episode = sum(np.dtype(dtype).itemsize for dtype in EPISODE_COLUMNS.values())
    return n_episodes * per_episode * RESULT_COPIES


def available_memory_bytes() -> int | None:
    """Memory this machine can still give (``MemAvailable``), or ``None`` where that is unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import os

        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, OSError, ValueError):
        return None


def check_fits_in_memory(n_episodes: int) -> None:
    """Refuse (UserInputError, exit 2) a run whose per-episode results cannot fit in this machine's
    memory, with the figures, before anything is allocated."""
    needed, available = episode_memory_bytes(n_episodes), available_memory_bytes()
    if available is not None and needed > available:
        raise UserInputError(
            f"n_episodes={n_episodes}: the per-episode results alone need about {memory_size(needed)} of memory "
            f"({episode_memory_bytes(1)} bytes per episode), and this machine has {memory_size(available)} available. "
            f"Run fewer episodes per run: split the seeds over several runs (--seed S -n N, then --seed S+N ...)."
        )


def memory_size(n_bytes: float) -> str:
    """``n_bytes`` in a human unit (``1.5 GiB``)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n_bytes < 1024 or unit == "PiB":
            return f"{n_bytes:.1f} {unit}" if unit != "B" else f"{int(n_bytes)} B"
        n_bytes /= 1024
    raise AssertionError


class Ledger:
    """Bookkeeping state for ``n_episodes`` episodes on ``n_slots`` slots.

    Arrays (all preallocated):
        slot_episode: int64[B], episode in each slot or IDLE (-1).
        acc_sum, acc_max: float64[B]; acc_len, acc_nan: int64[B]; acc_success: bool[B].
        sum_reward, max_reward: float64[N]; length, nan_rewards: int64[N]; success: bool[N].
        finished: bool[N], True once an episode's row is final.
    """

    def __init__(self, n_episodes: int, n_slots: int, seed: int, episode_ids=None, policy_ids=None,
                 n_policies: int = 1, policy_names=None):
        check_fits_in_memory(n_episodes)
        self.n_episodes = n_episodes
        self.n_slots = n_slots
        self.seed = seed
        self.episode_ids = (np.arange(n_episodes, dtype=np.int64) if episode_ids is None
                            else np.asarray(episode_ids, dtype=np.int64))
        """Row k of the ledger runs episode ``episode_ids[k]`` (seed ``seed + episode_ids[k]``).
        Normally ``0..n-1``; a resumed run passes only the episodes still missing."""
        assert self.episode_ids.shape == (n_episodes,)
        self.n_policies = int(n_policies)
        self.policy_ids = None if policy_ids is None else np.asarray(policy_ids, dtype=np.int64)
        """Row k runs policy ``policy_ids[k]`` of a many-policy run (``None``: a one-policy run)."""
        assert self.policy_ids is None or self.policy_ids.shape == (n_episodes,)
        self.policy_names = tuple(policy_names) if policy_names is not None else None
        """The policies' names (a many-policy run): what its records and fault records are labelled with."""
        self.dropped = np.zeros(self.n_policies, dtype=bool)
        """Policies a race dropped (:meth:`drop_policies`): none of their rows starts any more."""
        self.halting = False
        """Set with ``stop_requested`` by :meth:`request_stop`: the whole run stops (not only dropped policies)."""
        self.next_episode = 0
        self.slot_episode = np.full(n_slots, IDLE, dtype=np.int64)
        self.acc_sum = np.zeros(n_slots, dtype=np.float64)
        self.acc_max = np.full(n_slots, -np.inf, dtype=np.float64)
        self.acc_len = np.zeros(n_slots, dtype=np.int64)
        self.acc_nan = np.zeros(n_slots, dtype=np.int64)
        self.acc_success = np.zeros(n_slots, dtype=bool)
        self.sum_reward = np.zeros(n_episodes, dtype=np.float64)
        self.max_reward = np.full(n_episodes, -np.inf, dtype=np.float64)
        self.length = np.zeros(n_episodes, dtype=np.int64)
        self.nan_rewards = np.zeros(n_episodes, dtype=np.int64)
        self.success = np.zeros(n_episodes, dtype=bool)
        self.finished = np.zeros(n_episodes, dtype=bool)
        self.failed = np.zeros(n_episodes, dtype=bool)
        """True once a row has failed for good (env errors beyond the retries, bad actions)."""
        self.attempts = np.zeros(n_episodes, dtype=np.int64)
        self.failed_rows: list[int] = []
        """The rows that failed for good, in the order they did (:meth:`fail`): what a race reads."""
        self.limit = n_episodes
        """Rows ``>= limit`` are never started. Lowered to ``next_episode`` to stop starting new
        episodes (graceful interruption); the kernel reads it as its ledger size."""
        self.starting_stopped = False
        """Set by :meth:`stop_starting` (a signal's graceful stop, or a rule's :meth:`request_stop`)."""
        self.stop_requested = False
        """Set by :meth:`request_stop` (a ``--stop-when`` rule held): the loop cancels what is in flight."""
        self.n_cancelled = 0
        """Episodes in flight that :meth:`cancel_in_flight` dropped (they have no record)."""
        self.success_signal = False
        """Whether the envs had reported ``info["is_success"]`` when the engine last handed finished rows up
        (it sets this before each ``on_finished``): what the records of those rows say."""

    def seeds_of(self, rows) -> list[int]:
        """Seeds of ledger rows ``rows``."""
        return [self.seed + int(self.episode_ids[r]) for r in rows]

    @property
    def seeds(self) -> np.ndarray:
        return self.seed + self.episode_ids

    def start_wave(self) -> list[int]:
        """Hand the next episodes to every idle slot, in slot order. Returns the slots started."""
        started = []
        for slot in range(self.n_slots):
            if self.next_episode >= self.limit:
                break
            if self.slot_episode[slot] == IDLE:
                self.slot_episode[slot] = self.next_episode
                self.next_episode += 1
                started.append(slot)
        return started

    def active_slots(self) -> list[int]:
        return np.flatnonzero(self.slot_episode != IDLE).tolist()

    @property
    def exhausted(self) -> bool:
        return self.next_episode >= self.limit

    def stop_starting(self) -> None:
        """Run the episodes in flight to their end, but start no new ones."""
        self.limit = min(self.limit, self.next_episode)
        self.starting_stopped = True

    def request_stop(self) -> None:
        """Start no new episode, and let the loop cancel the ones in flight at its next step boundary."""
        self.stop_starting()
        self.stop_requested = True
        self.halting = True

    def drop_policies(self, policies) -> int:
        """A race dropped ``policies``: their rows not started yet move past ``limit`` (kept in the arrays,
        unfinished), and the loop abandons their episodes in flight at its next step boundary (it sees
        ``stop_requested``). The other policies' rows keep their order. Returns the rows moved."""
        self.dropped[list(policies)] = True
        start, stop = self.next_episode, self.limit
        if self.policy_ids is None or stop <= start:
            self.stop_requested = True
            return 0
        tail = np.arange(start, stop)
        out = self.dropped[self.policy_ids[tail]]
        order = np.concatenate([tail[~out], tail[out]])
        self.episode_ids[start:stop] = self.episode_ids[order]
        self.policy_ids[start:stop] = self.policy_ids[order]
        self.limit = start + int((~out).sum())
        self.stop_requested = True
        return int(out.sum())

    def dropped_slots(self, slots) -> list[int]:
        """The slots among ``slots`` whose episode belongs to a dropped policy."""
        if self.policy_ids is None or not self.dropped.any():
            return []
        return [s for s in slots if self.slot_episode[s] != IDLE and self.dropped[self.policy_ids[self.slot_episode[s]]]]

    def fail(self, row: int) -> None:
        """Row ``row`` failed for good (env errors beyond the retries, a bad action)."""
        self.failed[row] = True
        self.failed_rows.append(int(row))

    def cancel_in_flight(self) -> int:
        """Abandon every episode in a slot (their rows stay unfinished); returns how many."""
        slots = self.active_slots()
        for slot in slots:
            self.slot_episode[slot] = IDLE
            self.clear_slot(slot)
        self.n_cancelled += len(slots)
        return len(slots)

    def clear_slot(self, slot: int) -> None:
        """Empty a slot's accumulators (its episode restarts or is abandoned)."""
        self.acc_sum[slot] = 0.0
        self.acc_max[slot] = -np.inf
        self.acc_len[slot] = 0
        self.acc_nan[slot] = 0
        self.acc_success[slot] = False

    def take_next(self) -> int:
        """The next row to start, or IDLE when none is left (respects ``limit``)."""
        if self.next_episode >= self.limit:
            return IDLE
        row = self.next_episode
        self.next_episode += 1
        return row
