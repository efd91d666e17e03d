"""The bytes a ``fasteval serve`` holds for its clients, bounded across all connections (``--max-inflight-mb``).

``--max-message-mb`` caps one message; without a total, N clients sending large requests at once make the
server hold N of them (three 200 MB requests took one from 232 MB to 913 MB). :class:`InflightBudget`
counts every byte the server holds for a connection's requests until the request it belongs to is answered:

* bytes received but not yet a whole message (the websocket library's buffers), per connection;
* each whole message from the moment the server reads it until it is decoded, then its decoded copy (the
  arrays msgpack builds; the wire bytes are dropped) until its reply is sent (or the connection closes);
* each reply, from the moment it is packed until it is sent.

Two copies are not held for long but do exist: the websocket library copies a message out of its read
buffer when it is whole, and decoding holds the wire bytes and the arrays together for a moment. One message
at a time does either (both run on the event loop), so connections wait once the held bytes pass the bound
less one message (``--max-inflight-mb`` - ``--max-message-mb``), which keeps that message's room for them.

When the total passes that line, a connection that receives more of a message stops reading from its socket
(asyncio's ``pause_reading``): its client's sends wait in TCP (a queue, not an error), and it reads again,
oldest first, as answered requests free their bytes. So that a server whose requests are all incomplete
cannot stall, one connection (the *finisher*) may finish its message past the line when nothing else is in
flight. Small traffic is never paused: a connection with at most :data:`SMALL_BYTES` of a message still
arriving (a close frame, a ping, most step requests) or that is closing reads on, so that a connection cannot
stall its own close handshake, and a client waiting for its answer keeps answering its keepalive pings
(openpi's client pings every 20 s and drops a connection whose pong is late). A request that fits whole in TCP's
buffers is not covered: its client's next ping queues behind it, and cannot be answered until the request is read
(docs/serving.md says so). The server so holds at most
``--max-inflight-mb`` + ``--max-message-mb``, plus :data:`SMALL_BYTES` and one socket read (256 KiB) per
connection. The first time a connection waits, the server logs it, with the figures.

After a burst (:data:`TRIM_AFTER` bytes freed and the held bytes down to a quarter of their high point) the
server hands freed memory back to the system (glibc's ``malloc_trim``; elsewhere nothing), since the C
allocator keeps freed blocks below 32 MB for reuse and the process would stay at its peak.

Bytes are counted as they arrive on the wire; a message is taken back out by its payload plus its frame
header, so control frames (a client's pings: a few bytes each) stay counted until their connection closes.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

logger = logging.getLogger(__name__)

MB = 1024 * 1024
SMALL_BYTES = 64 * 1024
"""A connection holding at most this many unanswered bytes is never paused."""
DEFAULT_MAX_INFLIGHT_MB = 1024.0
"""``--max-inflight-mb``'s default: four of the largest messages ``--max-message-mb`` allows by default."""
TRIM_AFTER = 8 * MB
"""Bytes freed since the last high point after which the server returns memory to the system."""
TRIM_EVERY_S = 1.0
"""At most one return of memory a second (a burst's end is never missed: a later one is scheduled)."""


def _malloc_trim() -> Any:
    """glibc's ``malloc_trim(0)`` (returns the freed memory of every arena to the system), or None elsewhere.
    Chosen once, at import."""
    import sys

    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):  # musl and other libcs have no malloc_trim
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


MALLOC_TRIM = _malloc_trim()


