"""Helpers of the serve tests: a `fasteval serve` subprocess, a server in a thread, and policies served by
module:callable.

The server runs as its own process (``python -m fasteval.doors.serve``), so that it has its own torch
RNG and threads, and can be killed. It prints its address on stdout once it listens (port 0: any free
port); :class:`ServerProcess` reads it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 120.0


def repo_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


class ThreadServer:
    """A :class:`~fasteval.doors.serve_server.PolicyServer` on a loopback port, its event loop in a thread of this
    process (as a Ray policy actor runs it), so that a test reads its counters or patches its methods.
    ``config_fields`` are :class:`~fasteval.doors.serve_server.ServerConfig`'s (``batch_sessions_ms``, ...)."""

    def __init__(self, policy: str, **config_fields):
        import asyncio

        from fasteval.doors.serve_policy import RunnerOptions
        from fasteval.doors.serve_server import PolicyServer, ServerConfig

        config = ServerConfig(options=RunnerOptions(policy=policy, device="cpu", trust_remote_code=True), port=0,
                              **config_fields)
        self.server = PolicyServer(config)
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Future | None = None
        ready = threading.Event()

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = self._loop.create_future()

            def listening(port: int) -> None:
                self.url = f"ws://127.0.0.1:{port}"
                ready.set()

            await self.server.serve(ready=listening, stop=self._stop)

        self.thread = threading.Thread(target=lambda: asyncio.run(main()), daemon=True)
        self.thread.start()
        assert ready.wait(60), "the server did not start"

    def close(self) -> None:
        self._loop.call_soon_threadsafe(lambda: self._stop.done() or self._stop.set_result(None))
        self.thread.join(30)


class ServerProcess:
    """``with ServerProcess(POLICY, "--device", "cpu") as server: server.url`` -> ``ws://127.0.0.1:PORT``."""

    def __init__(self, policy: str, *args: str, port: int = 0, python: str = sys.executable, env: dict | None = None):
        self.cmd = [python, "-m", "fasteval.doors.serve", policy, "--port", str(port), "--device", "cpu", *args]
        self.env = env or repo_env()
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.stderr: list[str] = []

    def start(self) -> "ServerProcess":
        self.proc = subprocess.Popen(self.cmd, cwd=REPO, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        got: list[str] = []
        reader = threading.Thread(target=lambda: got.append(self.proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(START_TIMEOUT_S)
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()
        if not got or not got[0].startswith("ws://"):
            self.stop()
            raise RuntimeError(f"fasteval serve did not start: {got} {''.join(self.stderr)[-2000:]}")
        self.url = got[0].strip()
        return self

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> "ServerProcess":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- policies served by module:callable (tests.serve_helpers:NAME) --------------------------------

class EpisodeNoise:
    """Stochastic, with per-episode generators: action = 1 if a draw from the slot's generator < 0.5.

    ``reset(env_ids, seeds)`` seeds each slot's generator with its episode's seed, so an episode's
    actions depend on its seed only (whatever the batch, the grouping, or where the policy runs).
    """

    def __init__(self) -> None:
        self.generators: list[torch.Generator] = []

    def _grow(self, n: int) -> None:
        while len(self.generators) < n:
            self.generators.append(torch.Generator().manual_seed(12345))

    def reset(self, env_ids, seeds) -> None:
        self._grow(int(env_ids.max()) + 1 if len(env_ids) else 0)
        for slot, seed in zip(env_ids.tolist(), seeds):
            self.generators[slot].manual_seed(int(seed))

    def select_action(self, obs):
        self._grow(obs.shape[0])
        draws = torch.stack([torch.rand((), generator=g) for g in self.generators[: obs.shape[0]]])
        return (draws < 0.5).long()


def episode_noise() -> EpisodeNoise:
    return EpisodeNoise()


class ParityChunks(torch.nn.Module):
    """A chunking policy for KnownAnswerEnv: a chunk of 3 copies of the parity bit of the observation of
    the step its slot's queue ran out; the queue plays all 3 (``n_action_steps``). The parity flips every
    step, so only the 1st and 3rd action of a chunk earn the bonus: a misaligned queue changes the returns."""

    n_action_steps = 3

    def forward(self, obs):
        parity = obs[..., -1].round().long()
        return torch.stack([parity, parity, parity], dim=1)


def parity_chunks() -> ParityChunks:
    return ParityChunks()


def raises_after_steps() -> "RaisesLater":
    return RaisesLater()


class RaisesLater:
    """Fine on its dry run and its first steps, then raises (a server-side exception mid-run)."""

    def __init__(self) -> None:
        self.calls = 0

    def select_action(self, obs):
        self.calls += 1
        if self.calls > 5:
            raise RuntimeError("the served policy broke on purpose")
        return torch.zeros(obs.shape[0], dtype=torch.long)


class DroppingProxy:
    """A TCP proxy on 127.0.0.1 in front of a server; :meth:`drop` cuts every open connection (a network
    blip: the server and its sessions live on). ``forwarded`` counts the bytes sent to the server."""

    def __init__(self, target_port: int):
        import socket

        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list = []
        self.forwarded = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket

        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            with self.lock:
                self.sockets += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True).start()

    def _pipe(self, src, dst, count: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if count:
                    self.forwarded += len(data)
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.close()
            except OSError:
                pass

    def drop(self) -> None:
        import socket

        with self.lock:
            sockets, self.sockets = self.sockets, []
        for s in sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass

    def close(self) -> None:
        self.listener.close()
        self.drop()
