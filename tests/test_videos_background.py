"""Videos cost what they must: ``render`` and ``encode`` are stages of their own, encoding runs beside
the loop (a background thread feeding ffmpeg, bounded memory, errors raised in the run, nothing lost
at the end), and ``failures``/``successes`` render only the episodes kept (replayed from their seeds
and actions), never the candidates that are dropped.

Timing assertions here are lower bounds of sleeps the envs and writers make on purpose (a sleep always
lasts at least its time, whatever the load); no test asserts a speed.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from fasteval import evaluate
from fasteval.robot import recording
from fasteval.robot.video_encoder import MAX_QUEUED_BYTES, ReplayJob, VideoEncoder, partial_path
from fasteval.testing import ParityPolicy, expected_episode
from fasteval.testing.envs import KnownAnswerEnv

KA_DIR = "tests.test_videos_background_make_counting_env"


class CountingEnv(KnownAnswerEnv):
    """The known-answer env, counting every frame it renders (all instances, any thread) and
    sleeping ``render_s`` per frame."""

    renders = 0
    in_loop = 0
    """Renders in the main thread (the loop's, with sync envs); replays render in the encoder's thread."""
    render_s = 0.0
    lock = threading.Lock()

    def render(self):
        with CountingEnv.lock:
            CountingEnv.renders += 1
            CountingEnv.in_loop += threading.current_thread() is threading.main_thread()
        if CountingEnv.render_s:
            time.sleep(CountingEnv.render_s)
        return super().render()


def make_counting_env(**kwargs) -> CountingEnv:
    return CountingEnv(**kwargs)


class DriftingEnv(KnownAnswerEnv):
    """Each instance adds its own number to every reward: an env that a fresh instance does not repeat."""

    made = 0

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        DriftingEnv.made += 1
        self.offset = float(DriftingEnv.made)

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward + self.offset, terminated, truncated, info


def make_drifting_env(**kwargs) -> DriftingEnv:
    return DriftingEnv(**kwargs)


class BlindEnv(KnownAnswerEnv):
    def render(self):
        return None


def make_blind_env(**kwargs) -> BlindEnv:
    return BlindEnv(**kwargs)


def parity(obs) -> int:
    return int(round(float(obs[-1])))


def lengths(seed: int, episodes) -> dict[int, int]:
    return {e: expected_episode(seed + e, parity)["length"] for e in episodes}


@pytest.fixture(autouse=True)
def fresh_counters():
    CountingEnv.renders, CountingEnv.in_loop, CountingEnv.render_s = 0, 0, 0.0
    yield
    CountingEnv.render_s = 0.0


@pytest.mark.parametrize("mode", ["failures", "successes"])
def test_outcome_selection_renders_only_the_kept_episodes(tmp_path, mode):
    seed, n, k = 10, 24, 2
    matching = [i for i in range(n) if expected_episode(seed + i, parity)["success"] == (mode == "successes")][:k]
    result = evaluate(env="tests.test_videos_background:make_counting_env", policy=ParityPolicy(), n_episodes=n,
                      batch_size=8, seed=seed, max_episodes_rendered=k, video_select=mode, videos_dir=str(tmp_path))
    kept = [int(os.path.basename(p)[2:8]) for p in result.video_paths]
    assert kept == matching
    # every frame drawn is a frame of a kept video (its reset frame and one per step), plus the one frame
    # that checks the replay env at the start; nothing for the candidates that were dropped (eight
    # episodes start at once, and most of them do not match)
    assert CountingEnv.renders == 1 + sum(length + 1 for length in lengths(seed, matching).values())
    assert sorted(os.listdir(tmp_path / KA_DIR)) == sorted(os.path.basename(p) for p in result.video_paths)


@pytest.mark.parametrize("live", [False, True])
def test_first_renders_only_its_episodes(tmp_path, live, monkeypatch):
    """``first``: the K episodes' frames and nothing else, replayed after their episodes (plus the one frame that
    checks the replay env at the start), or rendered in the loop under FASTEVAL_LIVE_VIDEOS=1."""
    if live:
        monkeypatch.setenv(recording.LIVE_VIDEOS_VARIABLE, "1")
    result = evaluate(env="tests.test_videos_background:make_counting_env", policy=ParityPolicy(), n_episodes=12,
                      batch_size=4, seed=3, max_episodes_rendered=2, videos_dir=str(tmp_path))
    assert len(result.video_paths) == 2
    assert CountingEnv.renders == (0 if live else 1) + sum(length + 1 for length in lengths(3, [0, 1]).values())
    # live: every frame in the loop, as the episodes run; replayed: none there (the encoder's thread draws them)
    assert CountingEnv.in_loop == (CountingEnv.renders if live else 0)
    assert result.meta["videos"] == (f"rendered during the run ({recording.LIVE_VIDEOS_VARIABLE}=1)" if live
                                     else recording.REPLAYED)


def test_render_and_encode_are_stages_of_their_own(tmp_path, monkeypatch):
    """A 10 ms render in the loop (``first`` videos rendered during the run) is booked as ``render``, not
    ``bookkeeping``; the wait for a slow encoder after the last episode is ``encode``; the encoder ran on its own
    thread."""
    CountingEnv.render_s = 0.01
    threads: set[str] = set()
    real = recording.load_video_writer()

    class SlowWriter:
        def __init__(self, writer):
            self.writer = writer

        def append_data(self, frame):
            threads.add(threading.current_thread().name)
            time.sleep(0.01)
            self.writer.append_data(frame)

        def close(self):
            self.writer.close()

    class SlowImageio:
        def get_writer(self, *args, **kwargs):
            return SlowWriter(real.get_writer(*args, **kwargs))

    monkeypatch.setattr(recording, "load_video_writer", lambda: SlowImageio())
    monkeypatch.setenv(recording.LIVE_VIDEOS_VARIABLE, "1")  # frames rendered in the loop: the render stage
    result = evaluate(env="tests.test_videos_background:make_counting_env", policy=ParityPolicy(), n_episodes=6,
                      batch_size=3, seed=3, max_episodes_rendered=2, videos_dir=str(tmp_path))
    frames = CountingEnv.renders
    assert frames == sum(length + 1 for length in lengths(3, [0, 1]).values())
    t = result.timings
    assert {"render", "encode"} <= set(t)
    assert t["render"] >= 0.01 * frames  # every sleep of the render is in the render stage ...
    assert t["bookkeeping"] < 0.01 * frames  # ... and none of them in bookkeeping
    assert t["encode"] > 0.0 and threads == {"fasteval-video-encoder"}  # written beside the loop
    assert result.eval_s >= t["render"] + t["encode"]  # engine time covers both (the wait at the end included)
    assert [len(decoded(p)) for p in result.video_paths] == [frames_of(3, e) for e in (0, 1)]


def frames_of(seed: int, episode: int) -> int:
    return expected_episode(seed + episode, parity)["length"] + 1


def decoded(path) -> list:
    import imageio.v2 as imageio

    with imageio.get_reader(path) as reader:
        return [np.asarray(f) for f in reader]


def test_the_cli_profile_and_eval_info_show_the_stages(tmp_path):
    from tests.report_fixtures import RUN_ARGS, cli

    result = cli(*RUN_ARGS, "--profile", "-o", str(tmp_path / "r"))
    assert result.exit_code == 0, result.output
    assert "  render " in result.output and "  encode " in result.output
    timings = json.loads((tmp_path / "r" / "eval_info.json").read_text())["timings"]
    assert {"env_step", "h2d", "policy", "d2h", "bookkeeping", "render", "encode"} == set(timings)
    html = (tmp_path / "r" / "report.html").read_text()
    assert 'data-stage="render"' in html and 'data-stage="encode"' in html


def test_a_replay_that_is_not_the_episode_is_dropped_with_a_warning(tmp_path):
    DriftingEnv.made = 0
    with pytest.warns(RuntimeWarning, match="not deterministic given its seed and actions"):
        result = evaluate(env="tests.test_videos_background:make_drifting_env", policy=ParityPolicy(), n_episodes=6,
                          batch_size=2, seed=0, max_episodes_rendered=1, video_select="failures", videos_dir=str(tmp_path))
    assert list(result.video_paths) == []
    assert not [p for p in Path(tmp_path).rglob("*") if p.is_file()]  # no partial file left


@pytest.mark.parametrize("live", [True, False])
def test_a_video_being_written_has_one_hidden_partial_name(tmp_path, monkeypatch, live):
    """Each video is written under one hidden partial name until it is complete (issue 42: ``..ep….partial.partial.mp4``,
    the partial name of a name that was partial already): ``.ep<episode>.partial.mp4`` in the loop, the final name's
    (``.ep<episode>_seed<seed>_<outcome>.partial.mp4``) for a replay."""
    if live:
        monkeypatch.setenv(recording.LIVE_VIDEOS_VARIABLE, "1")
    seen = []
    real = VideoEncoder._do_stream

    def spy(self, key, path):
        real(self, key, path)
        seen.append(self._writers[key][1].name)

    monkeypatch.setattr(VideoEncoder, "_do_stream", spy)
    result = evaluate(env=f"{__name__}:make_counting_env", policy="zero", n_episodes=2, batch_size=1, seed=0,
                      max_episodes_rendered=2, videos_dir=str(tmp_path))
    if live:
        assert seen == [".ep000000.partial.mp4", ".ep000001.partial.mp4"]
    else:
        assert seen == [f".{Path(p).stem}.partial.mp4" for p in result.video_paths]
    assert len(result.video_paths) == 2 and not list(Path(tmp_path).rglob(".*partial*"))


# -- the encoder on its own -----------------------------------------------------------------------------

class FakeWriter:
    """A writer that writes nothing but a marker file, with an optional delay or failure per frame."""

    def __init__(self, path, delay=0.0, fail_at=None, log=None):
        self.path, self.delay, self.fail_at, self.log = Path(path), delay, fail_at, log
        self.frames = 0
        self.path.write_bytes(b"partial")

    def append_data(self, frame):
        if self.fail_at is not None and self.frames == self.fail_at:
            raise OSError(28, "No space left on device")
        time.sleep(self.delay)
        self.frames += 1
        if self.log is not None:
            self.log.append(self.frames)

    def close(self):
        self.path.write_bytes(b"video %d" % self.frames)


class FakeImageio:
    """Makes FakeWriters; with ``failing_writer=k``, only the k-th writer made (0-based) gets ``fail_at``."""

    def __init__(self, failing_writer=None, **kwargs):
        self.kwargs, self.failing_writer, self.made = kwargs, failing_writer, 0

    def get_writer(self, path, **_):
        kwargs = dict(self.kwargs)
        if self.failing_writer is not None and self.made != self.failing_writer:
            kwargs.pop("fail_at", None)
        self.made += 1
        return FakeWriter(path, **kwargs)


def test_the_queue_is_bounded_in_bytes(tmp_path):
    frame = np.zeros((512, 512, 3), np.uint8)  # 768 KiB
    encoder = VideoEncoder(FakeImageio(delay=0.005), 30, lambda f: f, max_bytes=4 * frame.nbytes)
    encoder.stream(0, tmp_path / "ep0.mp4")
    most = 0
    for _ in range(40):
        encoder.frame(0, frame)
        most = max(most, encoder._bytes)
    encoder.close(0, tmp_path / "ep0.mp4")
    encoder.finish()
    assert most <= 4 * frame.nbytes  # the loop waited instead of queueing more
    assert (tmp_path / "ep0.mp4").read_bytes() == b"video 40" and not (tmp_path / ".ep0.partial.mp4").exists()
    assert partial_path(tmp_path / "ep0.mp4") == tmp_path / ".ep0.partial.mp4"
    assert MAX_QUEUED_BYTES >= 100 * 2**20


def test_an_encoder_error_is_raised_in_the_run_and_nothing_half_written_stays(tmp_path):
    encoder = VideoEncoder(FakeImageio(fail_at=3), 30, lambda f: f)
    encoder.stream(0, tmp_path / "ep0.mp4")
    for _ in range(6):
        encoder.frame(0, np.zeros((4, 4, 3), np.uint8))
    deadline = time.monotonic() + 30
    while encoder.error is None and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(OSError, match="No space left"):
        encoder.check()
    encoder.finish()
    assert not list(tmp_path.iterdir()) and encoder.written == {}


def _one_video_closed_one_open(encoder: VideoEncoder, folder: Path, frames_of_the_open_one: int) -> None:
    """Episode 0's video: one frame, closed (its final name ``ep0.mp4``); episode 1's: still streaming."""
    encoder.stream(0, folder / "ep0.mp4")
    encoder.frame(0, np.zeros((4, 4, 3), np.uint8))
    encoder.close(0, folder / "ep0.mp4")
    encoder.stream(1, folder / "ep1.mp4")
    for _ in range(frames_of_the_open_one):
        encoder.frame(1, np.zeros((4, 4, 3), np.uint8))


def test_an_error_left_at_the_end_is_a_warning_and_the_written_videos_stay(tmp_path):
    encoder = VideoEncoder(FakeImageio(fail_at=2), 30, lambda f: f)
    _one_video_closed_one_open(encoder, tmp_path, 4)
    with pytest.warns(RuntimeWarning, match="No space left.*1 videos were written"):
        encoder.finish()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ep0.mp4"]


def test_an_encoder_failure_during_a_run_is_surfaced(tmp_path, monkeypatch):
    """ffmpeg failing mid-run (a full disk): the run stops with the error at its next step (its finished
    episodes kept), or, when the loop was already done, the run warns and lists only the videos written.

    The third video fails: with two slots, its episode starts only after an earlier one finished, so at least
    one finished episode exists whenever the failure is seen (a failure in the first video could stop the run
    before any episode ends, which left nothing to keep and made the check a race)."""
    monkeypatch.setattr(recording, "load_video_writer", lambda: FakeImageio(fail_at=2, failing_writer=2))
    from fasteval.types.errors import EvaluationAborted

    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = evaluate(env="tests.test_videos_background:make_counting_env", policy=ParityPolicy(), n_episodes=400,
                              batch_size=2, seed=3, max_episodes_rendered=4, videos_dir=str(tmp_path))
        except EvaluationAborted as exc:  # the usual case: the thread fails long before the loop ends
            assert "No space left" in str(exc) and len(exc.partial.per_episode) > 0
        else:
            assert any("No space left" in str(w.message) for w in caught) and len(result.video_paths) < 4


def test_a_replay_env_whose_frames_a_video_cannot_take_stops_the_run_at_once(tmp_path):
    from fasteval.types.errors import UserInputError

    with pytest.raises(UserInputError, match="returned None"):
        evaluate(env="tests.test_videos_background:make_blind_env", policy=ParityPolicy(), n_episodes=200, batch_size=2,
                 seed=0, max_episodes_rendered=2, video_select="failures", videos_dir=str(tmp_path))
    assert not [p for p in Path(tmp_path).rglob("*") if p.is_file()]


def test_an_abort_keeps_the_finished_videos_and_deletes_the_unfinished(tmp_path):
    encoder = VideoEncoder(FakeImageio(delay=0.05), 30, lambda f: f)
    _one_video_closed_one_open(encoder, tmp_path, 50)
    deadline = time.monotonic() + 30
    while 0 not in encoder.written and time.monotonic() < deadline:
        time.sleep(0.01)
    encoder.abort()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ep0.mp4"]
    assert encoder.written == {0: str(tmp_path / "ep0.mp4")}


def test_a_replay_renders_the_episode_from_its_seed_and_actions(tmp_path):
    import imageio.v2 as imageio

    seed = 7
    env = KnownAnswerEnv()
    obs, _ = env.reset(seed=seed)
    actions, total, done, steps = [], 0.0, False, 0
    while not done:
        a = parity(obs)
        obs, r, term, trunc, info = env.step(a)
        actions.append(np.int64(a))
        total += r
        done = term or trunc
    expect = expected_episode(seed, parity)
    assert total == expect["sum_reward"]
    path = tmp_path / "ep.mp4"
    encoder = VideoEncoder(imageio, 30, lambda f: np.asarray(f)[..., :3], make_env=KnownAnswerEnv)
    encoder.replay(ReplayJob(0, seed, actions, expect["sum_reward"], expect["length"], expect["success"], path))
    encoder.finish()
    assert len(decoded(path)) == expect["length"] + 1 and not partial_path(path).exists()
