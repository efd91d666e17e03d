"""The columnar per-episode table, the streamed eval_info.json, and has_success_signal (issue 14)."""

from __future__ import annotations

import json
import pickle
import math
import tracemalloc

import numpy as np
import pytest

from fasteval.types.results import EPISODE_FIELDS, EpisodeTable, EvalResult, aggregate, merge_episodes, write_json_atomic
from fasteval.testing import KNOWN_ANSWER_ID, expected_episode

NAN = float("nan")


def records(n: int = 7, start: int = 0) -> list[dict]:
    """Hand-made records: two groups, three tasks, one NaN episode (index 2), one without a signal flag."""
    out = []
    for i in range(start, start + n):
        out.append({
            "episode_ix": i, "seed": 100 + i, "sum_reward": NAN if i == 2 else i / 4, "max_reward": -1.5 * i,
            "length": i, "success": i % 3 == 0, "nan_rewards": int(i == 2),
            "task_group": "g" if i < 4 else "h", "task_id": i % 2 if i < 4 else "x", "task": f"task {i % 2}",
            "has_success_signal": i != 5,
        })
    return out


def same(a, b) -> bool:
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return type(a) is type(b) and a == b


def assert_rows(table, want: list[dict]) -> None:
    got = list(table)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert list(g) == list(w), "same keys in the same order"
        assert all(same(g[k], w[k]) for k in w), (g, w)


def test_table_reads_like_the_list_of_dicts():
    want = records()
    table = EpisodeTable.from_records(want)
    assert len(table) == 7 and list(table.fields) == list(EPISODE_FIELDS)
    assert_rows(table, want)
    assert same(table[3]["sum_reward"], 0.75) and table[-1]["episode_ix"] == 6 and table[6]["task_id"] == "x"
    assert table[1]["success"] is False and table[0]["success"] is True  # plain bools, as `is` tests expect
    assert_rows(table[2:5], want[2:5])
    assert isinstance(table[2:5], list)
    with pytest.raises(IndexError):
        table[7]
    assert_rows([] + table, want)  # list + table
    assert_rows(table + [], want)
    row = table[0]
    row["sum_reward"] = 99.0  # rows are copies
    assert table[0]["sum_reward"] == 0.0
    clean = records(2)  # no NaN: a plain list compare (NaN != NaN) would fail, as it did before
    assert EpisodeTable.from_records(clean) == clean and EpisodeTable.from_records(clean) != clean[:1]
    np.testing.assert_array_equal(table.column("length"), np.arange(7))
    assert table.column("task_group").tolist() == ["g"] * 4 + ["h"] * 3
    with pytest.raises(KeyError, match="expected one of"):
        table.column("nope")


def test_table_from_records_defaults_and_errors():
    old = [{k: v for k, v in r.items() if k != "has_success_signal"} for r in records(3)]
    assert EpisodeTable.from_records(old).column("has_success_signal").tolist() == [True] * 3  # unknown counts as signalled
    with pytest.raises(ValueError, match="no 'length'"):
        EpisodeTable.from_records([{k: v for k, v in r.items() if k != "length"} for r in records(2)])
    extra = EpisodeTable.from_records([{**r, "note": f"n{r['episode_ix']}"} if r["episode_ix"] == 1 else r for r in records(3)])
    assert extra.fields[-1] == "note" and [r["note"] for r in extra] == [None, "n1", None]
    empty = EpisodeTable.from_records([])
    assert len(empty) == 0 and list(empty) == [] and aggregate(empty)["n_episodes"] == 0


def test_concat_sort_and_merge_keep_rows_and_tasks():
    a, b = records(4), records(3, start=4)
    table = EpisodeTable.concat([EpisodeTable.from_records(b), EpisodeTable.from_records(a)])
    assert [r["episode_ix"] for r in table] == [4, 5, 6, 0, 1, 2, 3]
    assert_rows(table.sorted_by_episode(), a + b)
    assert_rows(merge_episodes(b, EpisodeTable.from_records(a)), a + b)  # resume: done records + the new table
    new = EpisodeTable.from_records(a)
    assert merge_episodes([], new) is new  # a fresh run converts nothing


