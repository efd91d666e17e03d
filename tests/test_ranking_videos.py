"""Videos where they help the decision (issue 41): a many-policy run renders its videos after the race, by
replaying the kept episodes, and the ranking page shows the checkpoints side by side on the same seeds.

The counting env (``tests.test_videos_background``) counts every frame drawn and those drawn in the main
thread (the loop's, with sync envs): a many-policy run draws none there; every frame is a replay's, in the
encoder's thread, after the last episode (plus one frame per policy that checks the replay env at the start).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from fasteval.testing import expected_episode
from fasteval.testing.bernoulli import BernoulliEnv
from fasteval.testing.checkpoints import CheckpointFamily
from tests.report_fixtures import cli
from tests.test_videos_background import CountingEnv, fresh_counters  # noqa: F401  (the autouse fixture)

COUNTING = "tests.test_videos_background:make_counting_env"
PARITY = "fasteval.testing.policies:ParityPolicy"


def parity(obs) -> int:
    return int(round(float(obs[-1])))


def test_a_many_policy_run_renders_after_the_race_and_the_page_shows_them_side_by_side(tmp_path):
    pytest.importorskip("imageio_ffmpeg")
    folder = tmp_path / "run"
    out = cli("--env", COUNTING, "--policy", PARITY, "--policy", "zero", "-n", "8", "-b", "4", "--seed", "5",
              "--videos", "3", "-o", str(folder))
    assert out.exit_code == 0, out.output
    info = json.loads((folder / "eval_info.json").read_text())
    # no frame was drawn in the loop; every frame is a replay's (and one probe per policy)
    assert CountingEnv.in_loop == 0
    frames = {name: sum(r["length"] + 1 for r in entry["per_episode"] if r["episode_ix"] < 3)
              for name, entry in info["policies"].items()}
    assert frames["ParityPolicy"] == sum(expected_episode(5 + e, parity)["length"] + 1 for e in range(3))
    assert CountingEnv.renders == 2 + sum(frames.values())
    html = (folder / "report.html").read_text()
    block = html[html.index('<section id="side-by-side">'):]
    block = block[:block.index("</section>")]
    figures = re.findall(r'<figure data-policy="([^"]+)" data-episode="(\d+)" data-seed="(\d+)"[^>]*>'
                         r'<video [^>]*src="([^"]+)"', block)
    names = [r["policy"] for r in info["ranking"]]
    assert sorted({f[0] for f in figures}) == sorted(names)
    for name in names:  # the same seeds for every policy, each a file that exists and is the policy's own
        mine = [f for f in figures if f[0] == name]
        assert [(int(e), int(s)) for _, e, s, _ in mine] == [(e, 5 + e) for e in range(3)]
        for _, _, _, src in mine:
            assert (folder / src).is_file() and f"videos/{name}/" in src
    rows = re.findall(r'<tr data-episode="(\d+)" data-seed="(\d+)">', block)
    assert rows == [(str(e), str(5 + e)) for e in range(3)]
    # the header lists the policies in ranked order
    head = re.findall(r'<th scope="col">([^<]+)</th>', block)
    assert head == ["seed", *names]
    for name in names:
        assert sorted(Path(p).name for p in info["policies"][name]["overall"]["video_paths"]) == sorted(
            Path(src).name for f, _, _, src in figures if f == name)


def test_a_one_policy_page_has_no_side_by_side_block(tmp_path):
    folder = tmp_path / "one"
    out = cli("--env", COUNTING, "--policy", PARITY, "-n", "4", "--videos", "2", "-o", str(folder))
    assert out.exit_code == 0, out.output
    assert 'id="side-by-side"' not in (folder / "report.html").read_text()


class DrawnBernoulli(BernoulliEnv):
    """The Bernoulli checkpoints' env with frames (8x8, the step and the seed in two channels)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}
    render_mode = "rgb_array"

    def render(self):
        frame = np.zeros((8, 8, 3), dtype=np.uint8)
        frame[..., 0] = (self._t * 16) % 256
        frame[..., 1] = self._seed % 256
        return frame


def make_drawn_bernoulli(**kwargs) -> DrawnBernoulli:
    return DrawnBernoulli(**kwargs)


def test_a_dropped_policys_videos_are_only_of_the_episodes_the_race_counts(tmp_path):
    """A race drops a checkpoint at k before its K videos: the videos listed (on its page, in the record and
    side by side) are of episodes 0..k-1 only; every one is a file; the seeds shown side by side are shared."""
    pytest.importorskip("imageio_ffmpeg")
    family = CheckpointFamily((0.1, 0.9), share=1.0)
    folder = tmp_path / "race"
    out = cli("--env", "tests.test_ranking_videos:make_drawn_bernoulli", "--env-kwarg", "p=[0.1, 0.9]",
              "--env-kwarg", "share=1.0", "--policy", family.policy(0), "--policy", family.policy(1), "-n", "200",
              "-b", "4", "--stop-when", "best", "--videos", "40", "-o", str(folder))
    assert out.exit_code == 0, out.output
    info = json.loads((folder / "eval_info.json").read_text())
    dropped = {e["name"]: e["k"] for e in info["race"]["eliminations"]}
    assert dropped and min(dropped.values()) < 40  # the test's premise: a drop before the 40th episode
    for name, entry in info["policies"].items():
        limit = dropped.get(name, info["race"]["k"])
        episodes = sorted(int(Path(p).name[2:8]) for p in entry["overall"]["video_paths"])
        assert episodes == list(range(min(limit, 40))), (name, limit, episodes)
        assert all(Path(p).is_file() for p in entry["overall"]["video_paths"])
    block = (folder / "report.html").read_text().split('<section id="side-by-side">')[1].split("</section>")[0]
    rows = re.findall(r'<tr data-episode="(\d+)" data-seed="(\d+)">', block)
    assert [int(e) for e, _ in rows] == list(range(min(min(dropped.values()), 40)))
