"""TorchRL envs as fasteval slot envs.

A TorchRL ``EnvBase`` reaches the engine in one of three ways: as a live object
(``evaluate(env=GymEnv("CartPole-v1"))``), as a zero-argument factory of one
(``evaluate(env=lambda: GymEnv("CartPole-v1"))``), or from the command line by its constructor
(``--env torchrl.envs:GymEnv --env-kwarg env_name=CartPole-v1``, under the trust rules of
:mod:`fasteval.types.trust`). :func:`adapt_env` turns it into what the engine steps:

* **A single env** (``env.batch_size == ()``) becomes one slot: a :class:`TorchRLGymEnv`, a
  ``gymnasium.Env`` whose spaces follow the TorchRL specs. Each slot has its own env (a factory is
  called once per slot; a live instance is deep-copied per slot, so the caller's object is never
  stepped, reset or closed). Episode ``i`` starts with ``env.set_seed(seed + i)`` and
  ``env.reset()``: its numbers depend on its seed only, whatever the batch size. One exception keeps
  TorchRL's gym wrappers (``GymEnv``, ``GymWrapper``, also inside a ``TransformedEnv``) exact: their
  ``set_seed(s)`` is itself ``reset(seed=s)`` on the gymnasium env, with the observation thrown
  away, so a ``reset()`` after it would start from the *second* draw of the seeded generator. For
  those the reset is ``env.reset(seed=s)`` (after ``set_seed(s)``), and episode ``i`` of
  ``GymEnv("CartPole-v1")`` is episode ``i`` of ``CartPole-v1`` (``tests/test_torchrl_envs.py``).
* **A batched env** (``ParallelEnv``, ``SerialEnv``, or any env with a batch size, such as Brax or
  MJX) steps its own workers, and its workers cannot be reset with a seed each: it becomes
  :class:`TorchRLBatchedEnvs`, whose slots are its workers (``min(batch_size, workers)`` of them;
  the others stay idle). At the start of every run it is seeded once, ``env.set_seed(seed)``, and
  each worker then draws its episodes from its own stream: a run is reproducible for the same
  seed, batch size and env, but episode ``i`` is not a function of ``seed + i``. The run says so:
  ``meta["seeding"]`` is ``"per worker, not per episode"`` (:data:`PER_WORKER`), shown in the summary,
  in ``eval_info.json`` and on the run page. Only ``vectorization="sync"``: the env's own workers are
  its parallelism. Slots step with TorchRL's partial steps (``"_step"``) and reset with partial
  resets (``"_reset"``).

Spaces: ``Bounded`` / ``Unbounded`` become ``Box`` (integer ``Unbounded`` with the dtype's limits),
``Categorical`` of shape ``()`` or ``(1,)`` and ``OneHot`` become ``Discrete`` (the adapter turns the
index back into a one-hot action), ``MultiCategorical`` becomes ``MultiDiscrete``, ``Binary``
becomes ``MultiBinary``. Observations: an env whose only observation key is ``"observation"`` gives
arrays; any other set of keys gives a ``Dict`` space of those keys (nested keys are refused). The
reward is ``float(next["reward"])`` (TorchRL's reward dtype, float32 for gym envs, so a float64 env
reward is rounded once by TorchRL itself); ``terminated`` and ``truncated`` come from the done
keys (an env with only ``"done"`` has ``terminated = done``); a ``"success"`` entry, where the env
has one, is ``info["is_success"]``.
"""

from __future__ import annotations

import copy
import os
import sys
from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np

from fasteval.core.slots import PER_WORKER, SlotEnvs, SlotEnvsSource, _failure, _obs_writer, allocate_obs_buffer
from fasteval.types.errors import UserInputError

OBSERVATION = "observation"
ACTION_ONE_HOT = "fasteval_action_one_hot"
"""``metadata`` key of a slot env whose env takes one-hot actions (TorchRL's ``OneHot`` spec): ``{"n": n, "dtype":
"int64"}``. The engine sends the index (a ``Discrete`` space); saved episodes store the one-hot action, the env's
own encoding, as TorchRL's collectors write it (:mod:`fasteval.robot.recording`)."""


