"""``--backend ray``, the rest of issue 43, on a 3-node ``ray.cluster_utils.Cluster``: a fixed-n many-policy run
equals the local run record for record, and a race (``--stop-when best``) driven from the driver has the same
eliminations at the same k, the same records and the same ranking (resumed on Ray too); shards of a many-policy
run on Ray merge into the local run; a ``--config`` file's backend keys; ``--save-episodes`` and ``--videos``
give the local run's steps and files; shared policy actors (``--ray-policy-actors``) the local records."""

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from fasteval.doors.cli import main
from fasteval.testing.checkpoints import CheckpointFamily
from fasteval.types.spec import EvalSpec

ray = pytest.importorskip("ray", reason="Ray is not installed: ./scripts/install.sh ray")

from fasteval.run.ray_engine import RayEngine, RayOptions, worker_spec  # noqa: E402
from tests.test_ray_run import MLP, cluster, local, on_ray  # noqa: E402,F401 -- the module's 3-node cluster

FAMILY = CheckpointFamily((0.3, 0.5, 0.8), share=0.5)
ENGINE_ONLY = ("n_cancelled", "computed_past_stop", "n_computed_past_stop")
"""Race-block keys that depend on how far the run got past its decisions (the batch, the timing)."""


def race_spec(n=400, rule="best", **fields):
    return EvalSpec(env=FAMILY.env_ref, env_kwargs=FAMILY.env_kwargs, policy=tuple(FAMILY.policies()), n_episodes=n,
                    device="cpu", stop_when=rule, trust_remote_code=True, **fields)


def race_numbers(result):
    return {k: v for k, v in result.race.items() if k not in ENGINE_ONLY}


def episodes(result):
    return {name: result.policy(name).per_episode.to_list() for name in result.names}


def test_the_workers_run_no_stop_rule_of_their_own():
    spec = race_spec()
    assert worker_spec(spec).stop_when is None and worker_spec(spec).names == spec.names
    one = EvalSpec(env="fasteval/KnownAnswer-v0", policy="zero", stop_when="ci<=0.2")
    assert worker_spec(one).stop_when is None and worker_spec(one.replace(stop_when=None)) == one.replace(stop_when=None)


@pytest.mark.parametrize("workers", [1, 3])
def test_a_many_policy_run_on_ray_equals_the_local_run_record_for_record(cluster, tmp_path, workers):
    spec = EvalSpec(env="CartPole-v1", policy=(MLP, "zero", "random"), n_episodes=7, seed=5, batch_size=3,
                    device="cpu")
    here = local(spec, tmp_path / "local").result
    there = on_ray(spec, tmp_path / "ray", workers)
    assert there.status == "complete"
    assert episodes(there.result) == episodes(here)
    assert there.result.per_episode.to_list() == here.per_episode.to_list()
    assert there.result.ranking == here.ranking
    lines = [json.loads(line) for line in (tmp_path / "ray" / "episodes.jsonl").read_text().splitlines()]
    assert sorted((r["policy"], r["episode_ix"]) for r in lines) == \
        sorted((name, i) for name in spec.names for i in range(7))  # each pair once
    shipped = there.result.meta["policy_shipped"]
    assert shipped[0]["digest"] and shipped[1] is None and shipped[2] is None  # only the folder travels


@pytest.mark.parametrize("workers, block", [(1, 16), (3, 5)])
def test_a_race_on_ray_drops_the_same_policies_at_the_same_k(cluster, tmp_path, workers, block):
    spec = race_spec(batch_size=16)
    here = local(spec, tmp_path / "local").result
    engine = RayEngine(spec, RayOptions(workers=workers, num_cpus=0.5, block=block))
    try:
        from fasteval.run.durable import run_durable
        from fasteval.run.rundir import RunDirectory

        there = run_durable(engine, RunDirectory(tmp_path / "ray"), announce=lambda m: None)
    finally:
        engine.close()
    assert there.status == "complete"
    assert here.race["reason"] == "one_left" and len(here.race["eliminations"]) == 2
    assert race_numbers(there.result) == race_numbers(here)
    assert episodes(there.result) == episodes(here)
    assert there.result.ranking == here.ranking
    for e in there.result.race["eliminations"]:  # a dropped policy keeps its first k episodes, no more
        assert len(there.result.policy(e["name"]).per_episode) == e["k"]


def test_a_race_resumed_on_ray_ends_as_the_uninterrupted_race(cluster, tmp_path):
    spec = race_spec(batch_size=8)
    here = local(spec, tmp_path / "local").result
    stopped = []

    def stop_early(engine):
        if not stopped and engine.ledger.finished.sum() >= 30:
            engine.stop_starting()
            stopped.append(True)

    first = on_ray(spec, tmp_path / "ray", 2, hook=stop_early)
    assert first.status == "interrupted"
    resumed = on_ray(spec, tmp_path / "ray", 2, resume=True)
    assert resumed.status == "complete"
    assert race_numbers(resumed.result) == race_numbers(here) and episodes(resumed.result) == episodes(here)


