"""A failure to connect, said as what it is: for good (the database does not exist, the password
or the role is wrong) or for now (the server is down, unreachable, or refusing connections).

libpq gives no SQLSTATE for a failed connection, only the server's text, so the kind is read
from that text. Rejections end start-up at once (``pgq work`` exits non-zero within seconds);
anything else is an outage, which workers wait out as before (:mod:`pgqueue.db.refusals`).
The errors name the server and the database the DSN points at, never its password.
"""

from __future__ import annotations

import os

import psycopg
from psycopg.conninfo import conninfo_to_dict

from pgqueue.db.refusals import refusal
from pgqueue.errors import (
    DatabaseConnectionError,
    DatabaseRejectedError,
    DatabaseUnavailableError,
)

# (what the server says, the problem in our words, what to check)
_REJECTIONS = (
    (
        ("database", "does not exist"),
        "the database does not exist",
        "create it (createdb, or CREATE DATABASE), or fix the database name in the DSN",
    ),
    (
        ("role", "does not exist"),
        "the role does not exist",
        "create it (CREATE ROLE ... LOGIN), or fix the user name in the DSN",
    ),
    (
        ("password authentication failed",),
        "password authentication failed",
        "check the DSN's user and password (or PGPASSWORD, ~/.pgpass)",
    ),
    (
        ("no password supplied",),
        "the server asks for a password and the DSN has none",
        "add the password to the DSN (or PGPASSWORD, ~/.pgpass)",
    ),
    (
        ("authentication failed",),
        "authentication failed",
        "check the DSN's user and credentials against the server's pg_hba.conf",
    ),
    (
        ("no pg_hba.conf entry",),
        "the server's pg_hba.conf does not let this user connect from here",
        "ask the server's administrator to add an entry, or connect as another user",
    ),
    (
        ("is not permitted to log in",),
        "the role may not log in",
        "ALTER ROLE ... LOGIN, or connect as another user",
    ),
    (
        ("permission denied for database",),
        "the role may not connect to this database",
        "GRANT CONNECT ON DATABASE ... TO the role, or connect as another user",
    ),
    (
        ("invalid connection option",),
        "the DSN has an option libpq does not know",
        "fix the DSN (see libpq's connection parameters)",
    ),
)


def rejection(exc: BaseException) -> tuple[str, str] | None:
    """``(problem, hint)`` when ``exc`` is a connection the server refused for good."""
    text = str(exc)
    for markers, problem, hint in _REJECTIONS:
        if all(marker in text for marker in markers):
            return problem, hint
    return None


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