def is_torchrl_env(obj: Any) -> bool:
    """Whether ``obj`` is a TorchRL ``EnvBase`` (without importing TorchRL: if ``torchrl.envs`` was never
    imported, nothing can be one of its envs)."""
    envs = sys.modules.get("torchrl.envs")
    return envs is not None and isinstance(obj, envs.EnvBase)


def adapt_env(obj: Any, built: bool) -> Any:
    """What the engine steps for ``obj``: a ``gymnasium.Env`` for one slot, or a
    :class:`~fasteval.core.slots.SlotEnvsSource` for a batched env; ``None`` if ``obj`` is neither a
    TorchRL env nor a factory of one (or of a gymnasium env).

    ``built``: ``obj`` was just made for this engine (by a ``module:callable`` reference), so the engine
    owns it. Otherwise it is the caller's live object: a single env is deep-copied (the copy is the
    engine's to step and close), a factory is called, and a batched env is used as it is and left open.
    """
    if is_torchrl_env(obj):
        if _is_batched(obj):
            return BatchedSource(obj, owned=built)
        return single_env(obj if built else _copy(obj))
    if built or not callable(obj):
        return None
    made = obj()  # a live factory (a function, a lambda, a class)
    if isinstance(made, gym.Env):
        return made
    if is_torchrl_env(made):
        return adapt_env(made, built=True)
    raise UserInputError(f"env factory {_name(obj)} returned {type(made).__name__}; expected a TorchRL EnvBase or a "
                         f"gymnasium.Env.")


def _copy(env: Any) -> Any:
    try:
        return copy.deepcopy(env)
    except Exception as exc:
        raise UserInputError(
            f"the TorchRL env {type(env).__name__} is one env, and fasteval steps a copy of it per slot, but it cannot be "
            f"deep-copied ({type(exc).__name__}: {exc}). Pass a factory instead, e.g. env=lambda: {type(env).__name__}(...)."
        ) from None


def _name(obj: Any) -> str:
    return getattr(obj, "__qualname__", None) or type(obj).__name__


def _is_batched(env: Any) -> bool:
    return len(env.batch_size) > 0


# -- specs -> spaces -----------------------------------------------------------------------------------
def numpy_dtype(dtype: Any) -> np.dtype:
    """The NumPy dtype of a torch dtype."""
    import torch

    return torch.empty((), dtype=dtype).numpy().dtype


def spec_to_space(spec: Any, what: str) -> gym.Space:
    """The gymnasium space of one TorchRL leaf spec (see the module docstring)."""
    from torchrl.data import Binary, Bounded, Categorical, MultiCategorical, MultiOneHot, OneHot, Unbounded

    shape = tuple(spec.shape)
    dtype = numpy_dtype(spec.dtype)
    if isinstance(spec, OneHot):
        return gym.spaces.Discrete(int(spec.space.n))
    if isinstance(spec, Binary):
        return gym.spaces.MultiBinary(list(shape))
    if isinstance(spec, MultiOneHot):
        return gym.spaces.MultiDiscrete([int(n) for n in spec.nvec])
    if isinstance(spec, MultiCategorical):
        return gym.spaces.MultiDiscrete(np.asarray(spec.nvec.cpu()).reshape(shape))
    if isinstance(spec, Categorical):
        if shape in ((), (1,)):
            return gym.spaces.Discrete(int(spec.space.n))
        return gym.spaces.MultiDiscrete(np.full(shape, int(spec.space.n)))
    if isinstance(spec, Bounded):
        low = np.asarray(spec.space.low.cpu(), dtype=dtype)
        high = np.asarray(spec.space.high.cpu(), dtype=dtype)
        return gym.spaces.Box(low, high, shape=shape, dtype=dtype)
    if isinstance(spec, Unbounded):
        if np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            return gym.spaces.Box(info.min, info.max, shape=shape, dtype=dtype)
        if dtype == np.bool_:
            return gym.spaces.MultiBinary(list(shape))
        return gym.spaces.Box(-np.inf, np.inf, shape=shape, dtype=dtype)
    raise UserInputError(f"TorchRL {what} spec {type(spec).__name__} has no gymnasium space fasteval knows; expected "
                         f"Bounded, Unbounded, Categorical, OneHot, MultiCategorical, MultiOneHot or Binary.")


