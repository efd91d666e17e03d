"""Pipelining (``--pipeline``): two groups of slots, double-buffered.

The slots split into group A (the first half) and group B. While A's envs step in their
async workers, the policy runs on B's observations, and the other way round: the
double-buffering of Sample Factory and EnvPool. It pays when an env step and a policy
call cost about the same; it needs async envs (sync envs step in this process, so there is
nothing to overlap with).

The step sequence itself is the plain loop's (:mod:`fasteval.core.loop`) with two groups
instead of one; this module decides the groups and checks that a setup can be pipelined.

Per-episode results are identical to the plain loop: each episode still runs in one slot
from its own seed, the policy sees the same observation rows, and the ledger hands out
episodes in the same index order. Rules:

* the policy must be stateless (no ``reset``): it is called with alternating half batches,
  so per-slot state could not be kept apart;
* continuous batching only (no wave mode);
* the groups are made of whole env-worker blocks (``SlotEnvs.groups``), so one group's step never
  queues behind the other's in a shared worker; a crashed worker restarts only its own block's
  episodes, from their seeds.
"""

from __future__ import annotations

from fasteval.core.policy import PolicyRunner
from fasteval.core.slots import SlotEnvs
from fasteval.types.errors import UserInputError


def group_rows(envs: SlotEnvs, pipeline: bool) -> list[slice]:
    """The slot groups of a run: all slots in one group, or two groups of whole worker blocks."""
    if not pipeline:
        return [slice(0, envs.n_slots)]
    return envs.groups(2)


def policy_batch(groups: list[slice]) -> int:
    """Rows per policy call: the largest group."""
    return max(rows.stop - rows.start for rows in groups)


def check_pipelinable(envs: SlotEnvs, runner: PolicyRunner, n_slots: int, batch_size: int | None = None) -> None:
    """Raise a clear error when ``--pipeline`` cannot work for this setup (``batch_size``: the one asked
    for, which ``n_slots`` caps at the number of episodes)."""
    if not envs.overlaps:
        raise UserInputError("--pipeline needs --vectorization async: sync envs step in this process, so there is "
                             "nothing to overlap the policy with.")
    if n_slots < 2:
        capped = (f"batch size {batch_size} capped at the {n_slots} episode to run (-n {n_slots})"
                  if batch_size is not None and batch_size > n_slots else f"batch size {n_slots}")
        raise UserInputError(f"--pipeline needs at least 2 env slots (two groups); got {capped}. Run at least 2 "
                             f"episodes with --batch-size 2 or more, or drop --pipeline.")
    if runner.capabilities.per_slot_state:
        raise UserInputError(
            f"--pipeline needs a stateless policy (no reset method); {type(runner.policy).__name__} has reset(), and its "
            f"per-slot state cannot be kept apart when it is called with alternating half batches. Drop --pipeline."
        )
