"""``--backend ray``: one evaluation on Ray actors over a multi-node cluster (``ray.cluster_utils.Cluster``,
3 nodes of one CPU each, on this machine), identical per episode to a local run at 1, 2 and 4 workers;
a killed worker actor and a removed node lose nothing and count nothing twice; ``--resume`` of a Ray run,
on Ray or locally (issue 43)."""

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from fasteval.doors.cli import main
from fasteval.run.durable import run_durable
from fasteval.run.engine import Engine
from fasteval.run.rundir import RunDirectory
from fasteval.types.spec import EvalSpec

ray = pytest.importorskip("ray", reason="Ray is not installed: ./scripts/install.sh ray")
from ray.cluster_utils import Cluster  # noqa: E402

from fasteval.run.ray_engine import RayEngine, RayOptions  # noqa: E402

KA = "fasteval/KnownAnswer-v0"
TIMING = {"eval_s", "eval_ep_s", "steps_per_s", "episodes_per_s"}
MLP = str(Path(__file__).resolve().parents[1] / "src" / "fasteval" / "assets" / "cartpole_mlp")
SPECS = {
    "known-answer": EvalSpec(env=KA, policy="zero", n_episodes=13, seed=3, batch_size=2),
    "cartpole-mlp": EvalSpec(env="CartPole-v1", policy=MLP, n_episodes=8, seed=5, batch_size=2),
}


@pytest.fixture(scope="module")
def cluster():
    """Three nodes with their own resources (one CPU each; actors reserve half a CPU, so 4 fit on 2 cores)."""
    if ray.is_initialized():
        ray.shutdown()
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"head": 1}})
    for _ in range(2):
        c.add_node(num_cpus=1)
    c.wait_for_nodes()
    ray.init(address=c.address, include_dashboard=False, log_to_driver=False)
    yield c
    ray.shutdown()
    c.shutdown()


def local(spec, folder, **kwargs):
    engine = Engine(spec)
    try:
        return run_durable(engine, RunDirectory(folder), announce=lambda m: None, **kwargs)
    finally:
        engine.close()


def on_ray(spec, folder, workers, **kwargs):
    engine = RayEngine(spec, RayOptions(workers=workers, num_cpus=0.5))
    try:
        hook = kwargs.pop("hook", None)
        if hook is not None:
            kwargs["on_finished"] = lambda ledger, rows: hook(engine)
        return run_durable(engine, RunDirectory(folder), announce=lambda m: None, **kwargs)
    finally:
        engine.close()