def observation_keys(spec: Any) -> list[str]:
    """The observation keys of a Composite observation spec (flat string keys only)."""
    keys = list(spec.keys(True, True))
    nested = [k for k in keys if not isinstance(k, str)]
    if nested:
        raise UserInputError(f"the TorchRL env has nested observation keys {nested}; fasteval reads flat keys. "
                             f"Flatten them with TorchRL's FlattenObservation / RenameTransform first.")
    if not keys:
        raise UserInputError("the TorchRL env has no observation keys.")
    return keys


def observation_space(spec: Any) -> tuple[gym.Space, list[str]]:
    """``(space, keys)``: an array space for the single key ``"observation"``, else a ``Dict`` of the keys."""
    keys = observation_keys(spec)
    if keys == [OBSERVATION]:
        return spec_to_space(spec[OBSERVATION], "observation"), keys
    return gym.spaces.Dict({k: spec_to_space(spec[k], f"observation {k!r}") for k in keys}), keys


class EnvKeys:
    """The keys, spaces and action encoder of a TorchRL env (one worker's view), read once."""

    def __init__(self, env: Any, batched: bool):
        pick = (lambda s: s[(0,) * len(env.batch_size)]) if batched else (lambda s: s)
        if len(env.action_keys) != 1 or len(env.reward_keys) != 1:
            raise UserInputError(f"the TorchRL env has action keys {env.action_keys} and reward keys {env.reward_keys}; "
                                 f"fasteval evaluates envs with one action and one reward (no multi-agent envs).")
        self.observation_space, self.obs_keys = observation_space(pick(env.observation_spec))
        self.action_key, self.reward_key = env.action_key, env.reward_key
        action_spec = pick(env.full_action_spec[self.action_key])
        self.action_space = spec_to_space(action_spec, "action")
        self.encode_action = _action_encoder(action_spec, self.action_space)
        self.action_meta = _action_meta(action_spec)
        reward_spec = pick(env.full_reward_spec[self.reward_key])
        if int(np.prod(reward_spec.shape)) != 1:
            raise UserInputError(f"the TorchRL env's reward has shape {tuple(reward_spec.shape)}; fasteval sums one scalar "
                                 f"reward per step.")
        done_keys = set(env.done_keys)
        self.terminated_key = "terminated" if "terminated" in done_keys else "done"
        self.truncated_key = "truncated" if "truncated" in done_keys else None
        self.success_key = "success" if "success" in set(env.full_observation_spec.keys()) | done_keys else None
        self.array = not isinstance(self.observation_space, gym.spaces.Dict)


def _action_meta(spec: Any) -> dict[str, Any]:
    """``{ACTION_ONE_HOT: {"n", "dtype"}}`` for a ``OneHot`` action spec, else ``{}``."""
    from torchrl.data import OneHot

    if not isinstance(spec, OneHot):
        return {}
    return {ACTION_ONE_HOT: {"n": int(spec.space.n), "dtype": str(spec.dtype).removeprefix("torch.")}}


def _action_encoder(spec: Any, space: gym.Space) -> Callable[[Any], Any]:
    """``encode(action) -> tensor`` in the spec's shape and dtype (a Discrete index becomes one-hot for ``OneHot``)."""
    import torch
    from torchrl.data import OneHot

    shape, dtype, device = tuple(spec.shape), spec.dtype, spec.device
    if isinstance(spec, OneHot):
        eye = torch.eye(int(spec.space.n), dtype=dtype, device=device)
        return lambda a: eye[int(a)]
    if isinstance(space, gym.spaces.Discrete):
        return lambda a: torch.tensor(int(a), dtype=dtype, device=device).reshape(shape)
    return lambda a: torch.as_tensor(np.asarray(a), device=device).to(dtype).reshape(shape)


def inner_gym_env(env: Any) -> Any:
    """The gymnasium env inside one of TorchRL's gym wrappers (through its transforms: the wrapper's ``_env``),
    or ``None`` for any other TorchRL env."""
    from torchrl.envs.libs.gym import GymWrapper

    base = env
    while hasattr(base, "base_env"):
        base = base.base_env
    return base._env if isinstance(base, GymWrapper) else None


