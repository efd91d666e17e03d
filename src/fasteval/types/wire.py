"""The wire format of ``fasteval serve``: msgpack with NumPy arrays, never pickle.

Arrays travel in the encoding of openpi-client's ``msgpack_numpy`` (byte for byte the same, so
openpi clients and servers read what fasteval writes, and the other way round):

* an ``np.ndarray`` becomes the map ``{b"__ndarray__": True, b"data": <C-order bytes>,
  b"dtype": dtype.str, b"shape": [...]}`` (keys in that order);
* a NumPy scalar becomes ``{b"__npgeneric__": True, b"data": <Python value>, b"dtype": dtype.str}``;
* everything else is plain msgpack (``use_bin_type=True``: ``bytes`` stay bytes, ``str`` stays str).

Object, void (structured) and complex dtypes are refused both ways: an object array is what
``msgpack-numpy`` falls back to pickle for. Decoding checks every array: a known dtype, a shape of
non-negative integers, and exactly ``prod(shape) * itemsize`` bytes. Decoded arrays are read-only
views of the message (copy them into your own buffers).

:func:`unpack` refuses a message over ``max_bytes`` before it parses anything.

Messages of fasteval's own protocol are maps with the key :data:`KIND` (``"__fasteval__"``) naming
their kind (:data:`CLIENT_KINDS`, :data:`SERVER_KINDS`); a map without it is an openpi observation
(or an openpi ``"__ctrl__"`` message). :func:`message_kind` refuses unknown kinds.

Gymnasium spaces cross as data (:func:`space_to_wire`, :func:`space_from_wire`): ``Box``,
``Discrete``, ``MultiDiscrete``, ``MultiBinary`` and ``Dict`` of those.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import msgpack
import numpy as np

from fasteval.types.errors import FastevalError

DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024 * 1024
"""Largest message either side accepts by default (``fasteval serve --max-message-mb``)."""

KIND = "__fasteval__"
"""The key that names a fasteval message's kind."""
CLIENT_KINDS = frozenset({"open", "dry_run", "step", "close"})
SERVER_KINDS = frozenset({"opened", "checked", "actions", "closed", "error"})
PROTOCOL = "fasteval/1"
"""The protocol version the server's metadata names (``metadata["fasteval_protocol"]``)."""
REFUSED_DTYPE_KINDS = frozenset("VOc")


class WireError(FastevalError, ValueError):
    """A message that is not valid on the wire (too big, not msgpack, a refused dtype, an unknown kind)."""


def _encode(obj: Any) -> Any:
    if isinstance(obj, (np.ndarray, np.generic)) and obj.dtype.kind in REFUSED_DTYPE_KINDS:
        raise WireError(f"arrays of dtype {obj.dtype} cannot be sent (object, structured and complex dtypes "
                        f"are refused: msgpack only, never pickle). Convert to a numeric dtype.")
    if isinstance(obj, np.ndarray):
        return {b"__ndarray__": True, b"data": obj.tobytes(), b"dtype": obj.dtype.str, b"shape": obj.shape}
    if isinstance(obj, np.generic):
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    raise TypeError(f"cannot send an object of type {type(obj).__name__} (msgpack types and NumPy arrays only)")


def _dtype(raw: Any) -> np.dtype:
    if not isinstance(raw, str):
        raise WireError(f"an array's dtype must be a string, got {type(raw).__name__}")
    try:
        dtype = np.dtype(raw)
    except TypeError:
        raise WireError(f"unknown array dtype {raw!r}") from None
    if dtype.kind in REFUSED_DTYPE_KINDS or dtype.hasobject:
        raise WireError(f"array dtype {raw!r} is refused (object, structured and complex dtypes never decode)")
    return dtype


def _decode(obj: dict) -> Any:
    if b"__ndarray__" in obj:
        dtype, shape, data = _dtype(obj.get(b"dtype")), obj.get(b"shape"), obj.get(b"data")
        if not isinstance(shape, (list, tuple)) or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                                                           for n in shape):
            raise WireError(f"an array's shape must be a list of integers >= 0, got {shape!r}")
        if not isinstance(data, bytes):
            raise WireError(f"an array's data must be bytes, got {type(data).__name__}")
        expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if len(data) != expected:
            raise WireError(f"an array of shape {tuple(shape)} and dtype {dtype.str} needs {expected} bytes; the "
                            f"message has {len(data)}")
        return np.frombuffer(data, dtype=dtype).reshape(shape)
    if b"__npgeneric__" in obj:
        dtype = _dtype(obj.get(b"dtype"))
        try:
            return dtype.type(obj.get(b"data"))
        except (TypeError, ValueError, OverflowError) as exc:
            raise WireError(f"bad NumPy scalar of dtype {dtype.str}: {exc}") from None
    return obj


