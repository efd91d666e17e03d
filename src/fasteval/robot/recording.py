"""Videos and episode data: two :class:`~fasteval.core.protocols.StepObserver` s the engine adds when the spec asks.

* ``max_episodes_rendered=K`` (``--videos K``; LeRobot's ``--max-episodes-rendered K``) renders K
  episodes with ``env.render()`` (``rgb_array``) into
  ``<videos_dir>/<task>/ep<episode:06d>_seed<seed>_<success|failure>.mp4`` (imageio + ffmpeg, in
  the default install). ``<task>`` is the env kwarg ``task`` or ``env_name`` when there is one
  (``push-v3``), else the env id, made safe for a file name. ``video_select`` chooses the episodes:

  =============  ==============================================================================
  ``first``      the K smallest episode indices (not the first K to finish)
  ``failures``   the K smallest episode indices among the episodes that end without success
  ``successes``  the K smallest episode indices among the episodes that succeed
  ``per-task``   the first K of every task of a suite (:func:`fasteval.doors.suites.run_suite`); in
                 one engine run it is ``first``
  =============  ==============================================================================

  How the frames are made, and what that costs:

  * ``first`` (and ``per-task``): the loop records the K episodes' actions (a few bytes a step), and the
    encoder's thread replays each one once it has ended, as below: no slot of the run renders a frame, so a
    chunking policy's unread observations stay skipped (:mod:`fasteval.core.unread`) with videos on. A
    replay of a ``first`` episode must be the episode bit for bit (its return's bits, length, success and
    end), else it is dropped with a warning. The K episodes are rendered in the loop as they run instead
    (exact by construction: the frames are the episode's own; only the slots being recorded render, async
    envs in their worker), and every observation is computed, where a replay cannot be exact
    (:func:`live_reason`): an env declared not bit-reproducible by itself
    (:func:`fasteval.robot.reproducible.physics_rounding`: PushT's pymunk, LeRobot's Meta-World whose first
    frame depends on the episode its env ran before), a live env object (no second env to replay in), or
    ``FASTEVAL_LIVE_VIDEOS=1``. The run's ``meta["videos"]`` says which was done, and why. (A policy's
    randomness plays no part: a replay steps the actions the run sent, never the policy.)
  * ``failures`` / ``successes``: the outcome of an episode is known only at its end, so the loop
    renders nothing; it records the actions of every episode that may still be among the K (a few
    bytes a step), and once an episode is kept and no episode with a smaller index can displace it
    (every smaller index has finished), the encoder's thread replays it: a fresh env (the engine's
    factory), reset with the episode's seed, stepped with its actions, rendering each frame. So only
    the K kept episodes are ever rendered, never the candidates that are dropped. A replay is exact
    for an env that is deterministic given its seed and actions (what every exact, batch-invariant
    result of fasteval relies on) and is checked: a replay whose return, length, success or end
    differs from the episode's is dropped with a warning, never kept as a video of another episode.
    (Recording the env's state instead would need every env to expose and restore it; rendering
    every candidate costs as many renders as episodes started before the K matches finish.)

  * a many-policy run (``--policy A --policy B ...``) with the env given by its id: **every** selection
    is rendered after the race, never in the loop. The loop only records the actions of the episodes
    that may be shown (a few bytes a step); at the end of the run, once the race has decided, the
    encoder's thread replays the kept ones (``deferred``). So videos cost the time of the episodes
    shown (the same seeds for every policy: the ranking page puts them side by side), not a frame of
    every checkpoint's first K while it runs. (A live env object cannot be rebuilt for a replay: its
    ``first`` videos are rendered in the loop, as in a one-policy run.)

  Encoding runs beside the loop (:mod:`fasteval.robot.video_encoder`: a background thread feeding
  ffmpeg, frames queued up to a byte bound, its errors raised in the run, every queued video written
  before the run returns). The loop's time in the recorders is the ``render`` stage; the wait for
  the encoder after the last episode is ``encode`` (:mod:`fasteval.core.timing`).

  The videos left are exactly the K matching episodes with the smallest indices, whatever the batch
  size, vectorization or finishing order (fewer if fewer match). Episodes that fail with an error (env
  or policy faults) have no video and count as neither.
  A video has exactly ``length + 1`` frames: the reset frame, then one frame per step. Videos are
  written under a hidden ``.….partial.mp4`` name and renamed when complete. ``result.video_paths`` lists
  the videos in episode order. The env must be made with ``render_mode="rgb_array"``
  (``--env-kwarg render_mode=rgb_array``; gym-pusht does it by default).
* ``return_episode_data=True``: ``result.episode_data`` is a TensorDict with one row per step of
  every reported episode (exactly the episodes in ``result.per_episode``), each cut at its end
  (nothing after ``done``), sorted by episode then frame, in TorchRL's key layout (a collector's
  ``("next", ...)`` nesting, so it trains as TorchRL data does; :mod:`fasteval.run.episode_files`
  saves it as a TorchRL replay buffer):

  ==========================  ===========================================================
  key                         value at row (episode i, frame t)
  ==========================  ===========================================================
  observation keys            the observation the policy acted on at step t, as the env
                              returned it: ``observation`` for array observations and the
                              env's own keys for ``Dict`` ones in ``raw`` format; the mapped
                              names (``observation.image`` ...) with the env's dtypes
                              (images stay uint8 HWC) in ``lerobot`` format
  ``action``                  the action sent to the env, in its own encoding (one-hot ``[n]``
                              for a TorchRL env with a ``OneHot`` action spec)
  ``done``, ``terminated``,   ``[1]`` bool, all False: the flags of the state acted on (a row
  ``truncated``               is never taken in a terminal state)
  ``("next", <obs keys>)``    the observation after the step (the next row's, or the
                              episode's final observation on its last row)
  ``("next", "reward")``      ``[1]`` float64: the reward of the step, exactly as summed into
                              the record's ``sum_reward`` (cast with ``.float()`` for float32 losses)
  ``("next", "terminated")``  ``[1]`` bool, the env's flag after the step
  ``("next", "truncated")``   ``[1]`` bool, the env's flag, or the engine's step cap reached
  ``("next", "done")``        ``[1]`` bool, terminated or truncated: true exactly on an
                              episode's last row
  ``("next", "success")``     ``[1]`` bool, ``info["is_success"]`` after the step
  ``episode``, ``seed``       the episode index (TorchRL's ``SliceSampler`` reads trajectories
                              from ``"episode"`` by default) and its reset seed
  ``step_count``              ``[1]`` int64, the step index t within the episode (TorchRL's
                              ``StepCounter`` key)
  ``index``                   the row index
  ==========================  ===========================================================

  Steps are written into a ``[B, T]`` TensorDict preallocated on the policy device
  (:mod:`fasteval.robot.buffers.rollout_buffer`); each finished episode is cut out of it at its end (with its
  final observation, copied from the env's host buffer), and ``result.episode_data`` is on the
  policy device. ``--save-episodes DIR`` writes it as a TorchRL replay buffer
  (:mod:`fasteval.run.episode_files`).

An episode restarted after an env failure (``parked`` slots) is recorded from its new start;
its partial data and video are dropped. If a restart cannot be seen in time (an env reset that
fails at the very start of a wave, or a restart under ``pipeline``), that episode's recording is
dropped with a warning rather than recorded wrong.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from time import perf_counter
from typing import Any

import gymnasium as gym
import numpy as np

from fasteval.core.protocols import OBSERVER_FACTS, StepObserver, reads_observations
from fasteval.types.errors import UserInputError
from fasteval.types.files import safe_filename
from fasteval.kernels import IDLE
from fasteval.robot.env_kinds import is_mujoco
from fasteval.robot.policies.obs_mapping import RAW, plan_keys
from fasteval.robot.torchrl.envs import ACTION_ONE_HOT
from fasteval.robot.video_encoder import ReplayJob, VideoEncoder

DEFAULT_FPS = 30


FIRST, FAILURES, SUCCESSES, PER_TASK = "first", "failures", "successes", "per-task"
LIVE_VIDEOS_VARIABLE = "FASTEVAL_LIVE_VIDEOS"
"""Set to ``1`` to render ``first`` videos during the run (every observation is then computed), not replayed."""
VIDEOS_FACT = "videos"
"""The run's metadata key that says how its videos were made (``meta["videos"]``)."""
REPLAYED = "replayed after their episodes from their seeds and actions (no slot of the run renders a frame)"
REPLAYED_AFTER_RACE = ("replayed after the run (after the race) from their seeds and actions (no slot of the run "
                       "renders a frame)")