def takes_seeded_reset(env: Any) -> bool:
    """Whether ``env`` (through its transforms) is one of TorchRL's gym wrappers, whose ``set_seed(s)`` is a
    ``reset(seed=s)`` of the gymnasium env (see the module docstring)."""
    from torchrl.envs.libs.gym import GymWrapper

    base = env
    while hasattr(base, "base_env"):
        base = base.base_env
    return isinstance(base, GymWrapper)


# -- running normalization -----------------------------------------------------------------------------
VECNORM_NAMES = ("VecNorm", "VecNormV2")


def env_transforms(env: Any) -> list[Any]:
    """Every transform of ``env`` (through nested ``TransformedEnv`` s and ``Compose`` s), outermost first."""
    from torchrl.envs import Compose, TransformedEnv

    out: list[Any] = []
    base = env
    while isinstance(base, TransformedEnv):
        pending = [base.transform]
        while pending:
            t = pending.pop(0)
            if t is None:
                continue
            if isinstance(t, Compose):
                pending[:0] = list(t.transforms)
            else:
                out.append(t)
        base = base.base_env
    return out


def running_vecnorms(env: Any) -> list[Any]:
    """The ``VecNorm`` transforms of ``env`` whose statistics still update with every step (not frozen)."""
    return [t for t in env_transforms(env) if type(t).__name__ in VECNORM_NAMES and not t.frozen]


def _has_statistics(vecnorm: Any) -> bool:
    """Whether a ``VecNorm`` has seen a step: ``VecNorm`` has no statistics table before (``frozen_copy`` raises),
    ``VecNormV2`` starts with a count of 0 (frozen, both normalize by NaN)."""
    try:
        vecnorm.frozen_copy()
    except RuntimeError:
        return False
    from torchrl.envs.transforms import VecNormV2

    if not isinstance(vecnorm, VecNormV2):  # VecNorm: frozen_copy above raised if it had no statistics
        return True
    count = vecnorm._count
    leaves = list(count.values(True, True)) if hasattr(count, "values") else [count]
    return all(bool((leaf > 0).all()) for leaf in leaves)


def freeze_vecnorms(env: Any, owned: bool = True) -> None:
    """Freeze the running ``VecNorm`` s of ``env``, an env the engine owns (its own copy, or what a factory made),
    with a warning: a running ``VecNorm`` updates its statistics with every evaluation step, so two evaluations
    of the same weights and seeds differ, and each slot's copy would drift apart from the others. Freezing the
    engine's own copy in place is TorchRL's ``VecNorm.frozen_copy()`` (a copy that keeps the statistics and does
    not update them); the caller's env is never touched. A ``VecNorm`` that has no statistics yet (never stepped)
    would normalize by NaN when frozen: refused. ``owned=False`` (a batched env used as it is): warn only."""
    import warnings

    running = running_vecnorms(env)
    if not running:
        return
    if not owned:
        warnings.warn(f"the TorchRL env has a running {type(running[0]).__name__}: its statistics change with every "
                      f"evaluation step, so evaluations of the same weights and seeds differ. Freeze it "
                      f"(vecnorm.freeze(), or build the env with vecnorm.frozen_copy()) for reproducible numbers.",
                      UserWarning, stacklevel=2)
        return
    for t in running:
        if not hasattr(t, "frozen_copy"):  # a TorchRL without frozen statistics
            warnings.warn(f"the TorchRL env has a running {type(t).__name__}, and this TorchRL cannot freeze it "
                          f"(no frozen_copy): evaluations of the same weights and seeds will differ.", UserWarning,
                          stacklevel=2)
            continue
        if not _has_statistics(t):
            raise UserInputError(
                f"the TorchRL env has a running {type(t).__name__} with no statistics yet (it was never stepped): "
                f"fasteval evaluates with frozen statistics (reproducible numbers), and frozen empty ones normalize by "
                f"NaN. Pass an env whose VecNorm holds the training statistics (e.g. the training env's "
                f"vecnorm.frozen_copy() in the eval env's transforms).") from None
        t.freeze()
    warnings.warn(f"the TorchRL env has a running {type(running[0]).__name__}: its statistics change with every step, "
                  f"so evaluations of the same weights and seeds would differ. fasteval evaluates a frozen copy "
                  f"(VecNorm.frozen_copy(): the statistics as they were when the env was copied or made for the engine). "
                  f"Pass a frozen VecNorm to silence this.", UserWarning, stacklevel=2)


