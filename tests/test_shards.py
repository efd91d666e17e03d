"""``--shard K/N`` and ``fasteval merge``: N shards merged give the record of one run, record for record;
bad merges (another evaluation, overlapping or missing episodes) exit 2 (issue 43)."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from fasteval.doors.cli import main
from fasteval.run.shards import Shard, parse_shard
from fasteval.types.errors import UserInputError

KA = "fasteval/KnownAnswer-v0"
MLP = str(Path(__file__).resolve().parents[1] / "src" / "fasteval" / "assets" / "cartpole_mlp")
TIMING = {"eval_s", "eval_ep_s", "steps_per_s", "episodes_per_s"}
EVALUATIONS = {
    "known-answer": ["--env", KA, "--policy", "zero", "-n", "11", "--seed", "3"],
    "cartpole-mlp": ["--env", "CartPole-v1", "--policy", MLP, "-n", "6", "--seed", "5"],
}


def run(args):
    return CliRunner().invoke(main, [*args, "--no-report"], catch_exceptions=False)


def info(folder):
    return json.loads((Path(folder) / "eval_info.json").read_text())


def lines(folder):
    """``episodes.jsonl`` of a run folder, in episode order, without the folder's run id and the line digest that
    covers it (each folder has its own run id); the merged folder's digests are checked by a resume of it."""
    records = [json.loads(line) for line in (Path(folder) / "episodes.jsonl").read_text().splitlines()]
    for r in records:
        r.pop("run_id")
        r.pop("digest", None)
    return sorted(records, key=lambda r: r["episode_ix"])


def without_timing(agg):
    return {k: v for k, v in agg.items() if k not in TIMING}


def shards(tmp_path, args, count, batch="3", tag=""):
    folders = []
    for k in range(count):
        folder = tmp_path / f"shard{tag}{k}of{count}"
        result = run([*args, "-b", batch, "--shard", f"{k}/{count}", "-o", str(folder)])
        assert result.exit_code == 0, result.output
        folders.append(folder)
    return folders


def merge(folders, out):
    return CliRunner().invoke(main, ["merge", *map(str, folders), "-o", str(out), "--no-report"],
                              catch_exceptions=False)


@pytest.fixture(scope="module", params=sorted(EVALUATIONS))
def single(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(request.param)
    result = run([*EVALUATIONS[request.param], "-b", "4", "-o", str(tmp / "single")])
    assert result.exit_code == 0, result.output
    return request.param, tmp / "single"


@pytest.mark.parametrize("count", [1, 2, 4])
def test_n_shards_merged_equal_one_run_record_for_record(single, count, tmp_path):
    name, one = single
    folders = shards(tmp_path, EVALUATIONS[name], count)
    for k, folder in enumerate(folders):  # each folder holds its shard's episodes (strided) and the full what
        manifest = json.loads((folder / "manifest.json").read_text())
        assert manifest["shard"] == {"index": k, "count": count, "scheme": "strided"}
        assert manifest["what"]["n_episodes"] == info(one)["meta"]["n_episodes"]
        n = manifest["what"]["n_episodes"]
        assert [r["episode_ix"] for r in lines(folder)] == list(range(k, n, count))
    result = merge(folders, tmp_path / "merged")
    assert result.exit_code == 0, result.output
    a, b = info(one), info(tmp_path / "merged")
    assert b["per_episode"] == a["per_episode"]  # every per-episode field identical
    assert lines(tmp_path / "merged") == lines(one)
    assert without_timing(b["overall"]) == without_timing(a["overall"])
    assert b["per_task"] == a["per_task"] and b["per_group"] == a["per_group"]
    assert b["meta"]["n_episodes"] == a["meta"]["n_episodes"] and b["meta"]["status"] == "complete"
    assert [s["folder"] for s in b["meta"]["shards"]] == [str(f) for f in folders]
    # the merged folder is a run folder: a resume finds nothing missing, and its record is the same
    again = run(["--resume", str(tmp_path / "merged")])
    assert again.exit_code == 0, again.output
    assert info(tmp_path / "merged")["per_episode"] == a["per_episode"]


@pytest.fixture(scope="module")
def four(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("four")
    return tmp, shards(tmp, EVALUATIONS["known-answer"], 4)


def test_a_missing_shard_is_refused_naming_it(four, tmp_path):
    _, folders = four
    result = merge(folders[:3], tmp_path / "out")
    assert result.exit_code == 2
    assert "are in none of the folders" in result.output and "Shards 3/4 are not among the folders" in result.output
    assert not (tmp_path / "out").exists()


def test_overlapping_shards_are_refused(four, tmp_path):
    tmp, folders = four
    halves = shards(tmp, EVALUATIONS["known-answer"], 2, tag="h")
    result = merge([halves[0], *folders[1:]], tmp_path / "out")  # 0/2 holds the episodes of 0/4 and 2/4
    assert result.exit_code == 2
    assert "is recorded in" in result.output and "the folders overlap" in result.output
    twice = merge([folders[0], folders[0], *folders[1:]], tmp_path / "out2")
    assert twice.exit_code == 2 and "given twice" in twice.output
    again = tmp / "again"  # the same shard run twice, into two folders
    assert run([*EVALUATIONS["known-answer"], "--shard", "3/4", "-o", str(again)]).exit_code == 0
    result = merge([*folders, again], tmp_path / "out3")
    assert result.exit_code == 2 and "the folders overlap" in result.output


@pytest.mark.parametrize("change", [["--seed", "4"], ["-n", "12"], ["--max-steps", "5"]])
def test_a_shard_of_another_evaluation_is_refused(four, tmp_path, change):
    _, folders = four
    args = [*EVALUATIONS["known-answer"], *change]
    other = tmp_path / "other"
    assert run([*args, "--shard", "3/4", "-o", str(other)]).exit_code == 0
    result = merge([*folders[:3], other], tmp_path / "out")
    assert result.exit_code == 2
    assert "is a run of another evaluation" in result.output


def test_strided_shards_extend_with_a_larger_n_and_still_merge(tmp_path):
    """The reason for strided shards: episode i stays in shard i % N whatever -n, so each shard's folder
    is extended by --resume -n M and the extended shards merge into the run of M episodes."""
    args = ["--env", KA, "--policy", "zero", "--seed", "3"]
    folders = shards(tmp_path, [*args, "-n", "5"], 2)
    for folder in folders:
        result = run(["-n", "9", "--resume", str(folder)])
        assert result.exit_code == 0, result.output
    assert [r["episode_ix"] for r in lines(folders[1])] == [1, 3, 5, 7]
    assert merge(folders, tmp_path / "merged").exit_code == 0
    assert run([*args, "-n", "9", "-o", str(tmp_path / "one")]).exit_code == 0
    assert info(tmp_path / "merged")["per_episode"] == info(tmp_path / "one")["per_episode"]


def test_a_resumed_shard_runs_only_its_missing_episodes(tmp_path):
    folder = tmp_path / "s"
    assert run(["--env", KA, "-n", "9", "--shard", "1/3", "-o", str(folder)]).exit_code == 0
    log = folder / "episodes.jsonl"
    kept = log.read_text().splitlines()[:1]  # a kill after the first record
    log.write_text("\n".join(kept) + "\n")
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({**manifest, "status": "running"}))
    result = run(["--resume", str(folder)])
    assert result.exit_code == 0, result.output
    assert [r["episode_ix"] for r in lines(folder)] == [1, 4, 7]
    refused = run(["--resume", str(folder), "--shard", "0/3"])
    assert refused.exit_code == 2 and "has shard 1/3" in refused.output


@pytest.mark.parametrize("args, message", [
    (["--shard", "0/2", "--stop-when", "ci<=0.3"], "a stop rule decides on the prefix"),
    (["--shard", "2/2"], "expected K/N with 0 <= K < N"),
    (["--shard", "two"], "expected K/N"),
    (["--shard", "7/8", "-n", "4"], "has no episode i with i % 8 == 7"),
    (["--shard", "0/2", "--policy", "zero", "--policy", "random", "--stop-when", "return:best", "--return-bounds",
      "0,10"], "a stop rule decides on the prefix"),  # a race needs the driver too
])
def test_bad_shards_exit_2_before_anything_runs(tmp_path, args, message):
    result = CliRunner().invoke(main, ["--env", KA, *args, "-o", str(tmp_path / "x")])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not (tmp_path / "x").exists()


def test_merge_refuses_a_folder_that_is_not_a_finished_run(tmp_path):
    folder = tmp_path / "s"
    assert run(["--env", KA, "-n", "4", "--shard", "0/2", "-o", str(folder)]).exit_code == 0
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({**manifest, "status": "interrupted"}))
    result = merge([folder], tmp_path / "out")
    assert result.exit_code == 2 and "not complete" in result.output and "fasteval --resume" in result.output
    empty = tmp_path / "empty"
    empty.mkdir()
    result = merge([empty], tmp_path / "out")
    assert result.exit_code == 2 and "holds no manifest.json" in result.output