@pytest.fixture(scope="module")
def expected(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("local")
    return {name: local(spec, tmp / name).result for name, spec in SPECS.items()}


@pytest.mark.parametrize("workers", [1, 2, 4])
@pytest.mark.parametrize("name", sorted(SPECS))
def test_a_ray_run_equals_a_local_run_per_episode(cluster, expected, tmp_path, name, workers):
    if workers == 1:  # the library's door: RayEngine(spec).run() returns the record, as Engine(spec).run() does
        with RayEngine(SPECS[name], RayOptions(workers=1, num_cpus=0.5)) as engine:
            assert engine.run().per_episode.to_list() == expected[name].per_episode.to_list()
    outcome = on_ray(SPECS[name], tmp_path / "ray", workers)
    assert outcome.status == "complete"
    assert outcome.result.per_episode.to_list() == expected[name].per_episode.to_list()
    lines = [json.loads(line) for line in (tmp_path / "ray" / "episodes.jsonl").read_text().splitlines()]
    assert sorted(r["episode_ix"] for r in lines) == list(range(SPECS[name].n_episodes))  # each once
    meta = outcome.result.meta
    assert meta["backend"] == "ray" and meta["ray_workers"] == workers
    if workers == 4:
        assert meta["ray_nodes"] >= 2  # SPREAD placed the actors on several nodes


def test_a_killed_worker_returns_its_block_and_the_result_is_exact(cluster, expected, tmp_path):
    killed = []

    def kill_one(engine):
        if not killed and engine.leases:
            actor, rows, _ = next(iter(engine.leases.values()))
            ray.kill(actor, no_restart=True)
            killed.append(rows.tolist())

    outcome = on_ray(SPECS["known-answer"], tmp_path / "ray", 2, hook=kill_one)
    assert killed and outcome.status == "complete"
    assert outcome.result.meta["ray_actors_lost"] == 1
    assert outcome.result.per_episode.to_list() == expected["known-answer"].per_episode.to_list()
    ixs = [json.loads(line)["episode_ix"] for line in (tmp_path / "ray" / "episodes.jsonl").read_text().splitlines()]
    assert sorted(ixs) == list(range(13))  # nothing lost, nothing twice


def test_a_removed_node_loses_nothing(cluster, tmp_path):
    """The node of an actor that holds a block is removed mid-run: its block runs again elsewhere, exactly.
    The known-answer env with ~20 ms of CPU per step, so that a block is still running when its node goes."""
    spec = EvalSpec(env="fasteval/BusyKnownAnswer-v0", env_kwargs={"work": 20_000}, policy="zero", n_episodes=25,
                    seed=3, batch_size=2)
    removed = []

    def remove_a_leased_node(engine):
        if removed:
            return
        for actor, _, _ in list(engine.leases.values()):
            node = next((n for n in cluster.worker_nodes if n.node_id == engine.node_of.get(id(actor))), None)
            if node is not None:
                cluster.remove_node(node)
                removed.append(node.node_id)
                return

    try:
        outcome = on_ray(spec, tmp_path / "ray", 3, hook=remove_a_leased_node)
    finally:
        if removed:
            cluster.add_node(num_cpus=1)
            cluster.wait_for_nodes()
    assert removed and outcome.status == "complete"
    assert outcome.result.meta["ray_actors_lost"] >= 1
    assert outcome.result.per_episode.to_list() == local(spec, tmp_path / "local").result.per_episode.to_list()
    ixs = [json.loads(line)["episode_ix"] for line in (tmp_path / "ray" / "episodes.jsonl").read_text().splitlines()]
    assert sorted(ixs) == list(range(25))


def test_resume_of_a_ray_run_on_ray_and_locally(cluster, expected, tmp_path):
    spec = SPECS["known-answer"]
    short = spec.replace(n_episodes=6)
    on_ray(short, tmp_path / "a", 2)
    resumed = on_ray(spec, tmp_path / "a", 2, resume=True)  # a larger -n extends it, on Ray
    assert resumed.resumed_episodes == 6 and resumed.status == "complete"
    assert resumed.result.per_episode.to_list() == expected["known-answer"].per_episode.to_list()
    on_ray(short, tmp_path / "b", 2)
    locally = local(spec, tmp_path / "b", resume=True)  # ... and locally
    assert locally.result.per_episode.to_list() == expected["known-answer"].per_episode.to_list()
    local(short, tmp_path / "c")
    on_ray_after_local = on_ray(spec, tmp_path / "c", 2, resume=True)  # a local run resumed on Ray
    assert on_ray_after_local.result.per_episode.to_list() == expected["known-answer"].per_episode.to_list()


def test_a_graceful_stop_leases_no_more_blocks_and_resume_finishes_exactly(cluster, expected, tmp_path):
    """What a first SIGINT/SIGTERM does (``engine.stop_starting()``): the blocks out finish and are kept, no block
    is leased after; the run ends ``interrupted``, and ``--resume`` (on Ray) runs exactly the missing episodes."""
    spec = SPECS["known-answer"]
    stopped = []

    def stop_after_first_block(engine):
        if not stopped:
            engine.stop_starting()
            stopped.append(engine.ledger.next_episode)

    first = on_ray(spec, tmp_path / "run", 2, hook=stop_after_first_block)
    assert first.status == "interrupted"
    assert 0 < len(first.result.per_episode) <= stopped[0] < spec.n_episodes
    resumed = on_ray(spec, tmp_path / "run", 2, resume=True)
    assert resumed.status == "complete" and resumed.resumed_episodes == len(first.result.per_episode)
    assert resumed.result.per_episode.to_list() == expected["known-answer"].per_episode.to_list()


def test_the_cli_runs_on_ray_and_shards_on_ray_merge(cluster, expected, tmp_path):
    args = ["--env", KA, "-n", "13", "--seed", "3", "-b", "2", "--no-report", "--backend", "ray",
            "--address", cluster.address, "--ray-workers", "2", "--num-cpus", "0.5"]
    result = CliRunner().invoke(main, [*args, "-o", str(tmp_path / "run")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    info = json.loads((tmp_path / "run" / "eval_info.json").read_text())
    assert info["per_episode"] == expected["known-answer"].per_episode.to_list()
    for k in range(2):
        shard = CliRunner().invoke(main, [*args, "--shard", f"{k}/2", "-o", str(tmp_path / f"s{k}")],
                                   catch_exceptions=False)
        assert shard.exit_code == 0, shard.output
    merged = CliRunner().invoke(main, ["merge", str(tmp_path / "s0"), str(tmp_path / "s1"), "-o", str(tmp_path / "m"),
                                       "--no-report"], catch_exceptions=False)
    assert merged.exit_code == 0, merged.output
    assert json.loads((tmp_path / "m" / "eval_info.json").read_text())["per_episode"] == info["per_episode"]


def test_a_stop_rule_on_ray_stops_at_the_local_k_with_the_local_record(cluster, tmp_path):
    """The driver decides on the index prefix as blocks arrive: the same k and records as a local run."""
    spec = EvalSpec(env=KA, policy="zero", n_episodes=80, seed=3, batch_size=2, stop_when="ci<=0.25")
    here = local(spec, tmp_path / "local").result
    there = on_ray(spec, tmp_path / "ray", 3)
    assert there.status == "complete"
    a, b = here.meta["stopping"], there.result.meta["stopping"]
    assert b["reason"] == a["reason"] == "rule" and b["k"] == a["k"]
    assert there.result.per_episode.to_list() == here.per_episode.to_list()
    assert {k: v for k, v in there.result.overall().items() if k not in TIMING} == \
        {k: v for k, v in here.overall().items() if k not in TIMING}


def test_a_checkpoint_folder_travels_to_the_actors_with_its_digest(cluster, expected, tmp_path):
    """The policy folder is shipped through the object store: each actor loads its own copy (not the driver's
    path), checked by digest; the results are the local run's. A damaged package is refused on arrival."""
    from fasteval.run.ray_engine import pack_folder, unpack_folder

    with RayEngine(SPECS["cartpole-mlp"], RayOptions(workers=2, num_cpus=0.5)) as engine:
        paths = ray.get([actor.policy_ref.remote() for actor in engine.actors])
        assert all(p != MLP and p.endswith("cartpole_mlp") for p in paths)
        record = engine.run()
    assert record.per_episode.to_list() == expected["cartpole-mlp"].per_episode.to_list()
    assert record.meta["policy_shipped"]["digest"] == pack_folder(MLP).digest
    package = pack_folder(MLP)
    damaged = type(package)(package.name, {**package.files, "config.json": b"{}"}, package.digest)
    with pytest.raises(RuntimeError, match="arrived damaged"):
        unpack_folder(damaged, str(tmp_path))


def test_a_bad_spec_on_ray_is_the_engines_own_bad_input(cluster):
    from fasteval.types.errors import UserInputError

    with pytest.raises(UserInputError):
        RayEngine(SPECS["known-answer"].replace(env_kwargs={"no_such_kwarg": 1}), RayOptions(workers=1, num_cpus=0.5))


@pytest.mark.parametrize("args, message", [
    (["--backend", "ray", "--videos", "2", "--policy", "zero", "--policy", "random"], "renders one policy's"),
    (["--ray-workers", "2"], "options of --backend ray"),
    (["--ray-policy-actors", "2"], "--ray-policy-actors: options of --backend ray"),
])
def test_what_ray_cannot_run_yet_exits_2(tmp_path, args, message):
    result = CliRunner().invoke(main, ["--env", KA, "-n", "3", *args, "-o", str(tmp_path / "x")])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not (tmp_path / "x").exists()
    shutil.rmtree(tmp_path, ignore_errors=True)