# -- one env per slot ----------------------------------------------------------------------------------
class TorchRLGymEnv(gym.Env):
    """One non-batched TorchRL env as a ``gymnasium.Env`` (autoreset never: fasteval owns the episode ends).

    ``reset(seed=s)``: ``env.set_seed(s)``, then ``env.reset()`` (``env.reset(seed=s)`` for TorchRL's gym
    wrappers; module docstring). ``step(a)``: the action encoded into the env's spec, ``env.step``, and
    the next observation, reward and flags read from ``("next", ...)``.
    """

    metadata: dict = {"render_modes": []}

    def __init__(self, env: Any):
        self.env = env
        freeze_vecnorms(env)  # the engine's own env: reproducible numbers
        self.keys = EnvKeys(env, batched=False)
        self.observation_space, self.action_space = self.keys.observation_space, self.keys.action_space
        self.metadata = {"render_modes": [], **self.keys.action_meta}
        self.seeded_reset = takes_seeded_reset(env)
        inner = inner_gym_env(env)
        self.render_mode = inner.render_mode if isinstance(inner, gym.Env) else None
        self._td: Any = None

    def _obs(self, td: Any) -> Any:
        keys = self.keys
        if keys.array:
            return td.get(OBSERVATION).cpu().numpy()
        return {k: td.get(k).cpu().numpy() for k in keys.obs_keys}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        env = self.env
        if seed is None:
            td = env.reset()
        else:
            env.set_seed(int(seed))
            td = env.reset(seed=int(seed)) if self.seeded_reset else env.reset()
        self._td = td
        return self._obs(td), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        keys, td = self.keys, self._td
        td.set(keys.action_key, keys.encode_action(action))
        nxt = self.env.step(td).get("next")
        self._td = nxt
        info = {}
        if keys.success_key is not None:
            info["is_success"] = bool(nxt.get(keys.success_key).any())
        truncated = bool(nxt.get(keys.truncated_key).any()) if keys.truncated_key is not None else False
        return (self._obs(nxt), float(nxt.get(keys.reward_key).sum()), bool(nxt.get(keys.terminated_key).any()),
                truncated, info)

    def render(self) -> Any:
        """The wrapped gymnasium env's frame (TorchRL's gym wrappers made with ``render_mode="rgb_array"``), or
        the last observation's ``"pixels"``; ``None`` otherwise."""
        inner = inner_gym_env(self.env)
        if inner is not None and self.render_mode is not None:
            return inner.render()
        if self._td is not None and "pixels" in self._td.keys():
            return self._td.get("pixels").cpu().numpy()
        return None

    def close(self) -> None:
        if not self.env.is_closed:
            self.env.close()


# -- the fast path: a plain GymEnv steps its gymnasium env directly -----------------------------------------
NO_FAST_PATH = "FASTEVAL_TORCHRL_NO_FAST_PATH"
"""Environment variable: ``1`` steps every TorchRL env through TorchRL (no :class:`DirectGymEnv`)."""


def single_env(env: Any) -> gym.Env:
    """The slot env of one non-batched TorchRL env the engine owns: :class:`DirectGymEnv` where the fast path
    applies (:func:`direct_gym_env`), else :class:`TorchRLGymEnv`."""
    slot = TorchRLGymEnv(env)
    return direct_gym_env(slot) or slot


