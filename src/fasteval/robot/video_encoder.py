"""Videos encoded beside the loop: one background thread that feeds ffmpeg, and replays episodes.

:class:`VideoEncoder` takes commands on a queue and runs them in order, on its own thread:

* ``stream(key, path)``, ``frame(key, frame)``, ``close(key, path)``, ``discard(key)``: a video whose
  frames the loop renders (``--video-select first``); each video has its own ffmpeg process (imageio),
  written under a hidden ``.ep<episode>…partial.mp4`` name and renamed to ``path`` when it is closed,
  or deleted when it is discarded;
* ``replay(job)``: an episode the loop did not render (``failures``/``successes``): the thread builds its
  own env once (the engine's factory), resets it with the episode's seed, steps it with the actions the
  run recorded, rendering every frame, and checks that the replay is the episode (its length, success
  and end, and its return within :data:`RETURN_TOLERANCE`, or bit for bit for a ``first`` video:
  :attr:`ReplayJob.exact`): an env is deterministic given its seed and
  actions, which every exact result of fasteval already relies on. A replay that differs is dropped
  with a warning, never kept as a video of another episode. Each env call of a replay holds
  :data:`fasteval.core.env_lock.ENV_CALLS`, as the loop's in-process env calls do: two threads of one process
  never step or render at once.

Memory is bounded: frames waiting in the queue are counted, and :meth:`VideoEncoder.frame` waits while
more than ``max_bytes`` are queued (a frame larger than that on its own goes through alone). The loop's
time in that wait is part of its ``render`` stage.

Errors are never lost: the first error of the thread (an ffmpeg failure, a full disk, frames a video
cannot take) is kept; :meth:`VideoEncoder.check` raises it in the caller's thread (the recorder calls it
at every step, so the run stops there, its finished episodes kept), and :meth:`VideoEncoder.finish`
warns one found after the last step (the run's results are complete then; only videos are missing). ``finish`` waits for every
queued video (nothing is lost at the end of a run, nor after the first SIGINT/SIGTERM, which finishes the
episodes in flight); a ``KeyboardInterrupt`` while it waits (the second signal) stops the thread after the
frame it is writing, deletes the unfinished file, keeps the videos already written, and is raised again.
A file left half-written by a killed process keeps its hidden partial name.

Why ffmpeg may live across an episode here (the old frame spool avoided it): an env worker forked
meanwhile would inherit the pipe to ffmpeg's stdin and keep it open; fasteval's worker pool starts
its workers with ``forkserver`` (else ``spawn``), which never inherit this process's descriptors.
"""

from __future__ import annotations

import math
import threading
import time
import warnings
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from fasteval.core.env_lock import ENV_CALLS

RETURN_TOLERANCE = 1e-6
"""A replay is the episode when its length, end and success are the episode's and its return is equal
within this (relative, and absolute near 0): PushT's returns differ in their last bit between two
processes (7.75148589676597 and 7.7514858967659706 for seed 0, random policy), which is the same episode."""

MAX_QUEUED_BYTES = 256 * 2**20
"""Frames waiting for the encoder, at most (256 MiB; PushT's 680 px frames: about 180)."""


@dataclass
class ReplayJob:
    """One episode to re-render from its seed and its actions (see the module docstring)."""

    episode: int
    seed: int
    actions: list[Any]
    """The actions the run sent to the env, in order (one per step)."""
    sum_reward: float
    length: int
    success: bool
    path: Path
    """Where the video goes when the replay is the episode."""
    exact: bool = False
    """The replay must give the episode's return bit for bit (``first`` videos), not within :data:`RETURN_TOLERANCE`."""


def partial_path(path: Path) -> Path:
    """The hidden name a video is written under until it is complete."""
    return path.with_name(f".{path.stem}.partial{path.suffix}")


