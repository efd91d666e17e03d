"""The bytes a ``fasteval serve`` holds for its clients, bounded across all connections (``--max-inflight-mb``).

``--max-message-mb`` caps one message; without a total, N clients sending large requests at once make the
server hold N of them (three 200 MB requests took one from 232 MB to 913 MB). :class:`InflightBudget`
counts every byte a connection has read from its socket until the request it belongs to is answered:

* bytes received but not yet a whole message (the websocket library's buffers), per connection;
* each whole message from the moment the server reads it until its reply is sent (or the connection
  closes).

When the total passes the bound, a connection that receives more stops reading from its socket (asyncio's
``pause_reading``): its client's sends wait in TCP (a queue, not an error), and it reads again, oldest
first, as answered requests free their bytes. So that a server whose requests are all incomplete cannot
stall, one connection (the *finisher*) may finish its message past the bound when nothing else is in
flight. Small traffic is never paused: a connection that holds at most :data:`SMALL_BYTES` (a close
frame, a ping, most step requests) or is closing reads on, so that a connection cannot stall its own close
handshake. The server so holds at most the bound plus one message (``--max-inflight-mb`` +
``--max-message-mb``), plus :data:`SMALL_BYTES` and one socket read (256 KiB) per connection. The first
time a connection waits, the server logs it, with the figures.

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


def wire_size(payload: bytes | str) -> int:
    """Bytes a client-to-server websocket message of ``payload`` takes on the wire, sent as one frame:
    2 header bytes, the extended length (2 bytes from 126, 8 from 65536), the 4-byte mask, the payload."""
    n = len(payload.encode()) if isinstance(payload, str) else len(payload)
    return n + 2 + 4 + (0 if n < 126 else 2 if n < 65536 else 8)


class InflightBudget:
    """Bytes held for requests, across connections (see the module docstring). Not thread-safe: every call
    comes from the server's event loop (asyncio protocol callbacks and connection handlers)."""

    def __init__(self, limit_bytes: int):
        if limit_bytes < 1:
            raise ValueError(f"limit_bytes: expected >= 1, got {limit_bytes}")
        self.limit = int(limit_bytes)
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
        if self.used <= self.limit or conn is self.finisher or not self._may_pause(conn):
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

    def _may_pause(self, conn: Any) -> bool:
        if self.partial[conn] + self.inflight[conn] <= SMALL_BYTES:
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
        while self.paused and self.used <= self.limit:
            self.paused.popleft().transport.resume_reading()
        if self.paused and self.finisher is None and not self._answers_pending():
            self.finisher = self.paused.popleft()  # nothing in flight: let the oldest finish its message
            self.finisher.transport.resume_reading()


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
