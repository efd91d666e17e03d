"""The wire format: openpi-client's msgpack_numpy encoding byte for byte, and what it refuses."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

msgpack = pytest.importorskip("msgpack")

from fasteval.types.wire import (  # noqa: E402
    KIND, WireError, message_kind, pack, space_from_wire, space_to_wire, unpack,
)


def openpi_bytes(obj):
    """openpi-client's msgpack_numpy.packb, written from its documented format (arrays as maps with
    bytes keys __ndarray__, data, dtype, shape in that order; scalars as __npgeneric__, data, dtype)."""
    def default(o):
        if isinstance(o, np.ndarray):
            return {b"__ndarray__": True, b"data": o.tobytes(), b"dtype": o.dtype.str, b"shape": o.shape}
        if isinstance(o, np.generic):
            return {b"__npgeneric__": True, b"data": o.item(), b"dtype": o.dtype.str}
        raise TypeError(type(o))
    return msgpack.packb(obj, default=default)


ARRAYS = [np.arange(12, dtype=np.float32).reshape(3, 4), np.zeros((2, 0, 3), np.uint8), np.array(7, np.int64),
          np.asfortranarray(np.arange(6, dtype=np.float64).reshape(2, 3)), np.array([True, False]),
          np.arange(5, dtype=">i4")]


@pytest.mark.parametrize("array", ARRAYS, ids=lambda a: f"{a.dtype.str}{a.shape}")
def test_arrays_round_trip_in_openpis_bytes(array):
    message = {"actions": array, "nested": [array, {"x": np.float32(1.5)}], "s": "text", "b": b"raw"}
    data = pack(message)
    assert data == openpi_bytes(message)
    back = unpack(data)
    assert back["actions"].dtype == array.dtype and back["actions"].shape == array.shape
    np.testing.assert_array_equal(back["actions"], array)
    assert back["nested"][1]["x"] == np.float32(1.5) and isinstance(back["nested"][1]["x"], np.float32)
    assert back["s"] == "text" and back["b"] == b"raw"
    assert not back["actions"].flags.writeable  # a view of the message: copy before writing


@pytest.mark.parametrize("bad", [np.array([object()]), np.zeros(2, dtype=[("a", "i4")]), np.zeros(2, np.complex64)],
                         ids=["object", "structured", "complex"])
def test_refused_dtypes_are_not_packed(bad):
    with pytest.raises(WireError, match="refused"):
        pack({"x": bad})


def forged(dtype="<f4", shape=(2,), data=b"\x00" * 8):
    return msgpack.packb({"x": {b"__ndarray__": True, b"data": data, b"dtype": dtype, b"shape": list(shape)}})


@pytest.mark.parametrize("data,match", [
    (forged(dtype="|O"), "refused"),
    (forged(dtype="|V8"), "refused"),
    (forged(dtype="not-a-dtype"), "unknown array dtype"),
    (forged(data=b"\x00" * 7), "needs 8 bytes"),
    (forged(shape=(-1,)), "integers >= 0"),
    (b"\xc1", "not a valid msgpack"),
    (msgpack.packb({"a": 1}) + b"\x00", "not a valid msgpack"),
    ("text frame", "text frame"),
], ids=["object", "void", "unknown", "short", "negative", "garbage", "trailing", "text"])
def test_bad_messages_are_refused(data, match):
    with pytest.raises(WireError, match=match):
        unpack(data)


def test_size_limit_is_checked_before_parsing():
    data = pack({"x": np.zeros(1000, np.float64)})
    assert unpack(data, max_bytes=len(data))["x"].shape == (1000,)
    with pytest.raises(WireError, match="over the limit"):
        unpack(data, max_bytes=len(data) - 1)


def test_message_kinds():
    assert message_kind({"observation": 1}) is None  # an openpi observation
    assert message_kind({KIND: "step"}) == "step"
    with pytest.raises(WireError, match="unknown message kind 'exec'"):
        message_kind({KIND: "exec"})
    with pytest.raises(WireError, match="expected a map"):
        message_kind([1, 2])


SPACES = [
    gym.spaces.Box(-1.0, 2.0, (3,), np.float32),
    gym.spaces.Box(0, 255, (4, 4, 3), np.uint8),
    gym.spaces.Discrete(5, start=2),
    gym.spaces.MultiDiscrete([3, 4]),
    gym.spaces.MultiBinary(6),
    gym.spaces.Dict({"pixels": gym.spaces.Box(0, 255, (2, 2, 3), np.uint8),
                     "agent_pos": gym.spaces.Box(-np.inf, np.inf, (2,), np.float64)}),
]


@pytest.mark.parametrize("space", SPACES, ids=lambda s: type(s).__name__)
def test_spaces_cross_as_data(space):
    back = space_from_wire(unpack(pack(space_to_wire(space))))
    assert back == space
    if isinstance(space, gym.spaces.Dict):
        assert list(back.spaces) == list(space.spaces)  # key order kept


def test_unknown_spaces_are_refused():
    with pytest.raises(WireError, match="cannot be served"):
        space_to_wire(gym.spaces.Tuple([gym.spaces.Discrete(2)]))
    with pytest.raises(WireError, match="unknown space type"):
        space_from_wire({"type": "Graph"})
