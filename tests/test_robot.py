"""Robot-learning conventions: observation mapping, normalization stats, hf:// policies, task
descriptions, action chunks, videos, episode data; and the real envs (PushT, MuJoCo) when installed.

Exact known answers throughout: ``PixelEnv`` below (images + state, every number a function of
the reset seed and the actions) and ``KnownAnswerEnv``. Real-env tests skip with the pip command
when their package is missing.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
import os

os.environ.setdefault("MUJOCO_GL", "egl")  # headless MuJoCo rendering (mesa's EGL works here; osmesa needs libosmesa6)

import gymnasium as gym
import numpy as np
import pytest
import torch
from click.testing import CliRunner

from fasteval import evaluate
from fasteval.doors.cli import main
from fasteval.robot.policies.obs_mapping import KeyPlan, plan_keys
from fasteval.types.errors import PolicyLoadError, UserInputError
from fasteval.robot.policies.checkpoint import save_checkpoint
from fasteval.robot.policies.mlp import MLPPolicy
from fasteval.robot.policies.normalization import EPS, save_stats
from fasteval.types.spec import EvalSpec
from fasteval.testing import KnownAnswerEnv, ParityPolicy
from fasteval.testing.envs import episode_length

KA = "fasteval.testing.envs:make_known_answer_env"
PIXEL = "tests.test_robot:make_pixel_env"


def has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


needs_hub = pytest.mark.skipif(not has("huggingface_hub"), reason="hf:// policies need huggingface_hub: ./scripts/install.sh hub")


# -- a known-answer env with images and state ---------------------------------------------------------
class PixelEnv(gym.Env):
    """Dict observations ``pixels`` (uint8 4x6x3, or ``pixels/top`` + ``pixels/wrist``: a nested ``pixels`` Dict, flat) and
    ``agent_pos`` (float64 [seed, t]); Box(2) actions. For reset seed ``s``: length ``1 + s % 5``;
    pixels at step t: ``(7 s + 3 t + arange(72)) % 256``; reward ``0.25 a0 - a1``; terminated at the
    end; ``is_success`` at the end when ``s`` is even; ``task_description`` = ``"task <s % 3>"``.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}
    description_reads = 0

    def __init__(self, cameras: int = 1, render_mode: str | None = "rgb_array"):
        image = gym.spaces.Box(0, 255, shape=(4, 6, 3), dtype=np.uint8)
        keys = {"pixels": image} if cameras == 1 else {"pixels/top": image, "pixels/wrist": image}
        self.observation_space = gym.spaces.Dict({**keys, "agent_pos": gym.spaces.Box(-1e9, 1e9, (2,), np.float64)})
        self.action_space = gym.spaces.Box(-1e9, 1e9, (2,), np.float32)
        self.cameras, self.render_mode = cameras, render_mode
        self._seed, self._t, self._done = 0, 0, True

    @property
    def task_description(self) -> str:
        PixelEnv.description_reads += 1
        return f"task {self._seed % 3}"

    def _obs(self):
        pixels = lambda k: ((7 * self._seed + 3 * self._t + k + np.arange(72)) % 256).astype(np.uint8).reshape(4, 6, 3)
        images = {"pixels": pixels(0)} if self.cameras == 1 else {"pixels/top": pixels(0), "pixels/wrist": pixels(100)}
        return {**images, "agent_pos": np.array([self._seed, self._t], dtype=np.float64)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._seed, self._t, self._done = int(seed), 0, False
        return self._obs(), {}

    def step(self, action):
        assert not self._done, "stepped after the end"
        self._t += 1
        last = self._t == 1 + self._seed % 5
        self._done = last
        reward = 0.25 * float(action[0]) - float(action[1])
        return self._obs(), reward, last, False, {"is_success": last and self._seed % 2 == 0}

    def render(self):
        frame = np.zeros((8, 8, 3), dtype=np.uint8)
        frame[..., 0] = self._t * 16
        return frame


def make_pixel_env(**kwargs) -> PixelEnv:
    return PixelEnv(**kwargs)


class StatePolicy:
    """LeRobot-style: reads ``observation.state`` and ``observation.image``; records every input."""

    def __init__(self):
        self.inputs = []

    def select_action(self, obs):
        state, image = obs["observation.state"], obs["observation.image"]
        self.inputs.append((state.clone(), image.clone()))
        return torch.stack([state[:, 0] * 0.5, image[:, 0, 0, 0]], dim=1)


# -- observation mapping ------------------------------------------------------------------------------
def box(shape, dtype):
    return gym.spaces.Box(0, 255, shape=shape, dtype=dtype)


def test_lerobot_keys_for_pusht_like_observations():
    space = gym.spaces.Dict({"pixels": box((96, 96, 3), np.uint8), "agent_pos": box((2,), np.float64)})
    assert set(plan_keys(space, "lerobot", {})) == {
        KeyPlan("pixels", "observation.image", "image_hwc"), KeyPlan("agent_pos", "observation.state", "float")}
    assert set(plan_keys(space, "raw", {})) == {KeyPlan("pixels", "pixels", "same"), KeyPlan("agent_pos", "agent_pos", "same")}


def test_lerobot_keys_for_cameras_environment_state_and_arrays():
    space = gym.spaces.Dict({"pixels/top": box((4, 6, 3), np.uint8), "pixels/wrist": box((3, 4, 6), np.uint8),
                             "environment_state": box((16,), np.float32), "gripper": box((1,), np.float64)})
    assert {(p.target, p.kind) for p in plan_keys(space, "lerobot", {})} == {
        ("observation.images.top", "image_hwc"), ("observation.images.wrist", "image_chw"),
        ("observation.environment_state", "same"), ("observation.gripper", "float")}
    assert plan_keys(box((17,), np.float64), "lerobot", {}) == [KeyPlan(None, "observation.state", "float")]
    assert plan_keys(box((8, 8, 3), np.uint8), "lerobot", {}) == [KeyPlan(None, "observation.image", "image_hwc")]
    assert plan_keys(box((17,), np.float32), "raw", {}) == [KeyPlan(None, "observation", "same")]


def test_lerobot_key_rules_are_lerobots():
    """LeRobot's preprocess_observation rules: an image under another key than pixels passes through as float
    (HxWxC, unscaled); a key whose name a special case already made is dropped; robot_state and IsaacLab's
    policy / camera_obs keep their values; an env key already named observation.* gets the prefix again."""
    space = gym.spaces.Dict({"state": box((3,), np.float64), "agent_pos": box((2,), np.float64),
                             "top": box((4, 6, 3), np.uint8), "image": box((2,), np.float32), "pixels": box((4, 6, 3), np.uint8),
                             "robot_state/eef/pos": box((3,), np.float64), "policy": box((5,), np.int64),
                             "camera_obs": box((4, 6, 3), np.uint8), "observation.x": box((1,), np.int64)})
    assert {(p.source, p.target, p.kind) for p in plan_keys(space, "lerobot", {})} == {
        ("pixels", "observation.image", "image_hwc"), ("agent_pos", "observation.state", "float"),
        ("robot_state/eef/pos", "observation.robot_state/eef/pos", "same"), ("policy", "observation.policy", "same"),
        ("camera_obs", "observation.camera_obs", "same"), ("top", "observation.top", "float"),
        ("observation.x", "observation.observation.x", "float")}  # "state" and "image": names already made
    with pytest.raises(UserInputError, match="uint8 image"):
        plan_keys(gym.spaces.Dict({"pixels": box((2,), np.float32)}), "lerobot", {})


def test_rename_by_mapped_or_raw_key_and_clear_errors():
    space = gym.spaces.Dict({"pixels": box((4, 6, 3), np.uint8), "agent_pos": box((2,), np.float64)})
    plans = plan_keys(space, "lerobot", {"observation.image": "observation.images.top", "agent_pos": "observation.robot"})
    assert {p.target for p in plans} == {"observation.images.top", "observation.robot"}
    with pytest.raises(UserInputError, match=r"no observation key 'nope'.*observation.image"):
        plan_keys(space, "lerobot", {"nope": "x"})
    with pytest.raises(UserInputError, match="clash"):
        plan_keys(space, "lerobot", {"observation.image": "observation.state"})
    with pytest.raises(UserInputError, match="observation_format"):
        EvalSpec(env=KA, observation_format="torchrl")
    with pytest.raises(UserInputError, match="rename"):
        EvalSpec(env=KA, rename={"a": 3})


def test_policy_gets_float_chw_images_and_float32_state_exactly():
    policy = StatePolicy()
    result = evaluate(env=PIXEL, policy=policy, n_episodes=4, batch_size=1, observation_format="lerobot",
                      return_episode_data=True)
    data = result.episode_data
    assert len(policy.inputs) == len(data) + 1  # + the dry run
    for (state, image), raw_image, raw_state in zip(policy.inputs[1:], data["observation.image"], data["observation.state"]):
        # a block of 16 rows (policy_block): the real row first, then inert copies of it
        assert image.dtype == torch.float32 and image.shape == (16, 3, 4, 6)
        assert torch.equal(image[0], raw_image.permute(2, 0, 1).float() / 255)  # exact: the same division
        assert all(torch.equal(image[k], image[0]) for k in range(1, 16))
        assert state.dtype == torch.float32 and torch.equal(state[0], raw_state.float())
    for record in result.per_episode:  # reward 0.25 * (seed / 2) - pixel(0, 0, 0) / 255 per step
        s = record["seed"]
        want = sum(0.25 * float(np.float32(s * 0.5)) - float(np.float32(((7 * s + 3 * t) % 256) / 255)) for t in range(1 + s % 5))
        assert record["sum_reward"] == pytest.approx(want, rel=1e-6)
        assert record["success"] is (s % 2 == 0) and record["length"] == 1 + s % 5


def test_multi_camera_keys_reach_the_policy():
    seen = {}

    class Cameras:
        def select_action(self, obs):
            seen.update({k: tuple(obs[k].shape) for k in obs.keys() if isinstance(obs.get(k), torch.Tensor)})
            return torch.zeros(obs.batch_size[0], 2)

    evaluate(env=PIXEL, env_kwargs={"cameras": 2}, policy=Cameras(), n_episodes=2, batch_size=2, observation_format="lerobot",
             rename={"observation.images.wrist": "observation.images.hand"})
    # blocks of 16 rows (policy_block), whatever the batch
    assert seen == {"observation.images.top": (16, 3, 4, 6), "observation.images.hand": (16, 3, 4, 6), "observation.state": (16, 2)}


# -- task descriptions --------------------------------------------------------------------------------
class TaskPolicy:
    def __init__(self):
        self.calls = []
        self.obs_tasks = []

    def set_task(self, env_ids, descriptions):
        self.calls.append((env_ids.tolist(), list(descriptions)))

    def select_action(self, obs):
        self.obs_tasks.append(list(obs["task"]))
        return torch.zeros(obs.batch_size[0], 2)


@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_task_description_read_every_step_as_lerobots_rollout(vectorization):
    """LeRobot's rollout reads task_description before every select_action: so does fasteval (set_task hears of
    each episode's task once, at its start, and again only when it changes)."""
    PixelEnv.description_reads = 0
    policy = TaskPolicy()
    n = 7
    result = evaluate(env=PIXEL, policy=policy, n_episodes=n, batch_size=3, vectorization=vectorization, observation_format="lerobot")
    got = [d for _ids, descriptions in policy.calls for d in descriptions]
    assert sorted(got) == sorted(f"task {s % 3}" for s in range(n))  # one per episode, each its own
    assert sum(len(ids) for ids, _ in policy.calls) == n
    steps = sum(r["length"] for r in result.per_episode)
    assert len(policy.obs_tasks) > 1 and all(len(t) == 3 for t in policy.obs_tasks)
    if vectorization == "sync":  # in-process: count the attribute reads themselves
        assert PixelEnv.description_reads > steps  # every started slot, before every policy call


class ChangingTaskEnv(PixelEnv):
    """PixelEnv whose task changes within an episode: ``"task <s % 3> step <t>"``."""

    @property
    def task_description(self) -> str:
        return f"task {self._seed % 3} step {self._t}"


class OnlyTaskEnv(PixelEnv):
    """An env with ``task`` and no ``task_description``: LeRobot's rollout falls back to ``task``."""

    def __getattribute__(self, name):
        if name == "task_description":
            raise AttributeError(name)
        return super().__getattribute__(name)

    @property
    def task(self) -> str:
        return f"only task {self._seed}"


class NoTaskEnv(PixelEnv):
    def __getattribute__(self, name):
        if name == "task_description":
            raise AttributeError(name)
        return super().__getattribute__(name)


def make_task_env(kind: str) -> PixelEnv:
    return {"changing": ChangingTaskEnv, "only_task": OnlyTaskEnv, "none": NoTaskEnv}[kind]()


@pytest.mark.parametrize("kind, expected", [
    ("changing", lambda seed, t: f"task {seed % 3} step {t}"),
    ("only_task", lambda seed, t: f"only task {seed}"),
    ("none", lambda seed, t: ""),
])
def test_batch_task_follows_lerobots_rollout(kind, expected):
    """task_description read every step (a change within an episode reaches the next call), then task, then ""."""
    policy = TaskPolicy()
    result = evaluate(env="tests.test_robot:make_task_env", env_kwargs={"kind": kind}, policy=policy, n_episodes=3,
                      batch_size=1, seed=4, observation_format="lerobot")
    want = [expected(r["seed"], t) for r in result.per_episode for t in range(r["length"])]
    assert [t[0] for t in policy.obs_tasks[1:]] == want  # [0]: the dry run


def test_no_task_description_reads_without_a_consumer():
    PixelEnv.description_reads = 0
    evaluate(env=PIXEL, policy=lambda obs: torch.zeros(len(obs), 2), n_episodes=5, batch_size=2)
    assert PixelEnv.description_reads == 0


# -- action chunks ------------------------------------------------------------------------------------
class ChunkParity:
    """Chunks of 3 from the observation the chunk is computed on: [p, 1 - p, p], p its parity bit."""

    def __init__(self, n_action_steps=None):
        self.calls = 0
        if n_action_steps is not None:
            self.n_action_steps = n_action_steps

    def select_action(self, obs):
        self.calls += 1
        p = obs[:, -1].round().long()
        return torch.stack([p, 1 - p, p], dim=1)


def chunk_actions(n_exec: int):
    def factory():
        t, chunk = itertools.count(), []

        def act(obs):
            i = next(t) % n_exec
            if i == 0:
                p = int(round(float(obs[-1])))
                chunk[:] = [p, 1 - p, p]
            return chunk[i]

        return act

    return factory


@pytest.mark.parametrize("n_exec", [None, 2])
def test_chunking_policy_known_answers_at_every_batch_size(n_exec, known_answers, check_episodes, check_same_results):
    runs = []
    for batch in (1, 4, 16):
        policy = ChunkParity(n_exec)
        result = evaluate(env=KA, policy=policy, n_episodes=23, batch_size=batch, seed=5)
        check_episodes(result.per_episode, known_answers(23, 5, chunk_actions(n_exec or 3)), f"batch {batch}")
        runs.append(result.per_episode)
        if batch == 1:  # the policy runs only when the queue is empty (+1: the dry run)
            per = n_exec or 3
            assert policy.calls == 1 + sum(math.ceil(episode_length(5 + i) / per) for i in range(23))
    check_same_results(runs[0], runs[1], "batch 1 vs 4")
    check_same_results(runs[0], runs[2], "batch 1 vs 16")


def test_continuous_chunks_and_bad_chunk_settings():
    class BoxChunks:
        def select_action(self, obs):
            state = obs["agent_pos"].float()
            steps = torch.arange(4, dtype=torch.float32).view(1, 4, 1)
            return state.unsqueeze(1) + steps  # [B, 4, 2]: own position + k

    data = evaluate(env=PIXEL, policy=BoxChunks(), n_episodes=6, batch_size=4, return_episode_data=True).episode_data
    assert len(data) == sum(1 + s % 5 for s in range(6))
    for row in range(len(data)):  # the chunk comes from the episode's step 4k state
        t = int(data["step_count"][row])
        s = int(data["episode"][row])
        assert data["action"][row].tolist() == [s + t % 4, (t - t % 4) + t % 4]
    policy = ChunkParity(n_action_steps=5)
    with pytest.raises(UserInputError, match="n_action_steps"):
        evaluate(env=KA, policy=policy, n_episodes=2)


# -- normalization stats --------------------------------------------------------------------------------
def test_normalization_stats_from_a_checkpoint_folder(tmp_path):
    torch.manual_seed(0)
    module = MLPPolicy(3, 1, hidden_sizes=(8,), action_head="linear")
    folder = save_checkpoint(module, tmp_path / "ckpt")
    mean, std = torch.tensor([0.1, -0.2, 0.3]), torch.tensor([2.0, 0.5, 1.5])
    amin, amax = torch.tensor([-2.0]), torch.tensor([2.0])
    save_stats(folder, {"observation": {"mean": mean, "std": std}, "action": {"min": amin, "max": amax}})
    result = evaluate(env="Pendulum-v1", policy=str(folder), n_episodes=2, batch_size=1, max_steps=6, return_episode_data=True)
    data = result.episode_data
    with torch.no_grad():
        for obs, action in zip(data["observation"], data["action"]):
            x = obs.unsqueeze(0).float()
            normalized = (x - mean) / (std + EPS)
            out = module(normalized)
            want = (out + 1.0) / 2.0 * (amax - amin) + amin
            assert torch.allclose(action, want[0], rtol=0, atol=1e-6), (action, want)
    plain = evaluate(env="Pendulum-v1", policy=module, n_episodes=2, batch_size=1, max_steps=6)
    assert [r["sum_reward"] for r in plain.per_episode] != [r["sum_reward"] for r in result.per_episode]


def test_normalization_errors_name_the_problem(tmp_path):
    module = MLPPolicy(3, 2, hidden_sizes=(4,))
    folder = save_checkpoint(module, tmp_path / "a")
    save_stats(folder, {"observation.state": {"mean": torch.zeros(3), "std": torch.ones(3)}})
    with pytest.raises(UserInputError, match=r"stats for \['observation.state'\].*keys \['observation'\]"):
        evaluate(env=KA, policy=str(folder), n_episodes=1)
    save_stats(folder, {"action": {"mean": torch.zeros(1), "std": torch.ones(1)}})
    with pytest.raises(UserInputError, match="discrete"):
        evaluate(env=KA, policy=str(folder), n_episodes=1)
    save_stats(folder, {"observation": {"mean": torch.zeros(5), "std": torch.ones(5)}})
    with pytest.raises(UserInputError, match="does not broadcast"):
        evaluate(env=KA, policy=str(folder), n_episodes=1)
    with pytest.raises(PolicyLoadError, match="needs mean and std"):
        save_stats(folder, {"observation": {"mean": torch.zeros(3)}}, modes={"observation": "mean_std"})


# -- hf:// policies -----------------------------------------------------------------------------------
def make_hub_cache(root, module, repo="org/cartpole", revision="a" * 40, tags=("main",), stats=None):
    snapshot = root / "hub" / f"models--{repo.replace('/', '--')}" / "snapshots" / revision
    save_checkpoint(module, snapshot)
    if stats:
        save_stats(snapshot, stats)
    refs = snapshot.parent.parent / "refs"
    refs.mkdir(parents=True, exist_ok=True)
    for tag in tags:
        (refs / tag).write_text(revision)
    return snapshot


@needs_hub
def test_hf_reference_loads_from_an_offline_cache(tmp_path, monkeypatch, check_same_results):
    from fasteval.robot.policies import hub

    hub._resolve.cache_clear()
    module = MLPPolicy(3, 2, hidden_sizes=(8,))
    snapshot = make_hub_cache(tmp_path, module, tags=("main", "v1"),
                              stats={"observation": {"mean": torch.full((3,), 0.5), "std": torch.full((3,), 0.25)}})
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    local = evaluate(env=KA, policy=str(snapshot), n_episodes=12, batch_size=4)
    for ref in ("hf://org/cartpole", "hf://org/cartpole@v1", f"hf://org/cartpole@{'a' * 40}"):
        check_same_results(evaluate(env=KA, policy=ref, n_episodes=12, batch_size=4).per_episode, local.per_episode, ref)
    with pytest.raises(PolicyLoadError, match="HF_HUB_OFFLINE"):
        evaluate(env=KA, policy="hf://org/missing", n_episodes=1)
    with pytest.raises(PolicyLoadError, match="HF_HUB_OFFLINE"):
        evaluate(env=KA, policy="hf://org/cartpole@v2", n_episodes=1)
    with pytest.raises(UserInputError, match="hf://org/repo"):
        evaluate(env=KA, policy="hf://org/a/b@", n_episodes=1)
    hub._resolve.cache_clear()


# -- videos -------------------------------------------------------------------------------------------
def video_name(record) -> str:
    """``ep<episode:06d>_seed<seed>_<success|failure>.mp4`` of a per-episode record."""
    return f"ep{record['episode_ix']:06d}_seed{record['seed']}_{'success' if record['success'] else 'failure'}.mp4"


def decoded_frames(path):
    import imageio.v2 as imageio

    with imageio.get_reader(path) as reader:
        return [np.asarray(frame) for frame in reader]


@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_videos_of_the_first_k_episodes_by_index(tmp_path, vectorization):
    result = evaluate(env=KA, policy=ParityPolicy(), n_episodes=7, batch_size=3, seed=1, max_episodes_rendered=3,
                      videos_dir=str(tmp_path), vectorization=vectorization)
    names = [os.path.relpath(p, tmp_path) for p in result.video_paths]
    assert names == [f"fasteval.testing.envs_make_known_answer_env/{video_name(r)}" for r in result.per_episode[:3]]
    assert sorted(os.listdir(tmp_path / "fasteval.testing.envs_make_known_answer_env")) == sorted(os.path.basename(n) for n in names)
    for path, record in zip(result.video_paths, result.per_episode):
        frames = decoded_frames(path)
        assert len(frames) == record["length"] + 1  # the reset frame + one per step
        reds = [float(f[..., 0].mean()) for f in frames]
        assert reds == pytest.approx([16.0 * t for t in range(len(frames))], abs=4)  # frame t shows step t
    assert result.overall()["video_paths"] == list(result.video_paths)


def test_render_none_is_a_clear_error(tmp_path):
    with pytest.raises(UserInputError, match="render_mode='rgb_array'"):
        evaluate(env="CartPole-v1", n_episodes=1, max_episodes_rendered=1, videos_dir=str(tmp_path))


# -- episode data -------------------------------------------------------------------------------------
def plain_rollout(seed: int, max_steps: int | None = None):
    env = KnownAnswerEnv()
    obs, _ = env.reset(seed=seed)
    rows = []
    for t in itertools.count():
        action = int(round(float(obs[-1])))
        next_obs, reward, terminated, truncated, info = env.step(action)
        capped = max_steps is not None and t + 1 >= max_steps
        rows.append((obs, action, reward, terminated, truncated, info["is_success"], terminated or truncated or capped,
                     next_obs))
        obs = next_obs
        if rows[-1][6]:
            return rows


@pytest.mark.parametrize("batch,max_steps", [(1, None), (4, None), (5, 4)])
def test_episode_data_equals_plain_single_env_rollouts(batch, max_steps):
    n, seed = 9, 11
    result = evaluate(env=KA, policy=ParityPolicy(), n_episodes=n, batch_size=batch, seed=seed, max_steps=max_steps,
                      return_episode_data=True)
    data = result.episode_data
    assert sorted(set(data["episode"].tolist())) == list(range(n))
    assert len(data) == sum(r["length"] for r in result.per_episode)
    assert data["index"].tolist() == list(range(len(data)))
    flat = lambda rows, *key: rows[key].reshape(-1).tolist()  # noqa: E731  (TorchRL's [T, 1] entries)
    for record in result.per_episode:
        rows = data[data["episode"] == record["episode_ix"]]
        want = plain_rollout(record["seed"], max_steps)
        assert len(rows) == record["length"] == len(want)
        assert rows["seed"].tolist() == [record["seed"]] * len(want)
        assert flat(rows, "step_count") == list(range(len(want)))
        assert np.array_equal(rows["observation"].numpy(), np.stack([w[0] for w in want]))
        assert np.array_equal(rows["next", "observation"].numpy(), np.stack([w[7] for w in want]))
        assert rows["action"].tolist() == [w[1] for w in want]
        assert flat(rows, "next", "reward") == [w[2] for w in want]
        assert flat(rows, "next", "terminated") == [w[3] for w in want]
        assert flat(rows, "next", "truncated") == [w[4] or (w[6] and not w[3]) for w in want]  # the cap truncates
        assert flat(rows, "next", "success") == [w[5] for w in want]
        assert flat(rows, "next", "done") == [False] * (len(want) - 1) + [True]
        assert flat(rows, "done") == flat(rows, "terminated") == flat(rows, "truncated") == [False] * len(want)
        assert float(rows["next", "reward"].sum()) == record["sum_reward"]


def test_episode_data_of_dict_observations_keeps_the_env_keys():
    data = evaluate(env=PIXEL, policy=lambda obs: torch.zeros(len(obs), 2), n_episodes=3, batch_size=2,
                    return_episode_data=True).episode_data
    assert {"pixels", "agent_pos"} <= set(data.keys()) and "observation" not in data.keys()  # TorchRL: the env's keys
    assert data["pixels"].dtype == torch.uint8 and data["agent_pos"].dtype == torch.float64
    assert data["agent_pos"][:, 1].tolist() == data["step_count"].reshape(-1).double().tolist()
    assert set(data["next"].keys()) >= {"pixels", "agent_pos", "reward", "done"}


# -- CLI ------------------------------------------------------------------------------------------------
def test_cli_rename_obs_format_and_videos(tmp_path):
    out = tmp_path / "run"
    args = ["--env", PIXEL, "--policy", "tests.test_robot:StatePolicy", "-n", "3", "-b", "2", "--obs-format", "lerobot",
            "--rename", "observation.images.cam=observation.image", "-o", str(out)]
    bad = CliRunner().invoke(main, args)
    assert bad.exit_code == 2 and "no observation key 'observation.images.cam'" in bad.output
    bad = CliRunner().invoke(main, [*args[:-4], "--rename", "novalue", "-o", str(out)])
    assert bad.exit_code == 2 and "key=new_key" in bad.output
    args = args[:-4] + ["--rename", "agent_pos=observation.state", "-o", str(out)]
    args += ["--max-episodes-rendered", "2"]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    info = json.loads((out / "eval_info.json").read_text())
    assert info["overall"]["n_episodes"] == 3
    videos = sorted(p.name for p in (out / "videos" / "tests.test_robot_make_pixel_env").iterdir())
    assert videos == [video_name(r) for r in info["per_episode"][:2]]


# -- real envs ----------------------------------------------------------------------------------------
@pytest.mark.skipif(not has("gym_pusht"), reason="PushT needs gym-pusht: ./scripts/install.sh pusht")
def test_pusht_pixels_agent_pos_sync_equals_async(check_same_results):
    runs = {}
    for vectorization in ("sync", "async"):
        policy = StatePolicy()
        result = evaluate(env="gym_pusht/PushT-v0", env_kwargs={"obs_type": "pixels_agent_pos"}, policy=policy,
                          n_episodes=4, batch_size=2, max_steps=8, seed=3, vectorization=vectorization,
                          observation_format="lerobot", return_episode_data=True)
        runs[vectorization] = result
        state, image = policy.inputs[1]
        # a block of 16 rows (policy_block): 2 real rows, then copies of the last one
        assert image.shape == (16, 3, 96, 96) and image.dtype == torch.float32 and 0 <= image.min() <= image.max() <= 1
        assert state.shape == (16, 2) and state.dtype == torch.float32
        data = result.episode_data
        assert data["observation.image"].shape[1:] == (96, 96, 3) and len(data) == 4 * 8
        assert [r["length"] for r in result.per_episode] == [8] * 4
        assert all(r["success"] is False for r in result.per_episode)  # from info["is_success"]
    check_same_results(runs["sync"].per_episode, runs["async"].per_episode, "PushT sync vs async")
    assert torch.equal(runs["sync"].episode_data["observation.image"], runs["async"].episode_data["observation.image"])
    env = gym.make("gym_pusht/PushT-v0", obs_type="pixels_agent_pos")
    obs, _ = env.reset(seed=3)  # episode 0 starts from the env's own reset with seed 3
    assert np.array_equal(runs["async"].episode_data["observation.image"][0].numpy(), obs["pixels"])
    env.close()


@pytest.mark.skipif(not has("mujoco"), reason="MuJoCo envs need gymnasium[mujoco]: ./scripts/install.sh mujoco")
def test_mujoco_state_observations_and_rgb_array_video(tmp_path, check_same_results):
    seen = []

    def zero(obs):
        seen.append(tuple(obs["observation.state"].shape))
        return torch.zeros(obs.batch_size[0], 6)

    common = dict(env="HalfCheetah-v5", n_episodes=3, max_steps=5, seed=2, observation_format="lerobot")
    a = evaluate(policy=zero, batch_size=1, **common)
    b = evaluate(policy=zero, batch_size=3, **common)
    check_same_results(a.per_episode, b.per_episode, "HalfCheetah batch 1 vs 3")
    assert set(seen) == {(16, 17)}  # blocks of 16 rows (policy_block) at batch 1 and 3 alike
    try:
        probe = gym.make("HalfCheetah-v5", render_mode="rgb_array", width=32, height=32)
        probe.reset(seed=0)
        probe.render()
        probe.close()
    except Exception as exc:  # no usable OpenGL: say which and how to fix it
        pytest.skip(f"MuJoCo cannot render headless with MUJOCO_GL={os.environ.get('MUJOCO_GL')}: {exc!r}; "
                    f"install mesa's EGL (libegl1, libegl-mesa0) or libosmesa6 with MUJOCO_GL=osmesa")
    result = evaluate(env="Hopper-v5", env_kwargs={"render_mode": "rgb_array", "width": 32, "height": 32}, policy="zero",
                      n_episodes=2, batch_size=2, max_steps=4, max_episodes_rendered=1, videos_dir=str(tmp_path))
    assert len(result.video_paths) == 1
    frames = decoded_frames(result.video_paths[0])
    assert len(frames) == result.per_episode[0]["length"] + 1 == 5 and frames[0].shape == (32, 32, 3)


# -- recording through env faults ---------------------------------------------------------------------
FAULTY = "fasteval.testing.faulty:make_faulty_env"


@pytest.mark.parametrize("vectorization,fault", [("sync", "raise"), ("async", "die")])
def test_recording_drops_partial_data_of_restarted_episodes(tmp_path, vectorization, fault):
    kwargs = {"fault": fault, "fault_seeds": [1, 4], "fault_step": 3, "once_dir": str(tmp_path)}
    rendered = 3
    result = evaluate(env=FAULTY, env_kwargs=kwargs, policy=ParityPolicy(), n_episodes=8, batch_size=3,
                      vectorization=vectorization, return_episode_data=True, max_episodes_rendered=rendered,
                      videos_dir=str(tmp_path / "videos"))
    assert len(result.errors) == 2 and result.n_failed == 0
    data = result.episode_data
    assert len(data) == sum(r["length"] for r in result.per_episode)
    for record in result.per_episode:
        rows = data[data["episode"] == record["episode_ix"]]
        want = plain_rollout(record["seed"])
        assert rows["action"].tolist() == [w[1] for w in want]
        assert np.array_equal(rows["observation"].numpy(), np.stack([w[0] for w in want]))
    for path, record in zip(result.video_paths, result.per_episode):
        assert len(decoded_frames(path)) == record["length"] + 1


def test_failed_episodes_have_no_data_and_no_video(tmp_path):
    kwargs = {"fault": "raise", "fault_seeds": [2], "fault_step": 1}
    rendered = 4
    result = evaluate(env=FAULTY, env_kwargs=kwargs, policy=ParityPolicy(), n_episodes=5, batch_size=2, retries=0,
                      return_episode_data=True, max_episodes_rendered=rendered, videos_dir=str(tmp_path))
    assert result.n_failed == 1 and [r["episode_ix"] for r in result.per_episode] == [0, 1, 3, 4]
    assert sorted(set(result.episode_data["episode"].tolist())) == [0, 1, 3, 4]
    if rendered:
        assert [os.path.basename(p) for p in result.video_paths] == [video_name(r) for r in result.per_episode[:3]]
        assert len(list((tmp_path / "fasteval.testing.faulty_make_faulty_env").iterdir())) == 3


def test_recording_with_pipeline_and_chunks_refuse_pipeline(tmp_path):
    result = evaluate(env=KA, policy=ParityPolicy(), n_episodes=9, batch_size=4, seed=4, vectorization="async",
                      pipeline=True, return_episode_data=True)
    data = result.episode_data
    for record in result.per_episode:
        rows = data[data["episode"] == record["episode_ix"]]
        want = plain_rollout(record["seed"])
        assert rows["action"].tolist() == [w[1] for w in want]
        assert np.array_equal(rows["observation"].numpy(), np.stack([w[0] for w in want]))
    with pytest.raises(UserInputError, match="Drop --pipeline"):
        evaluate(env=KA, policy=ChunkParity(), n_episodes=4, batch_size=4, vectorization="async", pipeline=True)


# -- robot envs as the docs describe them ---------------------------------------------------------------
needs_metaworld = pytest.mark.skipif(not has("metaworld"), reason="MetaWorld needs metaworld: ./scripts/install.sh metaworld")


@needs_metaworld
def test_metaworld_env_type_and_the_meta_world_namespace_run_end_to_end(tmp_path):
    runner = CliRunner()
    common = ["--eval.n_episodes=2", "--eval.batch_size=2", "--env.episode_length=4", "--policy.device=cpu", "--seed=7"]
    typed = runner.invoke(main, ["--env.type=metaworld", "--env.task=push-v3", *common, f"--output_dir={tmp_path / 'a'}"])
    assert typed.exit_code == 0, typed.output
    info = json.loads((tmp_path / "a" / "eval_info.json").read_text())
    assert [(r["seed"], r["length"]) for r in info["per_episode"]] == [(7, 4), (8, 4)]
    again = runner.invoke(main, ["--env.type=metaworld", "--env.task=metaworld-push-v3", *common, f"--output_dir={tmp_path / 'b'}"])
    assert again.exit_code == 0, again.output  # the reset seed picks the task variant: the same numbers again
    assert json.loads((tmp_path / "b" / "eval_info.json").read_text())["per_episode"] == info["per_episode"]
    plain = runner.invoke(main, ["--env", "Meta-World/MT1", "--env-kwarg", "env_name=push-v3", "-n", "2", "--max-steps", "4",
                                 "--device", "cpu", "-o", str(tmp_path / "c")])
    assert plain.exit_code == 0, plain.output  # MetaWorld's own registration, found through its module name


@needs_metaworld
def test_several_metaworld_tasks_from_the_command_line(tmp_path):
    out = tmp_path / "suite"
    result = CliRunner().invoke(main, ["--env.type=metaworld", "--env.task=push-v3,reach-v3", "--eval.n_episodes=2",
                                       "--eval.batch_size=2", "--env.episode_length=3", "--policy.device=cpu",
                                       f"--output_dir={out}"])
    assert result.exit_code == 0, result.output
    info = json.loads((out / "eval_info.json").read_text())
    assert [(t["task_group"], t["task_id"], t["task"]) for t in info["per_task"]] == [
        ("metaworld", 0, "push-v3"), ("metaworld", 1, "reach-v3")]
    assert list(info["per_group"]) == ["metaworld"] and info["per_group"]["metaworld"]["n_episodes"] == 4
    # LeRobot-style options: LeRobot's seed 1000 (every task the same seeds, as LeRobot's eval_policy_all)
    assert [(r["task"], r["seed"]) for r in info["per_episode"]] == [("push-v3", 1000), ("push-v3", 1001),
                                                                    ("reach-v3", 1000), ("reach-v3", 1001)]
    single = CliRunner().invoke(main, ["--env.type=metaworld", "--env.task=reach-v3", "--eval.n_episodes=2",
                                       "--env.episode_length=3", "--policy.device=cpu", f"--output_dir={tmp_path / 'one'}"])
    assert single.exit_code == 0, single.output
    alone = json.loads((tmp_path / "one" / "eval_info.json").read_text())["per_episode"]
    assert [r["sum_reward"] for r in info["per_episode"][2:]] == [r["sum_reward"] for r in alone]  # same seeds, same task
    assert (out / "tasks" / "metaworld_1" / "episodes.jsonl").exists() and (out / "config.json").exists()


@pytest.mark.skipif(not has("mujoco"), reason="MuJoCo envs need gymnasium[mujoco]: ./scripts/install.sh mujoco")
@pytest.mark.parametrize("flag", ["--videos", "--max-episodes-rendered"])
def test_mujoco_videos_without_render_mode_exit_2_before_the_run(tmp_path, flag):
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["--env", "Hopper-v5", "-n", "1", "--max-steps", "2", flag, "1", "-o", str(out)])
    assert result.exit_code == 2, result.output
    assert "render_mode=rgb_array" in result.output and "Unexpected mode" in result.output  # named, not raised
    assert not (out / "manifest.json").exists() and not (out / "episodes.jsonl").exists()
    with pytest.raises(UserInputError, match="render_mode=rgb_array"):
        evaluate(env="Hopper-v5", n_episodes=1, max_steps=2, max_episodes_rendered=1, videos_dir=str(tmp_path / "v"))


