"""Type stub for the compiled Cython backend (``csrc/_cython_ops.pyx``).

Contracts: see :mod:`fasteval.kernels.reference`.
"""

from typing import Final, SupportsIndex

import numpy as np
import numpy.typing as npt

IDLE: Final[int]

_F64 = npt.NDArray[np.float64]
_BOOL = npt.NDArray[np.bool_]
_I64 = npt.NDArray[np.int64]

def step_bookkeeping(
    rewards: _F64,
    terminated: _BOOL,
    truncated: _BOOL,
    success: _BOOL,
    slot_episode: _I64,
    acc_sum: _F64,
    acc_max: _F64,
    acc_len: _I64,
    acc_success: _BOOL,
    acc_nan: _I64,
    max_steps: SupportsIndex,
    res_sum: _F64,
    res_max: _F64,
    res_len: _I64,
    res_success: _BOOL,
    res_nan: _I64,
    next_episode: SupportsIndex,
    n_episodes: SupportsIndex,
    refill: bool | np.bool_,
    finished_out: _I64,
    reset_out: _I64,
) -> tuple[int, int, int]: ...
def warmup() -> None: ...