def test_with_task_relabels_every_row_in_a_new_table():
    want = records(4)
    table = EpisodeTable.from_records(want)
    labelled = table.with_task("suite", 3, "reach")
    assert_rows(labelled, [dict(r, task_group="suite", task_id=3, task="reach") for r in want])
    assert_rows(table, want)  # the original is not changed (a record is never patched)
    assert all(labelled.columns[k] is table.columns[k] for k in table.columns)  # columns shared, not copied


def test_aggregates_per_group_and_task_match_the_records():
    want = records()
    result = EvalResult(want, 2.0, video_paths=["v/g_0/eval_episode_0.mp4", "v/h_x/eval_episode_1.mp4"])
    o = result.overall()
    assert o["n_episodes"] == 7 and math.isnan(o["avg_sum_reward"]) and o["n_nan_reward_episodes"] == 1
    assert o["avg_max_reward"] == pytest.approx(np.mean([r["max_reward"] for r in want]))
    assert o["n_success"] == 3 and o["env_steps"] == 21 and o["has_success_signal"] is True
    groups = result.per_group()
    assert list(groups) == ["g", "h"] and groups["g"]["n_episodes"] == 4 and groups["h"]["video_paths"] == ["v/h_x/eval_episode_1.mp4"]
    assert groups["g"]["video_paths"] == ["v/g_0/eval_episode_0.mp4"]  # a task's videos: those in its folder
    tasks = result.per_task()
    assert [(t["task_group"], t["task_id"]) for t in tasks] == [("g", 0), ("g", 1), ("h", "x")]
    assert tasks[0]["metrics"]["seeds"] == [100, 102] and tasks[2]["metrics"]["lengths"] == [4, 5, 6]
    assert [t["metrics"]["video_paths"] for t in tasks] == [["v/g_0/eval_episode_0.mp4"], [], ["v/h_x/eval_episode_1.mp4"]]
    assert all(t["metrics"]["predicted_video_paths"] == [] for t in tasks)  # LeRobot's key, never filled here
    assert tasks[1]["metrics"]["successes"] == [False, True] and tasks[0]["aggregated"]["n_nan_reward_episodes"] == 1
    no_signal = [dict(r, has_success_signal=False) for r in want]
    assert aggregate(no_signal)["has_success_signal"] is False


def test_streamed_eval_info_equals_the_plain_document(tmp_path):
    result = EvalResult(records(), 1.5, timings={"env_step": 0.5}, meta={"env": "e", "n": np.int64(3)},
                        errors=[{"seed": 1, "error": "boom"}])
    path = write_json_atomic(tmp_path / "eval_info.json", result.eval_info_document())
    streamed = json.loads(path.read_text())
    plain = json.loads(json.dumps(result.to_eval_info(), default=lambda x: x.item()))
    assert json.dumps(streamed, sort_keys=True) == json.dumps(plain, sort_keys=True)  # NaN-safe comparison
    assert list(streamed) == ["per_episode", "per_task", "per_group", "overall", "timings", "errors", "meta"]
    assert result.to_json(tmp_path / "b.json").read_text() == path.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.json", "eval_info.json"]  # no temp file left
    empty = json.loads(write_json_atomic(tmp_path / "e.json", EvalResult([], 0.0).eval_info_document()).read_text())
    assert empty["per_episode"] == [] and empty["per_task"] == []


def test_streamed_writer_is_atomic_on_error(tmp_path):
    path = tmp_path / "eval_info.json"
    path.write_text("old")

    class Boom:
        pass

    with pytest.raises(TypeError):
        write_json_atomic(path, {"per_episode": EpisodeTable.from_records(records(3)), "bad": Boom()})
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["eval_info.json"]


