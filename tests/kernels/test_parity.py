"""Every kernel backend must do exactly what ``fasteval.kernels.reference`` does.

Arrays are compared with ``np.testing.assert_array_equal`` (NaN == NaN), plus
dtype, shape and the sign of zero, so "same" means bit-for-bit up to NaN payload.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fasteval.kernels import IDLE
from tests.kernels.conftest import require_backend

SRC = Path(__file__).resolve().parents[2] / "src"

# The reference adds NumPy float64 scalars, which warn on inf - inf and on overflow.
pytestmark = [
    pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
]

STEP_ARRAYS = (
    "slot_episode", "acc_sum", "acc_max", "acc_len", "acc_success", "acc_nan",
    "res_sum", "res_max", "res_len", "res_success", "res_nan", "finished_out", "reset_out",
)  # fmt: skip
REDUCE_OUTS = ("out_sum", "out_max", "out_len", "out_success", "out_nan", "out_done")

HYPOTHESIS = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# ---------------------------------------------------------------------------- helpers


def assert_exact(actual, expected, name=""):
    """Same dtype, shape and values (NaN == NaN; 0.0 != -0.0)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, f"{name}: dtype {actual.dtype} != {expected.dtype}"
    np.testing.assert_array_equal(actual, expected, err_msg=name, strict=True)
    if actual.dtype.kind == "f":
        keep = ~np.isnan(expected)
        np.testing.assert_array_equal(
            np.signbit(actual[keep]), np.signbit(expected[keep]), err_msg=f"{name}: sign of zero"
        )


class Ledger:
    """State of one step_bookkeeping call sequence, fresh as the engine starts it."""

    def __init__(self, batch: int, n_episodes: int):
        active = min(batch, n_episodes)
        self.n_episodes = n_episodes
        self.slot_episode = np.full(batch, IDLE, np.int64)
        self.slot_episode[:active] = np.arange(active)
        self.next_episode = active
        self.acc_sum = np.zeros(batch)
        self.acc_max = np.full(batch, -np.inf)
        self.acc_len = np.zeros(batch, np.int64)
        self.acc_success = np.zeros(batch, np.bool_)
        self.acc_nan = np.zeros(batch, np.int64)
        self.res_sum = np.zeros(n_episodes)
        self.res_max = np.full(n_episodes, -np.inf)
        self.res_len = np.zeros(n_episodes, np.int64)
        self.res_success = np.zeros(n_episodes, np.bool_)
        self.res_nan = np.zeros(n_episodes, np.int64)
        self.finished_out = np.full(batch, -7, np.int64)  # sentinels: untouched entries must stay
        self.reset_out = np.full(batch, -7, np.int64)

    def copy(self) -> Ledger:
        other = object.__new__(Ledger)
        other.n_episodes, other.next_episode = self.n_episodes, self.next_episode
        for name in STEP_ARRAYS:
            setattr(other, name, getattr(self, name).copy())
        return other

    def step(self, module, rewards, terminated, truncated, success, *, max_steps=0, refill=True):
        out = module.step_bookkeeping(
            rewards, terminated, truncated, success, self.slot_episode,
            self.acc_sum, self.acc_max, self.acc_len, self.acc_success, self.acc_nan, max_steps,
            self.res_sum, self.res_max, self.res_len, self.res_success, self.res_nan,
            self.next_episode, self.n_episodes, refill, self.finished_out, self.reset_out,
        )  # fmt: skip
        assert isinstance(out, tuple) and len(out) == 3, out
        for value in out:
            assert isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)), out
        n_finished, n_reset, next_episode = (int(v) for v in out)
        self.next_episode = next_episode
        return n_finished, n_reset, next_episode

    def assert_same(self, other: Ledger, where: str = ""):
        assert self.next_episode == other.next_episode, where
        for name in STEP_ARRAYS:
            assert_exact(getattr(self, name), getattr(other, name), f"{where} {name}")


def flags(batch, **true_at):
    """bool[B] arrays: flags(3, terminated=[1]) -> terminated True at slot 1, others all False."""
    out = {}
    for name in ("terminated", "truncated", "success"):
        arr = np.zeros(batch, np.bool_)
        arr[list(true_at.get(name, []))] = True
        out[name] = arr
    return out


def step_both(backend, reference, ledger, ref_ledger, rewards, *, max_steps=0, refill=True, **true_at):
    """One step on the backend and on the reference; the two must agree. Returns the backend's result."""
    rewards = np.asarray(rewards, dtype=np.float64)
    f = flags(len(rewards), **true_at)
    got = ledger.step(backend, rewards, f["terminated"], f["truncated"], f["success"], max_steps=max_steps, refill=refill)
    want = ref_ledger.step(reference, rewards, f["terminated"], f["truncated"], f["success"], max_steps=max_steps, refill=refill)
    assert got == want
    ledger.assert_same(ref_ledger)
    return got