def test_the_cli_races_on_ray(cluster, tmp_path):
    policies = [a for p in FAMILY.policies() for a in ("--policy", p)]
    args = ["--env", FAMILY.env_ref, "--env-kwarg", f"p={json.dumps(list(FAMILY.rates))}", "--env-kwarg",
            f"share={FAMILY.share}", *policies, "-n", "400", "-b", "7", "--stop-when", "best", "--no-report",
            "--trust-remote-code"]
    here = CliRunner().invoke(main, [*args, "-o", str(tmp_path / "local")], catch_exceptions=False)
    there = CliRunner().invoke(main, [*args, "-o", str(tmp_path / "ray"), "--backend", "ray", "--address",
                                      cluster.address, "--ray-workers", "2", "--num-cpus", "0.5"],
                               catch_exceptions=False)
    assert here.exit_code == there.exit_code == 0, there.output
    assert "race: dropped arm_0 after" in there.output and "race: done (one_left)" in there.output
    a, b = (json.loads((tmp_path / d / "eval_info.json").read_text()) for d in ("local", "ray"))
    assert b["race"]["eliminations"] == a["race"]["eliminations"] and b["ranking"] == a["ranking"]
    assert {n: p["per_episode"] for n, p in b["policies"].items()} == \
        {n: p["per_episode"] for n, p in a["policies"].items()}
    assert b["meta"]["backend"] == "ray"


