"""openpi's protocol: fasteval serve batches openpi requests dynamically; openpi+ws:// clients; interop
with openpi-client's own WebsocketClientPolicy (in its own environment: scripts/openpi_client_env.sh)."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
import torch

pytest.importorskip("websockets")
pytest.importorskip("msgpack")

from fasteval.robot.policies.checkpoint import load_checkpoint  # noqa: E402
from fasteval.testing import KNOWN_ANSWER_ID  # noqa: E402
from fasteval.types.wire import pack, unpack  # noqa: E402
from tests.serve_helpers import REPO, ServerProcess, repo_env  # noqa: E402
from tests.test_serve import CHUNKS, MLP, run  # noqa: E402

OBS = np.array([[0.01, -0.2, 0.03, 0.4], [0.1, 0.5, -0.05, -0.3], [-0.02, 0.0, 0.2, 0.1]], dtype=np.float32)


def local_actions(obs: np.ndarray) -> list[int]:
    policy = load_checkpoint(MLP).eval()
    with torch.inference_mode():
        return policy(torch.from_numpy(obs)).tolist()  # the checkpoint's argmax head: actions


@pytest.fixture(scope="module")
def mlp_server():
    with ServerProcess(MLP, "--env", "CartPole-v1", "--max-batch", "8", "--max-wait-ms", "300") as server:
        yield server.url


def test_concurrent_requests_are_batched_and_padded(mlp_server):
    """Three clients, one request in flight each: one policy call on a batch of 3 padded to 4, each reply its row's."""
    from websockets.sync.client import connect

    sockets = [connect(mlp_server, compression=None).__enter__() for _ in OBS]  # (the context form)
    try:
        metadata = [unpack(ws.recv()) for ws in sockets][0]
        assert metadata["openpi"] and metadata["max_batch"] == 8
        for ws, row in zip(sockets, OBS):
            ws.send(pack({"observation": row}))
        replies = [unpack(ws.recv()) for ws in sockets]
    finally:
        for ws in sockets:
            ws.close()
    assert [r["actions"].shape for r in replies] == [(1,)] * 3  # openpi's [H, *action]: a chunk of one
    assert [int(r["actions"][0]) for r in replies] == local_actions(OBS)
    assert {(r["server_timing"]["batch_size"], r["server_timing"]["padded_to"]) for r in replies} == {(3, 4)}


def test_one_connection_may_pipeline_its_requests(mlp_server):
    """Requests sent before the earlier replies came back are all answered, in order."""
    from websockets.sync.client import connect

    with connect(mlp_server, compression=None) as ws:
        ws.recv()
        for row in OBS:
            ws.send(pack({"observation": row}))
        assert [int(unpack(ws.recv())["actions"][0]) for _ in OBS] == local_actions(OBS)


def test_openpi_client_runs_equal_in_process(mlp_server):
    from fasteval.robot.policies.remote import connect_remote

    remote_rows, _s, result = run(connect_remote(f"openpi+{mlp_server}"), env="CartPole-v1", n_episodes=5, batch_size=3,
                                  seed=2, device="cpu", max_steps=40)
    local_rows, _l, _ = run(MLP, env="CartPole-v1", n_episodes=5, batch_size=3, seed=2, device="cpu", max_steps=40)
    assert remote_rows == local_rows and result.meta["policy_protocol"] == "openpi"


def test_openpi_chunks_are_played_as_the_in_process_queue_plays_them():
    from fasteval.robot.policies.remote import connect_remote

    with ServerProcess(CHUNKS, "--env", KNOWN_ANSWER_ID) as server:
        remote_rows, _s, _ = run(connect_remote(f"openpi+{server.url}"), env=KNOWN_ANSWER_ID, n_episodes=20,
                                 batch_size=4, seed=3, device="cpu")
    local_rows, _l, _ = run(CHUNKS, env=KNOWN_ANSWER_ID, n_episodes=20, batch_size=4, seed=3, device="cpu")
    assert remote_rows == local_rows


def test_bad_openpi_request_is_refused_and_the_server_goes_on(mlp_server):
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    with connect(mlp_server, compression=None) as ws:
        ws.recv()
        ws.send(pack({"observation": np.zeros(7, np.float32)}))  # the wrong shape
        text = ws.recv()
        assert isinstance(text, str) and "must be a numeric array of shape (4,)" in text
        with pytest.raises(ConnectionClosed):
            ws.recv()
    with connect(mlp_server, compression=None) as ws:
        ws.recv()
        ws.send(pack({"observation": OBS[0]}))
        assert int(unpack(ws.recv())["actions"][0]) == local_actions(OBS[:1])[0]


