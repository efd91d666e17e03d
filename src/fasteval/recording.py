"""Videos and episode data: two :class:`~fasteval.core.loop.StepObserver` s the engine adds when the spec asks.

* ``max_episodes_rendered=K``: the first K episodes **by episode index** (not by finishing order)
  are rendered with ``env.render()`` (``rgb_array``) into
  ``<videos_dir>/<env>/eval_episode_<i>.mp4`` (imageio + ffmpeg: ``pip install 'fasteval[video]'``).
  A video has exactly ``length + 1`` frames: the reset frame, then one frame per step. Only the
  slots being recorded are rendered; async envs render in their worker (gymnasium's ``_call``
  pipe command), so frames cross the pipe only for those slots. ``result.video_paths`` lists the
  videos in episode order. The env must be made with ``render_mode="rgb_array"``
  (``--env-kwarg render_mode=rgb_array``; gym-pusht does it by default).
* ``return_episode_data=True``: ``result.episode_data`` is a TensorDict with one row per step of
  every reported episode (exactly the episodes in ``result.per_episode``), each cut at its end
  (nothing after ``done``), sorted by episode then frame:

  =====================  ================================================================
  key                    value at row (episode i, frame t)
  =====================  ================================================================
  observation keys       the observation the policy acted on at step t, as the env returned
                         it: ``observation`` (array, or a TensorDict of the env's keys) in
                         ``raw`` format; the mapped names (``observation.image`` ...) with the
                         env's dtypes (images stay uint8 HWC) in ``lerobot`` format
  ``action``             the action sent to the env
  ``next.reward``        the reward of the step (float64)
  ``next.terminated``,   the env's flags after the step; ``next.done`` is true exactly on an
  ``next.truncated``,    episode's last row (this includes the engine's step cap)
  ``next.done``
  ``next.success``       ``info["is_success"]`` after the step
  ``episode_index``,     the episode index, the step index within the episode, and the row index
  ``frame_index``,
  ``index``
  =====================  ================================================================

An episode restarted after an env failure (``parked`` slots) is recorded from its new start;
its partial data and video are dropped. If a restart cannot be seen in time (an env reset that
fails at the very start of a wave, or a restart under ``pipeline``), that episode's recording is
dropped with a warning rather than recorded wrong.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from fasteval.core.loop import StepObserver
from fasteval.core.obs_mapping import RAW, plan_keys, slot_getter
from fasteval.errors import UserInputError

IDLE = -1
DEFAULT_FPS = 30


def safe_name(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in str(text)) or "env"


def video_path(videos_dir: str | os.PathLike, env: str, episode_ix: int) -> Path:
    """``<videos_dir>/<env>/eval_episode_<i>.mp4`` (the env id made safe for a file name)."""
    return Path(videos_dir) / safe_name(env) / f"eval_episode_{int(episode_ix)}.mp4"


def _check_frame(frame: Any, env: str) -> np.ndarray:
    if frame is None:
        raise UserInputError(
            f"env {env!r}: env.render() returned None, so there is nothing to record. Make the env with "
            f"render_mode='rgb_array' (--env-kwarg render_mode=rgb_array), or set max_episodes_rendered=0."
        )
    frame = np.asarray(frame)
    if frame.ndim != 3 or frame.shape[-1] not in (3, 4) or frame.dtype != np.uint8:
        raise UserInputError(f"env {env!r}: env.render() returned {frame.dtype} {frame.shape}; expected an "
                             f"rgb_array frame (uint8, HxWx3).")
    return frame[..., :3]


class FrameSpool:
    """The frames of one episode, spooled raw to a hidden file beside the video, encoded at the end.

    Why not stream into ffmpeg: an ffmpeg process that lives across the episode would have the
    write end of its stdin copied into any env worker forked meanwhile (an async env rebuilt after
    a failure), and would then never see end-of-file; the encoder runs only in :meth:`encode`.
    Memory stays at one frame per open video.
    """

    def __init__(self, path: Path):
        self.path = path
        self.tmp = path.with_name(f".{path.name}.frames")
        self.file = open(self.tmp, "wb")
        self.shape: tuple | None = None
        self.count = 0

    def append(self, frame: np.ndarray, env: str) -> None:
        if self.shape is None:
            self.shape = frame.shape
        elif frame.shape != self.shape:
            raise UserInputError(f"env {env!r}: env.render() changed its frame shape from {self.shape} to {frame.shape} "
                                 f"within an episode; a video needs one frame size.")
        self.file.write(np.ascontiguousarray(frame).tobytes())
        self.count += 1

    def encode(self, imageio: Any, fps: int) -> None:
        self.file.close()
        try:
            frames = np.memmap(self.tmp, dtype=np.uint8, mode="r", shape=(self.count, *self.shape))
            with imageio.get_writer(str(self.path), fps=fps, macro_block_size=2, ffmpeg_log_level="error") as writer:
                for frame in frames:
                    writer.append_data(np.asarray(frame))
            del frames
        finally:
            self.tmp.unlink(missing_ok=True)

    def discard(self) -> None:
        self.file.close()
        self.tmp.unlink(missing_ok=True)


class VideoRecorder(StepObserver):
    """Renders the first ``max_episodes`` episodes (by index) into mp4 files, frame by frame."""

    def __init__(self, envs: Any, ledger: Any, env: str, max_episodes: int, videos_dir: str | os.PathLike):
        try:
            import imageio.v2 as imageio
            import imageio_ffmpeg  # noqa: F401  (the ffmpeg plugin's binary)
        except ImportError:
            raise UserInputError("videos need imageio with its ffmpeg plugin: pip install 'fasteval[video]' "
                                 "(or pip install imageio-ffmpeg).") from None
        self._imageio = imageio
        self.envs, self.ledger, self.env = envs, ledger, env
        self.max_episodes, self.videos_dir = max_episodes, videos_dir
        self.render = slot_getter(envs, "render")
        metadata = getattr(getattr(envs, "vector_env", None), "metadata", None) or {}
        self.fps = int(metadata.get("render_fps") or DEFAULT_FPS)
        self.open: dict[int, tuple[int, FrameSpool]] = {}  # slot -> (ledger row, frames)
        self.done: dict[int, str] = {}  # episode index -> path
        self.frames: dict[int, int] = {}  # episode index -> frames written

    def _wanted(self, row: int) -> bool:
        return row != IDLE and int(self.ledger.episode_ids[row]) < self.max_episodes

    def _open(self, rows: dict[int, int]) -> None:
        """Start videos for ``{slot: ledger row}`` (rows of parked slots are not in the ledger yet)."""
        rows = {s: r for s, r in rows.items() if self._wanted(r)}
        slots = list(rows)
        if not slots:
            return
        frames = self.render(slots)
        for slot, frame in zip(slots, frames):
            frame = _check_frame(frame, self.env)  # before any file is created
            row = rows[slot]
            path = video_path(self.videos_dir, self.env, int(self.ledger.episode_ids[row]))
            path.parent.mkdir(parents=True, exist_ok=True)
            spool = FrameSpool(path)
            self.open[slot] = (row, spool)
            spool.append(frame, self.env)

    def _close(self, slot: int) -> None:
        row, spool = self.open.pop(slot)
        if self.ledger.finished[row] and not self.ledger.failed[row]:
            spool.encode(self._imageio, self.fps)
            episode = int(self.ledger.episode_ids[row])
            self.done[episode] = str(spool.path)
            self.frames[episode] = spool.count
        else:
            spool.discard()

    def _discard(self, slot: int) -> None:
        self.open.pop(slot)[1].discard()

    def on_start(self, slots: list[int]) -> None:
        failing = {f.slot for f in getattr(self.envs, "failures", [])}
        for slot in slots:
            if slot in self.open:
                self._close(slot)
        self._open({s: int(self.ledger.slot_episode[s]) for s in slots if s not in failing})

    def on_step(self, active: list[int], actions: np.ndarray, parked: dict[int, int]) -> None:
        if parked:
            for slot in parked:
                if slot in self.open:
                    self._discard(slot)
            self._open(dict(parked))
        if not self.open:
            return
        acc_len = self.ledger.acc_len
        slots = []
        for slot in active:
            entry = self.open.get(slot)
            if entry is None or slot in parked:
                continue
            row, spool = entry
            if spool.count != int(acc_len[slot]) + 1 or int(self.ledger.slot_episode[slot]) != row:
                warnings.warn(f"episode {int(self.ledger.episode_ids[row])} restarted where the recorder could not "
                              f"see it; its video is dropped.", RuntimeWarning, stacklevel=2)
                self._discard(slot)
                continue
            slots.append(slot)
        if slots:
            try:
                for slot, frame in zip(slots, self.render(slots)):
                    self.open[slot][1].append(_check_frame(frame, self.env), self.env)
            except UserInputError:
                for slot in list(self.open):  # no half-written files left behind
                    self._discard(slot)
                raise

    def finish(self, result: Any) -> None:
        for slot in list(self.open):
            self._close(slot)
        result.video_paths = [self.done[e] for e in sorted(self.done)]


class EpisodeDataRecorder(StepObserver):
    """Logs every step of every episode (vectorized over the active slots); assembles at the end."""

    def __init__(self, envs: Any, ledger: Any, observation_format: str, rename: dict):
        self.envs, self.ledger = envs, ledger
        self.obs = envs.obs
        self.is_dict = isinstance(self.obs, dict)
        self.keys = list(self.obs) if self.is_dict else [None]
        plans = plan_keys(envs.observation_space, observation_format, rename)
        self.names = {p.source: p.target for p in plans}
        self.raw = observation_format == RAW and not rename
        n = ledger.n_slots
        self.prev = {k: np.zeros_like(self._buf(k)) for k in self.keys}
        self.attempt = np.full(n, -1, dtype=np.int64)  # attempt id per slot (-1: not recording)
        self.frame = np.zeros(n, dtype=np.int64)
        self.attempt_row: list[int] = []  # attempt id -> ledger row
        self.log: list[tuple] = []
        self._next_attempt = 0

    def _buf(self, key: Any) -> np.ndarray:
        return self.obs if key is None else self.obs[key]

    def _start(self, rows: dict[int, int]) -> None:
        """Start recording ``{slot: ledger row}`` (rows of parked slots are not in the ledger yet)."""
        for slot, row in rows.items():
            if row == IDLE:
                self.attempt[slot] = -1
                continue
            for key in self.keys:
                self.prev[key][slot] = self._buf(key)[slot]
            self.attempt[slot] = self._next_attempt
            self.attempt_row.append(row)
            self._next_attempt += 1
            self.frame[slot] = 0

    def on_start(self, slots: list[int]) -> None:
        failing = {f.slot for f in getattr(self.envs, "failures", [])}
        for slot in failing:
            self.attempt[slot] = -1
        self._start({s: int(self.ledger.slot_episode[s]) for s in slots if s not in failing})

    def on_step(self, active: list[int], actions: np.ndarray, parked: dict[int, int]) -> None:
        if parked:
            for slot in parked:
                self.attempt[slot] = -1
            self._start(dict(parked))
            active = [s for s in active if s not in parked]
        if not active:
            return
        idx = np.asarray(active, dtype=np.int64)
        attempts = self.attempt[idx]
        stale = (self.frame[idx] != self.ledger.acc_len[idx]) & (attempts >= 0)
        if stale.any():
            for slot in idx[stale]:
                warnings.warn(f"the episode in slot {int(slot)} restarted where the recorder could not see it; "
                              f"its data is dropped.", RuntimeWarning, stacklevel=2)
            self.attempt[idx[stale]] = -1
            attempts = self.attempt[idx]
        env = self.envs
        self.log.append((
            attempts, self.frame[idx].copy(), {k: self.prev[k][idx] for k in self.keys}, actions[idx].copy(),
            env.rewards[idx].copy(), env.terminated[idx].copy(), env.truncated[idx].copy(), env.success[idx].copy(),
        ))
        for key in self.keys:
            self.prev[key][idx] = self._buf(key)[idx]
        self.frame[idx] += 1

    def finish(self, result: Any) -> None:
        result.episode_data = self.assemble()

    def assemble(self) -> Any:
        import torch
        from tensordict import TensorDict

        L = self.ledger
        attempt_row = np.asarray(self.attempt_row, dtype=np.int64)
        if not self.log:
            return TensorDict({}, batch_size=[0])
        attempts = np.concatenate([e[0] for e in self.log])
        frames = np.concatenate([e[1] for e in self.log])
        keep = attempts >= 0
        rows = np.full(attempts.shape, -1, dtype=np.int64)
        rows[keep] = attempt_row[attempts[keep]]
        ok_row = np.zeros(L.n_episodes, dtype=bool)
        ok_row[:] = L.finished & ~L.failed
        keep &= np.where(rows >= 0, ok_row[np.maximum(rows, 0)], False)
        # An episode may have been recorded more than once only if restarted; keep its last complete attempt.
        last_attempt = np.full(L.n_episodes, -1, dtype=np.int64)
        np.maximum.at(last_attempt, rows[keep], attempts[keep])
        keep &= attempts == np.where(rows >= 0, last_attempt[np.maximum(rows, 0)], -2)
        episode = np.where(keep, L.episode_ids[np.maximum(rows, 0)], -1)
        order = np.lexsort((frames, episode))
        order = order[keep[order]]
        lengths = L.length[rows[order]] if len(order) else np.zeros(0, dtype=np.int64)
        frame_index = frames[order]
        counts = np.bincount(rows[order], minlength=L.n_episodes)
        complete = ok_row & (counts == L.length)
        if not complete[ok_row].all():
            missing = [int(L.episode_ids[r]) for r in np.flatnonzero(ok_row & ~complete)]
            warnings.warn(f"episode data of episodes {missing[:10]} is incomplete and left out.", RuntimeWarning, stacklevel=2)
            sel = complete[rows[order]]
            order, lengths, frame_index = order[sel], lengths[sel], frame_index[sel]

        def cat(i: int) -> np.ndarray:
            return np.concatenate([e[i] for e in self.log])[order]

        out: dict[str, Any] = {}
        obs = {key: torch.from_numpy(np.concatenate([e[2][key] for e in self.log])[order]) for key in self.keys}
        n = len(order)
        if self.raw:
            out["observation"] = (TensorDict({k: v for k, v in obs.items()}, batch_size=[n]) if self.is_dict else obs[None])
        else:
            for key, value in obs.items():
                out[self.names[key]] = value
        out["action"] = torch.from_numpy(np.ascontiguousarray(cat(3)))
        out["next.reward"] = torch.from_numpy(cat(4))
        out["next.terminated"] = torch.from_numpy(cat(5))
        out["next.truncated"] = torch.from_numpy(cat(6))
        out["next.done"] = torch.from_numpy(frame_index == lengths - 1)
        out["next.success"] = torch.from_numpy(cat(7))
        out["episode_index"] = torch.from_numpy(episode[order].copy())
        out["frame_index"] = torch.from_numpy(frame_index.copy())
        out["index"] = torch.arange(n, dtype=torch.int64)
        return TensorDict(out, batch_size=[n])


class Recorders(StepObserver):
    """The spec's recorders plus the caller's own observer, called in that order."""

    def __init__(self, parts: list[Any], user: StepObserver | None):
        self.parts = parts
        self.observers = parts + ([user] if user is not None else [])

    def on_start(self, slots: list[int]) -> None:
        for observer in self.observers:
            observer.on_start(slots)

    def on_step(self, active: list[int], actions: np.ndarray, parked: dict[int, int]) -> None:
        for observer in self.observers:
            observer.on_step(active, actions, parked)

    def finish(self, result: Any) -> None:
        for part in self.parts:
            part.finish(result)


def attach_recorders(engine: Any, ledger: Any, observer: StepObserver | None) -> StepObserver | None:
    """The observer for a run: ``observer`` itself unless the spec asks for videos or episode data."""
    spec = engine.spec
    parts: list[Any] = []
    if spec.max_episodes_rendered > 0:
        parts.append(VideoRecorder(engine.envs, ledger, spec.env, spec.max_episodes_rendered, spec.videos_dir or "videos"))
    if spec.return_episode_data:
        parts.append(EpisodeDataRecorder(engine.envs, ledger, spec.observation_format, spec.rename))
    return Recorders(parts, observer) if parts else observer


def finish_recorders(observer: Any, result: Any) -> None:
    """Close videos and assemble episode data into ``result`` (no-op without recorders)."""
    if isinstance(observer, Recorders):
        observer.finish(result)