# ---------------------------------------------------------------------------- strategies

special_rewards = st.sampled_from(
    [0.0, -0.0, 1.0, -1.0, -2.5, math.nan, math.inf, -math.inf, 1e308, -1e308, 5e-324, -5e-324]
)
reward_elements = st.one_of(
    st.floats(-1e3, 1e3, allow_nan=False, allow_subnormal=False),
    st.floats(-1e3, 1e3, allow_nan=False, allow_subnormal=False),
    st.floats(-1e3, 1e3, allow_nan=False, allow_subnormal=False),
    special_rewards,
)


def flag_grids(shape):
    """Sparse-ish bool grids (a few Trues drawn, the rest filled with False)."""
    return hnp.arrays(np.bool_, shape, elements=st.booleans(), fill=st.just(False))


@st.composite
def step_scenarios(draw):
    batch = draw(st.integers(1, 17))
    n_episodes = draw(st.integers(0, 3 * batch + 4))
    n_steps = draw(st.integers(1, 25))
    return {
        "batch": batch,
        "n_episodes": n_episodes,
        "refill": draw(st.booleans()),
        "max_steps": draw(st.sampled_from([0, 0, 1, 2, 3, 5, 8])),
        "rewards": draw(hnp.arrays(np.float64, (n_steps, batch), elements=reward_elements)),
        "terminated": draw(flag_grids((n_steps, batch))),
        "truncated": draw(flag_grids((n_steps, batch))),
        "success": draw(flag_grids((n_steps, batch))),
    }


# ---------------------------------------------------------------------------- randomised parity


@HYPOTHESIS
@given(scenario=step_scenarios(), numpy_scalars=st.booleans())
def test_step_bookkeeping_sequences_match_reference(backend, reference, scenario, numpy_scalars):
    ledger = Ledger(scenario["batch"], scenario["n_episodes"])
    ref_ledger = ledger.copy()
    max_steps, refill = scenario["max_steps"], scenario["refill"]
    if numpy_scalars:
        max_steps, refill = np.int64(max_steps), np.bool_(refill)
        ledger.next_episode = np.int64(ledger.next_episode)
        ledger.n_episodes = np.int64(ledger.n_episodes)
    for t in range(scenario["rewards"].shape[0]):
        args = [scenario[k][t] for k in ("rewards", "terminated", "truncated", "success")]
        got = ledger.step(backend, *args, max_steps=max_steps, refill=refill)
        want = ref_ledger.step(reference, *args, max_steps=scenario["max_steps"], refill=scenario["refill"])
        assert got == want, f"step {t}"
        ledger.assert_same(ref_ledger, f"after step {t}:")


# ---------------------------------------------------------------------------- step_bookkeeping edge cases


def test_episode_ending_at_first_step(backend, reference):
    ledger = Ledger(1, 2)
    ref_ledger = ledger.copy()
    assert step_both(backend, reference, ledger, ref_ledger, [-4.0], terminated=[0]) == (1, 1, 2)
    assert ledger.res_len[0] == 1 and ledger.res_sum[0] == -4.0 and ledger.res_max[0] == -4.0
    assert ledger.finished_out[0] == 0 and ledger.reset_out[0] == 0 and ledger.slot_episode[0] == 1
    assert (ledger.acc_sum[0], ledger.acc_max[0], ledger.acc_len[0]) == (0.0, -np.inf, 0)
    # the refilled episode ends at its first step too; nothing left to refill
    assert step_both(backend, reference, ledger, ref_ledger, [2.0], truncated=[0]) == (1, 0, 2)
    assert ledger.slot_episode[0] == IDLE and ledger.res_len[1] == 1


def test_terminated_and_truncated_on_same_step_end_once(backend, reference):
    ledger = Ledger(2, 4)
    ref_ledger = ledger.copy()
    step_both(backend, reference, ledger, ref_ledger, [1.0, 1.0])
    got = step_both(backend, reference, ledger, ref_ledger, [1.0, 2.0], terminated=[0], truncated=[0])
    assert got == (1, 1, 3)
    assert ledger.finished_out[0] == 0 and ledger.reset_out[0] == 0
    assert ledger.slot_episode.tolist() == [2, 1]
    assert ledger.res_len[0] == 2 and ledger.res_sum[0] == 2.0


