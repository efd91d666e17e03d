# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Cython backend: the kernels of ``fasteval/kernels/reference.py``, compiled.

Same names, signatures, in-place effects and return values as the reference
(the specification; read its docstrings). Built by ``setup.py`` as
``fasteval.kernels._cython_ops``.

``step_bookkeeping`` runs once per env step, so its per-call cost is what
matters: it takes its arrays as ``ndarray`` objects and reads data pointer,
stride, length and dtype straight from the array struct (a few nanoseconds per
argument) instead of acquiring 16 typed memoryviews (a buffer request, a format
parse and a memoryview object each, ~0.2-0.3 us per argument). The checks a
memoryview would make are all still made: 1-D, dtype (float64 / bool / int64),
native byte order, aligned, writeable for outputs, long enough; any stride,
including non-contiguous views, is fine. NumPy bool arrays are read and written
in place as bytes, without copies. The loops are ``nogil``; the GIL is only
released for very large batches, where doing so costs less than it gains.
"""

cimport numpy as cnp
from libc.math cimport INFINITY, NAN, isnan
from libc.stdint cimport int64_t

cnp.import_array()

IDLE = -1
"""Value of ``slot_episode`` for a slot that runs no episode."""

__all__ = ["IDLE", "step_bookkeeping", "warmup"]

cdef enum:
    _IDLE = -1
    # Below these sizes the loop takes well under a microsecond, less than a
    # GIL release/re-acquire round trip can cost when other threads are busy.
    _NOGIL_MIN_SLOTS = 4096

cdef enum _Kind:
    K_F64 = 0
    K_BOOL = 1
    K_I64 = 2

cdef struct Vec:
    char* p          # data pointer
    Py_ssize_t s     # stride in bytes
    Py_ssize_t n     # length


cdef inline double* _f(Vec v, Py_ssize_t i) noexcept nogil:
    return <double*>(v.p + i * v.s)

cdef inline unsigned char* _b(Vec v, Py_ssize_t i) noexcept nogil:
    return <unsigned char*>(v.p + i * v.s)

cdef inline int64_t* _i(Vec v, Py_ssize_t i) noexcept nogil:
    return <int64_t*>(v.p + i * v.s)


cdef object _bad_array(object arr, str name, int kind, bint writable):
    kinds = ("float64", "bool", "int64")
    if not isinstance(arr, cnp.ndarray):
        return TypeError(f"{name} must be a numpy.ndarray of {kinds[kind]}, not {type(arr).__name__}")
    if arr.ndim != 1:
        return ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if writable and not arr.flags.writeable:
        return ValueError(f"{name} is read-only; it is written in place")
    return ValueError(
        f"{name} must be an aligned, native-byte-order {kinds[kind]} array, got dtype {arr.dtype}"
    )


cdef inline int _vec(object obj, Vec* v, int kind, bint writable, str name) except -1:
    """Fill ``v`` from the 1-D ndarray ``obj`` after checking it, or raise."""
    cdef cnp.ndarray a
    cdef int t
    cdef bint ok
    if not isinstance(obj, cnp.ndarray):
        raise _bad_array(obj, name, kind, writable)
    a = <cnp.ndarray>obj
    t = cnp.PyArray_TYPE(a)
    if kind == K_F64:
        ok = t == cnp.NPY_DOUBLE
    elif kind == K_BOOL:
        ok = t == cnp.NPY_BOOL
    else:
        ok = (t == cnp.NPY_LONG or t == cnp.NPY_LONGLONG) and cnp.PyArray_ITEMSIZE(a) == 8
    ok = ok and cnp.PyArray_NDIM(a) == 1 and cnp.PyArray_ISBEHAVED_RO(a)
    if writable:
        ok = ok and cnp.PyArray_ISWRITEABLE(a)
    if not ok:
        raise _bad_array(obj, name, kind, writable)
    v.p = <char*>cnp.PyArray_DATA(a)
    v.s = cnp.PyArray_STRIDE(a, 0)
    v.n = cnp.PyArray_DIM(a, 0)
    return 0


cdef inline int _need(Vec v, Py_ssize_t n, str name, str what) except -1:
    if v.n < n:
        raise ValueError(f"{name} has length {v.n}, needs at least {n} ({what})")
    return 0


cdef struct StepArrays:
    Vec rewards, terminated, truncated, success, slot_episode
    Vec acc_sum, acc_max, acc_len, acc_success, acc_nan
    Vec res_sum, res_max, res_len, res_success, res_nan
    Vec finished_out, reset_out


cdef Py_ssize_t _step_core(
    StepArrays* a,
    Py_ssize_t n_slots,
    Py_ssize_t n_res,
    int64_t max_steps,
    int64_t* next_episode,
    int64_t n_episodes,
    bint refill,
    Py_ssize_t* n_reset_out,
    Py_ssize_t* bad_slot,
) noexcept nogil:
    """The loop of reference.step_bookkeeping. Returns n_finished, or -1 (and the
    offending slot in ``bad_slot``) if a slot holds an episode outside ``[0, n_res)``."""
    cdef Py_ssize_t slot, n_finished = 0, n_reset = 0
    cdef int64_t episode, nxt = next_episode[0]
    cdef double reward
    cdef bint done
    for slot in range(n_slots):
        episode = _i(a.slot_episode, slot)[0]
        if episode == _IDLE:
            continue
        if episode < 0 or episode >= n_res:
            bad_slot[0] = slot
            next_episode[0] = nxt
            n_reset_out[0] = n_reset
            return -1
        reward = _f(a.rewards, slot)[0]
        _f(a.acc_sum, slot)[0] += reward
        if isnan(reward):
            _i(a.acc_nan, slot)[0] += 1
            _f(a.acc_max, slot)[0] = NAN
        elif reward > _f(a.acc_max, slot)[0]:
            _f(a.acc_max, slot)[0] = reward
        _i(a.acc_len, slot)[0] += 1
        if _b(a.success, slot)[0]:
            _b(a.acc_success, slot)[0] = 1
        done = _b(a.terminated, slot)[0] != 0 or _b(a.truncated, slot)[0] != 0
        if max_steps > 0 and _i(a.acc_len, slot)[0] >= max_steps:
            done = True
        if not done:
            continue
        _f(a.res_sum, episode)[0] = _f(a.acc_sum, slot)[0]
        _f(a.res_max, episode)[0] = _f(a.acc_max, slot)[0]
        _i(a.res_len, episode)[0] = _i(a.acc_len, slot)[0]
        _b(a.res_success, episode)[0] = 1 if _b(a.acc_success, slot)[0] else 0
        _i(a.res_nan, episode)[0] = _i(a.acc_nan, slot)[0]
        _i(a.finished_out, n_finished)[0] = episode
        n_finished += 1
        _f(a.acc_sum, slot)[0] = 0.0
        _f(a.acc_max, slot)[0] = -INFINITY
        _i(a.acc_len, slot)[0] = 0
        _b(a.acc_success, slot)[0] = 0
        _i(a.acc_nan, slot)[0] = 0
        if refill and nxt < n_episodes:
            _i(a.slot_episode, slot)[0] = nxt
            nxt += 1
            _i(a.reset_out, n_reset)[0] = slot
            n_reset += 1
        else:
            _i(a.slot_episode, slot)[0] = _IDLE
    next_episode[0] = nxt
    n_reset_out[0] = n_reset
    return n_finished


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
    int64_t max_steps,
    res_sum,
    res_max,
    res_len,
    res_success,
    res_nan,
    int64_t next_episode,
    int64_t n_episodes,
    bint refill,
    finished_out,
    reset_out,
):
    """Fold one env step into per-slot accumulators; retire finished episodes.

    See ``fasteval.kernels.reference.step_bookkeeping`` for the contract.
    Returns ``(n_finished, n_reset, next_episode)``.
    """
    cdef StepArrays a
    cdef Py_ssize_t n_slots, n_res, n_finished, n_reset = 0, bad_slot = -1
    _vec(slot_episode, &a.slot_episode, K_I64, True, "slot_episode")
    _vec(rewards, &a.rewards, K_F64, False, "rewards")
    _vec(terminated, &a.terminated, K_BOOL, False, "terminated")
    _vec(truncated, &a.truncated, K_BOOL, False, "truncated")
    _vec(success, &a.success, K_BOOL, False, "success")
    _vec(acc_sum, &a.acc_sum, K_F64, True, "acc_sum")
    _vec(acc_max, &a.acc_max, K_F64, True, "acc_max")
    _vec(acc_len, &a.acc_len, K_I64, True, "acc_len")
    _vec(acc_success, &a.acc_success, K_BOOL, True, "acc_success")
    _vec(acc_nan, &a.acc_nan, K_I64, True, "acc_nan")
    _vec(res_sum, &a.res_sum, K_F64, True, "res_sum")
    _vec(res_max, &a.res_max, K_F64, True, "res_max")
    _vec(res_len, &a.res_len, K_I64, True, "res_len")
    _vec(res_success, &a.res_success, K_BOOL, True, "res_success")
    _vec(res_nan, &a.res_nan, K_I64, True, "res_nan")
    _vec(finished_out, &a.finished_out, K_I64, True, "finished_out")
    _vec(reset_out, &a.reset_out, K_I64, True, "reset_out")

    n_slots = a.slot_episode.n
    if (
        a.rewards.n < n_slots or a.terminated.n < n_slots or a.truncated.n < n_slots
        or a.success.n < n_slots or a.acc_sum.n < n_slots or a.acc_max.n < n_slots
        or a.acc_len.n < n_slots or a.acc_success.n < n_slots or a.acc_nan.n < n_slots
        or a.finished_out.n < n_slots or a.reset_out.n < n_slots
    ):
        _need(a.rewards, n_slots, "rewards", "one entry per slot")
        _need(a.terminated, n_slots, "terminated", "one entry per slot")
        _need(a.truncated, n_slots, "truncated", "one entry per slot")
        _need(a.success, n_slots, "success", "one entry per slot")
        _need(a.acc_sum, n_slots, "acc_sum", "one entry per slot")
        _need(a.acc_max, n_slots, "acc_max", "one entry per slot")
        _need(a.acc_len, n_slots, "acc_len", "one entry per slot")
        _need(a.acc_success, n_slots, "acc_success", "one entry per slot")
        _need(a.acc_nan, n_slots, "acc_nan", "one entry per slot")
        _need(a.finished_out, n_slots, "finished_out", "one entry per slot")
        _need(a.reset_out, n_slots, "reset_out", "one entry per slot")
    n_res = min(a.res_sum.n, a.res_max.n, a.res_len.n, a.res_success.n, a.res_nan.n)

    if n_slots >= _NOGIL_MIN_SLOTS:
        with nogil:
            n_finished = _step_core(
                &a, n_slots, n_res, max_steps, &next_episode, n_episodes, refill, &n_reset, &bad_slot
            )
    else:
        n_finished = _step_core(
            &a, n_slots, n_res, max_steps, &next_episode, n_episodes, refill, &n_reset, &bad_slot
        )
    if n_finished < 0:
        raise IndexError(
            f"slot {bad_slot} holds episode {_i(a.slot_episode, bad_slot)[0]}, outside the "
            f"results table (length {n_res})"
        )
    return n_finished, n_reset, next_episode


def warmup():
    """No-op: compiled ahead of time (present for symmetry with the Numba backend)."""
    return None