"""``meta["videos"]`` of a run whose videos were all replayed."""


def live_reason(env: Any, env_kwargs: Any, select: str, environ: Any = None) -> str | None:
    """Why ``first`` videos of ``env`` (an env reference or a live env, its kwargs) are rendered during the run
    rather than replayed, or ``None`` (replayed; outcome-chosen videos are always replayed)."""
    from fasteval.robot.reproducible import physics_rounding

    if select in (FAILURES, SUCCESSES):
        return None
    environ = os.environ if environ is None else environ
    if environ.get(LIVE_VIDEOS_VARIABLE, "") not in ("", "0"):
        return f"{LIVE_VIDEOS_VARIABLE}={environ[LIVE_VIDEOS_VARIABLE]}"
    if not isinstance(env, str):
        return "a live env object: there is no second env to replay its episodes in"
    rounding = physics_rounding(env, env_kwargs or {})
    if rounding is not None:
        return f"a replay would not be the episode bit for bit: {rounding}"
    from fasteval.robot.lerobot.envs import ENV_REF
    from fasteval.robot.lerobot.libero import is_libero_type

    if env == ENV_REF and is_libero_type(dict(env_kwargs or {}).get("type")):
        # a replay env built in the run's process changed a LIBERO ACT episode against lerobot-eval's
        # (tests/lerobot/test_differential.py, libero-witness; it passed with live videos): live until understood
        return "LIBERO: a replay env in the run's process changed the run's episodes (GL state), so none is built"
    return None
