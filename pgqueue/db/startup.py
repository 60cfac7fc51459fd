"""The check before work starts: can this DSN connect, and is its pgqueue schema the one this
pgqueue needs? One connection and two statements, once per client (its first pooled
connection), worker, reaper or dashboard; never per enqueue.

A connection the server rejects for good raises
:class:`~pgqueue.errors.DatabaseRejectedError`, a server down or unreachable
:class:`~pgqueue.errors.DatabaseUnavailableError` (after waiting up to ``wait`` seconds while
it refuses connections: :mod:`pgqueue.db.refusals`), a schema missing, behind or ahead
:class:`~pgqueue.errors.SchemaVersionError` (:mod:`pgqueue.db.schema_check`).
"""

from __future__ import annotations

from typing import Any

import psycopg

from pgqueue.db import plan as plans
from pgqueue.db import refusals, schema_check
from pgqueue.db.connect_errors import connection_error

#: How long one connection attempt may take.
CONNECT_TIMEOUT = 10


# sync-twin: async source
async def check_database_async(dsn: str, *, wait: float = 0.0) -> str:
    """Connect to ``dsn`` and check its schema (see the module docstring); the revision."""

    async def connect() -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(
            dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT
        )

    try:
        conn = await refusals.connect_when_accepted_async(connect, wait)
    except psycopg.OperationalError as exc:
        raise connection_error(exc, dsn) from exc
    async with conn:
        return await plans.run_async(schema_check.check(), conn)


# sync-twin: generated from the async source above by `make sync-twins`; do not edit


def check_database(dsn: str, *, wait: float = 0.0) -> str:
    """Connect to ``dsn`` and check its schema (see the module docstring); the revision."""

    def connect() -> psycopg.Connection[Any]:
        return psycopg.Connection.connect(dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT)

    try:
        conn = refusals.connect_when_accepted(connect, wait)
    except psycopg.OperationalError as exc:
        raise connection_error(exc, dsn) from exc
    with conn:
        return plans.run(schema_check.check(), conn)


# sync-twin: end
