"""The frozen description of one evaluation, in two halves: *what* is evaluated, and *how* it runs.

* :class:`What`: everything that decides the numbers (env and its kwargs, policy, seeds, ``n``, the
  step cap, the stop rule, what the policy is shown and at which precision it computes). Two runs with
  the same ``What`` give the same per-episode results.
* :class:`How`: everything else (batch size, vectorization, workers, device, pipeline, graphs, compile,
  threads, timeouts, retries, outputs, videos). Changing a ``How`` field changes how fast a run goes
  and what it writes besides its results, never a number (``tests/test_what_and_how.py`` runs a
  known-answer env with each of them changed and compares every episode).

The rule for a new field: if any value of it can change a recorded number beyond the rounding of the
same float32 computation (a batched matmul at another batch size, another device, compiled kernels,
another thread count), it is *what*; otherwise *how*. Each field's docstring says which half and why.

:class:`EvalSpec` is the flat union of the two (every door builds it with keywords,
``EvalSpec(env=..., n_episodes=..., batch_size=...)``); ``spec.what`` and ``spec.how`` give the
halves, ``EvalSpec.of(what, how)`` joins them. A run folder's manifest stores both halves, and
``--resume`` compares the *what* only (a larger ``n_episodes`` extends a run). A field added to a half
is in the spec, its config files, its manifest and its resume check at once.

Built by every door (CLI, library API, bench, sweeps), validated once here, then trusted by the
engine. It does no argv parsing and touches no files.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from fasteval.types.errors import UserInputError

VECTORIZATIONS = ("sync", "async")
DEVICES = ("cpu", "cuda", "auto")
RESET_MODES = ("auto", "per-env", "wave")
ON_NAN_ACTIONS = ("error", "skip-episode")
OBSERVATION_FORMATS = ("raw", "lerobot")
AMP_MODES = ("none", "bf16", "fp16", "auto")
OBS_DTYPES = ("auto", "keep", "float32", "float64")
VIDEO_SELECTIONS = ("first", "failures", "successes", "per-task")
VIDEO_LAYOUTS = ("fasteval", "lerobot")
NOISE_MODES = ("episode", "global")
EXPLORATIONS = ("deterministic", "random")
DESIGNS = ("anytime", "truncated")
MAX_SEED = 2**63 - 1
"""The largest episode seed: the engine keeps seeds as int64 (``seed + n_episodes - 1`` must fit)."""
MAX_STEPS = 2**63 - 1
"""The largest step cap: the bookkeeping kernel counts an episode's steps in an int64."""
MAX_TIMEOUT_S = 1_000_000.0
"""The longest timeout in seconds (11.6 days): the OS's waits take at most about 2**31 ms."""
MAX_CPU_THREADS = 1024
"""The most torch intra-op threads a run may ask for. More threads than cores only slow a policy down, and
1024 is above the hardware threads of any one machine fasteval targets (a two-socket 192-core CPU has 768);
far beyond it, OpenMP fails to create the threads and the process crashes (``--cpu-threads 100000``
segfaulted in libgomp)."""


DEFAULT_POLICY_BLOCK = 16
"""The default rows per policy call (``What.policy_block``), chosen by measurement (benchmarks/RESULTS.md,
"Policy blocks")."""
WHOLE_BATCH = 0
"""``What.policy_block`` for no blocks: the policy runs on the whole batch."""
MAX_POLICY_BLOCK = 1 << 16
LEGACY_WHAT_DEFAULTS = {"policy_block": WHOLE_BATCH}
"""*What* fields whose absence from an older manifest means another value than today's default: runs written
before ``policy_block`` existed called their policy on the whole batch."""