def pack(obj: Any) -> bytes:
    """``obj`` (msgpack types, NumPy arrays and scalars) as bytes, in openpi-client's encoding."""
    try:
        return msgpack.packb(obj, default=_encode, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        if isinstance(exc, WireError):
            raise
        raise WireError(str(exc)) from None


def unpack(data: Any, max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> Any:
    """The object in ``data`` (bytes). Raises :class:`WireError` for anything that is not a valid message."""
    if isinstance(data, str):
        raise WireError("expected a binary msgpack message, got a text frame")
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise WireError(f"expected bytes, got {type(data).__name__}")
    if len(data) > max_bytes:
        raise WireError(f"message of {len(data)} bytes is over the limit of {max_bytes} bytes")
    try:
        return msgpack.unpackb(bytes(data), object_hook=_decode, raw=False, strict_map_key=False)
    except WireError:
        raise
    except Exception as exc:  # msgpack's ExtraData, FormatError, StackError, ValueError, ...
        raise WireError(f"not a valid msgpack message ({type(exc).__name__}: {exc})") from None


def message_kind(message: Any, allowed: frozenset[str] = CLIENT_KINDS) -> str | None:
    """The kind of a fasteval message, ``None`` for an openpi message (a map without :data:`KIND`).

    Raises :class:`WireError` if ``message`` is not a map or names a kind not in ``allowed``.
    """
    if not isinstance(message, dict):
        raise WireError(f"expected a map (msgpack dict), got {type(message).__name__}")
    kind = message.get(KIND)
    if kind is None:
        return None
    if kind not in allowed:
        raise WireError(f"unknown message kind {kind!r}; expected one of {', '.join(sorted(allowed))}")
    return kind


def field(message: dict, name: str, types: type | tuple[type, ...], what: str) -> Any:
    """``message[name]``, checked to be of ``types`` (a bool is never taken for an int); raises
    :class:`WireError` naming the field and ``what`` was expected."""
    value = message.get(name)
    allowed = types if isinstance(types, tuple) else (types,)
    if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
        raise WireError(f"{message.get(KIND, 'message')}: field {name!r} must be {what}, got {type(value).__name__}")
    return value


# -- spaces as data ------------------------------------------------------------------------------

def space_to_wire(space: gym.Space) -> dict[str, Any]:
    """A gymnasium space as msgpack data (see :func:`space_from_wire`)."""
    if isinstance(space, gym.spaces.Box):
        return {"type": "Box", "low": np.asarray(space.low), "high": np.asarray(space.high), "dtype": np.dtype(space.dtype).str}
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": np.asarray(space.nvec), "dtype": np.dtype(space.dtype).str}
    if isinstance(space, gym.spaces.MultiBinary):
        return {"type": "MultiBinary", "n": np.asarray(space.n).tolist()}
    if isinstance(space, gym.spaces.Dict):
        return {"type": "Dict", "spaces": [[key, space_to_wire(sub)] for key, sub in space.spaces.items()]}
    raise WireError(f"the space {space} cannot be served: fasteval serve knows Box, Discrete, MultiDiscrete, "
                    f"MultiBinary and Dict of those")


def space_from_wire(data: Any) -> gym.Space:
    """The gymnasium space of :func:`space_to_wire`'s data. Raises :class:`WireError` for anything else."""
    if not isinstance(data, dict):
        raise WireError(f"a space must be a map, got {type(data).__name__}")
    kind = data.get("type")
    try:
        if kind == "Box":
            return gym.spaces.Box(np.asarray(data["low"]), np.asarray(data["high"]), dtype=_dtype(data["dtype"]))
        if kind == "Discrete":
            return gym.spaces.Discrete(int(data["n"]), start=int(data.get("start", 0)))
        if kind == "MultiDiscrete":
            return gym.spaces.MultiDiscrete(np.asarray(data["nvec"]), dtype=_dtype(data["dtype"]))
        if kind == "MultiBinary":
            return gym.spaces.MultiBinary(data["n"])
        if kind == "Dict":
            return gym.spaces.Dict({str(key): space_from_wire(sub) for key, sub in data["spaces"]})
    except WireError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise WireError(f"bad {kind} space: {type(exc).__name__}: {exc}") from None
    raise WireError(f"unknown space type {kind!r}; expected Box, Discrete, MultiDiscrete, MultiBinary or Dict")
