"""A policy that lives on a server: ``--policy ws://HOST:PORT`` and ``--policy openpi+ws://HOST:PORT``.

* ``ws://`` / ``wss://``: a ``fasteval serve`` server, in fasteval's batched protocol
  (:class:`~fasteval.robot.policies.remote_runner.RemoteRunner`): one request per step per slot
  group, resets and seeds forwarded, all per-slot state on the server;
* ``openpi+ws://`` / ``openpi+wss://``: any server of openpi's protocol (openpi's own, or ``fasteval
  serve --env ...``; :class:`~fasteval.robot.policies.remote_runner.OpenpiRunner`): one request per
  slot that needs actions, sent together, each answered with a chunk the slot then plays.

The token, when the server has one, comes from ``$FASTEVAL_SERVE_TOKEN`` (never from the URL: the URL
is written into manifests). A server that cannot be reached when the engine is built is a
:class:`~fasteval.types.errors.PolicyLoadError` (the CLI's exit 2). A connection that drops later is
retried with backoff for up to ``policy_timeout_s`` (:data:`DEFAULT_TIMEOUT_S` when unset); after that,
or when the server lost the run's session, :class:`PolicyServerLost` stops the run (finished episodes
are kept; ``fasteval --resume`` reruns the rest from their seeds).

:class:`RemotePolicy` is an ``nn.Module`` without weights, for two facts the engine reads from a
module: it runs on the CPU (the client sends host arrays; the policy device is the server's), and its
``state_dict`` holds the server's digest of the served weights (what resume compares).
"""

from __future__ import annotations

import os
import time
import weakref
from typing import Any, Callable
from urllib.parse import urlsplit

import torch
from torch import nn

from fasteval.types.errors import PolicyError, PolicyLoadError, UserInputError

SCHEMES = {"ws": "fasteval", "wss": "fasteval", "openpi+ws": "openpi", "openpi+wss": "openpi"}
TOKEN_ENV = "FASTEVAL_SERVE_TOKEN"
DEFAULT_TIMEOUT_S = 30.0
"""How long a dropped connection is retried when the spec sets no ``policy_timeout_s``."""
CONNECT_TIMEOUT_S = 30.0
LOAD_TIMEOUT_S = 900.0
"""How long opening a session (the server loads the policy) and its dry run may take at least."""
BACKOFF_S = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0)


class PolicyServerLost(PolicyError):
    """The policy server stayed unreachable past the timeout, or lost this run's session."""

    resumable = True
    """The CLI prints the resume command: the finished episodes are kept, the rest rerun from their seeds."""


class RemotePolicyError(PolicyError):
    """The server's policy raised on a request (one line, naming the request)."""


def is_remote_ref(ref: Any) -> bool:
    return isinstance(ref, str) and ref.split("://", 1)[0] in SCHEMES and "://" in ref


def parse_remote_ref(ref: str) -> tuple[str, str]:
    """``(protocol, websocket url)`` of a ``ws://`` / ``openpi+ws://`` reference. Raises UserInputError."""
    scheme, _, rest = ref.partition("://")
    protocol = SCHEMES.get(scheme)
    url = f"{scheme.split('+')[-1]}://{rest}"
    expected = "expected ws://HOST:PORT or openpi+ws://HOST:PORT (with a port from 1 to 65535; an IPv6 host in brackets, ws://[::1]:8000)"
    try:
        parts = urlsplit(url)
        port = parts.port  # raises for a port out of range or not a number
    except ValueError as exc:
        raise UserInputError(f"policy {ref!r}: {exc}; {expected}.") from None
    if protocol is None or not parts.hostname or port is None or port == 0:
        raise UserInputError(f"policy {ref!r}: {expected}.")
    if parts.query and "token" in parts.query:
        raise UserInputError(f"policy {ref!r}: do not put the token in the URL (it is written into the run's manifest); "
                             f"set ${TOKEN_ENV} instead.")
    return protocol, url