OPENPI_SCRIPT = r"""
import json, sys
import numpy as np
from openpi_client import msgpack_numpy
from openpi_client.websocket_client_policy import WebsocketClientPolicy

url, rows = sys.argv[1], json.loads(sys.argv[2])
policy = WebsocketClientPolicy(url)
meta = policy.get_server_metadata()
actions = [policy.infer({"observation": np.asarray(r, dtype=np.float32)})["actions"].tolist() for r in rows]
sample = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "s": np.int64(3), "t": "x"}
print(json.dumps({"meta_protocol": meta["fasteval_protocol"], "actions": actions,
                  "packed": msgpack_numpy.packb(sample).hex()}))
"""


@pytest.fixture(scope="module")
def openpi_python():
    try:
        out = subprocess.run(["bash", str(REPO / "scripts" / "openpi_client_env.sh")], capture_output=True, text=True,
                             timeout=900)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"no openpi-client environment ({exc})")
    if out.returncode != 0:
        pytest.skip(f"no openpi-client environment (scripts/openpi_client_env.sh exit {out.returncode}: "
                    f"{out.stderr.strip()[-300:]})")
    return out.stdout.strip().splitlines()[-1]


def test_openpi_clients_websocket_policy_gets_the_local_actions(mlp_server, openpi_python):
    out = subprocess.run([openpi_python, "-c", OPENPI_SCRIPT, mlp_server, json.dumps(OBS.tolist())],
                         capture_output=True, text=True, timeout=300,
                         env={k: v for k, v in repo_env().items() if k != "PYTHONPATH"})
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["meta_protocol"] == "fasteval/1"
    assert [a[0] for a in got["actions"]] == local_actions(OBS)
    sample = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "s": np.int64(3), "t": "x"}
    assert bytes.fromhex(got["packed"]) == pack(sample)  # openpi-client's encoder and fasteval's: the same bytes


def test_a_server_without_env_says_what_is_missing_to_the_client_and_on_its_log():
    """openpi requests need the spaces: without --env the reply and the server's log both name --env."""
    from websockets.sync.client import connect

    with ServerProcess("zero") as server:
        with connect(server.url, compression=None) as ws:
            ws.recv()
            ws.send(pack({"observation": OBS[0]}))
            text = ws.recv()
        server.stop()
    assert isinstance(text, str) and "--env is missing" in text.splitlines()[0], text
    assert "refused an openpi request: --env is missing" in "".join(server.stderr)


def test_refusals_have_one_shape_per_protocol(mlp_server):
    """openpi's shape (a text frame, then the close) for every connection that has not spoken fasteval's
    protocol, also when its first message is not msgpack at all; fasteval's error map for a fasteval kind."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    from fasteval.types.wire import KIND

    heard = {}
    for name, payload in [("garbage", b"\xc1\xc1"), ("text", "a text frame"), ("openpi", pack({"observation": 1})),
                          ("fasteval", pack({KIND: "exec"}))]:
        with connect(mlp_server, compression=None) as ws:
            ws.recv()
            ws.send(payload)
            heard[name] = ws.recv()
            with pytest.raises(ConnectionClosed):
                ws.recv()
    assert all(isinstance(heard[k], str) and heard[k].startswith("fasteval serve: bad request:")
               for k in ("garbage", "text", "openpi")), heard
    assert isinstance(heard["fasteval"], bytes) and unpack(heard["fasteval"])["kind"] == "protocol"


def test_openpi_clients_hear_what_a_server_without_env_misses(openpi_python):
    script = ("import sys, numpy as np\nfrom openpi_client.websocket_client_policy import WebsocketClientPolicy\n"
              "try:\n    WebsocketClientPolicy(sys.argv[1]).infer({'observation': np.zeros(4, np.float32)})\n"
              "except RuntimeError as exc:\n    print(repr(str(exc)))\n")
    with ServerProcess("zero") as server:
        out = subprocess.run([openpi_python, "-c", script, server.url], capture_output=True, text=True, timeout=300,
                             env={k: v for k, v in repo_env().items() if k != "PYTHONPATH"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert "--env is missing" in out.stdout and "fasteval serve POLICY --env ENV" in out.stdout, out.stdout


def test_an_ipv6_host_is_printed_in_brackets():
    from fasteval.doors.serve import server_url

    assert server_url("::1", 8000) == "ws://[::1]:8000" and server_url("127.0.0.1", 1) == "ws://127.0.0.1:1"
    assert server_url("localhost", 2) == "ws://localhost:2"
    with ServerProcess("zero", "--host", "::1") as server:
        assert server.url.startswith("ws://[::1]:"), server.url
        from websockets.sync.client import connect

        with connect(server.url, compression=None) as ws:  # the printed address is one a client can use
            assert unpack(ws.recv())["server"] == "fasteval serve"
