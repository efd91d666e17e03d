"""Per-episode noise for policies that sample from torch's global generator (TorchRL actors under random
exploration, SB3 policies with ``deterministic=False``).

Such a policy draws its noise with ``dist.sample()``, which reads the default generator of the tensor's
device. Called on a batch, row ``r``'s draw then depends on how many rows came before it, so the numbers of
an episode would depend on the batch size and on the other slots. :class:`EpisodeNoise` keeps one generator
state per slot, seeded with the seed of the episode the slot runs (``reset(env_ids, seeds)``), and calls the
policy **one row at a time**, with the device's default generator swapped for that row's state (and put back
afterwards). Episode ``i``'s draws are then the draws of a generator seeded with ``seed + i``, in the order
of its own steps: the same at every batch size, in any finishing order. Rows that run no episode advance
only their own (unseeded) state.

The price is one policy call per row instead of one per batch (batch-1 calls: no matmul rounding across
rows either). A CUDA graph would replay the draws of capture time, so these policies are never captured
(their per-slot ``reset`` already says so to the engine).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch


def default_generator(device: torch.device) -> torch.Generator:
    """The generator ``torch.rand`` & co. read on ``device`` (CPU, or that CUDA device's)."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return torch.cuda.default_generators[index]
    return torch.default_generator


class EpisodeNoise:
    """One generator state per slot (``n_slots``), seeded per episode; see the module docstring."""

    def __init__(self, n_slots: int):
        self.n_slots = n_slots
        self.device: torch.device | None = None
        self.states: list[torch.Tensor] = []
        self.seeds: dict[int, int] = {}
        """The seed each slot's episode started with (kept to re-seed on another device)."""

    def _on(self, device: torch.device) -> None:
        if self.device != device:
            self.device = device
            fresh = torch.Generator(device=device).get_state()
            self.states = [fresh.clone() for _ in range(self.n_slots)]
            for slot, seed in self.seeds.items():
                self._seed(slot, seed)

    def _seed(self, slot: int, seed: int) -> None:
        gen = torch.Generator(device=self.device)
        gen.manual_seed(seed)
        self.states[slot] = gen.get_state()

    def reset(self, env_ids: Any, seeds: Sequence[int] | None) -> None:
        """Slots ``env_ids`` start episodes with ``seeds``: their generators restart from those seeds."""
        if seeds is None:
            return
        for slot, seed in zip(torch.as_tensor(env_ids).tolist(), seeds):
            self.seeds[int(slot)] = int(seed)
            if self.device is not None:
                self._seed(int(slot), int(seed))

    def per_row(self, call: Callable[[int], Any], n_rows: int, device: torch.device) -> list[Any]:
        """``[call(r) for r in range(n_rows)]``, row ``r`` drawing from slot ``r``'s generator."""
        self._on(device)
        gen = default_generator(device)
        saved = gen.get_state()
        out = []
        try:
            for row in range(n_rows):
                gen.set_state(self.states[row])
                out.append(call(row))
                self.states[row] = gen.get_state()
        finally:
            gen.set_state(saved)
        return out
