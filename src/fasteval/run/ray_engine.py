"""``--backend ray``: one evaluation across the nodes of a Ray cluster, exact per episode.

The driver (this process) keeps what a run is: the ledger of the evaluation's episodes, the run folder
and the record (:func:`fasteval.run.durable.run_durable` drives a :class:`RayEngine` as it drives a local
:class:`~fasteval.run.engine.Engine`). The work goes to Ray actors (:class:`EpisodeWorker`), spread over
the cluster's nodes (``SPREAD``), each with ``num_cpus``/``num_gpus``: an actor builds the existing engine
once (envs, policy, dry run) and runs the blocks of episode indices it leases, as a resumed run runs its
missing episodes (episode ``i`` always with seed ``seed + i``), and returns the block's finished rows.

The driver leases blocks in index order (``block`` episodes each, default the batch size), writes each
block's rows into its ledger by index, and hands them up (``episodes.jsonl``, the progress bar) as they
arrive: a result never depends on which actor or node ran an episode, nor on the order blocks came back.

Faults: an actor that dies (killed, its node removed, its process crashed) loses its block; the block goes
back to the head of the queue and runs again from its seeds on a new actor (Ray places it on a node that
is still there). A block is leased at most :data:`MAX_LEASES` times; a block that kills every actor it
meets fails the run. Nothing is counted twice: a block's rows are written once, when it returns.

Stop rules (``--stop-when``) decide here, on index prefixes, as blocks arrive (the rule's prefix gate reads
episodes in index order whatever order they come back in, so ``k`` is the local run's); once the rule holds,
no block is leased any more, and the blocks still out are abandoned (their episodes count in ``n_cancelled``,
and rows past ``k`` that came back are listed as computed past the stop, not counted), as in the local engine.

Several policies (``--policy A --policy B``): every actor loads them all and runs leased rows of the run's
(policy, episode) ledger (interleaved by episode index, as the local engine's), given as pairs. A race
(``--stop-when best``) is the local engine's :class:`~fasteval.core.racing.RaceStop`, here in the driver, fed
on index prefixes: a dropped policy's rows not leased yet are never leased, its rows in blocks still out are
abandoned when their block comes back (counted in ``n_cancelled``, not recorded); the race's end abandons
every block out. The same eliminations at the same k as a local run, and the same records.

The workers' specs carry no ``stop_when``: only the driver decides (a worker sees a block, not a prefix).

Episode data (``return_episode_data``, ``--save-episodes``): each worker records its block's episodes (the
local recorder) and sends them back with its rows, on the host; the driver puts the landed blocks' steps
together in episode order (:func:`assemble_episode_data`), the local run's TensorDict row for row.

Shared policy actors (``policy_servers``, ``--ray-policy-actors``: :mod:`fasteval.doors.ray_policy_actors`): the
workers load ``ws://NODE:PORT`` of one of N policy servers run as Ray actors (round robin), with the run's token
in their environment, instead of the policy itself.

Videos (``--videos K``): the workers render nothing; after the run the driver replays the K episodes a local
run keeps, in a local engine, and checks each replay against the workers' row (:mod:`fasteval.run.ray_videos`).

A policy that draws from torch's global RNG is seeded per block (as per resumed segment): deterministic and
per-episode-noise policies are exact.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from fasteval.core.engine import build_stop_rule, many_policy_ledger, pairs_of
from fasteval.core.ledger import Ledger
from fasteval.core.outcome import Segment, SegmentAborted
from fasteval.core.racing import RaceStop
from fasteval.core.stopping import StopRuleError, StopWhen
from fasteval.core.watchdog import Watchdog
from fasteval.robot.policies.remote import TOKEN_ENV
from fasteval.run.engine import Engine
from fasteval.types.errors import UserInputError
from fasteval.types.spec import EvalSpec

MAX_LEASES = 3
"""Times one block may be leased (its actor died each time before): then the run fails."""

ROW_COLUMNS = ("sum_reward", "max_reward", "length", "nan_rewards", "success", "finished", "failed", "attempts")
"""The ledger's per-row arrays a worker sends back for its block."""


