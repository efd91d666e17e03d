"""Faults around a served policy: a server that is down, a wrong token, a policy that raises on the
server, a misbehaving client next to a good one, and a server killed mid-run followed by --resume."""

from __future__ import annotations

import socket
import threading

import numpy as np
import pytest

pytest.importorskip("websockets")
pytest.importorskip("msgpack")

from fasteval.robot.policies.remote import RemotePolicyError, connect_remote  # noqa: E402
from fasteval.run.engine import Engine  # noqa: E402
from fasteval.testing import KNOWN_ANSWER_ID  # noqa: E402
from fasteval.types.errors import EvaluationAborted, PolicyLoadError  # noqa: E402
from fasteval.types.spec import EvalSpec  # noqa: E402
from fasteval.types.wire import KIND, pack, unpack  # noqa: E402
from tests.serve_helpers import ServerProcess, repo_env  # noqa: E402
from tests.test_serve import NOISE, run  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_server_that_is_down_is_a_one_line_load_error():
    port = free_port()
    with pytest.raises(PolicyLoadError) as info:
        connect_remote(f"ws://127.0.0.1:{port}")
    message = str(info.value)
    assert "\n" not in message and f"ws://127.0.0.1:{port} is not reachable" in message and "fasteval serve" in message


def test_a_wrong_or_missing_token_is_refused(monkeypatch):
    with ServerProcess(NOISE, "--token", "s3cret") as server:
        monkeypatch.delenv("FASTEVAL_SERVE_TOKEN", raising=False)
        with pytest.raises(PolicyLoadError, match="HTTP 401.*FASTEVAL_SERVE_TOKEN"):
            connect_remote(server.url)
        monkeypatch.setenv("FASTEVAL_SERVE_TOKEN", "wrong")
        with pytest.raises(PolicyLoadError, match="HTTP 401"):
            connect_remote(server.url)
        monkeypatch.setenv("FASTEVAL_SERVE_TOKEN", "s3cret")
        rows, _s, _ = run(connect_remote(server.url), env=KNOWN_ANSWER_ID, n_episodes=6, batch_size=2, seed=1, device="cpu")
    assert rows == run(NOISE, env=KNOWN_ANSWER_ID, n_episodes=6, batch_size=2, seed=1, device="cpu")[0]


def test_a_non_local_bind_needs_a_token():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "fasteval.doors.serve", NOISE, "--host", "0.0.0.0", "--port", "0"],
                         capture_output=True, text=True, timeout=120, env=repo_env(FASTEVAL_SERVE_TOKEN=""))
    assert out.returncode == 2 and "is not a loopback address" in out.stderr and "--token" in out.stderr


def test_a_server_side_exception_stops_the_run_with_one_line_and_keeps_finished_episodes():
    with ServerProcess("tests.serve_helpers:raises_after_steps") as server:
        spec = EvalSpec(env=KNOWN_ANSWER_ID, policy=connect_remote(server.url), n_episodes=20, batch_size=2, seed=0,
                        device="cpu")
        with Engine(spec) as engine, pytest.raises(EvaluationAborted) as info:
            engine.run()
    cause = info.value.__cause__
    assert isinstance(cause, RemotePolicyError)
    assert "\n" not in str(cause) and "step request #" in str(cause) and "broke on purpose" in str(cause)
    assert len(info.value.partial.per_episode) >= 1  # episodes finished before the failure are kept


def _misbehave(url: str, session_guess: str) -> list[str]:
    """A client that sends garbage, unknown kinds, a step without a session, and another's session id."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    heard = []
    for payload in (b"\xc1\xc1", pack({KIND: "exec", "code": "print(1)"}),
                    pack({KIND: "step", "group": 0, "seq": 1, "slots": [0], "obs": np.zeros((1, 3), np.float32)}),
                    pack({KIND: "open", "resume": session_guess}), "a text frame",
                    pack({KIND: "step", "obs": np.zeros(300_000, np.float64)})):  # 2.4 MB: over the 1 MB limit
        with connect(url, compression=None) as ws:
            ws.recv()
            ws.send(payload)
            try:
                reply = ws.recv(timeout=30)
                heard.append(reply if isinstance(reply, str) else str(unpack(reply).get("error")))
            except ConnectionClosed as exc:
                heard.append(f"closed {exc.rcvd.code if exc.rcvd is not None else ''}")
    return heard


def test_a_bad_client_does_not_disturb_another():
    with ServerProcess(NOISE, "--max-message-mb", "1") as server:
        remote = connect_remote(server.url)
        spec = EvalSpec(env=KNOWN_ANSWER_ID, policy=remote, n_episodes=200, batch_size=4, seed=7, device="cpu")
        results = {}
        with Engine(spec) as engine:
            worker = threading.Thread(target=lambda: results.setdefault("rows", engine.run()))
            worker.start()
            heard = _misbehave(server.url, "0" * 16)
            worker.join(300)
        rows = [(r["episode_ix"], r["seed"], r["sum_reward"], r["length"], r["success"]) for r in results["rows"].per_episode]
    assert any("not a valid msgpack" in h for h in heard) and any("unknown message kind 'exec'" in h for h in heard)
    assert any("open a session first" in h for h in heard) and any("no session" in h for h in heard)
    assert heard[-1] == "closed 1009"  # message too big: that connection is closed, nothing else
    assert rows == run(NOISE, env=KNOWN_ANSWER_ID, n_episodes=200, batch_size=4, seed=7, device="cpu")[0]


def test_a_dropped_connection_is_retried_and_the_run_stays_exact():
    """A network blip mid-run: the client reconnects, resumes its session, repeats the unanswered request
    (answered from the server's cache, not run twice), and every episode keeps its in-process numbers."""
    import time

    from tests.serve_helpers import DroppingProxy

    with ServerProcess(NOISE) as server:
        proxy = DroppingProxy(server.port)
        try:
            spec = EvalSpec(env=KNOWN_ANSWER_ID, policy=connect_remote(f"ws://127.0.0.1:{proxy.port}"), n_episodes=300,
                            batch_size=4, seed=7, device="cpu")
            results = {}
            with Engine(spec) as engine:
                worker = threading.Thread(target=lambda: results.setdefault("result", engine.run()))
                worker.start()
                start = proxy.forwarded
                while proxy.forwarded < start + 20_000 and worker.is_alive():
                    time.sleep(0.01)
                drops = 0
                for _ in range(2):  # twice, at two points of the run
                    if worker.is_alive():
                        proxy.drop()
                        drops += 1
                        time.sleep(0.3)
                worker.join(300)
        finally:
            proxy.close()
    assert drops >= 1, "the run ended before the proxy could drop it: make it longer"
    assert results["result"].meta["policy_reconnects"] >= 1
    rows = [(r["episode_ix"], r["seed"], r["sum_reward"], r["length"], r["success"]) for r in results["result"].per_episode]
    assert rows == run(NOISE, env=KNOWN_ANSWER_ID, n_episodes=300, batch_size=4, seed=7, device="cpu")[0]