def direct_gym_env(slot: "TorchRLGymEnv") -> "DirectGymEnv | None":
    """A :class:`DirectGymEnv` for ``slot`` where stepping its gymnasium env directly gives exactly TorchRL's
    numbers, else ``None``. The fast path needs all of: TorchRL's ``GymEnv`` or ``GymWrapper`` itself (no
    ``TransformedEnv``: a transform may change the episode), a gymnasium env inside, no ``frame_skip``, one
    ``"observation"`` key (no pixels, no info readers: no ``"success"``) of the gymnasium space's dtype and
    shape, a ``Discrete`` or ``Box`` action, and ``FASTEVAL_TORCHRL_NO_FAST_PATH`` unset."""
    from torchrl.envs.libs.gym import GymEnv, GymWrapper

    env, keys = slot.env, slot.keys
    if os.environ.get(NO_FAST_PATH) == "1" or type(env) not in (GymEnv, GymWrapper):
        return None
    inner = env._env  # GymEnv and GymWrapper (their own types, checked above) keep the library's env here
    if not isinstance(inner, gym.Env) or env.wrapper_frame_skip != 1:
        return None
    if keys.obs_keys != [OBSERVATION] or keys.success_key is not None or keys.truncated_key is None:
        return None
    space, own = keys.observation_space, inner.observation_space
    if not (isinstance(space, gym.spaces.Box) and isinstance(own, gym.spaces.Box) and space.shape == own.shape
            and space.dtype == own.dtype):
        return None
    action = keys.action_space
    if not isinstance(action, (gym.spaces.Discrete, gym.spaces.Box)) or type(action) is not type(inner.action_space):
        return None
    return DirectGymEnv(slot, inner)


class DirectGymEnv(gym.Env):
    """The fast path of a plain TorchRL ``GymEnv`` / ``GymWrapper``: the gymnasium env inside it, stepped directly
    (TorchRL's TensorDict step costs 10-25x the step of a cheap env), with TorchRL's numbers. ``reset(seed=s)``
    is ``reset(seed=s)`` of the gymnasium env (what ``set_seed(s)`` then the seeded reset of
    :class:`TorchRLGymEnv` amount to); the reward is rounded to TorchRL's reward dtype (float32 for gym envs),
    the observation cast to its spec's dtype; the spaces, the render and the action encoding declared in
    ``metadata`` are TorchRL's. ``tests/test_torchrl_fast_path.py`` checks it equals the TorchRL path."""

    def __init__(self, slot: "TorchRLGymEnv", inner: gym.Env):
        self.slot, self.env = slot, inner
        self.torchrl_env = slot.env
        self.observation_space, self.action_space = slot.observation_space, slot.action_space
        self.metadata = dict(slot.metadata)
        self.render_mode = slot.render_mode
        self._obs_dtype = slot.observation_space.dtype
        self._reward_dtype = numpy_dtype(slot.env.full_reward_spec[slot.keys.reward_key].dtype).type
        if isinstance(self.action_space, gym.spaces.Discrete):
            self._action = int
        else:
            dtype, shape = inner.action_space.dtype, inner.action_space.shape
            self._action = lambda a: np.asarray(a, dtype=dtype).reshape(shape)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        obs, _info = self.env.reset(seed=None if seed is None else int(seed))
        return np.asarray(obs, dtype=self._obs_dtype), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, reward, terminated, truncated, _info = self.env.step(self._action(action))
        return (np.asarray(obs, dtype=self._obs_dtype), float(self._reward_dtype(reward)), bool(terminated),
                bool(truncated), {})

    def render(self) -> Any:
        return self.env.render() if self.render_mode is not None else None

    def close(self) -> None:
        self.slot.close()


# -- a batched env: its workers are the slots ---------------------------------------------------------
class BatchedSource(SlotEnvsSource):
    """A batched TorchRL env, waiting for the engine to say how many slots it needs."""

    def __init__(self, env: Any, owned: bool):
        if len(env.batch_size) != 1:
            raise UserInputError(f"the batched TorchRL env has batch size {tuple(env.batch_size)}; fasteval steps envs "
                                 f"with one batch dimension (its workers).")
        freeze_vecnorms(env, owned=owned)  # a caller's env, used as it is: warn only
        self.env, self.owned = env, owned

    def build(self, n_slots: int) -> "TorchRLBatchedEnvs":
        return TorchRLBatchedEnvs(self.env, n_slots, owned=self.owned)

    def close(self) -> None:
        if self.owned and not self.env.is_closed:
            self.env.close()