def test_all_negative_rewards_give_the_true_max(backend, reference):
    ledger = Ledger(1, 1)
    ref_ledger = ledger.copy()
    for reward in (-3.0, -1.5, -2.0):
        step_both(backend, reference, ledger, ref_ledger, [reward])
    step_both(backend, reference, ledger, ref_ledger, [-7.0], terminated=[0])
    assert ledger.res_max[0] == -1.5
    assert ledger.res_sum[0] == -13.5


def test_nan_reward_makes_sum_and_max_nan(backend, reference):
    ledger = Ledger(1, 1)
    ref_ledger = ledger.copy()
    step_both(backend, reference, ledger, ref_ledger, [1.0])
    step_both(backend, reference, ledger, ref_ledger, [math.nan])
    step_both(backend, reference, ledger, ref_ledger, [5.0], terminated=[0])
    assert math.isnan(ledger.res_sum[0]) and math.isnan(ledger.res_max[0])
    assert ledger.res_nan[0] == 1 and ledger.res_len[0] == 3


def test_one_slot_finishes_while_others_continue(backend, reference):
    ledger = Ledger(3, 5)
    ref_ledger = ledger.copy()
    step_both(backend, reference, ledger, ref_ledger, [1.0, 2.0, 3.0], success=[2])
    got = step_both(backend, reference, ledger, ref_ledger, [1.0, 2.0, 3.0], terminated=[1])
    assert got == (1, 1, 4)
    assert ledger.slot_episode.tolist() == [0, 3, 2]
    assert ledger.finished_out[0] == 1 and ledger.reset_out[0] == 1
    assert ledger.res_sum[1] == 4.0 and ledger.res_len[1] == 2
    assert ledger.acc_sum.tolist() == [2.0, 0.0, 6.0]
    assert ledger.acc_len.tolist() == [2, 0, 2]
    assert ledger.acc_success.tolist() == [False, False, True]
    assert ledger.finished_out[1:].tolist() == [-7, -7] and ledger.reset_out[1:].tolist() == [-7, -7]


def test_several_slots_finish_in_slot_order(backend, reference):
    ledger = Ledger(4, 5)
    ref_ledger = ledger.copy()
    got = step_both(backend, reference, ledger, ref_ledger, [0.0, 1.0, 2.0, 3.0], terminated=[3, 0, 2])
    assert got == (3, 1, 5)
    assert ledger.finished_out[:3].tolist() == [0, 2, 3]
    assert ledger.reset_out[:1].tolist() == [0]
    assert ledger.slot_episode.tolist() == [4, 1, IDLE, IDLE]


def test_wave_mode_leaves_slots_idle(backend, reference):
    ledger = Ledger(2, 6)
    ref_ledger = ledger.copy()
    got = step_both(backend, reference, ledger, ref_ledger, [1.0, 1.0], terminated=[0], refill=False)
    assert got == (1, 0, 2)
    assert ledger.slot_episode.tolist() == [IDLE, 1]
    # an idle slot is ignored entirely, whatever it reports
    got = step_both(backend, reference, ledger, ref_ledger, [math.nan, 2.0], terminated=[0], refill=False)
    assert got == (0, 0, 2)
    assert ledger.acc_nan[0] == 0 and ledger.acc_len.tolist() == [0, 2] and ledger.res_len[0] == 1


def test_max_steps_caps_episode_length(backend, reference):
    ledger = Ledger(2, 3)
    ref_ledger = ledger.copy()
    for _ in range(2):
        assert step_both(backend, reference, ledger, ref_ledger, [1.0, 1.0], max_steps=3)[0] == 0
    got = step_both(backend, reference, ledger, ref_ledger, [1.0, 1.0], max_steps=3)
    assert got == (2, 1, 3)
    assert ledger.res_len[:2].tolist() == [3, 3]
    assert ledger.slot_episode.tolist() == [2, IDLE]


def test_max_steps_zero_means_no_cap(backend, reference):
    ledger = Ledger(1, 1)
    ref_ledger = ledger.copy()
    for _ in range(50):
        assert step_both(backend, reference, ledger, ref_ledger, [0.5], max_steps=0)[0] == 0
    assert ledger.acc_len[0] == 50


def test_refill_stops_when_ledger_runs_out(backend, reference):
    ledger = Ledger(3, 2)  # more slots than episodes: slot 2 starts idle
    ref_ledger = ledger.copy()
    assert ledger.slot_episode.tolist() == [0, 1, IDLE]
    got = step_both(backend, reference, ledger, ref_ledger, [1.0, 1.0, 1.0], terminated=[0, 1, 2])
    assert got == (2, 0, 2)
    assert ledger.slot_episode.tolist() == [IDLE, IDLE, IDLE]


