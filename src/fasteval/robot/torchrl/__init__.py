"""TorchRL envs in fasteval (:mod:`.envs`): single envs one per slot, batched envs as their own slots. TorchRL's
actors are policies like any TensorDict module (:mod:`fasteval.robot.policies.torchrl_actors`). Nothing here
imports TorchRL until a TorchRL object is handed over."""
