"""``fasteval serve --max-inflight-mb``: the bytes held for requests are bounded across all connections.

The accounting and its pause/resume rules against fake connections (deterministic), then a real server
process: eight clients sending 44 MB each at once, with a 48 MB bound, all answered (they queue), and the
server's peak memory grows by about the bound plus one message, not by eight messages."""

from __future__ import annotations

import re
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("websockets")
pytest.importorskip("msgpack")

from fasteval.doors.serve_budget import SMALL_BYTES, InflightBudget, wire_size  # noqa: E402
from fasteval.types.wire import pack  # noqa: E402
from tests.serve_helpers import ServerProcess  # noqa: E402

MB = 1024 * 1024


class FakeTransport:
    def __init__(self) -> None:
        self.reading = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


class FakeConnection:
    def __init__(self, name: str) -> None:
        from websockets.protocol import State

        self.name, self.transport = name, FakeTransport()
        self.protocol = type("P", (), {"state": State.OPEN})()

    def __repr__(self) -> str:
        return self.name


def test_wire_size_is_payload_plus_the_frame_header():
    assert wire_size(b"x" * 10) == 10 + 6 and wire_size(b"x" * 200) == 200 + 8 and wire_size(b"x" * 70000) == 70000 + 14
    assert wire_size("é") == 2 + 6


def test_past_the_bound_connections_wait_and_resume_oldest_first():
    budget = InflightBudget(10 * MB)
    a, b, c = (FakeConnection(n) for n in "abc")
    for conn in (a, b, c):
        budget.join(conn)
    budget.received(a, 6 * MB)
    budget.received(b, 3 * MB)
    assert a.transport.reading and b.transport.reading and budget.used == 9 * MB
    size_a = budget.delivered(a, b"x" * (6 * MB - 14))  # a's message is whole: in flight until answered
    assert size_a == 6 * MB and budget.used == 9 * MB
    budget.received(c, 2 * MB)  # 11 MB > 10: c waits (a's answer will free memory)
    budget.received(b, 1 * MB)
    assert not c.transport.reading and not b.transport.reading and list(budget.paused) == [c, b]
    budget.answered(a, size_a)  # 6 MB free: both read again
    assert c.transport.reading and b.transport.reading and budget.used == 6 * MB and not budget.paused
    assert budget.peak == 12 * MB


def test_when_nothing_is_in_flight_one_connection_finishes_its_message_past_the_bound():
    """Every request incomplete and over the bound: waiting could free nothing, so one finishes (no stall)."""
    budget = InflightBudget(10 * MB)
    a, b = FakeConnection("a"), FakeConnection("b")
    budget.join(a), budget.join(b)
    budget.received(a, 6 * MB)
    budget.received(b, 5 * MB)  # 11 MB, nothing in flight: b is the finisher
    assert b.transport.reading and budget.finisher is b
    budget.received(a, 1 * MB)  # a waits for b
    assert not a.transport.reading
    budget.received(b, 3 * MB)
    size = budget.delivered(b, b"x" * (8 * MB - 14))
    assert budget.finisher is None and not a.transport.reading
    budget.answered(b, size)
    assert a.transport.reading and budget.used == 7 * MB


def test_small_traffic_and_closing_connections_are_never_paused():
    from websockets.protocol import State

    budget = InflightBudget(1 * MB)
    big, small, closing = FakeConnection("big"), FakeConnection("small"), FakeConnection("closing")
    for conn in (big, small, closing):
        budget.join(conn)
    budget.received(big, 2 * MB)  # finisher: nothing in flight
    budget.delivered(big, b"x" * (2 * MB - 14))
    budget.received(small, SMALL_BYTES)  # a step request, a ping: reads on
    closing.protocol.state = State.CLOSING
    budget.received(closing, 2 * MB)  # its close handshake must get through
    assert small.transport.reading and closing.transport.reading
    budget.leave(big)  # a closed connection frees all it held
    assert budget.used == SMALL_BYTES + 2 * MB


def _peak_kib(pid: int) -> int:
    return int(re.search(r"VmHWM:\s+(\d+)", Path(f"/proc/{pid}/status").read_text()).group(1))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the server's peak memory from /proc")
def test_concurrent_large_requests_queue_within_the_bound():
    """Eight 44 MB requests at once. Unbounded, the server held them together (+290 to +350 MB peak here);
    with --max-inflight-mb 48 they queue: every one is answered, the peak grows by about 48 + 44 MB (the
    bound and one message) plus one decoding copy, and the server says once that connections wait."""
    from websockets.sync.client import connect

    payload = pack({"observation": np.zeros(44 * MB // 4, np.float32)})  # not CartPole's shape: refused
    with ServerProcess("zero", "--env", "CartPole-v1", "--max-message-mb", "48", "--max-inflight-mb", "48") as server:
        before = _peak_kib(server.proc.pid)
        replies: list[object] = []

        def client() -> None:
            with connect(server.url, compression=None, max_size=None, open_timeout=60) as ws:
                ws.recv()
                ws.send(payload)
                replies.append(ws.recv(timeout=120))

        threads = [threading.Thread(target=client) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(300)
        grew_mb = (_peak_kib(server.proc.pid) - before) / 1024
        server.stop()
    assert len(replies) == 8 and all(isinstance(r, str) and "must be a numeric array" in r for r in replies), replies
    assert grew_mb < 2 * (48 + 44), f"the server's peak memory grew by {grew_mb:.0f} MB"
    assert "over --max-inflight-mb 48" in "".join(server.stderr)
