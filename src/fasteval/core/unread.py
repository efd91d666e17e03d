"""Observations nobody reads: the run's one decision, and the marker written in their place.

A chunking policy reads one observation per ``n_action_steps`` steps, yet an env computes one every step,
and for a pixel env that is most of the step (a render). Rendering does not change the physics, so an
env that skips the frame of a step whose observation is not read runs the same episode. Three parts meet:

* the **runner** says, after each call, which slots' next observation its next call reads
  (``runner.observation_reads()``, declared by ``capabilities.reads_per_slot``; a runner that cannot tell
  declares nothing, and every observation is read);
* the **env kind** says how a built env steps without its observation's work (``EnvKinds.unread_step``,
  declared per kind of env in :mod:`fasteval.robot.env_kinds.unread`, never probed by trying), or that it
  cannot;
* the **slot envs** step each slot with the kind's unread step when its observation is not read
  (:meth:`fasteval.core.slot_block.SlotBlock.step_reading`, in this process or in each pool worker, with the
  per-slot flags in the pool's shared memory), and write :func:`marker_writer`'s marker into that slot's
  row of the observation buffer instead of the observation: a policy that read it anyway would see an
  image of the dtype's largest value and NaN numbers, not a plausible stale frame.

Whether anything is skipped is decided once per run (:func:`skip_decision`, reported as
``meta["unread_observations"]``; ``FASTEVAL_NO_UNREAD_SKIP=1`` turns it off); the loop then binds a send
that passes the flags, and otherwise does exactly what it did before. Resets are never skipped: the first
observation of an episode is always read. What the policy reads is computed exactly as without skipping.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np

from fasteval.core.capabilities import Capabilities

ON = "on"
OFF_VARIABLE = "FASTEVAL_NO_UNREAD_SKIP"
"""Set to ``1`` to compute every observation (the run's decision says ``off (FASTEVAL_NO_UNREAD_SKIP=1)``)."""


def skip_decision(capabilities: Capabilities, observer: Any, envs: Any) -> str:
    """Whether this run skips unread observations: ``"on"``, or ``"off (why)"``. Turns the envs' skipping on or off
    (``envs.skip_unread``): on only when the runner tells its reads per slot, no observer that reads the
    observations is given (the engine passes only one that does: :func:`fasteval.core.protocols.reads_observations`;
    episode data and videos rendered during the run read every step), and the env kind can skip for every slot."""
    if os.environ.get(OFF_VARIABLE, "") not in ("", "0"):
        why = f"{OFF_VARIABLE}={os.environ[OFF_VARIABLE]}"
    elif not capabilities.reads_per_slot:
        why = "the policy reads every observation, or cannot tell which it reads"
    elif observer is not None:
        why = "a recorder reads every observation"
    else:
        why = None
    if why is not None:
        envs.skip_unread(False)
        return f"off ({why})"
    if not envs.skip_unread(True):
        return "off (the env cannot skip an observation's work)"
    return ON


def marker_value(dtype: np.dtype) -> Any:
    """What an unread observation's row holds: NaN for floats, the largest value for integers, True for booleans."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f" or dtype.kind == "c":
        return np.nan
    if dtype.kind in "iu":
        return np.iinfo(dtype).max
    if dtype.kind == "b":
        return True
    return 0


def marker_writer(obs: Any) -> Callable[[int], None]:
    """``mark(slot)``: fill ``slot``'s row of ``obs`` (an array, or a dict of arrays) with :func:`marker_value`."""
    arrays = list(obs.values()) if isinstance(obs, dict) else [obs]
    rows = [([a[slot, ...] for slot in range(a.shape[0])], marker_value(a.dtype)) for a in arrays]

    def mark(slot: int) -> None:
        for views, value in rows:
            views[slot][...] = value

    return mark


def is_marked(row: Any) -> bool:
    """Whether an observation row (an array, or a dict of arrays) holds the unread marker everywhere (for tests)."""
    arrays = list(row.values()) if isinstance(row, dict) else [row]
    for a in arrays:
        a = np.asarray(a)
        value = marker_value(a.dtype)
        if not (np.isnan(a).all() if isinstance(value, float) else (a == value).all()):
            return False
    return True