@dataclass(frozen=True)
class What:
    """What is evaluated: the fields that decide the numbers. Episode ``i`` (0 <= i < n_episodes) is reset
    with seed ``seed + i``. Two runs with equal ``What`` give the same per-episode results."""

    env: Any
    """What: the env is what is evaluated. Gymnasium id (``CartPole-v1``, ``gym_pusht/PushT-v0``) or
    ``module:callable`` returning an Env (a gymnasium or a TorchRL env); from the library API also a live
    TorchRL ``EnvBase`` or a zero-argument factory of one (:mod:`fasteval.robot.torchrl.envs`)."""

    policy: Any = "zero"
    """What: the policy is what is evaluated. Policy reference (``zero``, ``random``, a checkpoint
    folder, ``module:callable``) or a live object; or a tuple of two or more of them (a list is taken as
    one): a many-policy run, in which every policy runs the same episodes ``0..n-1`` with seeds ``seed + i``
    (:mod:`fasteval.core.policy_set`). A one-element list is that policy alone."""

    policy_names: tuple[str, ...] | None = None
    """What: the names label each policy's records, so a resume must find them again. The short name of
    each policy of a many-policy run (``None``: derived from the references by
    :func:`fasteval.types.policy_names.short_names`: a checkpoint's step number, else the folder name);
    unique, letters, digits and ``._+-``. Only with several policies."""

    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """What: they configure the env. Keyword arguments passed to ``gymnasium.make`` or to the env callable,
    once per sub-env."""

    n_episodes: int = 10
    """What: which episodes are reported. Exactly this many episodes are run and reported (``--stop-when``:
    the cap). >= 1. A resumed run may give a larger one: it extends the run with the episodes after."""

    seed: int = 0
    """What: the seeds decide every episode. Seed of episode 0; episode ``i`` uses ``seed + i``. >= 0."""

    max_steps: int | None = None
    """What: the cap ends (truncates) episodes, so it decides their returns. Step cap per episode, at most
    2**63 - 1. ``None`` uses the env spec's ``max_episode_steps`` (no cap if it has none)."""

    observation_format: str = "raw"
    """What: it decides what the policy is shown. ``raw`` (the env's observation: a Tensor, or a TensorDict
    of the env's Dict keys) or ``lerobot`` (a TensorDict with LeRobot keys: ``observation.image`` /
    ``observation.images.<camera>`` as float CHW in [0, 1], ``observation.state``,
    ``observation.environment_state``; see :mod:`fasteval.robot.policies.obs_mapping`)."""

    rename: Mapping[str, str] = field(default_factory=dict)
    """What: it decides which input the policy reads under which key. Observation key renames applied after
    the mapping, ``{key: new_key}`` (``--rename key=new``). A key may name the mapped key or the env's raw
    key; for array observations in ``raw`` format the key is ``observation``."""

    obs_dtype: str = "auto"
    """What: float64 and float32 observations are different inputs (their numbers differ past float32's
    precision). The dtype of float observations the policy receives (``--obs-dtype``), cast on the
    policy device into buffers allocated once: ``auto`` (the dtype of an ``nn.Module`` policy's first
    floating parameter; other policies get the env's dtypes), ``float32``, ``float64``, or ``keep`` (no
    cast). Integer and uint8 entries (raw images) are never cast. See :mod:`fasteval.robot.policies.obs_dtype`."""

    policy_block: int = DEFAULT_POLICY_BLOCK
    """What: the row count of every policy call changes the float rounding, so it decides the bits. The
    policy's network runs on blocks of exactly this many rows, the last padded with inert copies of a real
    row, whatever the batch size, workers, pipelining or active slots (``--policy-block``); ``0`` runs it on
    the whole batch (free batching: results then move with the batch size by float rounding). Policies that
    keep per-slot state run on the whole batch regardless, and the run says so (``meta["policy_call"]``,
    ``meta["guarantee"]``). See :mod:`fasteval.core.policy_blocks`."""

    noise: str = "episode"
    """What: it decides a stochastic policy's draws. Where a stochastic LeRobot policy's noise comes from:
    ``episode`` (a generator per episode, seeded with its seed: batch-invariant) or ``global`` (LeRobot's
    global torch RNG, aligned with ``lerobot-eval``'s: its per-seed numbers; needs wave mode, which
    ``reset_mode="auto"`` then picks; see :mod:`fasteval.robot.lerobot.policy`). With ``global`` the draws
    also follow the waves, so that run's numbers depend on its batch size; and a resume seeds the global
    RNG anew, so the episodes after it are not one uninterrupted run's draws: the record says so
    (``meta["resumed_global_rng"]``, for any policy that declares ``run_meta()["policy_rng"] == "global"``)."""

    policy_overrides: Mapping[str, str] = field(default_factory=dict)
    """What: it changes the policy. Fields of a LeRobot policy's config set on top of its saved ``config.json`` before the policy is built,
    ``{field: value}`` as LeRobot's command line spells them (``--policy.n_action_steps=10``, native
    ``--policy-field n_action_steps=10``), parsed by LeRobot's own config classes (an unknown field gets
    LeRobot's error). Only LeRobot checkpoints take them."""

    exploration: str = "deterministic"
    """What: it changes the numbers. The exploration type of a TorchRL / tensordict actor (``--exploration``),
    set around each call with TorchRL's ``set_exploration_type``: ``deterministic`` (the distribution's
    deterministic sample, TorchRL's default for evaluation) or ``random`` (a sample, drawn for each episode
    from a generator seeded with its seed, so that it does not depend on the batch;
    :mod:`fasteval.robot.policies.torchrl_actors`). An SB3 policy takes it as ``deterministic=``."""

    amp: str = "none"
    """What, although it is a speed setting: autocast computes the policy in bf16/fp16, a precision that
    changes its actions by more than rounding (and so the episodes), on purpose. A run evaluates the policy
    *at that precision*, and a resume must keep it. ``none``, ``bf16``, ``fp16`` or ``auto`` (the device's
    default autocast dtype: fp16 on CUDA, bf16 on CPU, as LeRobot's ``--policy.use_amp``)."""

    stop_when: str | None = None
    """What: it decides which episodes are reported. Stop as soon as a rule holds (``--stop-when``;
    ``n_episodes`` is then the cap): ``ci<=EPS``, ``above=T``, ``below=T`` for the success rate,
    ``return:ci<=E`` / ``return:above=T`` / ``return:below=T`` for the mean return (needs
    ``return_bounds``). Checked on prefixes of episode indices with an anytime-valid confidence
    sequence: a stopped run reports exactly episodes ``0..k-1`` whatever the batch size or mode. With
    several policies, a race (:mod:`fasteval.types.sequential.race`): ``best``, ``best:eps=E``,
    ``return:best[:eps=E]`` drop each policy once another is shown better (by more than E). See
    docs/how-many-episodes.md."""

    confidence: float = 0.95
    """What: it decides where ``stop_when`` stops. Level of its anytime-valid confidence sequence
    (``--confidence``), in (0, 1)."""

    return_bounds: tuple[float, float] | None = None
    """What: they decide the ``return:`` rules' intervals and stop. ``(LO, HI)``: the smallest and largest
    possible episode return (``--return-bounds LO,HI``); a return outside them stops the run with an error."""

    design: str = "anytime"
    """What: it decides where ``stop_when`` stops. ``anytime`` (the betting confidence sequence, valid
    however long the run goes on) or ``truncated`` (``--design truncated``: ``n_episodes`` is a real
    budget, and a group-sequential design that spends all of its error by it decides ``above=T`` /
    ``below=T`` on the success rate, valid only up to that cap, so such a run cannot be resumed with a
    larger ``n_episodes``; :mod:`fasteval.types.sequential.truncated`). See docs/how-many-episodes.md."""

    rank_by: str | None = None
    """What: it decides which policy a many-policy run calls best, and what a race (``--stop-when best``) races
    on. ``success``, ``return`` or ``max_reward`` (``--rank-by``); ``None``: success where the env reports a
    success signal, else the mean return, and the run says so (:mod:`fasteval.types.metric_bounds`)."""

    def __post_init__(self) -> None:
        What._check(self)

    def _check(self) -> None:
        _require((isinstance(self.env, str) and self.env.strip() != "") or (not isinstance(self.env, str) and self.env is not None),
                 "env", "a non-empty env id or module:callable, or a live env (a TorchRL EnvBase or a factory of one)",
                 self.env)
        _require(_is_int(self.n_episodes) and self.n_episodes >= 1, "n_episodes", "an integer >= 1", self.n_episodes)
        _require(_is_int(self.seed) and self.seed >= 0, "seed", "an integer >= 0", self.seed)
        _require(self.seed + self.n_episodes - 1 <= MAX_SEED, "seed",
                 f"a seed whose last episode's seed (seed + n_episodes - 1) is at most 2**63 - 1 = {MAX_SEED} "
                 f"(seeds are int64); with n_episodes={self.n_episodes} use seed <= {MAX_SEED - self.n_episodes + 1}",
                 self.seed)
        _require(self.max_steps is None or (_is_int(self.max_steps) and 1 <= self.max_steps <= MAX_STEPS),
                 "max_steps", f"None or an integer from 1 to 2**63 - 1 = {MAX_STEPS} (steps are counted in int64)",
                 self.max_steps)
        _require(isinstance(self.env_kwargs, Mapping), "env_kwargs", "a mapping of keyword arguments", self.env_kwargs)
        object.__setattr__(self, "env_kwargs", dict(self.env_kwargs))
        _require(self.observation_format in OBSERVATION_FORMATS, "observation_format", " or ".join(OBSERVATION_FORMATS),
                 self.observation_format)
        _require(isinstance(self.rename, Mapping) and all(isinstance(k, str) and isinstance(v, str) and k and v
                                                          for k, v in self.rename.items()),
                 "rename", "a mapping of non-empty key strings to new key strings", self.rename)
        object.__setattr__(self, "rename", dict(self.rename))
        _require(isinstance(self.policy_overrides, Mapping) and all(
            isinstance(k, str) and k and isinstance(v, str) for k, v in self.policy_overrides.items()),
                 "policy_overrides", "a mapping of LeRobot config field names to their values as strings",
                 self.policy_overrides)
        object.__setattr__(self, "policy_overrides", dict(self.policy_overrides))
        _require(self.obs_dtype in OBS_DTYPES, "obs_dtype", " or ".join(OBS_DTYPES), self.obs_dtype)
        _require(_is_int(self.policy_block) and 0 <= self.policy_block <= MAX_POLICY_BLOCK, "policy_block",
                 f"an integer from 0 (the whole batch) to {MAX_POLICY_BLOCK}", self.policy_block)
        _require(self.noise in NOISE_MODES, "noise", " or ".join(NOISE_MODES), self.noise)
        _require(self.exploration in EXPLORATIONS, "exploration", " or ".join(EXPLORATIONS), self.exploration)
        _require(self.amp in AMP_MODES, "amp", " or ".join(AMP_MODES), self.amp)
        self._check_policies()
        self._check_stop_fields()

    def _check_policies(self) -> None:
        """``policy`` as one reference or a tuple of two or more (a list converted), ``policy_names`` checked
        against them (or derived: stored resolved, so that every view and a resume see the same names)."""
        from fasteval.types.policy_names import check_names, short_names

        policy = self.policy
        if isinstance(policy, (list, tuple)):
            _require(len(policy) >= 1 and all(p is not None and (not isinstance(p, str) or p.strip()) for p in policy),
                     "policy", "one or more policy references (a list of non-empty references or live policies)",
                     policy)
            policy = tuple(policy) if len(policy) > 1 else policy[0]
            object.__setattr__(self, "policy", policy)
        if not isinstance(policy, tuple):
            _require(self.policy_names is None or (isinstance(self.policy_names, (list, tuple))
                                                   and len(self.policy_names) <= 1),
                     "policy_names", "None for a one-policy run (names label the policies of a run of several)",
                     self.policy_names)
            object.__setattr__(self, "policy_names", None)
            return
        try:
            names = short_names(policy) if self.policy_names is None else check_names(self.policy_names, len(policy))
        except ValueError as exc:
            raise UserInputError(str(exc)) from None
        object.__setattr__(self, "policy_names", tuple(names))
        _require(self.noise != "global", "noise",
                 "'episode' with several policies (LeRobot's global-RNG draws follow the waves of the whole run, so "
                 "they would not be the draws of each policy's own run; give --noise episode, or run each policy "
                 "on its own for LeRobot's global draws)", self.noise)

    @property
    def policies(self) -> tuple[Any, ...]:
        """The policies of the run, in order: ``(policy,)`` for a one-policy run."""
        return self.policy if isinstance(self.policy, tuple) else (self.policy,)

    @property
    def n_policies(self) -> int:
        return len(self.policies)

    @property
    def names(self) -> tuple[str, ...]:
        """The policies' short names (a one-policy run: its own short name)."""
        if self.policy_names is not None:
            return self.policy_names
        from fasteval.types.policy_names import short_names

        return short_names(self.policies)

    def _check_stop_fields(self) -> None:
        """``stop_when``, ``confidence`` and ``return_bounds`` parse and fit together (bounds stored as a tuple)."""
        from fasteval.types.sequential.betting import check_confidence
        from fasteval.types.sequential.race import check_race_setup, is_race_rule, parse_race_rule
        from fasteval.types.sequential.rules import check_rule_setup, parse_return_bounds, parse_stop_rule

        from fasteval.types.metric_bounds import check_rank_by

        try:
            check_confidence(self.confidence)
            check_rank_by(self.rank_by)
            bounds = parse_return_bounds(self.return_bounds)
            object.__setattr__(self, "return_bounds", bounds)
            if self.stop_when is not None and is_race_rule(self.stop_when):
                check_race_setup(self.race_rule, self.n_policies, self.metric_bounds(self.race_rule.metric)[0])
            elif self.stop_when is not None:
                if self.n_policies > 1:
                    raise ValueError(f"--stop-when {self.stop_when}: with several policies the rule is a race: best, "
                                     f"best:eps=E, return:best or return:best:eps=E (docs/how-many-episodes.md); "
                                     f"{self.stop_when!r} is a rule for one policy. Run each policy on its own for it.")
                check_rule_setup(parse_stop_rule(self.stop_when), bounds)
        except ValueError as exc:
            raise UserInputError(str(exc)) from None
        _require(self.design in DESIGNS, "design", " or ".join(DESIGNS), self.design)
        if self.design == "truncated":
            if self.stop_when is not None and is_race_rule(self.stop_when):
                raise UserInputError(
                    f"--design truncated: a race (--stop-when {self.stop_when}) has no truncated design; it is "
                    f"anytime-valid. Use --design anytime (the default) with several policies.")
            rule = parse_stop_rule(self.stop_when) if self.stop_when is not None else None
            if rule is None or rule.metric != "success" or rule.kind not in ("above", "below"):
                raise UserInputError(
                    f"--design truncated: the truncated design tests a success rate against a threshold up to the cap "
                    f"-n, so it needs --stop-when above=T or below=T; got "
                    f"{'no --stop-when' if rule is None else f'--stop-when {rule.text}'}. Use --design anytime (the "
                    f"default) for ci<= and return: rules.")

    @property
    def race_rule(self) -> Any:
        """The race's :class:`~fasteval.types.sequential.race.RaceRule` (``stop_when`` read with ``rank_by``)."""
        from fasteval.types.sequential.race import parse_race_rule

        return parse_race_rule(self.stop_when, self.rank_by)

    def metric_bounds(self, metric: str) -> tuple[tuple[float, float] | None, str | None]:
        """The bounds of ``metric`` per episode and where they come from: ``--return-bounds``, else the env's
        declared ones (:func:`fasteval.types.metric_bounds.resolve_bounds`)."""
        from fasteval.types.metric_bounds import resolve_bounds

        return resolve_bounds(metric, self.return_bounds, self.env, self.max_steps, self.env_kwargs)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready view of the *what* fields (a live policy object shown by its class name)."""
        return _fields_dict(self, WHAT_FIELDS)


@dataclass(frozen=True)
class How:
    """How a run goes: fields that change its speed, its fault handling and its outputs, never a number.
    Each docstring says why it cannot change one."""

    batch_size: int = 16
    """How: episode ``i`` gets seed ``seed + i`` in whichever slot it runs. Number of env slots stepped
    together. Capped at ``n_episodes``. >= 1."""

    vectorization: str = "sync"
    """How: where the envs step, not what they compute. ``sync``: envs in this process. ``async``: a pool
    of worker processes, each stepping a contiguous block of slots (pays when a block's step outweighs one
    round trip, ~0.1 ms)."""

    workers: int | None = None
    """How: the pool's size. Worker processes for ``vectorization="async"`` (capped at the number of
    slots). ``None``: ``min(batch, usable cores)``. Ignored by sync envs. >= 1."""

    device: str = "auto"
    """How: the same float32 computation on another processor (its rounding may differ, as a batched
    matmul's does at another batch size; :attr:`What.amp` is the setting that changes the precision).
    Where the policy runs: ``cpu``, ``cuda`` (or ``cuda:N``), or ``auto`` (cuda when available)."""

    reset_mode: str = "auto"
    """How: when a slot's policy state is reset, not what an episode sees (each episode starts fresh from
    its seed either way; :attr:`What.noise` ``global`` is the exception it notes). Stateful policies:
    ``per-env`` resets one slot at a time (continuous batching), ``wave`` starts all slots together,
    ``auto`` picks ``per-env`` when the policy's ``reset`` takes env ids."""

    pipeline: bool = False
    """How: two slot groups overlap in time; each episode's steps are the same. Double-buffer two slot
    groups: one group's async envs step while the policy runs on the other. Needs
    ``vectorization="async"`` and a stateless policy; same results."""

    cuda_graph: bool | None = None
    """How: a graph replays the same kernels. Capture the policy step in a CUDA graph and replay it.
    ``None``: on where CUDA exists."""

    stack_weights: bool = False
    """How: the same float32 computation, batched over policies (rounding only, as for ``device``). A
    many-policy run whose checkpoints share one architecture (same class, same parameter names and shapes,
    stateless, no own generator, no observation or action stages) runs them as one call:
    ``torch.func.stack_module_state`` plus ``vmap(functional_call)``, every policy on a static block of the
    whole batch (``--stack-weights``). Chosen once, by device: on CUDA; on a CPU, where it measured slower than the
    separate calls, those are kept (``FASTEVAL_STACK_WEIGHTS=stacked|separate|measure`` chooses); where a policy is not
    functional the run falls back to one call per policy, and ``meta["policy_calls"]`` says which ran and why."""

    compile: bool = False
    """How: the same float32 computation, fused (rounding only, as for ``device``). Wrap the policy step
    in ``torch.compile`` (pays for large policies and long runs)."""

    cpu_threads: int | None = 1
    """How: the same computation split over threads (rounding only: per-seed equality with ``lerobot-eval``
    down to 1e-12 needs the same count on both sides). torch intra-op threads while a CPU policy runs
    (restored afterwards), 1 to 1024. One is fastest for small policies beside env stepping: a second thread
    stalls whenever the other core is busy (40x slower seen on a loaded 2-core box). ``None`` keeps torch's
    setting (big CNNs)."""

    trust_remote_code: bool = False
    """How: a permission, not a setting of the evaluation (and only the command line grants it). Allow
    ``module:callable`` policies and envs from a file path (arbitrary Python)."""

    retries: int = 1
    """How: a retried episode restarts from its seed, so its numbers are those of a clean run. Times an
    episode is retried from its seed after its env raised, hung or died. >= 0."""

    on_nan_action: str = "error"
    """How: it decides what happens to a faulty episode, never the numbers of a recorded one. Non-finite
    policy actions: ``error`` stops the run (finished episodes kept); ``skip-episode`` records the
    episode as failed and goes on. Never sent to the env."""

    step_timeout: float | None = 300.0
    """How: a deadline, not a result. Seconds an env may take for one step or reset. An async env's
    worker is then killed and replaced, and the episode handled like a crash (retried). An in-process
    (sync) env cannot be interrupted, so the watchdog (:mod:`fasteval.core.watchdog`) ends the run
    instead: the records are flushed, the run folder's manifest says ``failed`` with the cause, and the
    process exits 1 (resume it with ``--resume``). ``None`` waits forever."""

    policy_timeout_s: float | None = None
    """How: a deadline, not a result. Seconds the policy may take for one step (or its dry run) before
    the watchdog ends the run as ``step_timeout`` does for sync envs (``--policy-timeout``). For a served
    policy (``--policy ws://...``): also how long a reply may take, and how long a dropped connection is
    retried with backoff before the run stops (finished episodes kept). ``None``: no limit in-process,
    30 s for served policies."""

    stop_grace_s: float = 30.0
    """How: a deadline, not a result. After the first SIGINT/SIGTERM of a durable run (the CLI), the
    episodes in flight have this many seconds to finish (long episodes, a hung policy or env call); then the
    run stops as a second signal would: the episodes in flight are dropped, every finished one is kept, exit
    130/143 (``--stop-grace``)."""

    max_episodes_rendered: int = 0
    """How: an output (videos are rendered beside the episodes, not into them). Number of videos K
    (``--videos K``; LeRobot's ``--max-episodes-rendered``), rendered with ``env.render()`` into
    ``<videos_dir>/<task>/ep<episode:06d>_seed<seed>_<success|failure>.mp4``; ``video_select`` says
    which episodes. The env must render ``rgb_array`` frames. >= 0."""

    video_select: str = "first"
    """How: an output. Which episodes get the ``max_episodes_rendered`` videos (see
    :mod:`fasteval.robot.recording`): ``first`` (the K smallest episode indices), ``failures`` /
    ``successes`` (the K episodes with the smallest indices among those that fail / succeed),
    ``per-task`` (the first K of every task of a suite; ``first`` for one env)."""

    videos_dir: str | None = None
    """How: an output. Folder for videos. ``None``: ``videos`` under the CLI's output folder, or
    ``./videos`` for the library."""

    video_layout: str = "fasteval"
    """How: an output. Video file names: ``fasteval``
    (``<videos_dir>/<task>/ep<episode:06d>_seed<seed>_<outcome>.mp4``) or ``lerobot``
    (``<videos_dir>/eval_episode_<episode>.mp4``, ``videos_dir`` being the task's
    ``videos/<group>_<task_id>`` folder, as ``lerobot-eval`` writes them)."""

    return_episode_data: bool = False
    """How: an output. Also return the rollout data of every episode (observation, action, reward, done,
    episode and frame index) as ``result.episode_data``, a TensorDict with one row per step."""

    def __post_init__(self) -> None:
        How._check(self)

    def _check(self) -> None:
        _require(_is_int(self.batch_size) and self.batch_size >= 1, "batch_size", "an integer >= 1", self.batch_size)
        _require(self.vectorization in VECTORIZATIONS, "vectorization", " or ".join(VECTORIZATIONS), self.vectorization)
        _require(self.workers is None or (_is_int(self.workers) and self.workers >= 1), "workers", "None or an integer >= 1",
                 self.workers)
        _require(
            isinstance(self.device, str) and (self.device in DEVICES or self.device.startswith("cuda:")),
            "device", "cpu, cuda, cuda:N or auto", self.device,
        )
        _require(self.reset_mode in RESET_MODES, "reset_mode", " or ".join(RESET_MODES), self.reset_mode)
        _require(_is_int(self.retries) and self.retries >= 0, "retries", "an integer >= 0", self.retries)
        _require(self.on_nan_action in ON_NAN_ACTIONS, "on_nan_action", " or ".join(ON_NAN_ACTIONS), self.on_nan_action)
        _require(_is_timeout(self.step_timeout), "step_timeout",
                 f"None (no timeout) or a finite number of seconds > 0 and <= {MAX_TIMEOUT_S:.0f}", self.step_timeout)
        _require(_is_timeout(self.policy_timeout_s), "policy_timeout_s",
                 f"None (no timeout) or a finite number of seconds > 0 and <= {MAX_TIMEOUT_S:.0f}", self.policy_timeout_s)
        _require(self.stop_grace_s is not None and _is_timeout(self.stop_grace_s), "stop_grace_s",
                 f"a finite number of seconds > 0 and <= {MAX_TIMEOUT_S:.0f}", self.stop_grace_s)
        _require(self.cpu_threads is None or (_is_int(self.cpu_threads) and 1 <= self.cpu_threads <= MAX_CPU_THREADS),
                 "cpu_threads", f"None or an integer from 1 to {MAX_CPU_THREADS} (more threads than cores only slow "
                 f"a policy down)", self.cpu_threads)
        _require(self.cuda_graph in (None, True, False), "cuda_graph", "None, True or False", self.cuda_graph)
        _require(isinstance(self.pipeline, bool), "pipeline", "True or False", self.pipeline)
        _require(isinstance(self.compile, bool), "compile", "True or False", self.compile)
        _require(isinstance(self.stack_weights, bool), "stack_weights", "True or False", self.stack_weights)
        _require(isinstance(self.trust_remote_code, bool), "trust_remote_code", "True or False", self.trust_remote_code)
        _require(_is_int(self.max_episodes_rendered) and self.max_episodes_rendered >= 0,
                 "max_episodes_rendered", "an integer >= 0", self.max_episodes_rendered)
        _require(self.video_select in VIDEO_SELECTIONS, "video_select", " or ".join(VIDEO_SELECTIONS), self.video_select)
        _require(self.videos_dir is None or (isinstance(self.videos_dir, str) and self.videos_dir != ""),
                 "videos_dir", "None or a folder path string", self.videos_dir)
        _require(self.video_layout in VIDEO_LAYOUTS, "video_layout", " or ".join(VIDEO_LAYOUTS), self.video_layout)
        _require(isinstance(self.return_episode_data, bool), "return_episode_data", "True or False", self.return_episode_data)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready view of the *how* fields."""
        return _fields_dict(self, HOW_FIELDS)


WHAT_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(What))
"""The fields of :class:`What`, in order."""
HOW_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(How))
"""The fields of :class:`How`, in order."""


@dataclass(frozen=True)
class EvalSpec(How, What):
    """One evaluation: the fields of :class:`What` then those of :class:`How`, flat (see the module
    docstring). ``spec.what`` / ``spec.how`` are the halves; ``EvalSpec.of(what, how)`` joins two."""

    def __post_init__(self) -> None:
        What._check(self)
        How._check(self)
        if self.noise == "global" and self.reset_mode == "auto":  # LeRobot's draws need LeRobot's batches
            object.__setattr__(self, "reset_mode", "wave")
        _require(self.noise != "global" or self.reset_mode == "wave", "reset_mode",
                 "wave (or auto) with noise='global': LeRobot's global-RNG draws follow its waves", self.reset_mode)
        object.__setattr__(self, "_halves", (What(**{k: getattr(self, k) for k in WHAT_FIELDS}),
                                             How(**{k: getattr(self, k) for k in HOW_FIELDS})))

    @classmethod
    def of(cls, what: What, how: How | None = None) -> "EvalSpec":
        """The spec of ``what`` evaluated ``how`` (default: every *how* field at its default)."""
        how = how if how is not None else How()
        return cls(**{k: getattr(what, k) for k in WHAT_FIELDS}, **{k: getattr(how, k) for k in HOW_FIELDS})

    @property
    def what(self) -> What:
        """What is evaluated: the half that decides the numbers (a resume must keep it)."""
        return self._halves[0]  # type: ignore[attr-defined]

    @property
    def how(self) -> How:
        """How it runs: the half a resume may change."""
        return self._halves[1]  # type: ignore[attr-defined]

    @property
    def n_slots(self) -> int:
        """Env slots actually built: ``min(batch_size, n_episodes * n_policies)`` (every policy runs n episodes)."""
        return min(self.batch_size, self.n_episodes * self.n_policies)

    def for_policy(self, k: int) -> "EvalSpec":
        """The one-policy spec of policy ``k`` of a many-policy run: what its own run would be (its loader,
        its runner and its record's facts are built from it). The race rule is the run's, not the policy's."""
        if self.n_policies == 1:
            return self
        from fasteval.types.sequential.race import is_race_rule

        stop = None if self.stop_when is not None and is_race_rule(self.stop_when) else self.stop_when
        return self.replace(policy=self.policies[k], policy_names=None, stop_when=stop)

    def replace(self, **changes: Any) -> "EvalSpec":
        """A copy with ``changes`` applied (validated again). ``what=`` / ``how=`` replace a whole half."""
        for half, names in (("what", WHAT_FIELDS), ("how", HOW_FIELDS)):
            if half in changes:
                value = changes.pop(half)
                changes = {**{k: getattr(value, k) for k in names}, **changes}
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready view of every field (a config document's keys); a live policy object is shown by its
        class name (and never copied: ``dataclasses.asdict`` would deep-copy a whole model, or fail on an
        uncopyable one)."""
        return _fields_dict(self, SPEC_FIELDS)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "EvalSpec":
        """The spec of a document: flat fields (a config, an older manifest's ``spec``) or the two halves
        (``{"what": {...}, "how": {...}}``, a manifest's). Keys that are no field are ignored."""
        flat = {**data.get("what", {}), **data.get("how", {})} if "what" in data else dict(data)
        return cls(**{k: v for k, v in flat.items() if k in SPEC_FIELDS})


SPEC_FIELDS: tuple[str, ...] = (*WHAT_FIELDS, *HOW_FIELDS)
"""Every field of :class:`EvalSpec`: the *what* fields, then the *how* fields."""


def policy_label(policy: Any) -> str:
    """How a run names one policy: the reference itself, ``<ClassName>`` for a live object."""
    return policy if isinstance(policy, str) else f"<{type(policy).__name__}>"


def _fields_dict(spec: Any, names: tuple[str, ...]) -> dict[str, Any]:
    def value(name: str) -> Any:
        if name == "policy":
            policy = spec.policy
            return [policy_label(p) for p in policy] if isinstance(policy, tuple) else policy_label(policy)
        if name == "policy_names":
            return list(spec.policy_names) if spec.policy_names is not None else None
        if name == "env":
            return env_label(spec.env)
        return copy.deepcopy(getattr(spec, name))

    return {name: value(name) for name in names}


def env_label(env: Any) -> str:
    """How a run names its env: the id or reference itself, ``<ClassName>`` for a live env object, and the
    function's name (``<make_env>``) for a live factory."""
    if isinstance(env, str):
        return env
    if callable(env) and hasattr(env, "__qualname__") and not hasattr(env, "batch_size"):
        name = env.__qualname__
        return name if name.startswith("<") else f"<{name}>"
    return f"<{type(env).__name__}>"


def _is_timeout(value: Any) -> bool:
    """``None``, or a finite number of seconds in ``(0, MAX_TIMEOUT_S]`` (``inf`` and NaN are refused: the
    OS cannot wait that long, and Python raises OverflowError deep in the run)."""
    if value is None:
        return True
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and 0 < value <= MAX_TIMEOUT_S)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _require(ok: bool, name: str, expected: str, got: Any) -> None:
    if not ok:
        raise UserInputError(f"{name}: expected {expected}, got {got!r}.")
