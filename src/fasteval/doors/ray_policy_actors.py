"""``--ray-policy-actors N``: one or a few shared policy actors for a run on Ray (docs/distributed.md).

Each policy actor is fasteval's own policy server (``fasteval serve``: :class:`~fasteval.doors.serve_server.
PolicyServer`, fasteval's protocol) run inside a Ray actor, listening on its node's address with a token of
the run's. The env workers of :class:`~fasteval.run.ray_engine.RayEngine` load ``ws://NODE:PORT`` as their
policy (worker ``w`` the actor ``w % N``), so the policy is loaded N times, not once per worker: on the
actors' GPUs (``--num-gpus`` goes to the policy actors then, not to the env workers).

Exactness: a served policy is called as in-process (the client's spec travels to the server: its
observation format, ``--policy-block`` R, accelerators), with the canonical policy call
(:mod:`fasteval.core.policy_blocks`: blocks of R rows), so a row's action does not depend on the rows it
was sent with; tests/test_ray_many.py checks the records against a local run.

Batching across workers: each actor's server runs with cross-session batching on
(:mod:`fasteval.doors.serve_merge`, ``batch_sessions_ms``, default :data:`RAY_BATCH_SESSIONS_MS`): the step
requests of the workers it serves share one policy call when the policy has no per-slot state (a plain
``nn.Module`` called on blocks of R rows, eager, no global RNG); other policies (chunk queues, per-slot resets,
per-episode noise) are still called per worker, and the run's meta says which
(``server_policy_batch_sessions``). :meth:`PolicyActor.merge_stats` gives an actor's counters.
"""

from __future__ import annotations

import secrets
import threading
from typing import Any

from fasteval.types.errors import UserInputError

RAY_BATCH_SESSIONS_MS = 2.0
"""How long a policy actor waits for the other workers' step requests before it calls the policy (ms)."""


class PolicyActor:
    """A Ray actor's body: a policy server on this node (a thread running its event loop); :meth:`url` says
    where. ``package``: the checkpoint folder shipped by the driver (digest checked on arrival)."""

    def __init__(self, options: dict[str, Any], token: str, package: Any = None,
                 batch_sessions_ms: float | None = RAY_BATCH_SESSIONS_MS):
        self.batch_sessions_ms = batch_sessions_ms
        self.server: Any = None
        self.error: BaseException | None = None
        self.address: str | None = None
        self._loop: Any = None
        self._stop: Any = None
        ready = threading.Event()
        try:
            self._start(options, token, package, ready)
        except Exception as exc:  # noqa: BLE001 -- raised again by url(): the driver's first call
            self.error = exc
            ready.set()
        ready.wait(120)

    def _start(self, options: dict[str, Any], token: str, package: Any, ready: threading.Event) -> None:
        import asyncio

        import ray

        from fasteval.doors.serve_policy import RunnerOptions
        from fasteval.doors.serve_server import PolicyServer, ServerConfig

        if package is not None:
            import tempfile

            from fasteval.run.ray_engine import unpack_folder

            options = {**options, "policy": unpack_folder(package, tempfile.mkdtemp(prefix="fasteval-policy-"))}
        host = ray.util.get_node_ip_address()
        server = self.server = PolicyServer(ServerConfig(options=RunnerOptions(**options), host=host, port=0,
                                                         token=token, batch_sessions_ms=self.batch_sessions_ms))

        def listening(port: int) -> None:  # an IPv6 host in brackets, as URLs write it (RFC 3986)
            self.address = f"ws://[{host}]:{port}" if ":" in host else f"ws://{host}:{port}"
            ready.set()

        def run() -> None:
            async def main() -> None:
                self._loop = asyncio.get_running_loop()
                self._stop = self._loop.create_future()
                await server.serve(ready=listening, stop=self._stop)

            try:
                asyncio.run(main())
            except BaseException as exc:  # noqa: BLE001 -- a port that cannot bind: the driver hears it
                self.error = exc
                ready.set()

        threading.Thread(target=run, name="fasteval-policy-actor", daemon=True).start()

    def url(self) -> str:
        """``ws://NODE:PORT``; the server's own error when it could not start."""
        if self.error is not None:
            raise self.error
        if self.address is None:
            raise RuntimeError("the policy actor's server did not start listening within 120 s.")
        return self.address

    def merge_stats(self) -> dict[str, int] | None:
        """The server's cross-session batching counters (:attr:`~fasteval.doors.serve_merge.SessionMerger.stats`);
        None when batching is off."""
        merger = self.server.merger if self.server is not None else None
        return dict(merger.stats) if merger is not None else None

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(lambda: self._stop.done() or self._stop.set_result(None))


class RayPolicyServers:
    """``n`` :class:`PolicyActor` actors serving ``spec``'s policy, spread over the cluster; ``urls`` and
    ``token`` are what the env workers connect with (:class:`~fasteval.run.ray_engine.RayEngine`'s
    ``policy_servers``); :meth:`close` kills them (and shuts down the Ray instance it started);
    ``batch_sessions_ms``: the actors' cross-session batching wait (None: each worker's request is its own call)."""

    def __init__(self, spec: Any, n: int, address: str | None = None, num_gpus: float = 0.0,
                 ship_policy: bool = True, batch_sessions_ms: float | None = RAY_BATCH_SESSIONS_MS):
        import ray

        from fasteval.run.ray_engine import policy_packages, RayOptions

        if spec.n_policies > 1:
            raise UserInputError(f"--ray-policy-actors serves one policy; this run has {spec.n_policies}. Drop "
                                 f"--ray-policy-actors (each env worker then loads every policy).")
        if not isinstance(spec.policy, str):
            raise UserInputError("--ray-policy-actors serves a policy reference (a checkpoint folder, module:callable, "
                                 "hf://...), not a live policy object.")
        from fasteval.robot.policies.remote import is_remote_ref

        if is_remote_ref(spec.policy):
            raise UserInputError(f"--ray-policy-actors: the policy {spec.policy} is already served; drop "
                                 f"--ray-policy-actors.")
        self.ray = ray
        self.started_ray = not ray.is_initialized()
        if self.started_ray:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        self.token = secrets.token_urlsafe(24)
        options = {"policy": spec.policy, "device": "auto" if num_gpus else spec.device,
                   "trust_remote_code": spec.trust_remote_code, "observation_format": spec.observation_format,
                   "rename": dict(spec.rename or {}), "obs_dtype": spec.obs_dtype, "reset_mode": spec.reset_mode,
                   "amp": spec.amp, "cuda_graph": spec.cuda_graph}
        package = policy_packages(spec, RayOptions(ship_policy=ship_policy))[0]
        actor = ray.remote(PolicyActor).options(num_cpus=1, num_gpus=num_gpus, max_restarts=0,
                                                scheduling_strategy="SPREAD")
        self.actors = [actor.remote(options, self.token, package, batch_sessions_ms) for _ in range(n)]
        try:
            self.urls: tuple[str, ...] = tuple(ray.get([a.url.remote() for a in self.actors]))
        except ray.exceptions.RayTaskError as exc:
            self.close()
            cause = exc.cause if isinstance(exc.cause, BaseException) else exc
            raise cause from None
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        from fasteval.run.ray_engine import kill_actors

        kill_actors(self.ray, self.actors)
        self.actors = []
        if self.started_ray:
            self.ray.shutdown()
            self.started_ray = False