def held_bytes(obj: Any) -> int:
    """Bytes of the buffers inside a decoded message (arrays, bytes, strings; nested maps and lists); the
    objects' own headers are not counted."""
    import numpy as np

    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    if isinstance(obj, (bytes, bytearray, str)):
        return len(obj)
    if isinstance(obj, dict):
        return sum(held_bytes(k) + held_bytes(v) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return sum(held_bytes(v) for v in obj)
    return 0


def wire_size(payload: bytes | str) -> int:
    """Bytes a client-to-server websocket message of ``payload`` takes on the wire, sent as one frame:
    2 header bytes, the extended length (2 bytes from 126, 8 from 65536), the 4-byte mask, the payload."""
    n = len(payload.encode()) if isinstance(payload, str) else len(payload)
    return n + 2 + 4 + (0 if n < 126 else 2 if n < 65536 else 8)


class InflightBudget:
    """Bytes held for requests, across connections (see the module docstring). Not thread-safe: every call
    comes from the server's event loop (asyncio protocol callbacks and connection handlers)."""

    def __init__(self, limit_bytes: int, reserve_bytes: int = 0):
        if limit_bytes < 1:
            raise ValueError(f"limit_bytes: expected >= 1, got {limit_bytes}")
        self.limit = int(limit_bytes)
        self.line = self.limit - min(max(0, int(reserve_bytes)), self.limit)
        """Past this many held bytes connections wait: the bound less the room of one message's copies."""
        self.high = 0
        """The most bytes held since memory was last returned to the system."""
        self.trims = 0
        """Times freed memory was returned to the system after a burst."""
        self._trim_pending = False
        self._trim_owed = False
        """A trim ran while bytes were still held: one more is due when the held bytes reach zero (what is freed
        after a mid-burst trim can be under :data:`TRIM_AFTER`, and would stay with the process)."""
        self._last_trim = float("-inf")
        self.used = 0
        """Bytes held now: partial messages plus requests not yet answered."""
        self.peak = 0
        """The largest ``used`` seen (for tests and the log)."""
        self.partial: dict[Any, int] = {}
        """Per connection: bytes read from its socket that are not yet a whole message."""
        self.inflight: dict[Any, int] = {}
        """Per connection: bytes of its whole messages not yet answered."""
        self.paused: deque[Any] = deque()
        self.finisher: Any = None
        self.waits = 0
        """Times a connection stopped reading because the bound was reached."""

    # -- the connection's socket side (asyncio protocol callbacks) ------------------------------------
    def join(self, conn: Any) -> None:
        self.partial[conn] = 0
        self.inflight[conn] = 0

    def received(self, conn: Any, n: int) -> None:
        """``n`` bytes arrived on ``conn``'s socket: count them; past the bound, ``conn`` stops reading."""
        if conn not in self.partial:
            return
        self.partial[conn] += n
        self._add(n)
        if self.used <= self.line or conn is self.finisher or not self._may_pause(conn):
            return
        if self.finisher is None and not self._answers_pending():
            self.finisher = conn  # nothing else can free bytes: this one finishes its message past the bound
            return
        self._pause(conn)

    def leave(self, conn: Any) -> None:
        """``conn`` closed: everything it held is free."""
        held = self.partial.pop(conn, 0) + self.inflight.pop(conn, 0)
        if conn in self.paused:
            self.paused.remove(conn)
        if conn is self.finisher:
            self.finisher = None
        self.used -= held
        self._resume()

    # -- the connection's handler side -------------------------------------------------------------------
    def delivered(self, conn: Any, payload: bytes | str) -> int:
        """A whole message of ``conn`` reached the handler: its bytes move from partial to in flight. Returns
        the size to give back to :meth:`answered`."""
        if conn not in self.partial:
            return 0
        size = min(self.partial[conn], wire_size(payload))
        self.partial[conn] -= size
        self.inflight[conn] += size
        if conn is self.finisher:
            self.finisher = None  # its message is whole: from now it waits like the others
        return size

    def swap(self, conn: Any, size: int, now: int) -> int:
        """A message of ``size`` held bytes (from :meth:`delivered`) is now held as ``now`` bytes (its decoded copy,
        the wire bytes dropped). Returns the size to give back to :meth:`answered`."""
        if conn not in self.inflight:
            return 0
        self.inflight[conn] += now - size
        self._add(now - size)
        if now < size:
            self._resume()
        return now

    def hold(self, conn: Any, n: int) -> int:
        """``conn`` holds ``n`` bytes more until :meth:`answered` (a reply waiting to be sent). Returns ``n``, or 0
        for a connection that closed."""
        if conn not in self.inflight or n <= 0:
            return 0
        self.inflight[conn] += n
        self._add(n)
        return n

    def answered(self, conn: Any, size: int) -> None:
        """The reply to a message of ``size`` bytes (from :meth:`delivered`) was sent, or it was dropped."""
        if conn not in self.inflight or size <= 0:
            return
        size = min(size, self.inflight[conn])
        self.inflight[conn] -= size
        self.used -= size
        self._resume()

    # -- inside ---------------------------------------------------------------------------------------------
    def _add(self, n: int) -> None:
        self.used += n
        self.peak = max(self.peak, self.used)
        self.high = max(self.high, self.used)

    def _may_pause(self, conn: Any) -> bool:
        if self.partial[conn] <= SMALL_BYTES:  # its answered-to-be requests do not hold back its pings
            return False
        from websockets.protocol import State

        return conn.protocol.state is State.OPEN

    def _answers_pending(self) -> bool:
        return any(self.inflight.values())

    def _pause(self, conn: Any) -> None:
        if conn in self.paused:
            return
        conn.transport.pause_reading()
        self.paused.append(conn)
        self.waits += 1
        if self.waits == 1:
            logger.warning("fasteval serve: %.0f MB held for requests, over --max-inflight-mb %.0f: connections wait "
                           "(their sends queue in TCP) until answered requests free memory. Raise --max-inflight-mb "
                           "if this machine has the memory. (Said once.)", self.used / MB, self.limit / MB)

    def _resume(self) -> None:
        while self.paused and self.used <= self.line:
            self.paused.popleft().transport.resume_reading()
        if self.paused and self.finisher is None and not self._answers_pending():
            self.finisher = self.paused.popleft()  # nothing in flight: let the oldest finish its message
            self.finisher.transport.resume_reading()
        if self.high - self.used >= TRIM_AFTER and self.used <= self.high // 4:
            self.high = self.used
            self._trim_soon()
        elif self._trim_owed and self.used == 0:  # a trim came mid-burst: the burst's last bytes are returned too
            self._trim_owed = False
            self._trim_soon()

    def _trim_soon(self) -> None:
        """Return freed memory to the system once the current callback is done (and has dropped its references),
        at most once per :data:`TRIM_EVERY_S`."""
        if MALLOC_TRIM is None or self._trim_pending:
            return
        import asyncio

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop (the unit tests): now
            self._trim()
            return
        self._trim_pending = True
        loop.call_later(max(0.0, self._last_trim + TRIM_EVERY_S - loop.time()), self._trim)

    def _trim(self) -> None:
        import asyncio
        import gc

        gc.collect(0)  # a message caught in a young reference cycle would keep its buffers
        MALLOC_TRIM(0)
        self.trims += 1
        self._trim_pending = False
        self._trim_owed = self.used > 0
        try:
            self._last_trim = asyncio.get_running_loop().time()
        except RuntimeError:
            pass


def budgeted_connection(budget: InflightBudget) -> type:
    """A websockets ``ServerConnection`` class (``serve(create_connection=...)``) whose socket bytes
    ``budget`` counts and pauses."""
    from websockets.asyncio.server import ServerConnection

    class BudgetedConnection(ServerConnection):
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            budget.join(self)

        def data_received(self, data: bytes) -> None:
            budget.received(self, len(data))
            super().data_received(data)

        def connection_lost(self, exc: Exception | None) -> None:
            budget.leave(self)
            super().connection_lost(exc)

    return BudgetedConnection