def _big_result(n: int) -> EvalResult:
    ids = np.arange(n, dtype=np.int64)
    columns = {"episode_ix": ids, "seed": ids + 7, "sum_reward": ids * 0.5, "max_reward": np.ones(n), "length": ids % 13,
               "success": ids % 2 == 0, "nan_rewards": np.zeros(n, np.int64), "has_success_signal": np.ones(n, bool)}
    return EvalResult(EpisodeTable(columns, np.zeros(1, np.int64), [("E", 0, "E")]), 1.0)


def _write_peak(result: EvalResult, path) -> int:
    tracemalloc.start()
    try:
        result.to_json(path)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_streaming_a_big_table_holds_no_per_episode_objects(tmp_path):
    """Writing eval_info.json allocates a bounded amount, whatever n (the old list of dicts plus
    json.dump held hundreds of bytes per episode); the table itself is ~50 B per episode."""
    small, big = _big_result(5_000), _big_result(80_000)
    assert big.per_episode.nbytes <= 60 * 80_000
    peak_small = _write_peak(small, tmp_path / "small.json")
    peak_big = _write_peak(big, tmp_path / "big.json")
    assert peak_big < peak_small + 2 * 80_000, f"{peak_small} B at 5k episodes, {peak_big} B at 80k"
    assert peak_big < 3 * 2**20
    doc = json.loads((tmp_path / "big.json").read_text())
    assert len(doc["per_episode"]) == 80_000 and doc["per_episode"][-1]["seed"] == 80_000 - 1 + 7
    assert doc["per_task"][0]["metrics"]["lengths"] == (np.arange(80_000) % 13).tolist()


# The known-answer env's episodes for seeds 5..13 under the zero policy, worked out from the rules in
# fasteval.testing.envs's docstring, not from its code: length 1 + (7 s) % 13; reward ((s + 3 t) % 9) - 6,
# + 0.5 when action 0 equals the parity bit (s + t - 1) % 2; success when s % 3 == 0, or s % 6 == 1 and
# the episode is longer than one step. Seed 6, step by step: -5.5, -3, 0.5, -6 (sum -14, max 0.5);
# seed 13: one step of reward 1, and 13 % 6 == 1 but the episode has one step (no success).
KNOWN_SEEDS_5_TO_13 = [  # (seed, length, sum_reward, max_reward, success)
    (5, 10, -4.5, 2.5, False), (6, 4, -14.0, 0.5, True), (7, 11, -22.5, 1.5, True),
    (8, 5, -6.5, 2.5, False), (9, 12, -33.0, 0.5, True), (10, 6, -10.5, 1.5, False),
    (11, 13, -10.0, 2.5, False), (12, 7, -16.0, 0.5, True), (13, 1, 1.0, 1.0, False),
]


def test_engine_result_is_columnar_and_exact():
    """The engine's records against the known-answer env's own numbers (a table worked out by hand
    from its rules), so that neither side is computed by the helpers of the other."""
    from fasteval import evaluate

    result = evaluate(env=KNOWN_ANSWER_ID, policy="zero", n_episodes=9, batch_size=4, seed=5, device="cpu")
    assert isinstance(result.per_episode, EpisodeTable)
    got = [(r["episode_ix"], r["seed"], r["length"], r["sum_reward"], r["max_reward"], r["success"], r["nan_rewards"])
           for r in result.per_episode]
    assert got == [(i, *row, 0) for i, row in enumerate(KNOWN_SEEDS_5_TO_13)]
    assert [type(v) for v in got[0]] == [int, int, int, float, float, bool, int]
    assert result.column("sum_reward").dtype == np.float64 and result.column("length").dtype == np.int64
    assert {r["has_success_signal"] for r in result.per_episode} == {True} and result.meta["has_success_signal"] is True
    assert result.meta["torch_threads"] == 1  # cpu_threads defaults to 1 on CPU