TASK_KWARGS = ("task", "env_name")
"""Env kwargs that name the task (``fasteval.doors.suites:make_metaworld_env``, ``Meta-World/MT1``)."""


def task_label(env: str, env_kwargs: Any = None) -> str:
    """The task an env runs: its ``task`` / ``env_name`` kwarg if it is a string, else the env id."""
    for key in TASK_KWARGS:
        value = (env_kwargs or {}).get(key)
        if isinstance(value, str) and value:
            return value
    return env


def video_path(videos_dir: str | os.PathLike, task: str, episode_ix: int, seed: int, success: bool | None,
               layout: str = "fasteval") -> Path:
    """``<videos_dir>/<task>/ep<episode:06d>_seed<seed>_<success|failure>.mp4`` (the task made safe for a file
    name); ``success=None`` (the env reports no success signal) leaves the outcome out: ``..._seed<seed>.mp4``.
    Layout ``lerobot``: ``<videos_dir>/eval_episode_<episode>.mp4``, as ``lerobot-eval`` names them (its
    ``videos_dir`` is the task's ``videos/<group>_<task_id>`` folder)."""
    if layout == "lerobot":
        return Path(videos_dir) / f"eval_episode_{int(episode_ix)}.mp4"
    outcome = "" if success is None else "_success" if success else "_failure"
    return Path(videos_dir) / safe_filename(task) / f"ep{int(episode_ix):06d}_seed{int(seed)}{outcome}.mp4"


class VideoSelection:
    """Which episodes get a video (see the module docstring): ``wanted`` at an episode's start,
    ``keep`` at its end. The result depends only on the episodes' outcomes, never on their order."""

    def __init__(self, mode: str, k: int):
        if mode not in (FIRST, FAILURES, SUCCESSES, PER_TASK):
            raise UserInputError(f"video_select: expected first, failures, successes or per-task, got {mode!r}.")
        self.mode = FIRST if mode == PER_TASK else mode
        self.k = k
        self.kept: list[int] = []
        """Episodes (sorted) whose video is kept so far (``failures`` / ``successes``)."""

    def wanted(self, episode: int) -> bool:
        """Whether episode ``episode`` may still be among the K (render it, or keep rendering it)."""
        if self.mode == FIRST:
            return episode < self.k
        return int(np.searchsorted(self.kept, episode)) < self.k

    def keep(self, episode: int, success: bool) -> tuple[bool, list[int]]:
        """At the end of a rendered episode: ``(keep its video, episodes whose videos to delete)``."""
        if not self.wanted(episode):
            return False, []
        if self.mode == FIRST:
            return True, []
        if success != (self.mode == SUCCESSES):
            return False, []
        self.kept.insert(int(np.searchsorted(self.kept, episode)), episode)
        dropped, self.kept = self.kept[self.k:], self.kept[: self.k]
        return True, dropped


def render_problem(env: Any, name: str) -> str | None:
    """Why ``env`` cannot give video frames, known before any episode: a MuJoCo env made without
    ``render_mode="rgb_array"`` (MuJoCo's own error would be ``Unexpected mode: None``). ``None``: no
    known problem (other envs are checked on their first frame)."""
    mode = env.render_mode if isinstance(env, gym.Env) else None
    if mode == "rgb_array" or not is_mujoco(env):
        return None
    return (f"env {name!r} is a MuJoCo env made with render_mode={mode!r}, so it cannot render videos (MuJoCo "
            f"would stop with 'Unexpected mode: {mode}'). Add --env-kwarg render_mode=rgb_array (and width=, height= "
            f"for the frame size), or drop --videos / --max-episodes-rendered.")


def _inspect_env(engine: Any, look: Any) -> Any:
    """``look(env)`` on one env of ``engine``: a sync env in place; for async envs one env built in this
    process from the engine's factory, and closed again."""
    local = engine.envs.local_envs  # in-process envs only (the worker pool holds none in this process)
    own = None if local else engine.factory()
    try:
        return look(local[0] if local else own)
    finally:
        if own is not None:
            own.close()