class Connection:
    """A synchronous websocket to the server that reconnects with backoff (see the module docstring)."""

    def __init__(self, url: str, token: str | None, max_bytes: int):
        self.url, self.token, self.max_bytes = url, token, max_bytes
        self.ws: Any = None
        self.metadata: dict[str, Any] = {}
        self.timeout_s = DEFAULT_TIMEOUT_S
        self.on_reconnect: Callable[[], None] | None = None
        self.reconnects = 0
        """Connections re-established after a drop (reported in the run's meta)."""

    def connect(self) -> dict[str, Any]:
        """Open the websocket and read the server's metadata. Raises ConnectionError (with a reason)."""
        from websockets.exceptions import InvalidStatus, WebSocketException
        from websockets.sync.client import connect

        from fasteval.types.wire import unpack

        headers = {"Authorization": f"Api-Key {self.token}"} if self.token else None
        try:
            self.ws = connect(self.url, compression=None, max_size=self.max_bytes, additional_headers=headers,
                              open_timeout=CONNECT_TIMEOUT_S, ping_interval=None).__enter__()  # (the context form)
            self.metadata = unpack(self.ws.recv(timeout=CONNECT_TIMEOUT_S), self.max_bytes)
        except InvalidStatus as exc:
            code = exc.response.status_code
            hint = f" (it needs the server's token: set ${TOKEN_ENV})" if code == 401 else ""
            raise ConnectionRefusedError(f"the server refused the connection: HTTP {code}{hint}") from None
        except (OSError, TimeoutError, WebSocketException) as exc:
            raise ConnectionError(f"{type(exc).__name__}: {exc}") from None
        if not isinstance(self.metadata, dict):
            raise ConnectionError("the server's first message is not a metadata map (is it a policy server?)")
        return self.metadata

    def send(self, data: bytes) -> None:
        self.ws.send(data)

    def recv(self, timeout_s: float | None = None) -> Any:
        return self.ws.recv(timeout=timeout_s or self.timeout_s)

    def exchange(self, requests: list[bytes], timeout_s: float | None = None) -> list[Any]:
        """Send ``requests`` (all before the first reply), return their replies in order; reconnects and
        sends them again when the connection drops (the server answers a repeated request from its cache).
        ``timeout_s``: how long a reply may take (default: :attr:`timeout_s`)."""
        from websockets.exceptions import ConnectionClosed

        deadline = time.monotonic() + self.timeout_s
        attempt = 0
        while True:
            try:
                for data in requests:
                    self.send(data)
                return [self.recv(timeout_s) for _ in requests]
            except (ConnectionClosed, OSError, TimeoutError) as exc:
                if isinstance(exc, ConnectionClosed) and exc.rcvd is not None and exc.rcvd.code in (1008, 1009, 1011):
                    raise RemotePolicyError(f"policy server {self.url} closed the connection: {exc.rcvd.reason or exc}") from None
                attempt = self._reconnect(deadline, attempt, exc)

    def _reconnect(self, deadline: float, attempt: int, cause: BaseException) -> int:
        from websockets.exceptions import ConnectionClosed

        while True:
            if time.monotonic() >= deadline:
                raise PolicyServerLost(
                    f"policy server {self.url} dropped the connection ({type(cause).__name__}) and could not be reached "
                    f"again within {self.timeout_s:g} s (--policy-timeout)") from None
            time.sleep(BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)])
            attempt += 1
            try:
                self.close()
                self.connect()
                if self.on_reconnect is not None:
                    self.on_reconnect()
                self.reconnects += 1
            except (ConnectionError, ConnectionClosed, OSError, TimeoutError) as exc:
                cause = exc
                continue
            return attempt

    def close(self) -> None:
        if self.ws is not None:
            try:
                self.ws.close()
            except Exception:
                pass
            self.ws = None


class RemotePolicy(nn.Module):
    """A served policy, seen from the client (see the module docstring). Built by :func:`connect_remote`;
    :func:`fasteval.robot.policies.runner.build_policy_runner` gives it a
    :func:`~fasteval.robot.policies.remote_runner.build_remote_runner` runner."""

    def __init__(self, ref: str, protocol: str, connection: Connection):
        super().__init__()
        self.ref, self.protocol, self.connection = ref, protocol, connection
        self._anchor = nn.Parameter(torch.empty(0), requires_grad=False)  # on the CPU: the client's device
        self.register_buffer("server_digest", torch.zeros(0, dtype=torch.uint8))
        self.server_facts: dict[str, Any] = {}
        weakref.finalize(self, connection.close)

    def set_digest(self, digest: str) -> None:
        self.server_digest = torch.frombuffer(bytearray(digest.encode()), dtype=torch.uint8).clone()

    def forward(self, obs: Any) -> torch.Tensor:
        raise PolicyError("a RemotePolicy is called through its runner (build_policy_runner), not directly")

    def run_meta(self) -> dict[str, Any]:
        return {"policy_server": self.ref, "policy_protocol": self.protocol, "policy_reconnects": self.connection.reconnects,
                **{f"server_{k}": v for k, v in self.server_facts.items()}}


def connect_remote(ref: str, max_bytes: int | None = None) -> RemotePolicy:
    """Connect to the server of ``ref``; a server that is down is a PolicyLoadError (exit 2), one line."""
    try:
        import msgpack  # noqa: F401
        import websockets  # noqa: F401
    except ImportError as exc:
        raise PolicyLoadError(f"policy {ref!r}: a served policy needs the serve extra ({exc.name} is missing): "
                              f"./scripts/install.sh serve.") from None
    from fasteval.types.wire import DEFAULT_MAX_MESSAGE_BYTES

    protocol, url = parse_remote_ref(ref)
    connection = Connection(url, os.environ.get(TOKEN_ENV) or None, max_bytes or DEFAULT_MAX_MESSAGE_BYTES)
    try:
        connection.connect()
    except ConnectionError as exc:
        raise PolicyLoadError(f"policy server {ref} is not reachable: {exc}. Start it with `fasteval serve POLICY "
                              f"--port {urlsplit(url).port}`, or check the address.") from None
    return RemotePolicy(ref, protocol, connection)