def test_expected_episode_gives_the_same_known_numbers():
    """``fasteval.testing.expected_episode``, which other tests use as their oracle, agrees with the table."""
    for seed, length, total, best, success in KNOWN_SEEDS_5_TO_13:
        want = expected_episode(seed)
        assert (want["length"], want["sum_reward"], want["max_reward"], want["success"]) == (length, total, best, success)


def test_torch_threads_in_meta_are_the_ones_the_run_used():
    import torch

    from fasteval.run.engine import Engine
    from fasteval.types.spec import EvalSpec

    for threads in (1, 2):
        seen = []
        with Engine(EvalSpec(env=KNOWN_ANSWER_ID, policy="zero", n_episodes=4, batch_size=2, device="cpu",
                             cpu_threads=threads)) as engine:
            result = engine.run(on_finished=lambda ledger, rows: seen.append(torch.get_num_threads()))
        assert set(seen) == {threads} and result.meta["torch_threads"] == threads


@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_cartpole_has_no_success_signal_and_known_answer_env_has_one(vectorization):
    """End to end: the env layer's flag (sync envs and the worker pool) reaches the records, the aggregates and meta."""
    from fasteval import evaluate

    silent = evaluate(env="CartPole-v1", policy="zero", n_episodes=5, batch_size=2, device="cpu",
                      vectorization=vectorization)
    assert silent.meta["has_success_signal"] is False and silent.overall()["has_success_signal"] is False
    assert {r["has_success_signal"] for r in silent.per_episode} == {False}
    loud = evaluate(env=KNOWN_ANSWER_ID, policy="zero", n_episodes=5, batch_size=2, device="cpu",
                    vectorization=vectorization)
    assert loud.meta["has_success_signal"] is True and loud.overall()["has_success_signal"] is True


@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_an_env_that_always_reports_failure_has_a_success_signal(vectorization):
    from fasteval import evaluate

    result = evaluate(env="tests.helpers:never_succeeding_env", policy="zero", n_episodes=3, batch_size=2,
                      device="cpu", vectorization=vectorization)
    assert result.meta["has_success_signal"] is True and result.overall()["pc_success"] == 0.0


def test_a_record_is_never_changed_after_it_is_built():
    """The record of a run is built once (fasteval.run.record): its fields, meta, timings and errors refuse changes."""
    import dataclasses

    from fasteval import evaluate

    result = evaluate(env=KNOWN_ANSWER_ID, policy="zero", n_episodes=3, batch_size=2, device="cpu")
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.video_paths = ["x.mp4"]  # type: ignore[misc]
    for change in (lambda: result.meta.__setitem__("status", "failed"), lambda: result.meta.update(n_episodes=9),
                   lambda: result.meta.pop("status"), lambda: result.timings.__setitem__("policy", 0.0)):
        with pytest.raises(TypeError, match="built once"):
            change()
    assert result.meta["status"] == "complete" and result.meta["n_episodes"] == 3
    assert not hasattr(result, "aggregated")  # the deprecated alias is gone: overall() is the one name
    copied = pickle.loads(pickle.dumps(result))  # evaluate_async and sweeps send records between processes
    assert dict(copied.meta) == dict(result.meta) and copied.per_episode == result.per_episode


def test_one_success_signal_rule_for_runs_and_sweep_cells():
    """types/ holds the one rule; an empty group has no signal in both the run's aggregates and a sweep cell's."""
    from fasteval.doors.sweep.report import has_success_signal as cell_rule
    from fasteval.types.eval_result import has_success_signal

    assert aggregate([])["has_success_signal"] is False and aggregate([])["pc_success"] is None
    assert cell_rule([]) is False is has_success_signal([])
    for flags in ([True], [False], [None], [False, None], [False, False, True]):
        eps = [{"has_success_signal": f} for f in flags]
        assert cell_rule(eps) is has_success_signal(flags) is any(f is not False for f in flags)
    assert has_success_signal(np.array([False, True])) is True and has_success_signal(np.zeros(0, bool)) is False