def check_renderable(engine: Any) -> None:
    """Raise :class:`UserInputError` (after closing ``engine``) if its env cannot render videos, before the
    run starts (see :func:`render_problem`)."""
    problem = _inspect_env(engine, lambda env: render_problem(env, engine.spec.env))
    if problem is not None:
        engine.close()
        raise UserInputError(problem)


def _check_frame(frame: Any, env: str) -> np.ndarray:
    if frame is None:
        raise UserInputError(
            f"env {env!r}: env.render() returned None, so there is nothing to record. Make the env with "
            f"render_mode='rgb_array' (--env-kwarg render_mode=rgb_array), or set --videos 0."
        )
    frame = np.asarray(frame)
    if frame.ndim != 3 or frame.shape[-1] not in (3, 4) or frame.dtype != np.uint8:
        raise UserInputError(f"env {env!r}: env.render() returned {frame.dtype} {frame.shape}; expected an "
                             f"rgb_array frame (uint8, HxWx3).")
    return frame[..., :3]


def load_video_writer() -> Any:
    """``imageio.v2`` with its ffmpeg plugin (both in the default install); a clear error if missing."""
    try:
        import imageio.v2 as imageio
        import imageio_ffmpeg  # noqa: F401  (the ffmpeg plugin's binary)
    except ImportError:
        raise UserInputError("videos need imageio with its ffmpeg plugin, which fasteval installs by default; "
                             "reinstall it with: pip install imageio imageio-ffmpeg.") from None
    return imageio