@dataclass(frozen=True)
class RayOptions:
    """How the Ray backend places its workers (``--address``, ``--ray-workers``, ``--num-cpus``, ``--num-gpus``,
    ``--ray-block``)."""

    address: str | None = None
    """The cluster to join (``auto``, ``ray://HOST:PORT``, ``HOST:PORT``); ``None``: the running Ray
    instance, else a new local one."""
    workers: int | None = None
    """Worker actors; ``None``: as many as the cluster's CPUs allow (``CPU // num_cpus``, at least 1)."""
    num_cpus: float = 1.0
    """CPUs each worker actor reserves."""
    num_gpus: float = 0.0
    """GPUs each worker actor reserves (its policy then runs there: ``--device auto``)."""
    block: int | None = None
    """Episodes per lease; ``None``: the batch size."""
    ship_policy: bool = True
    """A checkpoint folder policy travels to every actor through Ray's object store (its digest checked on
    arrival), so the nodes need not share its path; ``False``: each node reads the path itself."""

    def __post_init__(self) -> None:
        if self.workers is not None and self.workers < 1:
            raise UserInputError(f"--ray-workers: expected at least 1, got {self.workers}.")
        if self.num_cpus < 0 or self.num_gpus < 0:
            raise UserInputError(f"--num-cpus/--num-gpus: expected >= 0, got {self.num_cpus}/{self.num_gpus}.")
        if self.block is not None and self.block < 1:
            raise UserInputError(f"--ray-block: expected at least 1 episode per lease, got {self.block}.")


def check_ray_spec(spec: EvalSpec) -> None:
    """What the Ray backend cannot run yet: UserInputError (exit 2) saying so and what to do."""
    if spec.max_episodes_rendered and spec.n_policies > 1:
        raise UserInputError(f"--backend ray --videos renders one policy's episodes; this run has {spec.n_policies} "
                             f"policies. Drop --videos, or render each policy's with a run of its own.")
    if spec.return_episode_data and spec.n_policies > 1:
        raise UserInputError(f"--backend ray saves one policy's episode data (--save-episodes); this run has "
                             f"{spec.n_policies} policies. Save each policy's episodes with a run of its own.")


@dataclass(frozen=True)
class FolderPackage:
    """A checkpoint folder as it travels to the actors: its files' bytes and their digest."""

    name: str
    """The folder's own name (kept on arrival: a loader may read it)."""
    files: dict[str, bytes]
    """Path relative to the folder -> the file's bytes."""
    digest: str
    """:func:`files_digest` of ``files``, computed where the folder was read."""

    @property
    def n_bytes(self) -> int:
        return sum(len(b) for b in self.files.values())


def files_digest(files: dict[str, bytes]) -> str:
    """sha256 over the sorted (relative path, sha256 of the bytes) pairs of a folder's files."""
    import hashlib

    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode())
        h.update(hashlib.sha256(files[name]).digest())
    return h.hexdigest()


def pack_folder(path: str) -> FolderPackage:
    """Every file under ``path`` (links followed), with the digest of the lot."""
    from pathlib import Path

    root = Path(path)
    files = {str(f.relative_to(root)): f.read_bytes() for f in sorted(root.rglob("*")) if f.is_file()}
    return FolderPackage(root.resolve().name, files, files_digest(files))


def unpack_folder(package: FolderPackage, into: str) -> str:
    """Write ``package`` under ``into/<its name>`` after checking its digest (a RuntimeError when the bytes
    that arrived are not those that left); returns the folder's new path."""
    from pathlib import Path

    arrived = files_digest(package.files)
    if arrived != package.digest:
        raise RuntimeError(f"the checkpoint folder {package.name!r} arrived damaged: digest {arrived[:12]}..., "
                           f"sent as {package.digest[:12]}.... Run again; if it repeats, use --no-ship-policy with "
                           f"the folder at the same path on every node.")
    root = Path(into) / package.name
    for name, data in package.files.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return str(root)


def policy_packages(spec: EvalSpec, options: RayOptions) -> tuple[FolderPackage | None, ...]:
    """Per policy of the spec, its checkpoint folder packed to ship (``options.ship_policy`` and a local
    folder), else None."""
    import os

    return tuple(pack_folder(p) if options.ship_policy and isinstance(p, str) and os.path.isdir(p) else None
                 for p in spec.policies)