def test_shard_values():
    assert list(Shard(1, 3).episodes(10)) == [1, 4, 7]
    assert parse_shard("2/5") == Shard(2, 5)
    with pytest.raises(UserInputError):
        parse_shard("5/5")


MANY = ["--env", "CartPole-v1", "--policy", MLP, "--policy", "zero", "--policy", "random", "-n", "7", "--seed", "5"]


def policy_lines(folder):
    return sorted(lines(folder), key=lambda r: (r["policy"], r["episode_ix"]))


@pytest.mark.parametrize("count", [2, 3])
def test_shards_of_a_many_policy_run_merge_into_the_one_run(tmp_path, count):
    """Shard K runs episodes i % N == K of every policy; the merge rebuilds the many-policy record: each
    policy's episodes and aggregates, and the ranking, as one run's."""
    one = tmp_path / "one"
    assert run([*MANY, "-b", "4", "-o", str(one)]).exit_code == 0
    folders = shards(tmp_path, MANY, count)
    for k, folder in enumerate(folders):
        assert {(r["policy"], r["episode_ix"]) for r in lines(folder)} == \
            {(p, i) for p in ("cartpole_mlp", "zero", "random") for i in range(k, 7, count)}
        assert info(folder)["meta"]["status"] == "complete"  # a shard wants its own episodes only
    result = merge(folders, tmp_path / "merged")
    assert result.exit_code == 0, result.output
    a, b = info(one), info(tmp_path / "merged")
    assert policy_lines(tmp_path / "merged") == policy_lines(one)
    for name in a["policies"]:
        assert b["policies"][name]["per_episode"] == a["policies"][name]["per_episode"]
        assert without_timing(b["policies"][name]["overall"]) == without_timing(a["policies"][name]["overall"])
    assert b["ranking"] == a["ranking"] and b["meta"]["status"] == "complete"
    assert [s["folder"] for s in b["meta"]["shards"]] == [str(f) for f in folders]
    again = run(["--resume", str(tmp_path / "merged")])  # a run folder: nothing missing, the same record
    assert again.exit_code == 0, again.output
    assert info(tmp_path / "merged")["ranking"] == a["ranking"]
    missing = merge(folders[1:], tmp_path / "gap")  # a missing shard of a many-policy run: exit 2
    assert missing.exit_code == 2 and "are in none of the folders" in missing.output