class VideoRecorder(StepObserver):
    """Renders the episodes that ``selection`` picks into mp4 files (see the module docstring): by replaying the
    kept episodes' recorded actions in the encoder's thread (``factory`` builds its env), or, for ``first`` with a
    ``live`` reason (:func:`live_reason`) or without a factory, in the loop, frame by frame, encoded beside it.
    Only a recorder that renders in the loop reads the observations (``reads_observations``)."""

    def __init__(self, envs: Any, ledger: Any, env: str, max_episodes: int, videos_dir: str | os.PathLike,
                 select: str = FIRST, task: str | None = None, layout: str = "fasteval",
                 factory: Any = None, timers: Any = None, policy: int | None = None, live: str | None = None,
                 deferred: bool = False):
        imageio = load_video_writer()
        local = envs.local_envs  # in-process envs only (the worker pool holds none in this process)
        problem = render_problem(local[0], env) if local else None
        if problem is not None:
            raise UserInputError(problem)
        self.envs, self.ledger, self.env, self.timers = envs, ledger, env, timers
        self.task = task or env
        self.videos_dir = videos_dir
        self.layout = layout
        self.folder = Path(videos_dir) if layout == "lerobot" else Path(videos_dir) / safe_filename(self.task)
        self.selection = VideoSelection(select, max_episodes)
        self.replays = self.selection.mode != FIRST or (live is None and factory is not None)
        self.deferred = bool(deferred) and self.replays
        """Render after the run (a many-policy run: after the race): record actions only, replay at :meth:`finish`."""
        self.reads_observations = not self.replays
        self.how = ((REPLAYED_AFTER_RACE if self.deferred else REPLAYED) if self.replays
                    else f"rendered during the run ({live or 'no env factory to replay in'})")
        """``meta["videos"]``."""
        self.exact = self.selection.mode == FIRST
        """Replays must be their episodes bit for bit (``first``: they stand in for a recording in the loop)."""
        if self.replays and factory is None:
            raise ValueError("VideoRecorder: video_select failures/successes (and a deferred recorder) replays episodes "
                             "and needs the env factory.")
        metadata = envs.metadata or {}  # the env's metadata (render_fps), for sync and async envs
        self.fps = int(metadata.get("render_fps") or DEFAULT_FPS)
        self.encoder = VideoEncoder(imageio, self.fps, lambda frame: _check_frame(frame, env),
                                    factory if self.replays else None)
        if self.replays:
            self.encoder.probe()  # a replay env whose frames a video cannot take stops the run at its first steps
        self.open: dict[int, tuple[int, int]] = {}
        """``first``: slot -> (ledger row, frames sent) of each video being rendered."""
        self.recording: dict[int, tuple[int, list[Any]]] = {}
        """``failures``/``successes``: slot -> (ledger row, actions sent) of each candidate episode."""
        self.kept: dict[int, ReplayJob] = {}
        """Candidates kept so far (``selection.keep``), replayed once no smaller index can displace them."""
        self.prefix = 0
        """Ledger rows below this one are all finished (or failed for good)."""
        self.policy = policy
        """A many-policy run: the policy whose episodes this recorder renders (one recorder per policy)."""

    def _episode(self, row: int) -> int:
        return int(self.ledger.episode_ids[row])

    def _wanted(self, row: int) -> bool:
        if row != IDLE and self.policy is not None and int(self.ledger.policy_ids[row]) != self.policy:
            return False
        return row != IDLE and self.selection.wanted(self._episode(row))

    def _path(self, row: int) -> Path:
        L = self.ledger
        episode = self._episode(row)
        signal = bool(self.envs.has_success_signal)  # none: no outcome in the name
        return video_path(self.videos_dir, self.task, episode, L.seed + episode,
                          bool(L.success[row]) if signal else None, self.layout)

    # -- first: rendered in the loop ---------------------------------------------------------------------
    def _open(self, rows: dict[int, int]) -> None:
        """Start videos for ``{slot: ledger row}`` (rows of parked slots are not in the ledger yet)."""
        rows = {s: r for s, r in rows.items() if self._wanted(r)}
        if not rows:
            return
        if self.replays:
            for slot, row in rows.items():
                self.recording[slot] = (row, [])
            return
        slots = list(rows)
        frames = self.envs.call(slots, "render")
        checked = [_check_frame(frame, self.env) for frame in frames]  # before any file is created
        for slot, frame in zip(slots, checked):
            episode = self._episode(rows[slot])
            self.encoder.stream(episode, self.folder / f"ep{episode:06d}.mp4")  # written as .ep…partial.mp4 until closed
            self.encoder.frame(episode, frame)
            self.open[slot] = (rows[slot], 1)

    def _close(self, slot: int) -> None:
        row, _ = self.open.pop(slot)
        L = self.ledger
        if L.finished[row] and not L.failed[row] and self.selection.keep(self._episode(row), bool(L.success[row]))[0]:
            self.encoder.close(self._episode(row), self._path(row))
        else:
            self.encoder.discard(self._episode(row))

    def _discard(self, slot: int) -> None:
        if slot in self.open:
            self.encoder.discard(self._episode(self.open.pop(slot)[0]))
        self.recording.pop(slot, None)

    # -- failures / successes: actions recorded, the kept episodes replayed --------------------------------
    def _close_recording(self, slot: int) -> None:
        row, actions = self.recording.pop(slot)
        L = self.ledger
        if not (L.finished[row] and not L.failed[row]):
            return
        episode = self._episode(row)
        keep, dropped = self.selection.keep(episode, bool(L.success[row]))
        if keep:
            self.kept[episode] = ReplayJob(episode, L.seed + episode, actions, float(L.sum_reward[row]), int(L.length[row]),
                                           bool(L.success[row]), self._path(row), exact=self.exact)
        for other in dropped:  # a matching episode with a smaller index finished later
            self.kept.pop(other, None)

    def _replay_settled(self, everything: bool = False) -> None:
        """Hand the encoder the kept episodes no smaller index can displace any more (all of them at the end)."""
        L = self.ledger
        done = L.finished
        n = L.n_episodes
        while self.prefix < n and (done[self.prefix] or L.failed[self.prefix]):
            self.prefix += 1
        if everything or self.prefix >= n:  # rows are not episodes: a segment's may be [1, 3]
            ready = sorted(self.kept)
        else:
            ready = sorted(e for e in self.kept if e < int(L.episode_ids[self.prefix]))
        for episode in ready:
            self.encoder.replay(self.kept.pop(episode))

    # -- the observer ------------------------------------------------------------------------------------
    def on_start(self, slots: list[int]) -> None:
        failing = {f.slot for f in self.envs.failures}
        for slot in slots:
            if slot in self.open:
                self._close(slot)
            elif slot in self.recording:
                self._close_recording(slot)
        if self.replays and not self.deferred:
            self._replay_settled()
        self._open({s: int(self.ledger.slot_episode[s]) for s in slots if s not in failing})

    def on_step(self, active: list[int], actions: np.ndarray, parked: dict[int, int]) -> None:
        self.encoder.check()  # an error of the encoder's thread stops the run here
        if parked:
            for slot in parked:
                self._discard(slot)
            self._open(dict(parked))
        if self.replays:
            self._record_actions(active, actions, parked)
        elif self.open:
            self._render(active, parked)

    def _record_actions(self, active: list[int], actions: np.ndarray, parked: dict[int, int]) -> None:
        if not self.recording:
            return
        L = self.ledger
        for slot in active:
            entry = self.recording.get(slot)
            if entry is None or slot in parked:
                continue
            row, sent = entry
            if not self.selection.wanted(self._episode(row)):  # K matching episodes with smaller indices are done
                del self.recording[slot]
            elif len(sent) != int(L.acc_len[slot]) or int(L.slot_episode[slot]) != row:
                warnings.warn(f"episode {self._episode(row)} restarted where the recorder could not see it; its "
                              f"video is dropped.", RuntimeWarning, stacklevel=3)
                del self.recording[slot]
            else:
                sent.append(actions[slot].copy())

    def _render(self, active: list[int], parked: dict[int, int]) -> None:
        acc_len = self.ledger.acc_len
        slots = []
        for slot in active:
            entry = self.open.get(slot)
            if entry is None or slot in parked:
                continue
            row, count = entry
            if count != int(acc_len[slot]) + 1 or int(self.ledger.slot_episode[slot]) != row:
                warnings.warn(f"episode {self._episode(row)} restarted where the recorder could not "
                              f"see it; its video is dropped.", RuntimeWarning, stacklevel=3)
                self._discard(slot)
                continue
            slots.append(slot)
        if slots:
            try:
                frames = [_check_frame(frame, self.env) for frame in self.envs.call(slots, "render")]
            except UserInputError:
                for slot in list(self.open):  # no half-written files left behind
                    self._discard(slot)
                raise
            for slot, frame in zip(slots, frames):
                row, count = self.open[slot]
                self.encoder.frame(self._episode(row), frame)
                self.open[slot] = (row, count + 1)

    def finish(self) -> dict[str, Any]:
        """Close the open videos, replay the kept episodes, wait for the encoder (its wait is the ``encode``
        stage); what this recorder made: ``{"video_paths": [...]}`` in episode order (a many-policy run's
        recorder: also ``{"video_paths_by_policy": {name: [...]}}``)."""
        start = perf_counter()
        for slot in list(self.open):
            self._close(slot)
        for slot in list(self.recording):
            self._close_recording(slot)
        self._replay_settled(everything=True)
        try:
            self.encoder.finish()
        finally:
            if self.timers is not None:
                self.timers.add("encode", start)
        written = self.encoder.written
        paths = [written[e] for e in sorted(written)]
        facts = {OBSERVER_FACTS: {VIDEOS_FACT: self.how}}
        if self.policy is None:
            return {"video_paths": paths, **facts}
        name = self.ledger.policy_names[self.policy]
        return {"video_paths": paths, "video_paths_by_policy": {name: paths},
                "video_episodes_by_policy": {name: sorted(written)}, **facts}