def test_a_config_file_runs_on_ray_and_config_json_keeps_the_backend(cluster, tmp_path):
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"env": "fasteval/KnownAnswer-v0", "n_episodes": 9, "seed": 3, "batch_size": 2,
                                  "backend": "ray", "address": cluster.address, "ray_workers": 2, "num_cpus": 0.5,
                                  "ray_block": 3}))
    result = CliRunner().invoke(main, ["--config", str(config), "--ray-block", "4", "-o", str(tmp_path / "run"),
                                       "--no-report"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    meta = json.loads((tmp_path / "run" / "eval_info.json").read_text())["meta"]
    assert meta["backend"] == "ray" and meta["ray_workers"] == 2 and meta["ray_block"] == 4  # the command line wins
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["backend"] == "ray" and saved["address"] == cluster.address and saved["ray_block"] == 4
    spec = EvalSpec(env="fasteval/KnownAnswer-v0", n_episodes=9, seed=3, batch_size=2)
    expected = local(spec, tmp_path / "local").result.per_episode.to_list()
    assert json.loads((tmp_path / "run" / "eval_info.json").read_text())["per_episode"] == expected
    again = CliRunner().invoke(main, ["--config", str(tmp_path / "run" / "config.json"), "-o", str(tmp_path / "again"),
                                      "--no-report"], catch_exceptions=False)  # the saved config runs on Ray again
    assert again.exit_code == 0, again.output
    assert json.loads((tmp_path / "again" / "eval_info.json").read_text())["meta"]["backend"] == "ray"


def same_data(a, b):
    """Two episode-data TensorDicts with the same keys, shapes and values (bit for bit)."""
    keys = sorted(a.keys(include_nested=True, leaves_only=True), key=str)
    assert keys == sorted(b.keys(include_nested=True, leaves_only=True), key=str)
    return len(a) == len(b) and all(torch_equal(a[k], b[k]) for k in keys)


def torch_equal(x, y):
    import torch

    return x.dtype == y.dtype and x.shape == y.shape and bool(torch.equal(x.cpu(), y.cpu()))


@pytest.mark.parametrize("block", [3, 8])
def test_episode_data_on_ray_is_the_local_runs_row_for_row(cluster, block):
    """Each worker records its block's episodes; the driver puts them together in episode order: the local
    run's TensorDict (observations, actions, rewards, flags, episode, seed, step_count, index), bit for bit."""
    spec = EvalSpec(env="CartPole-v1", policy=MLP, n_episodes=8, seed=5, batch_size=2, return_episode_data=True)
    from fasteval.run.engine import Engine

    with Engine(spec) as engine:
        here = engine.run()
    with RayEngine(spec, RayOptions(workers=2, num_cpus=0.5, block=block)) as engine:
        there = engine.run()
    assert there.per_episode.to_list() == here.per_episode.to_list()
    assert len(here.episode_data) == int(sum(here.per_episode.column("length")))
    assert same_data(there.episode_data, here.episode_data)


def test_the_cli_saves_episodes_on_ray(cluster, tmp_path):
    from fasteval.run.episode_files import load_episodes

    args = ["--env", "CartPole-v1", "--policy", MLP, "-n", "6", "--seed", "5", "-b", "2", "--no-report"]
    ray_args = ["--backend", "ray", "--address", cluster.address, "--ray-workers", "2", "--num-cpus", "0.5"]
    for where, extra in (("local", []), ("ray", ray_args)):
        result = CliRunner().invoke(main, [*args, *extra, "-o", str(tmp_path / where), "--save-episodes",
                                           str(tmp_path / f"{where}-episodes")], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        assert "wrote 6 episodes" in result.output
    assert same_data(load_episodes(tmp_path / "ray-episodes"), load_episodes(tmp_path / "local-episodes"))


def test_a_run_with_another_seed_runs_those_seeds_on_the_workers(cluster):
    """``engine.run(seed=S)`` (the library's door): the workers run seeds S + i, not the spec's."""
    spec = EvalSpec(env="fasteval/KnownAnswer-v0", policy="zero", n_episodes=6, seed=3, batch_size=2)
    from fasteval.run.engine import Engine

    with Engine(spec) as engine:
        here = engine.run(seed=11)
    with RayEngine(spec, RayOptions(workers=2, num_cpus=0.5)) as engine:
        there = engine.run(seed=11)
    assert there.per_episode.to_list() == here.per_episode.to_list()
    assert there.per_episode.column("seed").tolist() == list(range(11, 17))


@pytest.mark.parametrize("servers", [1, 2])
def test_shared_policy_actors_serve_every_worker_with_the_local_records(cluster, tmp_path, servers):
    """``--ray-policy-actors N``: N policy servers (fasteval serve in Ray actors) and 3 env workers that load
    ``ws://...`` of one of them: the local run's records, whichever server answered which worker."""
    from fasteval.doors.ray_policy_actors import RayPolicyServers

    spec = EvalSpec(env="CartPole-v1", policy=MLP, n_episodes=8, seed=5, batch_size=2)
    here = local(spec, tmp_path / "local").result
    engine = RayEngine(spec, RayOptions(workers=3, num_cpus=0.25),
                       policy_servers=RayPolicyServers(spec, servers, num_gpus=0.0))
    try:
        urls = engine.policy_servers.urls
        assert len(set(urls)) == servers and all(u.startswith("ws://") for u in urls)
        loaded = ray.get([actor.policy_ref.remote() for actor in engine.actors])
        assert set(loaded) == set(urls)  # every worker loads a server, not the checkpoint
        from fasteval.run.durable import run_durable
        from fasteval.run.rundir import RunDirectory

        there = run_durable(engine, RunDirectory(tmp_path / "ray"), announce=lambda m: None)
    finally:
        engine.close()
    assert there.status == "complete"
    assert there.result.per_episode.to_list() == here.per_episode.to_list()
    assert there.result.meta["ray_policy_actors"] == servers


def test_a_shared_policy_actor_merges_the_workers_requests_into_one_call(cluster, tmp_path):
    """One policy actor, 3 env workers: their step requests share policy calls (the actor's counters show rows of
    several workers in one call), and the records are the local run's."""
    from fasteval.doors.ray_policy_actors import RayPolicyServers
    from fasteval.doors.serve_merge import MERGED
    from fasteval.run.durable import run_durable
    from fasteval.run.rundir import RunDirectory

    spec = EvalSpec(env="CartPole-v1", policy=MLP, n_episodes=12, seed=5, batch_size=2, max_steps=40)
    here = local(spec, tmp_path / "local").result
    engine = RayEngine(spec, RayOptions(workers=3, num_cpus=0.25),
                       policy_servers=RayPolicyServers(spec, 1, num_gpus=0.0, batch_sessions_ms=50.0))
    try:
        there = run_durable(engine, RunDirectory(tmp_path / "ray"), announce=lambda m: None)
        stats = ray.get(engine.policy_servers.actors[0].merge_stats.remote())
    finally:
        engine.close()
    assert there.status == "complete"
    assert there.result.per_episode.to_list() == here.per_episode.to_list()
    assert stats["merged_calls"] > 0 and stats["max_sessions"] >= 2, stats
    assert there.result.meta["server_policy_batch_sessions"].startswith(MERGED)


def test_the_cli_runs_shared_policy_actors(cluster, tmp_path):
    args = ["--env", "CartPole-v1", "--policy", MLP, "-n", "6", "--seed", "5", "-b", "2", "--no-report"]
    ray_args = ["--backend", "ray", "--address", cluster.address, "--ray-workers", "2", "--num-cpus", "0.25"]
    result = CliRunner().invoke(main, [*args, *ray_args, "--ray-policy-actors", "1", "-o", str(tmp_path / "ray")],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    spec = EvalSpec(env="CartPole-v1", policy=MLP, n_episodes=6, seed=5, batch_size=2)
    info = json.loads((tmp_path / "ray" / "eval_info.json").read_text())
    assert info["meta"]["ray_policy_actors"] == 1
    assert info["per_episode"] == local(spec, tmp_path / "local").result.per_episode.to_list()
    many = CliRunner().invoke(main, [*args, "--policy", "zero", *ray_args, "--ray-policy-actors", "1", "-o",
                                     str(tmp_path / "many")])
    assert many.exit_code == 2 and "--ray-policy-actors serves one policy" in many.output


def test_shards_of_a_many_policy_run_on_ray_merge_into_the_local_run(cluster, tmp_path):
    args = ["--env", "fasteval/KnownAnswer-v0", "--policy", "zero", "--policy", "random", "-n", "7", "--seed", "3",
            "-b", "2", "--no-report"]
    ray_args = ["--backend", "ray", "--address", cluster.address, "--ray-workers", "2", "--num-cpus", "0.5"]
    assert CliRunner().invoke(main, [*args, "-o", str(tmp_path / "one")], catch_exceptions=False).exit_code == 0
    for k in range(2):
        shard = CliRunner().invoke(main, [*args, *ray_args, "--shard", f"{k}/2", "-o", str(tmp_path / f"s{k}")],
                                   catch_exceptions=False)
        assert shard.exit_code == 0, shard.output
    merged = CliRunner().invoke(main, ["merge", str(tmp_path / "s0"), str(tmp_path / "s1"), "-o", str(tmp_path / "m"),
                                       "--no-report"], catch_exceptions=False)
    assert merged.exit_code == 0, merged.output
    a, b = (json.loads((tmp_path / d / "eval_info.json").read_text()) for d in ("one", "m"))
    assert {n: p["per_episode"] for n, p in b["policies"].items()} == \
        {n: p["per_episode"] for n, p in a["policies"].items()}
    assert b["ranking"] == a["ranking"]


@pytest.mark.parametrize("select", ["first", "failures"])
def test_videos_on_ray_are_the_local_runs_replayed_in_the_driver(cluster, tmp_path, select):
    """The workers render nothing; the driver replays the episodes a local run keeps (checked against the
    workers' rows) and writes the same videos, named alike, with the same frames."""
    import os

    from tests.test_videos import KA, KA_DIR, decoded_frames

    base = ["--env", KA, "--policy", "fasteval.testing.policies:ParityPolicy", "-n", "7", "-b", "2", "--seed", "1",
            "--videos", "2", "--video-select", select, "--no-report"]
    ray_args = ["--backend", "ray", "--address", cluster.address, "--ray-workers", "2", "--num-cpus", "0.5"]
    for where, extra in (("local", []), ("ray", ray_args)):
        result = CliRunner().invoke(main, [*base, *extra, "-o", str(tmp_path / where)], catch_exceptions=False)
        assert result.exit_code == 0, result.output
    a, b = (json.loads((tmp_path / d / "eval_info.json").read_text()) for d in ("local", "ray"))
    names = sorted(os.listdir(tmp_path / "local" / "videos" / KA_DIR))
    assert len(names) == 2 and sorted(os.listdir(tmp_path / "ray" / "videos" / KA_DIR)) == names
    assert [os.path.basename(p) for p in b["overall"]["video_paths"]] == \
        [os.path.basename(p) for p in a["overall"]["video_paths"]]
    for file in names:
        assert len(decoded_frames(tmp_path / "ray" / "videos" / KA_DIR / file)) == \
            len(decoded_frames(tmp_path / "local" / "videos" / KA_DIR / file))
    assert b["meta"]["backend"] == "ray" and "ray_videos_replay_s" in b["meta"]
    assert b["per_episode"] == a["per_episode"]


def test_videos_an_env_cannot_render_fail_the_run_on_ray_and_keep_its_episodes(cluster, tmp_path):
    """CartPole made without a render mode: its first frame fails in the driver's replay, after the run; the
    run ends on that bad input (exit 2, as a local run meeting it mid-run) saying why, and every episode the
    workers ran is kept."""
    result = CliRunner().invoke(main, ["--env", "CartPole-v1", "-n", "4", "--videos", "1", "--backend", "ray",
                                       "--address", cluster.address, "--ray-workers", "1", "--num-cpus", "0.5",
                                       "-o", str(tmp_path / "x"), "--no-report"])
    assert result.exit_code == 2, result.output
    assert "render_mode='rgb_array'" in result.output
    lines = (tmp_path / "x" / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == 4