def worker_spec(spec: EvalSpec) -> EvalSpec:
    """The spec an actor's engine runs: the run's, without its stop rule or race (the driver decides on index
    prefixes; a worker sees blocks), and with the policies' names fixed (a shipped folder lands at another
    path, which must not rename its policy)."""
    changes: dict[str, Any] = {}
    if spec.stop_when is not None:
        changes.update(stop_when=None, design="anytime")
    if spec.n_policies > 1:
        changes["policy_names"] = spec.names
    if spec.max_episodes_rendered:  # the driver replays the kept episodes after the run (run/ray_videos.py)
        changes.update(max_episodes_rendered=0, videos_dir=None)
    return spec.replace(**changes) if changes else spec


class EpisodeWorker:
    """A Ray actor's body: the existing engine, built once, run on the blocks of episodes it leases.
    ``package``: the policy's checkpoint folder, shipped (written to a folder of this actor's, digest checked)."""

    def __init__(self, spec: EvalSpec, packages: Sequence[FolderPackage | None] = (), check_render: bool = False):
        self.engine, self.error = None, None
        try:  # an actor whose constructor raises dies, and its error would reach the driver as a dead actor
            if any(p is not None for p in packages):
                import tempfile

                policies = tuple(p if package is None else unpack_folder(
                    package, tempfile.mkdtemp(prefix="fasteval-policy-")) for p, package in zip(spec.policies, packages))
                spec = spec.replace(policy=policies if spec.n_policies > 1 else policies[0])
            self.policy_path = spec.policy
            self.engine = Engine(spec)
            if check_render:  # the driver will replay videos: an env that cannot render is bad input now
                from fasteval.robot.recording import check_renderable

                check_renderable(self.engine)
        except Exception as exc:  # noqa: BLE001 -- raised again by identity(): the driver's first call
            self.error = exc

    def policy_ref(self) -> Any:
        """The policy reference this actor's engine loaded (a shipped folder: this actor's copy)."""
        return self.policy_path

    def identity(self) -> dict[str, Any]:
        """What the run folder's manifest holds about the policy and env (its digest, the step cap); the
        engine's own error (a bad spec: exit 2) when it could not be built."""
        if self.error is not None:
            raise self.error
        return self.engine.identity_facts()

    def node(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def run_block(self, episodes: Sequence[Any], seed: int | None = None) -> dict[str, Any]:
        """Run episodes ``episodes`` (global indices; a many-policy run's ``(policy, episode)`` pairs): their rows, faults, timings and facts; an error that
        stopped the block comes back in ``error`` with the rows finished before it."""
        error = None
        try:
            segment = self.engine.run_segment(episodes=list(episodes), seed=seed)
        except SegmentAborted as exc:
            segment, error = exc.segment, exc.segment.error
        ledger = segment.ledger
        return {"episode_ids": ledger.episode_ids.copy(),
                "policy_ids": None if ledger.policy_ids is None else ledger.policy_ids.copy(), **{c: getattr(ledger, c).copy() for c in ROW_COLUMNS},
                "success_signal": bool(segment.success_signal), "errors": list(segment.errors),
                "timings": dict(segment.timings), "eval_s": segment.eval_s, "facts": dict(segment.facts),
                "error": error, "node": self.node(), "episode_data": _host(segment.outputs.get("episode_data"))}


class _RemoteEnvs:
    """What the doors read of a run's envs while it runs: whether they have reported a success signal."""

    has_success_signal = False


class RayEngine:
    """The driver of a run on Ray: the engine interface :func:`~fasteval.run.durable.run_durable` drives
    (``spec``, :meth:`identity_facts`, :meth:`run_segment`, :meth:`stop_starting`, ``ledger``,
    ``watchdog``, :meth:`close`), with the episodes run by :class:`EpisodeWorker` actors."""

    def __init__(self, spec: EvalSpec, options: RayOptions = RayOptions(), policy_servers: Any = None):
        """``policy_servers``: shared policy actors (``urls``, ``token``, ``close()``:
        :class:`fasteval.doors.ray_policy_actors.RayPolicyServers`): each env worker loads ``ws://...`` of one
        of them (round robin) as its policy instead of the policy itself; closed with this engine."""
        check_ray_spec(spec)
        try:
            import ray
        except ImportError:
            raise UserInputError("--backend ray needs Ray: ./scripts/install.sh ray (fasteval's install script with the ray extra).") from None
        self.ray = ray
        self.spec, self.options = spec, options
        self.started_ray = not ray.is_initialized()
        if self.started_ray:
            ray.init(address=options.address, include_dashboard=False, log_to_driver=False)
        self.watchdog = Watchdog()
        """Never armed here (the workers' engines keep their own): run_durable sets its expiry."""
        self.envs = _RemoteEnvs()
        self.ledger: Ledger | None = None
        self.stop_rule = None
        self.announce: Callable[[str], None] | None = None
        self.block = int(options.block or spec.n_slots)
        per_worker = options.num_cpus or 1.0
        cpus = float(ray.cluster_resources().get("CPU", 1.0))
        self.n_workers = int(options.workers or max(1, int(cpus // per_worker)))
        self.worker_spec = worker_spec(spec)
        self.policy_servers = policy_servers
        self._made = 0
        served = {} if policy_servers is None else {"runtime_env": {"env_vars": {TOKEN_ENV: policy_servers.token}}}
        self._actor_class = ray.remote(EpisodeWorker).options(
            num_cpus=options.num_cpus, num_gpus=options.num_gpus, max_restarts=0, scheduling_strategy="SPREAD",
            **served)
        self.actors: list[Any] = []
        self.leases: dict[Any, tuple[Any, np.ndarray, int]] = {}
        """Blocks out on actors: ``{object ref: (actor, ledger rows, lease count)}``."""
        self.actors_lost = 0
        self.node_of: dict[int, str] = {}
        """``{id(actor): Ray node id}`` of the actors that have returned a block (where they run)."""
        self.packages = policy_packages(spec, options) if policy_servers is None else (None,)
        self._package_ref = ray.put(self.packages) if any(p is not None for p in self.packages) else ()
        try:
            self.actors = [self._new_actor() for _ in range(self.n_workers)]
            self._identity = self._first_answer(lambda actor: actor.identity.remote())
        except BaseException:
            self.close()
            raise
        self.max_steps = self._identity.get("max_steps")

    def _new_actor(self) -> Any:
        spec = self.worker_spec
        if self.policy_servers is not None:  # a shared policy actor, round robin
            urls = self.policy_servers.urls
            spec = spec.replace(policy=urls[self._made % len(urls)])
        self._made += 1
        return self._actor_class.remote(spec, self._package_ref, bool(self.spec.max_episodes_rendered))

    def _first_answer(self, call: Callable[[Any], Any]) -> dict[str, Any]:
        """Every actor's answer (each has built its engine: start-up stays out of the run), the first one's
        returned; a bad spec raises the engine's own error (exit 2)."""
        try:
            return self.ray.get([call(actor) for actor in self.actors])[0]
        except self.ray.exceptions.RayTaskError as exc:
            raise _cause(exc) from None

    def identity_facts(self) -> dict[str, Any]:
        return dict(self._identity)

    run = Engine.run
    """The library's door, as a local engine's: run and return the record (:meth:`fasteval.run.engine.Engine.run`)."""

    def stop_starting(self) -> None:
        """Graceful stop: the blocks out finish, no block is leased any more."""
        if self.ledger is not None:
            self.ledger.stop_starting()

    def run_segment(self, n_episodes: int | None = None, seed: int | None = None,
                    on_finished: Callable[[Ledger, np.ndarray], None] | None = None,
                    episodes: Sequence[int] | None = None, on_error: Callable[[dict[str, Any]], None] | None = None,
                    observer: Any = None, earlier: Any = None) -> Segment:
        """Run the spec's episodes (or ``episodes``: a resume's missing ones) on the actors; hand up the
        segment, as :meth:`fasteval.core.engine.CoreEngine.run_segment` does (:class:`SegmentAborted` when the
        run stopped early, holding every block that came back)."""
        spec = self.spec
        seed = spec.seed if seed is None else int(seed)
        cap = spec.n_episodes if episodes is not None or n_episodes is None else int(n_episodes)
        stop = build_stop_rule(spec, cap, earlier, max(1, self.block // 4), self.announce)
        self.stop_rule = stop
        slots = max(1, self.n_workers)
        if spec.n_policies > 1:
            pairs = pairs_of(episodes) if episodes is not None else None
            plain = None if episodes is None or pairs is not None else sorted({int(e) for e in episodes})
            ledger = many_policy_ledger(spec, slots, spec.n_episodes if n_episodes is None else int(n_episodes),
                                        seed, plain, pairs, stop)
        else:
            ids = np.arange(spec.n_episodes if n_episodes is None else n_episodes) if episodes is None else \
                np.asarray(sorted({int(e) for e in episodes}), dtype=np.int64)
            if stop is not None and stop.fired:
                ids = ids[:0]  # the rule held on the earlier segments: the run stays stopped
            ledger = Ledger(len(ids), slots, seed, ids)
        self.ledger = ledger
        state = _Blocks()
        state.stop, state.cap = stop, cap
        state.idle.extend(self.actors)
        started = time.perf_counter()
        try:
            self._drive(ledger, state, on_finished or (lambda ledger, rows: None), on_error or (lambda record: None))
        except BaseException as exc:
            if isinstance(exc, UserInputError) and not ledger.finished.any():
                raise  # the workers' dry run failed: nothing was evaluated
            raise SegmentAborted(self._segment(ledger, state, time.perf_counter() - started, exc)) from exc
        finally:
            for ref in list(self.leases):  # a block still out (an error, a second signal): abandoned
                actor, rows, _ = self.leases.pop(ref)
                ledger.n_cancelled += len(rows)
        if state.error is not None:
            if isinstance(state.error, UserInputError) and not ledger.finished.any():
                raise state.error
            raise SegmentAborted(self._segment(ledger, state, time.perf_counter() - started, state.error))
        return self._segment(ledger, state, time.perf_counter() - started, None)

    def _drive(self, ledger: Ledger, state: "_Blocks", on_finished: Callable[[Ledger, np.ndarray], None],
               on_error: Callable[[dict[str, Any]], None]) -> None:
        """Lease blocks to idle actors, land the blocks that come back, until none is out or left."""
        ray = self.ray
        while True:
            if state.error is None:
                self._lease(ledger, state)
            if not self.leases:
                return
            ready, _ = ray.wait(list(self.leases), num_returns=1, timeout=0.5)
            for ref in ready:
                actor, rows, count = self.leases.pop(ref)
                try:
                    out = ray.get(ref)
                except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError):  # the actor or its node is gone
                    # (or the block's result with it): its block goes back
                    self._lost(actor, rows, count, state)
                    continue
                except ray.exceptions.RayTaskError as exc:  # the worker's engine raised outside a block's run
                    state.error = state.error or _cause(exc)
                    state.idle.append(actor)
                    continue
                state.idle.append(actor)
                self._land(ledger, rows, out, state, on_finished, on_error, actor)
            if ledger.halting:  # the stop rule held (or the race ended): the blocks still out are abandoned
                self._abandon(ledger)
                return

    def _abandon(self, ledger: Ledger) -> None:
        """Drop the blocks still out (their episodes have no record; counted in ``n_cancelled``). Their actors
        finish them and are idle again for a next run (their results are never read)."""
        for ref in list(self.leases):
            _, rows, _ = self.leases.pop(ref)
            ledger.n_cancelled += len(rows)

    def _lease(self, ledger: Ledger, state: "_Blocks") -> None:
        """Give each idle actor a block: a lost block first (lowest indices first), then the next in index order."""
        while state.idle:
            if ledger.starting_stopped:  # a graceful stop: no block starts, not even a lost one
                return
            if state.returned:
                rows, count = state.returned.popleft()
                rows = self._live(ledger, rows)  # a race may have dropped some of its policies since
                if not rows.size:
                    continue
            else:
                start, stop = ledger.next_episode, min(ledger.limit, ledger.next_episode + self.block)
                if start >= stop:
                    return
                ledger.next_episode = stop
                rows, count = np.arange(start, stop), 0
            actor = state.idle.popleft()
            ids = ledger.episode_ids[rows].tolist()
            ref = actor.run_block.remote(ids if ledger.policy_ids is None else
                                         list(zip(ledger.policy_ids[rows].tolist(), ids)), ledger.seed)
            self.leases[ref] = (actor, rows, count + 1)

    @staticmethod
    def _live(ledger: Ledger, rows: np.ndarray) -> np.ndarray:
        """``rows`` less those of the policies a race has dropped."""
        if ledger.policy_ids is None or not ledger.dropped.any():
            return rows
        return rows[~ledger.dropped[ledger.policy_ids[rows]]]

    def _lost(self, actor: Any, rows: np.ndarray, count: int, state: "_Blocks") -> None:
        """An actor died with ``rows`` leased: they go back to the queue (in index order) and a new actor takes
        its place; a block lost :data:`MAX_LEASES` times fails the run."""
        self.actors_lost += 1
        self.actors = [a for a in self.actors if a is not actor]
        if count >= MAX_LEASES:
            state.error = state.error or RuntimeError(
                f"episodes {int(self.ledger.episode_ids[rows[0]])}..{int(self.ledger.episode_ids[rows[-1]])} lost "
                f"their Ray worker {count} times (an actor or node died each time); the run stops. Every finished "
                f"episode is kept: fix the cause, then --resume.")
            return
        state.returned.append((rows, count))
        state.returned = collections.deque(sorted(state.returned, key=lambda item: int(item[0][0])))
        replacement = self._new_actor()
        self.actors.append(replacement)
        state.idle.append(replacement)

    def _land(self, ledger: Ledger, rows: np.ndarray, out: dict[str, Any], state: "_Blocks",
              on_finished: Callable[[Ledger, np.ndarray], None], on_error: Callable[[dict[str, Any]], None],
              actor: Any = None) -> None:
        """A block came back: its rows into the ledger by index, its faults and finished rows handed up. The rows
        of policies a race dropped while the block was out are abandoned (``n_cancelled``: no record)."""
        assert np.array_equal(out["episode_ids"], ledger.episode_ids[rows]), "a block came back for other episodes"
        if ledger.policy_ids is not None:
            assert np.array_equal(out["policy_ids"], ledger.policy_ids[rows]), "a block came back for other policies"
        keep = np.ones(len(rows), dtype=bool)
        if ledger.policy_ids is not None and ledger.dropped.any():
            keep = ~ledger.dropped[ledger.policy_ids[rows]]
            ledger.n_cancelled += int((~keep).sum())
        rows = rows[keep]
        for column in ROW_COLUMNS:
            getattr(ledger, column)[rows] = out[column][keep]
        ledger.failed_rows.extend(int(rows[k]) for k in np.flatnonzero(out["failed"][keep]))
        for record in out["errors"]:
            state.errors.append(record)
            on_error(record)
        state.add(out)
        self.node_of[id(actor)] = out["node"]
        self.envs.has_success_signal = self.envs.has_success_signal or out["success_signal"]
        ledger.success_signal = out["success_signal"]
        done = rows[out["finished"][keep]]
        if done.size:
            on_finished(ledger, done)
            if state.stop is not None:  # decides on the index prefix, whatever order blocks come back in
                state.stop.on_finished(ledger, done)
        if out["episode_data"] is not None:
            state.episode_data.append(out["episode_data"])
        if out["error"] is not None:
            state.error = state.error or out["error"]

    def _segment(self, ledger: Ledger, state: "_Blocks", eval_s: float, error: BaseException | None) -> Segment:
        if state.stop is not None:
            try:
                state.stop.finish(ledger)
            except StopRuleError as exc:  # a return outside --return-bounds: the run's error
                error = error or exc
        facts = {**state.facts, "backend": "ray", "ray_workers": self.n_workers, "ray_block": self.block,
                 "ray_nodes": len(state.nodes), "ray_actors_lost": self.actors_lost,
                 **self._shipped_facts(),
                 **({"ray_policy_actors": len(self.policy_servers.urls)} if self.policy_servers is not None else {}),
                 "has_success_signal": bool(self.envs.has_success_signal),
                 "n_out_of_range_actions": state.out_of_range}
        outputs: dict[str, Any] = {}
        k = state.stop.k if state.stop is not None and state.stop.fired else None
        if self.spec.return_episode_data:
            outputs["episode_data"] = assemble_episode_data(state.episode_data, ledger, k)
        if self.spec.max_episodes_rendered and error is None:
            from fasteval.run.ray_videos import replay_videos

            started = time.perf_counter()
            try:
                outputs["video_paths"] = replay_videos(self.spec, ledger, k)
            except Exception as exc:  # noqa: BLE001 -- frames the env cannot give: the run's error, its episodes kept
                error = exc
            facts["ray_videos_replay_s"] = time.perf_counter() - started
        return Segment(ledger=ledger, errors=tuple(state.errors), eval_s=eval_s, timings=dict(state.timings),
                       facts=facts, success_signal=bool(self.envs.has_success_signal), stop=state.stop,
                       cap=state.cap, error=error, outputs=outputs)

    def _shipped_facts(self) -> dict[str, Any]:
        """``policy_shipped``: the shipped folder's digest and bytes (a list of them, per policy, for several)."""
        shipped = [{"digest": p.digest, "bytes": p.n_bytes} if p is not None else None for p in self.packages]
        if not any(shipped):
            return {}
        return {"policy_shipped": shipped[0] if len(shipped) == 1 else shipped}

    def close(self) -> None:
        kill_actors(self.ray, self.actors)
        self.actors = []
        self.watchdog.close()
        if self.policy_servers is not None:
            self.policy_servers.close()
        if self.started_ray:
            self.ray.shutdown()
            self.started_ray = False

    def __enter__(self) -> "RayEngine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _Blocks:
    """The driver's state of one run: idle actors, lost blocks waiting, what came back so far."""

    def __init__(self) -> None:
        self.idle: collections.deque = collections.deque()
        self.returned: collections.deque = collections.deque()
        self.errors: list[dict[str, Any]] = []
        self.timings: dict[str, float] = {}
        self.facts: dict[str, Any] = {}
        self.nodes: set[str] = set()
        self.out_of_range = 0
        self.error: BaseException | None = None
        self.stop: StopWhen | RaceStop | None = None
        self.episode_data: list[Any] = []
        """The landed blocks' episode data (TensorDicts on the host), in the order they came back."""
        self.cap: int | None = None

    def add(self, out: dict[str, Any]) -> None:
        for stage, seconds in out["timings"].items():
            self.timings[stage] = self.timings.get(stage, 0.0) + float(seconds)
        if not self.facts:
            self.facts = dict(out["facts"])
        self.nodes.add(out["node"])
        self.out_of_range += int(out["facts"].get("n_out_of_range_actions", 0))


def _host(data: Any) -> Any:
    """A block's episode data on the host (it travels back to the driver), or None."""
    return None if data is None else data.cpu()


def assemble_episode_data(blocks: Sequence[Any], ledger: Ledger, k: int | None = None) -> Any:
    """The blocks' episode data (TensorDicts ``[steps]``, each sorted by episode then frame) as one, in episode
    order: only the episodes the ledger counts (finished, not failed; below ``k`` when a stop rule decided),
    with ``index`` renumbered ``0..steps-1``; the local recorder's layout
    (:class:`fasteval.robot.recording.EpisodeDataRecorder`). An empty TensorDict when there are none."""
    import torch
    from tensordict import TensorDict

    rows = ledger.finished & ~ledger.failed
    if k is not None:
        rows &= ledger.episode_ids < k
    wanted = torch.from_numpy(np.sort(ledger.episode_ids[rows]))
    parts = [b for b in blocks if len(b)]
    if not parts or not len(wanted):
        return TensorDict({}, batch_size=[0])
    parts.sort(key=lambda b: int(b["episode"][0]))
    data = torch.cat(parts, dim=0)
    data = data[torch.isin(data["episode"], wanted)]
    data["index"] = torch.arange(len(data), dtype=torch.int64)
    return data


def _cause(exc: BaseException) -> BaseException:
    """The exception a Ray task raised (a UserInputError stays one: exit 2), without Ray's wrapping."""
    from ray.exceptions import RayTaskError

    cause = exc.cause if isinstance(exc, RayTaskError) else None
    return cause if isinstance(cause, BaseException) else exc


def kill_actors(ray: Any, actors: Sequence[Any]) -> None:
    """Kill Ray ``actors`` (env workers or policy servers); one already gone is skipped."""
    for actor in actors:
        try:
            ray.kill(actor)
        except Exception:  # noqa: BLE001 -- already gone
            pass
