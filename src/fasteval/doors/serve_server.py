"""The websocket server of ``fasteval serve``: connections, authentication, and one compute thread.

Every connection first gets the server's metadata (openpi's handshake). Its first message decides
how it talks:

* a map with ``"__fasteval__"``: fasteval's batched protocol (:mod:`fasteval.doors.serve_sessions`);
* any other map: openpi's protocol, one observation per request, batched with every other openpi
  client's by :class:`~fasteval.doors.serve_batcher.DynamicBatcher`. openpi ``"__ctrl__"`` messages
  are acknowledged as openpi's own server does.

With ``batch_sessions_ms`` (``--batch-sessions``), the ``step`` requests of fasteval sessions that can share a
call are gathered across connections and run as one (:mod:`fasteval.doors.serve_merge`).

A connection may send its next requests before the replies of the earlier ones came back; replies
go out in request order. All policy work runs on one compute thread (in arrival order), so sessions
never run concurrently and each session's RNG swap is safe; the event loop only moves bytes.

Safety:

* with a token (``--token``, required for a non-local bind), the websocket handshake must carry
  ``Authorization: Api-Key TOKEN`` (openpi-client's ``api_key``) or ``Bearer TOKEN``; anything else
  is answered ``401`` before a websocket exists;
* messages over ``max_message_bytes`` close that connection (websocket close code 1009); a message
  that is not valid msgpack, names an unknown kind, or breaks the protocol gets an error reply and
  the connection is closed (1008); nothing a client sends reaches pickle or runs code;
* the bytes held for requests across all connections (as read, decoded, and replied) are bounded
  (``max_inflight_bytes``, :mod:`fasteval.doors.serve_budget`): past the bound, connections stop reading
  their large requests until answered requests free memory (their clients' sends wait; nothing is refused);
* errors have one shape per protocol: on a fasteval connection an ``error`` map (``kind`` ``protocol`` or
  ``policy``, the request's ``seq``); on any other connection openpi's own, a text frame and then the
  close (openpi-client raises ``RuntimeError("Error in inference server:\n" + text)`` on a text frame),
  also when the first message is not even valid msgpack;
* an exception of the policy is reported to the client that made the request, naming it; the
  server and the other clients go on. A session whose connection drops is kept ``session_ttl_s``
  seconds, so the client can reconnect and resume it.
"""

from __future__ import annotations

import asyncio
import hmac
import http
import logging
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from time import monotonic
from typing import Any, Callable

from fasteval.doors.serve_batcher import DynamicBatcher
from fasteval.doors.serve_budget import DEFAULT_MAX_INFLIGHT_MB, MB, InflightBudget, budgeted_connection, held_bytes
from fasteval.doors.serve_merge import SessionMerger
from fasteval.doors.serve_policy import RunnerOptions, ServedRunner
from fasteval.doors.serve_sessions import Session
from fasteval.types.wire import KIND, PROTOCOL, WireError, message_kind, pack, space_to_wire, unpack

logger = logging.getLogger(__name__)
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


@dataclass(frozen=True)
class ServerConfig:
    options: RunnerOptions
    host: str = "127.0.0.1"
    port: int = 8000
    token: str | None = None
    max_batch: int = 16
    max_wait_ms: float = 2.0
    max_message_bytes: int = 256 * 1024 * 1024
    max_inflight_bytes: int = int(DEFAULT_MAX_INFLIGHT_MB * MB)
    """Bytes held for requests (as read, decoded and replied) across all connections, at most (plus one message:
    see serve_budget)."""
    session_ttl_s: float = 300.0
    openpi_spaces: tuple[Any, Any] | None = None
    """(observation space, action space) for openpi requests (from ``--env``); None: openpi refused."""
    threaded_compute: bool = False
    """Run every step on the compute thread too (not only the slow work: loading, dry runs)."""
    batch_sessions_ms: float | None = None
    """Cross-session batching of fasteval's protocol (:mod:`fasteval.doors.serve_merge`): the longest wait, in
    ms, for the other sessions' requests; None: each session's step is its own call."""


