"""The wire format between a worker and its child processes (``--pool process``).

Every message is one JSON object in a frame of :class:`multiprocessing.connection.Connection`'s
own format (a 4-byte big-endian signed length, or ``-1`` and an 8-byte length for frames over
2 GiB, then the bytes), so the child uses ``Connection.send_bytes``/``recv_bytes`` on blocking
pipes while the worker parses the same frames from non-blocking reads on its event loop
(:class:`FrameReader`): a slow or half-written message never blocks the loop.

Only JSON crosses: job data is JSON already, and a child must never unpickle anything the
worker did not write itself (nor the worker anything a handler's process wrote).
"""

from __future__ import annotations

import json
import struct
from typing import Any

_SHORT = struct.Struct("!i")
_LONG = struct.Struct("!Q")
_SHORT_MAX = 0x7FFFFFFF


def dumps(message: dict[str, Any]) -> bytes:
    """A message's bytes (the body of its frame: ``Connection.send_bytes`` adds the length)."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()


def encode(message: dict[str, Any]) -> bytes:
    """One message as a whole frame, length first."""
    body = dumps(message)
    if len(body) > _SHORT_MAX:
        return _SHORT.pack(-1) + _LONG.pack(len(body)) + body
    return _SHORT.pack(len(body)) + body


def decode(body: bytes | bytearray) -> dict[str, Any]:
    message = json.loads(body)
    if not isinstance(message, dict):
        raise ValueError(f"a frame must hold a JSON object, got {type(message).__name__}")
    return message


class FrameReader:
    """Splits a byte stream into messages; bytes of an incomplete frame wait for the rest."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        buffer = self._buffer
        buffer += data
        messages: list[dict[str, Any]] = []
        start = 0
        while len(buffer) - start >= _SHORT.size:
            (size,) = _SHORT.unpack_from(buffer, start)
            header = _SHORT.size
            if size == -1:
                if len(buffer) - start < header + _LONG.size:
                    break
                (size,) = _LONG.unpack_from(buffer, start + header)
                header += _LONG.size
            elif size < 0:
                raise ValueError(f"corrupt frame length {size}")
            end = start + header + size
            if len(buffer) < end:
                break
            messages.append(decode(buffer[start + header : end]))
            start = end
        if start:
            del buffer[:start]
        return messages

    @property
    def pending(self) -> int:
        """Bytes of a frame not complete yet."""
        return len(self._buffer)