class VideoEncoder:
    """The background thread (see the module docstring). ``check_frame(frame) -> frame`` validates and
    trims each frame (raising :class:`~fasteval.types.errors.UserInputError` on one a video cannot take);
    ``make_env`` builds the env replays use (``None``: no replays)."""

    def __init__(self, imageio: Any, fps: int, check_frame: Callable[[Any], np.ndarray],
                 make_env: Callable[[], Any] | None = None, max_bytes: int = MAX_QUEUED_BYTES):
        self._imageio, self.fps, self._check_frame, self._make_env = imageio, fps, check_frame, make_env
        self.max_bytes = max_bytes
        self._queue: deque[tuple[Any, ...]] = deque()
        self._bytes = 0
        self._cond = threading.Condition()
        self._abort = False
        self.error: BaseException | None = None
        self.written: dict[Any, str] = {}
        """Key (episode) -> path of every video written (filled by the thread)."""
        self.notes: list[str] = []
        """Warnings from the thread (a replay that differed), given out by :meth:`finish`."""
        self.busy_s = 0.0
        """Seconds the thread spent rendering replays and encoding (beside the loop)."""
        self._writers: dict[Any, list[Any]] = {}
        """Key -> [writer, partial path, frame shape] of each open video."""
        self._env: Any = None
        self._probed: threading.Event | None = None
        self._commands: dict[str, Callable[..., None]] = {
            "stream": self._do_stream, "frame": self._do_frame, "close": self._do_close, "discard": self._do_discard,
            "replay": self._do_replay, "probe": self._do_probe}
        self._thread = threading.Thread(target=self._run, name="fasteval-video-encoder", daemon=True)
        self._thread.start()

    # -- the caller's side ---------------------------------------------------------------------------
    def _put(self, item: tuple[Any, ...], nbytes: int = 0) -> None:
        if self._abort:  # stopped (an error was raised, or an abort): nothing more is taken
            return
        with self._cond:
            while (nbytes and self._bytes and self._bytes + nbytes > self.max_bytes and self.error is None
                   and self._thread.is_alive()):
                self._cond.wait(0.5)
            self._queue.append(item)
            self._bytes += nbytes
            self._cond.notify_all()

    def check(self) -> None:
        """Raise the thread's first error here (once); the first call waits for a queued :meth:`probe`."""
        if self._probed is not None:
            probed, self._probed = self._probed, None
            while not probed.wait(0.2) and self._thread.is_alive():
                pass
        if self.error is not None:
            error, self.error = self.error, None
            with self._cond:  # the run stops here: the thread takes nothing more
                self._abort = True
                self._cond.notify_all()
            raise error

    def stream(self, key: Any, path: Path) -> None:
        """Open video ``key``, written under :func:`partial_path` of ``path`` (``ep3.mp4``: ``.ep3.partial.mp4``)
        until :meth:`close` renames it."""
        self._put(("stream", key, path))

    def frame(self, key: Any, frame: np.ndarray) -> None:
        """Queue one frame of video ``key`` (a copy: the env may reuse its buffer)."""
        frame = np.array(frame, copy=True, order="C")
        self._put(("frame", key, frame), frame.nbytes)

    def close(self, key: Any, path: Path) -> None:
        self._put(("close", key, path))

    def discard(self, key: Any) -> None:
        self._put(("discard", key))

    def replay(self, job: ReplayJob) -> None:
        self._put(("replay", job))

    def probe(self) -> None:
        """Queue a first frame of the replay env (reset with seed 0) through the frame check; the first
        :meth:`check` waits for it, so an env whose frames a video cannot take stops the run at its
        first step, not after its last."""
        self._probed = threading.Event()
        self._put(("probe", self._probed))

    def finish(self) -> float:
        """Wait until every queued video is written; return the seconds waited. The thread's error, if
        one is left (the run raised the others at its steps), is a warning here: the run's results are
        complete, only videos are missing (``written`` lists those on disk). A ``KeyboardInterrupt``
        while waiting aborts the thread and is raised again."""
        start = time.perf_counter()
        with self._cond:
            self._queue.append(("stop",))
            self._cond.notify_all()
        try:
            while self._thread.is_alive():
                self._thread.join(0.2)
        except KeyboardInterrupt:
            self.abort()
            raise
        for note in self.notes:
            warnings.warn(note, RuntimeWarning, stacklevel=3)
        if self.error is not None:
            error, self.error = self.error, None
            warnings.warn(f"videos: {type(error).__name__}: {error}; {len(self.written)} videos were written, the "
                          f"others were not.", RuntimeWarning, stacklevel=3)
        return time.perf_counter() - start

    def abort(self, wait: float = 10.0) -> None:
        """Stop the thread after the frame it is on; unfinished files are deleted."""
        with self._cond:
            self._abort = True
            self._queue.clear()
            self._bytes = 0
            self._cond.notify_all()
        self._thread.join(wait)

    # -- the thread ----------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    while not self._queue and not self._abort:
                        self._cond.wait()
                    if self._abort:
                        break
                    item = self._queue.popleft()
                    if item[0] == "frame":
                        self._bytes -= item[2].nbytes
                        self._cond.notify_all()
                if item[0] == "stop":
                    break
                if self.error is None:
                    began = time.perf_counter()
                    try:
                        self._commands[item[0]](*item[1:])
                    except BaseException as exc:  # kept for the caller; the thread carries on discarding
                        self.error = exc
                        with self._cond:
                            self._cond.notify_all()
                    self.busy_s += time.perf_counter() - began
        finally:
            for key in list(self._writers):
                self._do_discard(key)
            if self._env is not None:
                try:
                    with ENV_CALLS:
                        self._env.close()
                except Exception:
                    pass

    def _writer(self, path: Path) -> Any:
        path.parent.mkdir(parents=True, exist_ok=True)
        return self._imageio.get_writer(str(path), fps=self.fps, macro_block_size=2, ffmpeg_log_level="error")

    def _do_stream(self, key: Any, path: Path) -> None:
        tmp = partial_path(path)
        self._writers[key] = [self._writer(tmp), tmp, None]

    def _do_frame(self, key: Any, frame: np.ndarray) -> None:
        entry = self._writers.get(key)
        if entry is None:
            return
        if entry[2] is None:
            entry[2] = frame.shape
        elif frame.shape != entry[2]:
            from fasteval.types.errors import UserInputError

            raise UserInputError(f"env.render() changed its frame shape from {entry[2]} to {frame.shape} within an "
                                 f"episode; a video needs one frame size.")
        entry[0].append_data(frame)

    def _do_close(self, key: Any, path: Path) -> None:
        writer, tmp, _ = self._writers.pop(key)
        writer.close()
        tmp.replace(path)
        self.written[key] = str(path)

    def _do_discard(self, key: Any) -> None:
        entry = self._writers.pop(key, None)
        if entry is None:
            return
        try:
            entry[0].close()
        except Exception:
            pass
        entry[1].unlink(missing_ok=True)

    def _replay_env(self) -> Any:
        if self._env is None:
            import gymnasium as gym

            with ENV_CALLS:  # the loop's envs may be rendering in the main thread (fasteval.core.env_lock)
                env = self._make_env()
            if not isinstance(env, gym.Env):
                from fasteval.types.errors import UserInputError

                raise UserInputError(f"videos of failures or successes replay their episodes in a gymnasium env, and "
                                     f"the env's factory gave a {type(env).__name__}; use --video-select first.")
            self._env = env
        return self._env

    def _do_probe(self, done: threading.Event) -> None:
        try:
            env = self._replay_env()
            with ENV_CALLS:
                env.reset(seed=0)
                frame = env.render()
            self._check_frame(frame)
        finally:
            done.set()

    def _do_replay(self, job: ReplayJob) -> None:
        env = self._replay_env()
        key = ("replay", job.episode)
        self._do_stream(key, job.path)
        with ENV_CALLS:  # one env call at a time in this process, the loop's and the replays' (fasteval.core.env_lock)
            env.reset(seed=int(job.seed))
            frame = env.render()
        self._do_frame(key, self._check_frame(frame))
        total, success, ended_early = 0.0, False, False
        for i, action in enumerate(job.actions):
            if self._abort:
                return  # the finally of _run deletes the partial file
            with ENV_CALLS:
                _obs, reward, terminated, truncated, info = env.step(action)
                frame = env.render()
            total += float(reward)
            flag = info.get("is_success") if isinstance(info, dict) else None
            success = success or bool(flag)
            ended_early = ended_early or (bool(terminated or truncated) and i < len(job.actions) - 1)
            self._do_frame(key, self._check_frame(frame))
        close = (total == job.sum_reward if job.exact else
                 math.isclose(total, job.sum_reward, rel_tol=RETURN_TOLERANCE, abs_tol=RETURN_TOLERANCE))
        same = (len(job.actions) == job.length and not ended_early and success == job.success
                and (close or (math.isnan(total) and math.isnan(job.sum_reward))))
        if not same:
            self._do_discard(key)
            self.notes.append(
                f"the video of episode {job.episode} (seed {job.seed}) was dropped: replaying its {len(job.actions)} "
                f"actions from its seed gave return {total!r} (success {success}) where the episode had "
                f"{job.sum_reward!r} (success {job.success}), so the env is not deterministic given its seed and "
                f"actions and the replay would show another episode. FASTEVAL_LIVE_VIDEOS=1 with --video-select "
                f"first renders the episodes as they run.")
            return
        self._do_close(key, job.path)
        self.written[job.episode] = self.written.pop(key)
