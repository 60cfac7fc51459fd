"""Loaders for the worker's connections: a value that Python cannot decode fails one job.

psycopg decodes a whole result set at once, so one undecodable value in a claimed row (a row
written by hand: JSON nested deeper than Python's recursion limit, a number with more digits than
``int()`` accepts, an infinite timestamp) would fail the claim that already committed, and every
job in that batch would sit claimed and unrun until its lease expired, again and again. With
these loaders the value decodes to a marker instead: JSON to
:class:`~pgqueue.rules.payload.UndecodableJson` (the executor dead-letters that job with the
reason),
``±infinity`` timestamps to ``datetime.max`` / ``datetime.min`` (UTC).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg import abc
from psycopg.abc import AdaptContext, Buffer
from psycopg.adapt import Loader
from psycopg.pq import Format

from pgqueue.rules.payload import UndecodableJson


def _json_fallback(data: bytes, exc: Exception) -> Any:
    return UndecodableJson(f"{type(exc).__name__}: {str(exc)[:200]}")


def _timestamp_fallback(data: bytes, exc: Exception) -> Any:
    if data == b"infinity":
        return datetime.max.replace(tzinfo=UTC)
    if data == b"-infinity":
        return datetime.min.replace(tzinfo=UTC)
    raise exc


def _forgiving(type_name: str, fallback: Any) -> tuple[int, type[Loader]]:
    """A loader wrapping the one psycopg would use (C or Python) that falls back on errors.
    (The C loaders cannot be subclassed, so it delegates.)"""
    oid = psycopg.adapters.types[type_name].oid
    found = psycopg.adapters.get_loader(oid, Format.TEXT)
    assert found is not None
    base: type[abc.Loader] = found

    class Forgiving(Loader):
        def __init__(self, oid: int, context: AdaptContext | None = None) -> None:
            super().__init__(oid, context)
            self.inner = base(oid, context)

        def load(self, data: Buffer) -> Any:
            try:
                return self.inner.load(data)
            except Exception as exc:  # DataError, ValueError, RecursionError: one value
                return fallback(bytes(data), exc)

    return oid, Forgiving


# The stdlib decoder called directly: psycopg's jsonb loader goes through json.loads (type checks,
# encoding detection of the bytes) and the forgiving wrapper added a call on top, 1.5-2 us a job
# for small args; this is about 0.5 us. PostgreSQL writes jsonb as one value with nothing around
# it, so raw_decode reads all of it.
_raw_decode = json.JSONDecoder().raw_decode


class _JsonbLoader(Loader):
    def load(self, data: Buffer) -> Any:
        try:
            return _raw_decode(str(data, "utf-8"))[0]
        except Exception as exc:  # RecursionError, ValueError (too many digits): one value
            return _json_fallback(bytes(data), exc)


_LOADERS: list[tuple[int, type[Loader]]] = [
    (psycopg.adapters.types["jsonb"].oid, _JsonbLoader),
    _forgiving("timestamptz", _timestamp_fallback),
]


def register(context: AdaptContext) -> None:
    """Use the forgiving loaders on a connection (the worker pool's ``configure`` hook)."""
    for oid, loader in _LOADERS:
        context.adapters.register_loader(oid, loader)