def test_headless_gl_is_set_once_when_unset_and_there_is_no_display(monkeypatch, caplog):
    import fasteval.robot.env_kinds.headless as headless

    monkeypatch.setattr(headless, "_said", False)
    with caplog.at_level("WARNING", logger="fasteval"):
        env: dict[str, str] = {}
        assert headless.ensure_headless_gl(env, platform="linux") is True
        assert env == {"MUJOCO_GL": "egl", "PYOPENGL_PLATFORM": "egl"}
        other: dict[str, str] = {"PYOPENGL_PLATFORM": "osmesa"}
        assert headless.ensure_headless_gl(other, platform="linux") is True and other["PYOPENGL_PLATFORM"] == "osmesa"
    assert [r.getMessage() for r in caplog.records].count(caplog.records[0].getMessage()) == 1  # said once
    assert "MUJOCO_GL=egl" in caplog.records[0].getMessage()
    for env, platform in [({"MUJOCO_GL": "osmesa"}, "linux"), ({"DISPLAY": ":0"}, "linux"),
                          ({"WAYLAND_DISPLAY": "wayland-0"}, "linux"), ({}, "darwin")]:
        before = dict(env)
        assert headless.ensure_headless_gl(env, platform=platform) is False and env == before


@pytest.mark.skipif(not has("mujoco"), reason="MuJoCo envs need gymnasium[mujoco]: ./scripts/install.sh mujoco")
def test_mujoco_envs_set_mujoco_gl_on_a_headless_linux(monkeypatch):
    import sys

    from fasteval.robot.env_kinds import prepare_env

    monkeypatch.setattr(sys, "platform", "linux")
    for name in ("MUJOCO_GL", "DISPLAY", "WAYLAND_DISPLAY", "PYOPENGL_PLATFORM"):
        monkeypatch.delenv(name, raising=False)
    prepare_env("CartPole-v1", {})
    assert "MUJOCO_GL" not in os.environ  # not a MuJoCo env: nothing changes
    prepare_env("Hopper-v5", {})
    assert os.environ["MUJOCO_GL"] == "egl"
    monkeypatch.setenv("MUJOCO_GL", "osmesa")
    prepare_env("Hopper-v5", {})
    assert os.environ["MUJOCO_GL"] == "osmesa"  # a user's choice stays


