"""A hypothesis state machine for the ledger and the step-bookkeeping kernel.

The machine drives :class:`fasteval.core.ledger.Ledger` exactly as the hot loop does
(``start_wave``, then ``step_bookkeeping`` steps in which random slots finish with
random rewards and flags, marking ``ledger.finished``; ``stop_starting`` for a graceful
stop), and checks every step against a plain Python model: a list of episodes (ledger
rows), each not-yet-started, running in one slot, or finished with its metrics. Some
ledgers run a subset of episode indices (``episode_ids``, as a resumed run does).

Invariants after every rule: an episode is in at most one slot; episodes are handed
out in index order; no episode finishes twice; finished + running + not-yet-started
== n; active slots never exceed n - finished; and a run that is over has finished
exactly n episodes (or, after a graceful stop, exactly those it had started).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from fasteval import kernels
from fasteval.core.ledger import Ledger
from fasteval.core.loop import kernel_outputs
from fasteval.kernels import IDLE, reference

# NumPy float64 scalars warn on inf - inf and on overflow; both are legitimate inputs here.
pytestmark = [
    pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
]

PENDING, RUNNING, FINISHED = "not-yet-started", "running", "finished"

REWARDS = st.one_of(
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False),
    st.integers(-6, 3).map(float),
    st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 1e308, -1e308]),
)


@dataclass
class Acc:
    """The model's running metrics of one slot's episode."""

    sum: float = 0.0
    max: float = -math.inf
    len: int = 0
    success: bool = False
    nan: int = 0


def same_float(a: float, b: float) -> bool:
    a, b = float(a), float(b)
    if math.isnan(b):
        return math.isnan(a)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


class LedgerMachine(RuleBasedStateMachine):
    """Ledger + a ``step_bookkeeping`` kernel against a list-of-episodes model."""

    step_bookkeeping = staticmethod(reference.step_bookkeeping)

    # -- set-up --------------------------------------------------------------------------------
    @initialize(
        n=st.integers(1, 30),
        n_slots=st.integers(1, 8),
        seed=st.integers(0, 2**31),
        refill=st.booleans(),
        max_steps=st.sampled_from([0, 0, 0, 1, 2, 5]),
        data=st.data(),
    )
    def setup(self, n, n_slots, seed, refill, max_steps, data):
        self.n, self.n_slots, self.refill, self.max_steps = n, n_slots, refill, max_steps
        subset = data.draw(st.booleans(), label="a subset of episode indices (resume)")
        if subset:
            ids = sorted(data.draw(st.sets(st.integers(0, 3 * n), min_size=n, max_size=n), label="episode_ids"))
            self.ledger = Ledger(n, n_slots, seed, ids)
        else:
            ids = list(range(n))
            self.ledger = Ledger(n, n_slots, seed)
        self.episode_ids = ids
        self.finished_out, self.reset_out = kernel_outputs(n_slots)  # the kernel's outputs, as a StepGroup holds them
        assert self.ledger.seeds.tolist() == [seed + e for e in ids]
        assert self.ledger.seeds_of(range(n)) == [seed + e for e in ids]
        self.limit = n  # rows >= limit never start (lowered by a graceful stop)
        # the model
        self.status = [PENDING] * n
        self.slot_of: list[int | None] = [None] * n
        self.slots: list[int | None] = [None] * n_slots
        self.accs = [Acc() for _ in range(n_slots)]
        self.results: dict[int, Acc] = {}
        self.times_finished = [0] * n
        self.handed_out: list[int] = []
        self.next = 0
        self._start_wave()  # the engine starts the first wave before the loop

    # -- model helpers -------------------------------------------------------------------------
    def _hand_out(self, slot: int) -> None:
        episode = self.next
        self.next += 1
        self.status[episode] = RUNNING
        self.slot_of[episode] = slot
        self.slots[slot] = episode
        self.handed_out.append(episode)

    def _start_wave(self) -> None:
        expected = []
        for slot in range(self.n_slots):
            if self.next >= self.limit:
                break
            if self.slots[slot] is None:
                self._hand_out(slot)
                expected.append(slot)
        started = self.ledger.start_wave()
        assert list(started) == expected
        assert self.ledger.seeds_of(self.ledger.slot_episode[started]) == [
            self.ledger.seed + self.episode_ids[self.slots[s]] for s in expected
        ]
        self._check_slots()

    def _check_slots(self) -> None:
        want = [IDLE if e is None else e for e in self.slots]
        assert self.ledger.slot_episode.tolist() == want
        assert self.ledger.active_slots() == [s for s, e in enumerate(self.slots) if e is not None]
        assert self.ledger.next_episode == self.next
        assert self.ledger.exhausted == (self.next >= self.limit)
        assert self.ledger.limit == self.limit

    # -- rules ---------------------------------------------------------------------------------
    @precondition(lambda self: any(e is None for e in self.slots) and self.next < self.limit)
    @rule()
    def start_wave(self):
        self._start_wave()

    @precondition(lambda self: self.limit == self.n)
    @rule()
    def stop_starting(self):
        """Graceful stop: episodes in flight run to their end, no new ones start."""
        self.ledger.stop_starting()
        self.limit = self.next
        self._check_slots()

    @rule(data=st.data())
    def step(self, data):
        """One env step: every slot gets a reward and flags; idle slots' values must be ignored.

        Always allowed: once the run is over, a step over idle slots must change nothing.
        """
        b = self.n_slots
        slots = data.draw(st.lists(st.tuples(REWARDS, st.booleans(), st.booleans(), st.booleans()), min_size=b, max_size=b),
                          label="(reward, terminated, truncated, success) per slot")
        rewards, terminated, truncated, success = (list(column) for column in zip(*slots))
        self._step(rewards, terminated, truncated, success)

    @precondition(lambda self: any(e is not None for e in self.slots))
    @rule(data=st.data())
    def step_all_finish(self, data):
        """A step where every running episode ends (terminated, truncated or both)."""
        b = self.n_slots
        rewards = data.draw(st.lists(REWARDS, min_size=b, max_size=b), label="rewards")
        terminated = data.draw(st.lists(st.booleans(), min_size=b, max_size=b), label="terminated")
        truncated = [not t or x for t, x in zip(terminated, data.draw(st.lists(st.booleans(), min_size=b, max_size=b)))]
        self._step(rewards, terminated, truncated, [False] * b)

    def _step(self, rewards, terminated, truncated, success):
        L = self.ledger
        # the model's step
        model_finished, model_reset = [], []
        for slot in range(self.n_slots):
            episode = self.slots[slot]
            if episode is None:
                continue
            acc, reward = self.accs[slot], rewards[slot]
            acc.sum += reward
            if math.isnan(reward):
                acc.nan += 1
                acc.max = math.nan
            elif reward > acc.max:
                acc.max = reward
            acc.len += 1
            acc.success = acc.success or success[slot]
            done = terminated[slot] or truncated[slot] or (self.max_steps > 0 and acc.len >= self.max_steps)
            if not done:
                continue
            self.results[episode] = acc
            self.accs[slot] = Acc()
            self.status[episode] = FINISHED
            self.slot_of[episode] = None
            self.times_finished[episode] += 1
            model_finished.append(episode)
            self.slots[slot] = None
            if self.refill and self.next < self.limit:
                self._hand_out(slot)
                model_reset.append(slot)

        # the kernel's step, called as the hot loop calls it
        already_finished = L.finished.copy()
        n_finished, n_reset, L.next_episode = self.step_bookkeeping(
            np.asarray(rewards, dtype=np.float64), np.asarray(terminated, dtype=bool),
            np.asarray(truncated, dtype=bool), np.asarray(success, dtype=bool), L.slot_episode,
            L.acc_sum, L.acc_max, L.acc_len, L.acc_success, L.acc_nan, self.max_steps,
            L.sum_reward, L.max_reward, L.length, L.success, L.nan_rewards,
            L.next_episode, L.limit, self.refill, self.finished_out, self.reset_out,
        )
        done = self.finished_out[:n_finished].copy()
        assert not already_finished[done].any(), f"episodes finished twice: {done[already_finished[done]].tolist()}"
        assert len(set(done.tolist())) == len(done), "an episode finished twice in one step"
        L.finished[done] = True

        assert done.tolist() == model_finished
        assert self.reset_out[:n_reset].tolist() == model_reset
        self._check_slots()
        for episode in model_finished:
            want = self.results[episode]
            assert same_float(L.sum_reward[episode], want.sum)
            assert same_float(L.max_reward[episode], want.max)
            assert int(L.length[episode]) == want.len
            assert bool(L.success[episode]) == want.success
            assert int(L.nan_rewards[episode]) == want.nan
        # running slots carry their episode's metrics; retired and refilled ones start empty (0, -inf, 0, False, 0)
        for slot, acc in enumerate(self.accs):
            assert same_float(L.acc_sum[slot], acc.sum)
            assert same_float(L.acc_max[slot], acc.max)
            assert int(L.acc_len[slot]) == acc.len
            assert bool(L.acc_success[slot]) == acc.success
            assert int(L.acc_nan[slot]) == acc.nan

    # -- invariants ----------------------------------------------------------------------------
    @invariant()
    def each_episode_in_at_most_one_slot(self):
        running = [int(e) for e in self.ledger.slot_episode if e != IDLE]
        assert len(running) == len(set(running))
        assert all(0 <= e < self.n for e in running)
        assert all(self.status[e] == RUNNING for e in running)

    @invariant()
    def episodes_handed_out_in_index_order(self):
        assert self.handed_out == list(range(self.ledger.next_episode))
        started = {int(e) for e in self.ledger.slot_episode if e != IDLE} | set(np.flatnonzero(self.ledger.finished).tolist())
        assert started == set(range(self.ledger.next_episode))

    @invariant()
    def no_episode_finished_twice(self):
        assert max(self.times_finished, default=0) <= 1
        assert int(self.ledger.finished.sum()) == sum(self.times_finished)
        assert np.flatnonzero(self.ledger.finished).tolist() == [e for e, s in enumerate(self.status) if s == FINISHED]

    @invariant()
    def every_episode_accounted_for(self):
        L = self.ledger
        finished = int(L.finished.sum())
        running = len(L.active_slots())
        not_started = L.n_episodes - L.next_episode
        assert finished + running + not_started == self.n
        assert self.status.count(FINISHED) == finished
        assert self.status.count(RUNNING) == running
        assert self.status.count(PENDING) == not_started

    @invariant()
    def active_slots_within_remaining(self):
        assert len(self.ledger.active_slots()) <= self.n - int(self.ledger.finished.sum())
        assert len(self.ledger.active_slots()) <= self.n_slots

    @invariant()
    def over_means_exactly_n_finished(self):
        L = self.ledger
        if not L.active_slots() and L.exhausted:
            assert int(L.finished.sum()) == self.limit
            assert L.finished[: self.limit].all() and not L.finished[self.limit:].any()


SETTINGS = settings(
    max_examples=100,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

LedgerMachine.TestCase.settings = SETTINGS
TestLedgerReferenceKernel = LedgerMachine.TestCase


class ActiveBackendLedgerMachine(LedgerMachine):
    """The same machine with the kernel backend fasteval chose at import (Cython, Numba or reference)."""

    step_bookkeeping = staticmethod(kernels.step_bookkeeping)


ActiveBackendLedgerMachine.TestCase.settings = SETTINGS
TestLedgerActiveBackend = pytest.mark.skipif(
    kernels.BACKEND == "reference", reason="the active backend is the reference kernel (tested above)"
)(ActiveBackendLedgerMachine.TestCase)