def env_encoded_actions(actions: Any, metadata: dict) -> Any:
    """The recorded actions (``[steps, ...]``, what the engine sent) in the env's own encoding: one-hot ``[steps, n]``
    where the env declares one-hot actions (``metadata[ACTION_ONE_HOT]``: TorchRL's ``OneHot`` spec, whose index the
    engine sends), as TorchRL's collectors write them; unchanged otherwise."""
    one_hot = (metadata or {}).get(ACTION_ONE_HOT)
    if not one_hot:
        return actions
    import torch

    index = actions.reshape(len(actions)).long()
    return torch.nn.functional.one_hot(index, int(one_hot["n"])).to(getattr(torch, one_hot["dtype"]))


class EpisodeDataRecorder(StepObserver):
    """Records every step into a :class:`~fasteval.robot.buffers.rollout_buffer.RolloutBuffer` on the policy device;
    a finished episode is cut out of it at once (with its final observation), and :meth:`finish` puts
    them together in episode order, in TorchRL's layout (module docstring).

    ``result.episode_data`` lives on the policy device (``.cpu()`` it to keep it on the host).
    """

    def __init__(self, engine: Any, ledger: Any, observation_format: str, rename: dict):
        from fasteval.robot.buffers.rollout_buffer import RolloutBuffer

        envs = self.envs = engine.envs
        self.ledger = ledger
        plans = plan_keys(envs.observation_space, observation_format, rename)
        self.names = {p.source: p.target for p in plans}
        self.raw = observation_format == RAW and not rename
        self.cap = int(engine.max_steps or 0)
        host = (envs.rewards, envs.terminated, envs.truncated, envs.success)
        actions = engine.d2h.host
        self.buffer = RolloutBuffer(engine.h2d.device_obs, host, actions.shape[1:], actions.dtype, engine.device, self.cap)
        n = ledger.n_slots
        self.row = np.full(n, -1, dtype=np.int64)
        """Ledger row of the episode each slot is recording (-1: not recording)."""
        self.episodes: dict[int, Any] = {}
        """Ledger row -> its steps (``{key: Tensor}`` on the device), for episodes whose end was recorded."""
        self.finals: dict[int, Any] = {}
        """Ledger row -> its final observation (after its last step), from the env's host buffer."""

    def _start(self, rows: dict[int, int]) -> None:
        """Start recording ``{slot: ledger row}`` (rows of parked slots are not in the ledger yet)."""
        slots = [s for s, row in rows.items() if row != IDLE]
        for slot, row in rows.items():
            self.row[slot] = row if row != IDLE else -1
        self.buffer.start(np.asarray(slots, dtype=np.int64))

    def on_start(self, slots: list[int]) -> None:
        failing = {f.slot for f in self.envs.failures}
        for slot in failing:
            self.row[slot] = -1
        self._start({s: int(self.ledger.slot_episode[s]) for s in slots if s not in failing})

    def on_step(self, active: list[int], actions: np.ndarray, parked: dict[int, int]) -> None:
        if parked:
            self._start(dict(parked))
            active = [s for s in active if s not in parked]
        if not active:
            return
        idx = np.asarray(active, dtype=np.int64)
        idx = idx[self.row[idx] >= 0]
        stale = self.buffer.frame[idx] != self.ledger.acc_len[idx]
        if stale.any():
            for slot in idx[stale]:
                warnings.warn(f"the episode in slot {int(slot)} restarted where the recorder could not see it; "
                              f"its data is dropped.", RuntimeWarning, stacklevel=2)
            self.row[idx[stale]] = -1
            idx = idx[~stale]
        if not len(idx):
            return
        lengths = self.buffer.write(idx, actions)
        env = self.envs
        done = env.terminated[idx] | env.truncated[idx]
        if self.cap:
            done |= lengths >= self.cap
        for slot, length in zip(idx[done].tolist(), lengths[done].tolist()):
            row = int(self.row[slot])
            self.episodes[row] = self.buffer.episode(slot, length)
            self.finals[row] = self._final_observation(slot)
            self.row[slot] = -1

    def _final_observation(self, slot: int) -> Any:
        """The observation after slot ``slot``'s last step (the env's host buffer holds it now), on the device."""
        import torch

        device, obs = self.buffer.device, self.envs.obs
        if isinstance(obs, dict):
            return {k: torch.from_numpy(np.array(v[slot])).to(device) for k, v in obs.items()}
        return torch.from_numpy(np.array(obs[slot])).to(device)

    def finish(self) -> dict[str, Any]:
        """What this recorder made: ``{"episode_data": TensorDict}``."""
        return {"episode_data": self.assemble()}

    def assemble(self) -> Any:
        """The reported episodes' steps, sorted by episode then frame, in TorchRL's layout (module docstring)."""
        import torch
        from tensordict import TensorDict

        from fasteval.robot.buffers.rollout_buffer import concat_episodes

        L = self.ledger
        n = L.n_episodes
        rows = np.flatnonzero(L.finished[:n] & ~L.failed[:n])
        rows = rows[np.argsort(L.episode_ids[rows], kind="stable")]
        complete = [int(r) for r in rows if int(r) in self.episodes and len(self.episodes[int(r)]["action"]) == L.length[r]]
        if len(complete) < len(rows):
            missing = sorted(int(L.episode_ids[r]) for r in set(rows.tolist()) - set(complete))
            warnings.warn(f"episode data of episodes {missing[:10]} is incomplete and left out.", RuntimeWarning, stacklevel=2)
        device = self.buffer.device
        if not complete:
            return TensorDict({}, batch_size=[0], device=device)
        steps = concat_episodes([self.episodes[r] for r in complete])
        lengths = L.length[complete].astype(np.int64)
        ends = torch.from_numpy(np.cumsum(lengths) - 1).to(device)
        starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
        frame_index = np.arange(int(lengths.sum()), dtype=np.int64) - starts
        total = len(frame_index)

        def after(now: torch.Tensor, finals: list[torch.Tensor]) -> torch.Tensor:
            """The next observation of every row: the next row's, or the episode's final one on its last row."""
            nxt = torch.empty_like(now)
            nxt[:-1] = now[1:]
            nxt[ends] = torch.stack(finals).to(now.dtype)
            return nxt

        obs = steps["observation"]
        root: dict[str, Any] = {}
        following: dict[str, Any] = {}
        if isinstance(obs, torch.Tensor):
            name = "observation" if self.raw else self.names[None]
            root[name] = obs
            following[name] = after(obs, [self.finals[r] for r in complete])
        else:
            for key, value in obs.items():
                name = key if self.raw else self.names[key]
                root[name] = value
                following[name] = after(value, [self.finals[r][key] for r in complete])
        last = torch.from_numpy(frame_index == np.repeat(lengths - 1, lengths)).to(device)
        column = lambda x: x.reshape(total, 1)  # noqa: E731  (TorchRL's [*B, 1] reward and done entries)
        truncated = steps["next.truncated"]
        if self.cap:  # the engine's step cap ended an episode the env did not end: TorchRL calls that truncated
            capped = torch.from_numpy(np.repeat(lengths >= self.cap, lengths)).to(device)
            truncated = truncated | (capped & last & ~steps["next.terminated"])
        following.update({"reward": column(steps["next.reward"]), "terminated": column(steps["next.terminated"]),
                          "truncated": column(truncated), "done": column(last), "success": column(steps["next.success"])})
        not_done = torch.zeros(total, 1, dtype=torch.bool, device=device)
        episode = torch.from_numpy(np.repeat(L.episode_ids[complete].astype(np.int64), lengths)).to(device)
        out = {**root, "action": env_encoded_actions(steps["action"], self.envs.metadata), "done": not_done, "terminated": not_done.clone(),
               "truncated": not_done.clone(), "episode": episode, "seed": episode + int(L.seed),
               "step_count": column(torch.from_numpy(frame_index).to(device)),
               "index": torch.arange(total, dtype=torch.int64, device=device),
               "next": TensorDict(following, batch_size=[total], device=device)}
        return TensorDict(out, batch_size=[total], device=device)


