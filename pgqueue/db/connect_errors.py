"""A failure to connect, said as what it is: for good (the database does not exist, the password
or the role is wrong) or for now (the server is down, unreachable, or refusing connections).

libpq gives no SQLSTATE for a failed connection, only the server's text, so the kind is read
from that text (:func:`~pgqueue.db.refusals.refusal`, :func:`~pgqueue.db.refusals.rejection`).
Rejections end start-up at once (``pgq work`` exits non-zero within seconds); anything else is
an outage, which workers wait out as before (:mod:`pgqueue.db.refusals`).
The errors name the server and the database the DSN points at, never its password.
"""

from __future__ import annotations

import os

import psycopg
from psycopg.conninfo import conninfo_to_dict

from pgqueue.db.refusals import refusal, rejection
from pgqueue.errors import (
    DatabaseConnectionError,
    DatabaseRejectedError,
    DatabaseUnavailableError,
)


def server_of(dsn: str) -> str:
    """Where ``dsn`` connects, for messages: host (or socket directory), port and database,
    with libpq's environment defaults; never the user's password."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.Error:
        params = {}

    def value(key: str, env: str, default: str) -> str:
        return str(params.get(key) or os.environ.get(env) or default)

    host = value("host", "PGHOST", "localhost")
    port = value("port", "PGPORT", "5432")
    user = value("user", "PGUSER", "the current user")
    database = value("dbname", "PGDATABASE", user)
    where = f"{host}:{port}" if not host.startswith("/") else f"socket in {host}, port {port}"
    return f"server {where}, database {database}"


def connection_error(exc: BaseException, dsn: str) -> DatabaseConnectionError:
    """``exc`` (a failure to connect to ``dsn``) as a :class:`DatabaseConnectionError` (its
    cause chained by the caller: ``raise connection_error(exc, dsn) from exc``)."""
    server = server_of(dsn)
    rejected = rejection(exc)
    if rejected is not None:
        problem, hint = rejected
        return DatabaseRejectedError(problem, cause=exc, server=server, hint=hint)
    refused = refusal(exc)
    if refused is not None:
        return DatabaseUnavailableError(
            refused, cause=exc, server=server, hint="it passes; try again shortly"
        )
    text = " ".join(str(exc).split())
    if "resolve host" in text or "translate host name" in text:
        hint = "check the host name in the DSN (and the DNS)"
    else:
        hint = "is the server running, and accepting connections at that address?"
    return DatabaseUnavailableError(
        f"cannot connect to PostgreSQL: {_reason(text)}", cause=exc, server=server, hint=hint
    )


def _reason(text: str) -> str:
    # libpq: 'connection failed: connection to server at "h", port 1 failed: Connection
    # refused Is the server running ...?': the last reason is the one that says what happened.
    reason = text.rsplit(" failed: ", 1)[-1]
    return reason.split(" Is the server running")[0].strip() or text
