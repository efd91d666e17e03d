"""Multi-task suites: per-task seed ledgers, the classic per_task / per_group / overall layout,
sequential equals concurrent, and concurrent tasks never share a stateful policy.

Tasks are ``KnownAnswerEnv`` s whose reset seed is offset per task, so every number of every
task's episodes is known in advance; MetaWorld runs when it is installed.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import threading

os.environ.setdefault("MUJOCO_GL", "egl")

import pytest
import torch

from fasteval.types.errors import UserInputError
from fasteval.doors.suites import Task, flatten_suite, run_suite
from fasteval.testing import KnownAnswerEnv, ParityPolicy, StepCounterPolicy, expected_episode

from tests.conftest import ACTION_FNS, EPISODE_NUMBERS, same_number


class OffsetEnv(KnownAnswerEnv):
    """KnownAnswerEnv whose episode for reset seed ``s`` is the one of seed ``s + offset``."""

    def __init__(self, offset: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.offset = offset

    def reset(self, *, seed=None, options=None):
        return super().reset(seed=seed + self.offset, options=options)


def make_offset_env(offset: int = 0) -> OffsetEnv:
    return OffsetEnv(offset)


OFFSET = "tests.test_suites:make_offset_env"
NAMED = {"open": 0, "close": 100}


def make_named_task_env(task: str) -> OffsetEnv:
    """An env whose ``task`` kwarg names it (as MetaWorld's does): ``open`` or ``close``."""
    return OffsetEnv(NAMED[task])

SUITE = {
    "kitchen": {0: Task(OFFSET, {"offset": 0}, name="open"), 1: Task(OFFSET, {"offset": 100}, name="close")},
    "garage": {0: Task(OFFSET, {"offset": 1000}, name="park")},
}
OFFSETS = {("kitchen", 0): 0, ("kitchen", 1): 100, ("garage", 0): 1000}


def check_suite(result, n, seed, actions):
    """Exact known answers for every task: episode i of every task uses seed + i."""
    assert len(result.per_episode) == n * len(OFFSETS)
    for (group, task_id), offset in OFFSETS.items():
        records = [r for r in result.per_episode if (r["task_group"], r["task_id"]) == (group, task_id)]
        assert [r["episode_ix"] for r in records] == list(range(n))
        assert [r["seed"] for r in records] == [seed + i for i in range(n)]
        for i, record in enumerate(records):
            want = expected_episode(seed + i + offset, ACTION_FNS[actions]())
            for key in EPISODE_NUMBERS:
                if key != "seed":
                    assert same_number(record[key], want[key]), (group, task_id, i, key, record[key], want[key])


def test_suite_known_answers_and_classic_layout():
    result = run_suite(SUITE, policy=ParityPolicy(), n_episodes=6, seed=7, batch_size=4)
    check_suite(result, 6, 7, "parity")
    info = result.to_eval_info()
    tasks = {(t["task_group"], t["task_id"]): t for t in info["per_task"]}
    assert set(tasks) == set(OFFSETS)
    assert tasks[("kitchen", 1)]["task"] == "close"
    assert tasks[("garage", 0)]["metrics"]["seeds"] == list(range(7, 13))
    assert set(info["per_group"]) == {"kitchen", "garage"}
    assert info["per_group"]["kitchen"]["n_episodes"] == 12 and info["overall"]["n_episodes"] == 18
    sums = [r["sum_reward"] for r in result.per_episode]
    assert info["overall"]["avg_sum_reward"] == pytest.approx(sum(sums) / len(sums))
    assert [t["task"] for t in result.meta["tasks"]] == ["open", "close", "park"]


@pytest.mark.parametrize("concurrency", [2, 3])
def test_concurrent_equals_sequential(concurrency, check_same_results):
    sequential = run_suite(SUITE, policy=ParityPolicy(), n_episodes=9, seed=3, batch_size=2)
    concurrent = run_suite(SUITE, policy=ParityPolicy(), n_episodes=9, seed=3, batch_size=5, concurrency=concurrency)
    check_same_results(sequential.per_episode, concurrent.per_episode, f"concurrency {concurrency}")


class OwnedCounter(StepCounterPolicy):
    """StepCounterPolicy that records every observation buffer it is called with.

    One engine has one buffer; an instance called with two buffers is shared between engines,
    the classic concurrent-suite bug (its per-slot counts would mix).
    """

    instances: list["OwnedCounter"] = []
    lock = threading.Lock()

    def __init__(self):
        super().__init__()
        self.buffers: set[int] = set()
        with OwnedCounter.lock:
            OwnedCounter.instances.append(self)

    def __deepcopy__(self, memo):
        clone = OwnedCounter()
        clone.counts = copy.deepcopy(self.counts, memo)
        return clone

    def select_action(self, obs):
        self.buffers.add(obs.data_ptr())
        return super().select_action(obs)


@pytest.mark.parametrize("how", ["deepcopy", "factory"])
def test_concurrent_tasks_never_share_a_stateful_policy(how):
    OwnedCounter.instances = []
    if how == "deepcopy":
        result = run_suite(SUITE, policy=OwnedCounter(), n_episodes=8, seed=2, batch_size=3, concurrency=3)
    else:
        result = run_suite(SUITE, policy_factory=OwnedCounter, n_episodes=8, seed=2, batch_size=3, concurrency=3)
    check_suite(result, 8, 2, "step_counter")  # per-slot state intact in every task
    used = [p for p in OwnedCounter.instances if p.buffers]
    assert len(used) == 3 and all(len(p.buffers) == 1 for p in used)


def test_policy_that_cannot_be_copied_needs_a_factory():
    class Uncopyable(ParityPolicy):
        def __deepcopy__(self, memo):
            raise TypeError("holds a CUDA stream")

    with pytest.raises(UserInputError, match="policy_factory"):
        run_suite(SUITE, policy=Uncopyable(), n_episodes=2, concurrency=2)
    result = run_suite(SUITE, policy=Uncopyable(), n_episodes=2, concurrency=1)  # sequential: shared is fine
    check_suite(result, 2, 0, "parity")


def test_callable_tasks_and_suite_validation():
    suite = {"lambdas": {"a": lambda: OffsetEnv(0), "b": lambda: OffsetEnv(100)}, "ids": {0: "CartPole-v1"}}
    result = run_suite(suite, policy="zero", n_episodes=3, seed=1)
    by_task = {(r["task_group"], r["task_id"]) for r in result.per_episode}
    assert by_task == {("lambdas", "a"), ("lambdas", "b"), ("ids", 0)}
    zero = ACTION_FNS["zero"]
    lam_b = [r for r in result.per_episode if r["task_id"] == "b"]
    assert [r["sum_reward"] for r in lam_b] == [expected_episode(1 + i + 100, zero())["sum_reward"] for i in range(3)]
    for bad in ({}, {"g": {}}, {"g": {0: 42}}, "CartPole-v1"):
        with pytest.raises(UserInputError):
            flatten_suite(bad)
    with pytest.raises(UserInputError, match="concurrency"):
        run_suite(SUITE, concurrency=0)
    with pytest.raises(UserInputError, match="'env'"):
        run_suite(SUITE, env="x")


def test_suite_videos_and_episode_data_per_task(tmp_path):
    result = run_suite(SUITE, policy=ParityPolicy(), n_episodes=3, batch_size=2, max_episodes_rendered=1,
                       video_select="per-task", videos_dir=str(tmp_path), return_episode_data=True)
    rel = sorted(os.path.relpath(p, tmp_path).split(os.sep)[0] for p in result.video_paths)
    assert rel == ["garage_0", "kitchen_0", "kitchen_1"]
    assert result.per_group()["kitchen"]["video_paths"] and len(result.per_group()["garage"]["video_paths"]) == 1
    assert set(result.episode_data) == {"kitchen/0", "kitchen/1", "garage/0"}
    for key, data in result.episode_data.items():
        assert sorted(set(data["episode"].tolist())) == [0, 1, 2]


def test_suite_first_k_videos_count_over_the_whole_suite(tmp_path):
    result = run_suite(SUITE, policy=ParityPolicy(), n_episodes=3, batch_size=2, max_episodes_rendered=4,
                       videos_dir=str(tmp_path))  # video_select="first": 3 of the first task, then 1 of the second
    rel = [os.path.relpath(p, tmp_path).split(os.sep) for p in result.video_paths]
    assert sorted((parts[0], parts[-1][:8]) for parts in rel) == [
        ("kitchen_0", "ep000000"), ("kitchen_0", "ep000001"), ("kitchen_0", "ep000002"), ("kitchen_1", "ep000000")]
    from fasteval.doors.suites import video_budgets

    assert video_budgets(4, "first", [3, 3, 3]) == [3, 1, 0]
    assert video_budgets(4, "failures", [3, 3]) == [4, 4] == video_budgets(4, "per-task", [3, 3])


@pytest.mark.skipif(importlib.util.find_spec("metaworld") is None,
                    reason="MetaWorld suites need metaworld: ./scripts/install.sh metaworld")
def test_metaworld_suite_seeds_and_concurrency(check_same_results):
    from fasteval.doors.suites import metaworld_suite
    from fasteval.robot.metaworld import make_metaworld_env

    suite = metaworld_suite(["reach-v3", "push-v3"], group="MT-mini")
    common = dict(policy=lambda obs: torch.zeros(len(obs), 4), n_episodes=3, max_steps=6, seed=11)
    a = run_suite(suite, batch_size=1, **common)
    b = run_suite(suite, batch_size=3, concurrency=2, **common)
    check_same_results(a.per_episode, b.per_episode, "MetaWorld sequential batch 1 vs concurrent batch 3")
    assert [(r["task_group"], r["task_id"], r["task"]) for r in a.per_episode] == (
        [("MT-mini", 0, "reach-v3")] * 3 + [("MT-mini", 1, "push-v3")] * 3)
    assert all(r["length"] == 6 and r["success"] is False for r in a.per_episode)
    env = make_metaworld_env("reach-v3")
    first, _ = env.reset(seed=11)
    again, _ = env.reset(seed=11)
    other, _ = env.reset(seed=12)
    assert (first == again).all() and not (first == other).all()  # the seed picks the task variant
    assert env.get_wrapper_attr("task_description") == "reach"
    with pytest.raises(UserInputError, match="unknown"):
        metaworld_suite(["reach-v9"])


def test_a_task_list_from_the_command_line_is_a_resumable_suite(tmp_path):
    import json
    import shutil

    from click.testing import CliRunner

    from fasteval.doors.cli import main

    out = tmp_path / "run"
    args = ["--env", "tests.test_suites:make_named_task_env", "--env-kwarg", 'task=["open", "close"]', "-n", "3",
            "-b", "2", "--seed", "5", "--policy", "fasteval.testing.policies:ParityPolicy", "-o", str(out)]
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0, first.output
    info = json.loads((out / "eval_info.json").read_text())
    parity = ACTION_FNS["parity"]()
    want = [(task, 5 + i, expected_episode(5 + i + NAMED[task], parity)["sum_reward"])
            for task in ("open", "close") for i in range(3)]
    assert [(r["task"], r["seed"], r["sum_reward"]) for r in info["per_episode"]] == want
    assert [t["task"] for t in info["per_task"]] == ["open", "close"]
    assert list(info["per_group"]) == ["tests.test_suites:make_named_task_env"]
    shutil.rmtree(out / "tasks" / "tests.test_suites_make_named_task_env_1")  # as if stopped before task 2
    again = CliRunner().invoke(main, args)  # the same command finishes the suite
    assert again.exit_code == 0 and "(resuming)" in again.output, again.output
    assert json.loads((out / "eval_info.json").read_text())["per_episode"] == info["per_episode"]
    changed = CliRunner().invoke(main, [*args[:-2], "--max-steps", "2", "-o", str(out)])
    assert changed.exit_code == 2, changed.output  # a task folder holds a run with other settings
    bad = CliRunner().invoke(main, [*args[:4], "--env-kwarg", 'task=["open", "open"]', *args[6:-1], str(tmp_path / "x")])
    assert bad.exit_code == 2 and "distinct task names" in bad.output


def test_both_suite_runners_honour_a_tasks_own_step_cap(tmp_path):
    """run_suite and the CLI's durable run_suite_durable build each task's spec the same way."""
    from fasteval.types.spec import EvalSpec
    from fasteval.doors.suites import run_suite_durable

    suite = {"g": {0: Task("fasteval/KnownAnswer-v0", max_steps=2), 1: Task("fasteval/KnownAnswer-v0")}}
    plain = run_suite(suite, ParityPolicy(), n_episodes=4, seed=5, batch_size=2, device="cpu")
    durable = run_suite_durable(EvalSpec(env="fasteval/KnownAnswer-v0", policy=ParityPolicy(), n_episodes=4, seed=5,
                                         batch_size=2, device="cpu"), suite, tmp_path, announce=lambda m: None)
    for result in (plain, durable.result):
        lengths = [(r["task_id"], r["length"]) for r in result.per_episode]
        assert all(n <= 2 for t, n in lengths if t == 0) and any(n > 2 for t, n in lengths if t == 1), lengths
    assert [(r["task_id"], r["length"], r["sum_reward"]) for r in plain.per_episode] == \
        [(r["task_id"], r["length"], r["sum_reward"]) for r in durable.result.per_episode]