class Recorders(StepObserver):
    """The spec's recorders plus the caller's own observer, called in that order. The recorders' time
    is the ``render`` stage (taken out of the loop's bookkeeping span it falls in); the caller's
    observer stays in bookkeeping."""

    def __init__(self, parts: list[Any], user: StepObserver | None, timers: Any = None):
        self.parts = parts
        self.user = user
        self.timers = timers
        self.reads_observations = any(part.reads_observations for part in parts) or reads_observations(user)

    def on_start(self, slots: list[int]) -> None:
        t = perf_counter()
        for part in self.parts:
            part.on_start(slots)
        if self.timers is not None:
            self.timers.add_within("render", t, "bookkeeping")
        if self.user is not None:
            self.user.on_start(slots)

    def on_step(self, active: list[int], actions: np.ndarray, parked: dict[int, int]) -> None:
        t = perf_counter()
        for part in self.parts:
            part.on_step(active, actions, parked)
        if self.timers is not None:
            self.timers.add_within("render", t, "bookkeeping")
        if self.user is not None:
            self.user.on_step(active, actions, parked)

    def finish(self) -> dict[str, Any]:
        """Every recorder's outputs, merged (the record of the run is built from them)."""
        out: dict[str, Any] = {}
        for part in self.parts:
            made = part.finish()
            for key, value in made.items():  # a many-policy run's recorders: lists and name maps put together
                if key == "video_paths" and key in out:
                    out[key] = [*out[key], *value]
                elif key in ("video_paths_by_policy", "video_episodes_by_policy", OBSERVER_FACTS) and key in out:
                    out[key] = {**out[key], **value}
                else:
                    out[key] = value
        return out