def test_empty_ledger_is_a_no_op(backend, reference):
    ledger = Ledger(4, 0)
    ref_ledger = ledger.copy()
    assert step_both(backend, reference, ledger, ref_ledger, [1.0] * 4, terminated=[0, 1]) == (0, 0, 0)


def test_strided_arrays(backend, reference):
    """Non-contiguous views are read and written in place like contiguous arrays."""
    batch, n_episodes = 5, 12
    rng = np.random.default_rng(1)

    def strided(ledger):  # every array becomes a stride-2 view into a bigger buffer
        for name in STEP_ARRAYS:
            arr = getattr(ledger, name)
            big = np.zeros(2 * arr.size, arr.dtype)
            big[::2] = arr
            setattr(ledger, name, big[::2])
        return ledger

    ledger = strided(Ledger(batch, n_episodes))
    ref_ledger = Ledger(batch, n_episodes)
    for t in range(20):
        rewards = np.repeat(rng.standard_normal(batch), 3)[::3]
        terminated = np.repeat(rng.random(batch) < 0.3, 2)[::2]
        truncated = np.zeros(batch, np.bool_)
        success = np.repeat(rng.random(batch) < 0.3, 2)[1::2]
        got = ledger.step(backend, rewards, terminated, truncated, success, max_steps=4)
        want = ref_ledger.step(reference, rewards, terminated, truncated, success, max_steps=4)
        assert got == want
        ledger.assert_same(ref_ledger, f"step {t}")


def test_read_only_inputs_are_accepted(backend, reference):
    ledger = Ledger(2, 4)
    ref_ledger = ledger.copy()
    rewards = np.array([1.0, -1.0])
    f = flags(2, terminated=[1])
    for arr in (rewards, *f.values()):
        arr.flags.writeable = False
    got = ledger.step(backend, rewards, f["terminated"], f["truncated"], f["success"])
    want = ref_ledger.step(reference, rewards, f["terminated"], f["truncated"], f["success"])
    assert got == want
    ledger.assert_same(ref_ledger)


@pytest.mark.numba
def test_numba_scalar_types_share_one_specialisation():
    numba_ops = require_backend("numba")
    numba_ops.warmup()
    before = len(numba_ops.step_bookkeeping.signatures)
    for max_steps, next_episode, n_episodes, refill in ((0, 1, 3, True), (np.int64(0), np.int64(1), np.int64(3), np.bool_(True))):
        ledger = Ledger(1, 3)
        ledger.next_episode, ledger.n_episodes = next_episode, n_episodes
        ledger.step(numba_ops, np.ones(1), *flags(1, terminated=[0]).values(), max_steps=max_steps, refill=refill)
    assert len(numba_ops.step_bookkeeping.signatures) == before


@pytest.mark.cython
def test_cython_rejects_bad_arrays():
    cy = require_backend("cython")
    f = flags(2)

    def call(ledger, rewards=np.zeros(2), terminated=f["terminated"]):
        return ledger.step(cy, rewards, terminated, f["truncated"], f["success"])

    with pytest.raises(ValueError, match="float64"):
        call(Ledger(2, 2), rewards=np.zeros(2, np.float32))
    with pytest.raises(TypeError, match="ndarray"):
        call(Ledger(2, 2), rewards=[0.0, 0.0])
    with pytest.raises(ValueError, match="bool"):
        call(Ledger(2, 2), terminated=np.zeros(2, np.int8))
    with pytest.raises(ValueError, match="at least 2"):
        call(Ledger(2, 2), rewards=np.zeros(1))
    ledger = Ledger(2, 2)
    ledger.acc_sum.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        call(ledger)
    ledger = Ledger(2, 2)
    ledger.slot_episode[1] = 5  # outside the results table
    with pytest.raises(IndexError, match="episode 5"):
        call(ledger)


# ---------------------------------------------------------------------------- backend selection


def _selected_backend(value: str | None):
    env = dict(os.environ)
    env.pop("FASTEVAL_KERNELS", None)
    if value is not None:
        env["FASTEVAL_KERNELS"] = value
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.run(
        [sys.executable, "-c", "import fasteval.kernels as k; print(k.BACKEND)"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize("value", ["reference", " Reference ", "numba"])
def test_env_var_forces_backend(value):
    if value.strip().lower() == "numba":
        require_backend("numba")
    proc = _selected_backend(value)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == value.strip().lower()


def test_env_var_rejects_unknown_backend():
    proc = _selected_backend("fortran")
    assert proc.returncode != 0
    assert "FASTEVAL_KERNELS" in proc.stderr and "fortran" in proc.stderr