def authorized(header: str | None, token: str | None) -> bool:
    """Whether an ``Authorization`` header carries ``token`` (any header when there is no token)."""
    if token is None:
        return True
    if not header:
        return False
    scheme, _, value = header.partition(" ")
    return scheme in ("Api-Key", "Bearer") and hmac.compare_digest(value.strip().encode(), token.encode())


def one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return text[0] if text else type(exc).__name__


class PolicyServer:
    def __init__(self, config: ServerConfig):
        self.config = config
        self.compute = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fasteval-serve-compute")
        self.sessions: dict[str, Session] = {}
        self.batcher: DynamicBatcher | None = None
        self.port: int | None = None
        self.lock = asyncio.Lock()
        self.budget = InflightBudget(config.max_inflight_bytes, reserve_bytes=config.max_message_bytes)
        self.merger: SessionMerger | None = None
        if config.batch_sessions_ms is not None:
            self.merger = SessionMerger(config.batch_sessions_ms, self.on_compute, lambda: list(self.sessions.values()))

    def metadata(self) -> dict[str, Any]:
        from fasteval.version import __version__

        meta: dict[str, Any] = {"fasteval_protocol": PROTOCOL, "server": "fasteval serve", "fasteval_version": __version__,
                                "policy": self.config.options.policy, "max_batch": self.config.max_batch,
                                "max_wait_ms": self.config.max_wait_ms, "openpi": self.config.openpi_spaces is not None,
                                "batch_sessions_ms": self.config.batch_sessions_ms}
        if self.config.openpi_spaces is not None:
            meta["observation_space"] = space_to_wire(self.config.openpi_spaces[0])
            meta["action_space"] = space_to_wire(self.config.openpi_spaces[1])
        return meta

    async def on_compute(self, fn: Callable[..., Any], *args: Any, slow: bool = False) -> Any:
        """Run policy work, one piece at a time (a lock). A step runs inline, on the event loop's thread
        (a hop to a worker thread costs two thread switches per request); ``slow`` work (loading a
        policy, a dry run, a first batch) runs on the compute thread, so that the loop keeps accepting
        connections and reading requests meanwhile (``threaded_compute``: everything there)."""
        async with self.lock:
            if not (slow or self.config.threaded_compute):
                return fn(*args)
            return await asyncio.get_running_loop().run_in_executor(self.compute, fn, *args)

    # -- the websocket server -----------------------------------------------------------------
    def _process_request(self, connection: Any, request: Any) -> Any:
        if request.path == "/healthz":
            return connection.respond(http.HTTPStatus.OK, "OK\n")
        if not authorized(request.headers.get("Authorization"), self.config.token):
            return connection.respond(http.HTTPStatus.UNAUTHORIZED,
                                      "fasteval serve: this server needs its token (Authorization: Api-Key TOKEN)\n")
        return None

    async def serve(self, ready: Callable[[int], None] | None = None, stop: asyncio.Future | None = None) -> None:
        from websockets.asyncio.server import serve

        if self.config.openpi_spaces is not None:
            self.batcher = DynamicBatcher(self._make_openpi_runner, self.config.openpi_spaces[0], self.config.max_batch,
                                          self.config.max_wait_ms / 1000.0, self.on_compute)
            self.batcher.start()
        reaper = asyncio.get_running_loop().create_task(self._reap_sessions())
        async with serve(self._handle, self.config.host, self.config.port, compression=None,
                         max_size=self.config.max_message_bytes, process_request=self._process_request,
                         ping_interval=None, max_queue=None,  # the budget pauses reading, not the frame queue
                         create_connection=budgeted_connection(self.budget)) as server:
            self.port = next(iter(server.sockets)).getsockname()[1]
            if ready is not None:
                ready(self.port)
            await (stop if stop is not None else asyncio.get_running_loop().create_future())
        reaper.cancel()
        if self.batcher is not None:
            await self.batcher.stop()
        self.compute.shutdown(wait=False, cancel_futures=True)

    def _make_openpi_runner(self, size: int) -> ServedRunner:
        observation_space, action_space = self.config.openpi_spaces
        return ServedRunner(self.config.options, observation_space, action_space, size)

    async def _reap_sessions(self) -> None:
        while True:
            await asyncio.sleep(min(10.0, self.config.session_ttl_s))
            now = monotonic()
            for sid in [s for s, session in self.sessions.items()
                        if session.detached_at is not None and now - session.detached_at > self.config.session_ttl_s]:
                self.sessions.pop(sid, None)

    async def _handle(self, ws: Any) -> None:
        import websockets

        if self.batcher is not None:
            self.batcher.connections += 1
        await ws.send(pack(self.metadata()))
        replies: asyncio.Queue = asyncio.Queue()
        writer = asyncio.get_running_loop().create_task(self._write(ws, replies, self.budget))
        state = _ConnectionState()
        try:
            async for raw in ws:
                size = self.budget.delivered(ws, raw)  # held until its reply is sent
                try:
                    message = unpack(raw, self.config.max_message_bytes)
                    size = self.budget.swap(ws, size, held_bytes(message))  # now held as its decoded copy
                    kind = message_kind(message)
                    if state.mode is None:
                        state.mode = "openpi" if kind is None else "fasteval"
                        if state.mode == "fasteval" and self.batcher is not None:
                            self.batcher.connections -= 1  # counted as a possible openpi client until now
                    elif (kind is None) != (state.mode == "openpi"):
                        raise WireError(f"this connection speaks the {state.mode} protocol; one connection cannot mix both")
                except WireError as exc:
                    await replies.put((_done(_refusal(state, exc, raw)), size))
                    break
                raw = None  # the decoded copy is what the request holds now (a refusal above still read raw)
                await replies.put((self._dispatch(state, kind, message), size))
                message = None  # the dispatched request holds it until answered; this loop must not, until the next
        except websockets.ConnectionClosed:
            pass
        finally:
            if state.mode != "fasteval" and self.batcher is not None:
                self.batcher.connections -= 1
            await replies.put(None)
            await writer
            if state.session is not None:
                state.session.detached_at = monotonic()

    def _dispatch(self, state: "_ConnectionState", kind: str | None, message: dict) -> "asyncio.Future[Any]":
        loop = asyncio.get_running_loop()
        if kind is None:
            if "__ctrl__" in message:
                return _done(pack({"__ack__": str(message.get("__ctrl__"))}))
            if self.batcher is None:
                logger.warning("fasteval serve: refused an openpi request: %s", NO_ENV)
                return _done(_refusal(state, WireError(NO_ENV)))
            return loop.create_task(self._openpi(message))
        return loop.create_task(self._fasteval(state, kind, message))

    async def _openpi(self, message: dict) -> Any:
        try:
            return pack(await self.batcher.infer(message))
        except WireError as exc:
            return _Close(f"fasteval serve: bad request: {exc}", 1008)
        except Exception as exc:  # the policy raised: openpi's convention is a text frame, then close
            logger.warning("openpi request failed: %s", one_line(exc))
            return _Close(f"fasteval serve: the policy raised on this request: {one_line(exc)}\n"
                          f"{traceback.format_exc(limit=4)}", 1011)

    async def _fasteval(self, state: "_ConnectionState", kind: str, message: dict) -> Any:
        seq = message.get("seq")
        try:
            key = state.session.merge_key(message) if (kind == "step" and self.merger is not None
                                                      and state.session is not None) else None
            if key is not None:  # shared with other sessions' requests (serve_merge)
                reply = await self.merger.submit(state.session, key, message)
            else:
                reply = await self.on_compute(self._fasteval_compute, state, kind, message, slow=kind != "step")
        except WireError as exc:
            return _Close(pack({KIND: "error", "seq": seq, "kind": "protocol", "error": str(exc)}), 1008)
        except Exception as exc:  # the policy (or its loading) raised: reported to this client only
            what = f"{kind} request" + (f" #{seq} (group {message.get('group')})" if kind == "step" else "")
            logger.warning("%s failed: %s", what, one_line(exc))
            return pack({KIND: "error", "seq": seq, "kind": "policy", "request": what,
                         "user_input": isinstance(exc, ValueError), "error": one_line(exc)})
        return pack(reply)

    def _fasteval_compute(self, state: "_ConnectionState", kind: str, message: dict) -> dict:
        if kind == "open":
            resume = message.get("resume")
            if resume is not None:
                session = self.sessions.get(resume) if isinstance(resume, str) else None
                if session is None:
                    raise WireError(f"open: no session {resume!r} on this server (it restarted, or the session "
                                    f"expired after {self.config.session_ttl_s:.0f} s)")
                session.detached_at = None
                state.session = session
                return session.opened(resumed=True)
            session = Session(self.config.options, message)
            self.sessions[session.id] = state.session = session
            return session.opened()
        session = state.session
        if session is None:
            raise WireError(f"{kind}: open a session first")
        if kind == "dry_run":
            reply = session.dry_run(message)
            if self.merger is not None:
                reply["facts"]["batch_sessions"] = session.plan_merges()
            return reply
        if kind == "step":
            return session.step(message)
        self.sessions.pop(session.id, None)  # close
        state.session = None
        return {KIND: "closed"}

    @staticmethod
    async def _write(ws: Any, replies: asyncio.Queue, budget: InflightBudget) -> None:
        import websockets

        while True:
            item = await replies.get()
            if item is None:
                return
            future, size = item
            item = None
            try:
                reply = await future
                future = None  # a finished task holds its result: the reply is held (and counted) below only
                if isinstance(reply, _Close):
                    await ws.send(reply.payload)
                    await ws.close(reply.code, "fasteval serve: request refused")
                    return
                size += budget.hold(ws, len(reply))  # the packed reply, until it is sent
                await ws.send(reply)
                reply = None
            except websockets.ConnectionClosed:
                return
            finally:
                budget.answered(ws, size)  # the connection's close frees the rest