def attach_recorders(engine: Any, ledger: Any, observer: StepObserver | None) -> StepObserver | None:
    """The observer for a run: ``observer`` itself unless the spec asks for videos or episode data."""
    spec = engine.spec
    parts: list[Any] = []
    if spec.max_episodes_rendered > 0:
        from fasteval.robot.env_names import lerobot_names

        if spec.video_select in (FAILURES, SUCCESSES) and not isinstance(spec.env, str):
            raise UserInputError(f"video_select={spec.video_select!r} replays the kept episodes in a fresh env built from "
                                 f"the env's id, and a live env object cannot give a second one that shares nothing "
                                 f"with the run's; use video_select='first', or pass the env by its id.")
        names = lerobot_names(spec.env, spec.env_kwargs)  # PushT-v0, not the fast PushT's import path
        task = names[1] if names else task_label(spec.env, spec.env_kwargs)
        videos_dir = spec.videos_dir or "videos"
        live = live_reason(spec.env, spec.env_kwargs, spec.video_select)
        if ledger.policy_names is None:
            parts.append(VideoRecorder(engine.envs, ledger, spec.env, spec.max_episodes_rendered, videos_dir,
                                       select=spec.video_select, layout=spec.video_layout, task=task,
                                       factory=engine.factory, timers=engine.timers, live=live))
        else:  # a many-policy run: each policy's videos in <videos_dir>/<policy name>/, chosen as its own run's,
            # rendered after the race by replays (an env given by its id; a live env object renders in the loop)
            deferred = isinstance(spec.env, str)
            for k, name in enumerate(ledger.policy_names):
                parts.append(VideoRecorder(engine.envs, ledger, spec.env, spec.max_episodes_rendered,
                                           Path(videos_dir) / safe_filename(name), select=spec.video_select,
                                           layout=spec.video_layout, task=task, policy=k,
                                           factory=engine.factory, timers=engine.timers, live=live,
                                           deferred=deferred))
    if spec.return_episode_data:
        parts.append(EpisodeDataRecorder(engine, ledger, spec.observation_format, spec.rename))
    return Recorders(parts, observer, engine.timers) if parts else observer


def finish_recorders(observer: Any) -> dict[str, Any]:
    """Close videos and assemble episode data: ``{"video_paths": [...], "episode_data": ...}`` as the spec
    asked (``{}`` without recorders)."""
    return observer.finish() if isinstance(observer, Recorders) else {}