@pytest.mark.skipif(not has("mujoco"), reason="MuJoCo envs need gymnasium[mujoco]: ./scripts/install.sh mujoco")
def test_one_mujoco_check_for_ids_references_and_built_envs():
    from fasteval.robot.env_kinds import is_mujoco

    assert is_mujoco("Hopper-v5") and not is_mujoco("CartPole-v1")
    assert is_mujoco("fasteval.robot.metaworld:make_metaworld_env") and not is_mujoco(KA)
    hopper, cartpole = gym.make("Hopper-v5"), gym.make("CartPole-v1")
    try:
        assert is_mujoco(hopper) and not is_mujoco(cartpole)  # through the wrappers, by the class's modules
    finally:
        hopper.close(), cartpole.close()


def test_a_human_render_mode_is_refused_where_no_window_can_open():
    from fasteval.robot.env_kinds import render_mode_problem

    human = {"render_mode": "human"}
    assert "no display" in render_mode_problem("CartPole-v1", human, environ={}, platform="linux")
    assert render_mode_problem("CartPole-v1", human, environ={"DISPLAY": ":0"}, platform="linux") is None
    assert render_mode_problem("CartPole-v1", {"render_mode": "rgb_array"}, environ={}, platform="linux") is None
    assert render_mode_problem("CartPole-v1", human, environ={}, platform="darwin") is None
    if has("mujoco"):  # a display, but MuJoCo told to render off-screen
        assert "MUJOCO_GL=egl" in render_mode_problem("Hopper-v5", human, {"DISPLAY": ":0", "MUJOCO_GL": "egl"}, "linux")
        assert render_mode_problem("Hopper-v5", human, {"DISPLAY": ":0", "MUJOCO_GL": "glfw"}, "linux") is None
        assert render_mode_problem("CartPole-v1", human, {"DISPLAY": ":0", "MUJOCO_GL": "egl"}, "linux") is None