@dataclass
class _ConnectionState:
    mode: str | None = None
    session: Session | None = None


@dataclass
class _Close:
    """A last reply, after which the server closes the connection with ``code``."""

    payload: Any
    code: int


NO_ENV = ("--env is missing: this server was started without --env, so it does not know the observation and action "
          "spaces openpi requests need. Restart it with `fasteval serve POLICY --env ENV` (the env the client runs), or "
          "evaluate with fasteval's protocol (--policy ws://HOST:PORT), whose clients send their spaces.")


def _refusal(state: _ConnectionState, exc: WireError, raw: Any = None) -> _Close:
    """The last reply to a message that breaks the protocol, in the connection's shape (see the module
    docstring): an error map for fasteval's protocol (a first message that names a fasteval kind counts),
    openpi's text frame otherwise."""
    fasteval = state.mode == "fasteval" or (state.mode is None and _names_fasteval(raw))
    if fasteval:
        return _Close(pack({KIND: "error", "kind": "protocol", "error": str(exc)}), 1008)
    return _Close(f"fasteval serve: bad request: {exc}", 1008)


def _names_fasteval(raw: Any) -> bool:
    """Whether an undecoded first message is a map with fasteval's kind key (its kind may still be wrong)."""
    try:
        message = unpack(raw)
    except Exception:
        return False
    return isinstance(message, dict) and KIND in message


def _done(value: Any) -> "asyncio.Future[Any]":
    future = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future