class TorchRLBatchedEnvs(SlotEnvs):
    """The workers of a batched TorchRL env as slots (module docstring: seeded per worker, not per episode)."""

    seeding = PER_WORKER

    def __init__(self, env: Any, n_slots: int, owned: bool):
        import torch

        self.env, self.owned = env, owned
        self.workers = int(env.batch_size[0])
        self.keys = keys = EnvKeys(env, batched=True)
        super().__init__(min(n_slots, self.workers), keys.observation_space, keys.action_space)
        self.metadata = dict(keys.action_meta)
        self.obs = allocate_obs_buffer(self.observation_space, self.n_slots)
        self._write = _obs_writer(self.obs)
        self._td: Any = None
        self._done_shape = tuple(env.full_done_spec[keys.terminated_key].shape)
        self._mask = torch.zeros(self.workers, dtype=torch.bool)
        full = env.full_action_spec[keys.action_key]
        self._actions = full.zero()  # rows of idle workers stay zero (they are not stepped)

    def start_run(self, seed: int) -> None:
        """Seed the env once for the run (``env.set_seed(seed)``); its first reset then starts every worker."""
        self.env.set_seed(int(seed))
        self._td = None

    def _rows(self, slots: Sequence[int]) -> Any:
        """A ``[workers]`` bool mask of ``slots``."""
        mask = self._mask.clone()
        mask[list(slots)] = True
        return mask

    def _write_obs(self, td: Any, slots: Sequence[int]) -> None:
        keys = self.keys
        if keys.array:
            obs = td.get("observation").cpu().numpy()
            for slot in slots:
                self._write(slot, obs[slot])
        else:
            arrays = {k: td.get(k).cpu().numpy() for k in keys.obs_keys}
            for slot in slots:
                self._write(slot, {k: v[slot] for k, v in arrays.items()})

    def reset_slots(self, slots: Sequence[int], seeds: Sequence[int]) -> None:
        """Reset the workers of ``slots`` (a partial reset); ``seeds`` are not used (module docstring)."""
        env = self.env
        try:
            if self._td is None:
                td = env.reset()
            else:
                td = self._td.clone(False)
                td.set("_reset", self._rows(slots).reshape(self.workers, *self._done_shape[1:]))
                td = env.reset(td)
                td.pop("_reset", None)
            self._td = td
            self._write_obs(td, slots)
        except Exception as exc:
            self.failures.extend(_failure(slot, "reset", exc) for slot in slots)

    def step(self, slots: Sequence[int], actions: np.ndarray) -> None:
        import torch

        keys, env = self.keys, self.env
        acts = self._actions
        for slot in slots:
            acts[slot] = keys.encode_action(actions[slot])
        td, stepped = self._td, self._rows(slots)
        td.set(keys.action_key, acts)
        td.set("_step", stepped)
        try:
            out = env.step(td)
        except Exception as exc:
            self.failures.extend(_failure(slot, "step", exc) for slot in slots)
            return
        nxt = out.get("next")
        self._write_obs(nxt, slots)
        index = torch.as_tensor(list(slots), dtype=torch.long)
        flat = lambda key: nxt.get(key)[index].reshape(len(slots), -1)  # noqa: E731
        idx = np.asarray(slots, dtype=np.int64)
        self.rewards[idx] = flat(keys.reward_key).sum(-1).double().cpu().numpy()
        self.terminated[idx] = flat(keys.terminated_key).any(-1).cpu().numpy()
        self.truncated[idx] = flat(keys.truncated_key).any(-1).cpu().numpy() if keys.truncated_key else False
        if keys.success_key is not None:
            self.success[idx] = flat(keys.success_key).any(-1).cpu().numpy()
            self.has_success_signal = True
        state = env._step_mdp(out)  # TorchRL's own step_mdp: the next step's input
        state.pop("_step", None)
        idle = ~stepped
        for key in keys.obs_keys:  # idle workers were not stepped (TorchRL gives them zeros): keep their rows
            state.get(key)[idle] = td.get(key)[idle]
        self._td = state

    def rebuild(self, slot: int) -> list[int]:
        """A worker of a batched env cannot be replaced alone: every worker is reset, every slot restarts."""
        self._td = None
        self.reset_slots(range(self.n_slots), [0] * self.n_slots)
        return list(range(self.n_slots))

    def call(self, slots: Sequence[int], name: str) -> list[Any]:
        value = getattr(self.env, name)
        return [value() if callable(value) else value for _ in slots]

    def has_attr(self, name: str) -> bool:
        return hasattr(self.env, name)

    def close(self) -> None:
        if self.owned and not self.env.is_closed:
            self.env.close()