@pytest.mark.skipif(not has("mujoco"), reason="MuJoCo envs need gymnasium[mujoco]: ./scripts/install.sh mujoco")
def test_a_human_render_mode_on_a_headless_run_exits_2_and_leaves_no_folder(tmp_path):
    """In a subprocess: without the refusal, MuJoCo's GLFW aborts the process (exit 134) after the folder's lock."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "MUJOCO_GL")}
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "fasteval.doors.cli", "--env", "HalfCheetah-v5", "--env-kwarg",
                           "render_mode=human", "-n", "1", "--max-steps", "2", "-o", str(out)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "render_mode='human'" in done.stderr and "no display" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not out.exists()


def test_unknown_namespaces_name_the_package_to_install():
    from fasteval.core.envs import make_factory
    from fasteval.robot.env_kinds import ENV_KINDS, PLUGINS, namespace_module
    from fasteval.types.errors import EnvNotFoundError

    assert namespace_module("Meta-World") == "metaworld" and namespace_module("gym_pusht") == "gym_pusht"
    assert namespace_module("Not-A-Module") is None
    if not has("gym_aloha"):
        with pytest.raises(EnvNotFoundError, match="`pip install gym-aloha`"):
            make_factory("gym_aloha/AlohaInsertion-v0", {}, None, kinds=ENV_KINDS)
    with pytest.raises(EnvNotFoundError, match="'no_such_plugin_xyz', which is not installed") as info:
        make_factory("no_such_plugin_xyz/Env-v0", {}, None, kinds=ENV_KINDS)
    assert "pip install no-such" not in str(info.value)  # no made-up package name
    with pytest.raises(EnvNotFoundError, match="not a plugin fasteval knows"):
        make_factory("Some-Thing/Env-v0", {}, None, kinds=ENV_KINDS)
    assert PLUGINS["Meta-World"] == ("metaworld", "metaworld")
    with pytest.raises(EnvNotFoundError) as plain:  # core alone knows no plugin: gymnasium's own words
        make_factory("no_such_plugin_xyz/Env-v0", {}, None)
    assert "pip install" not in str(plain.value) and "not installed" not in str(plain.value)
