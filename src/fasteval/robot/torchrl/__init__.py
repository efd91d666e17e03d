"""TorchRL in fasteval: its envs as slot envs (:mod:`.envs`) and its actors under a chosen exploration type
(:mod:`.actors`). Nothing here imports TorchRL until a TorchRL object is actually handed over."""
