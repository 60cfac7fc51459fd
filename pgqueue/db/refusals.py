"""PostgreSQL refusing new connections: ``max_connections`` or a role's ``CONNECTION LIMIT``
reached, a server starting up, shutting down or in recovery; and rejecting them for good (no
such database or role, failed authentication: :func:`rejection`), which is never waited for.

Such a refusal passes: connections close, the server finishes starting. So producers and
workers wait for it with backoff rather than fail, and say so in one line that names the
cause. A pool hides the cause (after its timeout it says only that it got no connection), so
the pools' connections remember the last failure to connect (:class:`ConnectFailures`) and
errors are explained with it (:meth:`ConnectFailures.explain`). A pool also backs off ever
longer between attempts, so its connections retry quickly themselves (:class:`_QuickRetries`):
after a failover or a restart the pool is back within about a second of the database.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg
from psycopg_pool import PoolTimeout

from pgqueue.rules.log_actions import Action, fields

log = logging.getLogger("pgqueue.db")
T = TypeVar("T")

# What the server says (libpq passes no SQLSTATE for a refused connection, only the text).
_REFUSALS = (
    ("too many connections for role", "the role's CONNECTION LIMIT is reached"),
    ("too many clients already", "max_connections is reached"),
    ("remaining connection slots are reserved", "max_connections is reached"),
    ("the database system is starting up", "the server is starting up"),
    ("the database system is shutting down", "the server is shutting down"),
    ("the database system is in recovery mode", "the server is recovering from a crash"),
    ("the database system is not yet accepting connections", "the server is starting up"),
    ("the database system is not accepting connections", "the server refuses connections"),
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


#: How long a remembered failure explains a pool timeout.
_RECENT = 120.0


def refusal(exc: BaseException) -> str | None:
    """Why PostgreSQL refused a connection, if ``exc`` is such a refusal (else None)."""
    text = str(exc)
    for marker, cause in _REFUSALS:
        if marker in text:
            return f"PostgreSQL refuses new connections: {cause} ({_server_line(text, marker)})"
    return None


def _server_line(text: str, marker: str) -> str:
    for line in text.splitlines():
        if marker in line:
            start = line.find("FATAL:")
            return (line[start + len("FATAL:") :] if start >= 0 else line).strip()
    return marker


class ConnectFailures:
    """The last failure to open a connection (for errors that hide it: a pool timeout).

    A refusal is also said at once, in one warning per outage (a reminder each minute while it
    lasts), where the pool's own retries are silent: a service waiting for a connection only
    learns of it when its wait times out."""

    def __init__(self, name: str = "pool") -> None:
        self.name = name
        self.last: BaseException | None = None
        self.at = 0.0
        self._said: str | None = None  # the refusal last warned about
        self._said_at = 0.0

    def record(self, exc: BaseException) -> None:
        now = time.monotonic()
        self.last, self.at = exc, now
        cause = refusal(exc)
        if cause is not None and (cause != self._said or now - self._said_at >= 60.0):
            self._said, self._said_at = cause, now
            log.warning(
                "%s; the %s retries with backoff", cause, self.name, extra=fields(Action.DB_REFUSED)
            )

    def clear(self) -> None:
        self.last = None
        if self._said is not None:
            self._said = None
            log.info(
                "PostgreSQL accepts connections again (%s)",
                self.name,
                extra=fields(Action.DB_ACCEPTING),
            )

    def explain(self, exc: BaseException) -> str:
        """``exc`` in one line; a pool timeout with the connection failure behind it."""
        text = " ".join(str(exc).split())
        last = self.last
        recent = time.monotonic() - self.at < _RECENT
        if isinstance(exc, PoolTimeout) and last is not None and recent:
            cause = refusal(last) or " ".join(str(last).split())
            return f"{text}: {cause}"
        return text

    def sync_connection_class(self) -> type[psycopg.Connection[Any]]:
        """A connection class for a pool: it records its failures to connect here, and tries
        again quickly (see :class:`_QuickRetries`) before it lets the pool back off."""
        failures = self

        class Remembering(psycopg.Connection[Any]):
            @classmethod
            def connect(cls, *args: Any, **kwargs: Any) -> Any:
                retries = _QuickRetries()
                while True:
                    try:
                        conn = super().connect(*args, **kwargs)
                    except psycopg.OperationalError as exc:
                        failures.record(exc)
                        time.sleep(retries.failed(exc))
                        continue
                    failures.clear()
                    return conn

        return Remembering

    def async_connection_class(
        self, base: type[psycopg.AsyncConnection[Any]] = psycopg.AsyncConnection
    ) -> type[psycopg.AsyncConnection[Any]]:
        """The async twin of :meth:`sync_connection_class`, a subclass of ``base`` (the
        client's pools: :class:`pgqueue.db.async_wait.LeanWaits`)."""
        failures = self

        class Remembering(base):  # type: ignore[valid-type,misc]
            @classmethod
            async def connect(cls, *args: Any, **kwargs: Any) -> Any:
                retries = _QuickRetries()
                while True:
                    try:
                        conn = await super().connect(*args, **kwargs)
                    except psycopg.OperationalError as exc:
                        failures.record(exc)
                        await asyncio.sleep(retries.failed(exc))
                        continue
                    failures.clear()
                    return conn

        return Remembering


class _QuickRetries:
    """A pool's connection attempt, tried again every 0.1-1 s (full jitter) for up to
    ``window`` seconds before the failure goes to the pool (a rejection for good at once).

    psycopg_pool backs off 1, 2, 4, 8... seconds between attempts: after a failover or a
    restart that took 30 s, its next attempt could come 30 s after the database was back, and
    every enqueue and claim would wait for it. Retrying within the attempt keeps the pool at
    most about a second behind the database (a refused connection costs the server little, and
    the jitter spreads a fleet's attempts)."""

    def __init__(self, window: float = 30.0) -> None:
        self.deadline = time.monotonic() + window
        self.failures = 0

    def failed(self, exc: BaseException) -> float:
        # A connection rejected for good (no such database, a wrong password) goes to the pool
        # at once: retrying cannot help, and a pool closing meanwhile would wait for the retries.
        if time.monotonic() >= self.deadline or rejection(exc) is not None:
            raise exc
        self.failures += 1
        return random.uniform(0.05, min(1.0, 0.1 * 2**self.failures))


class _WaitForAcceptance:
    """The waiting shared by the sync and async connect: full-jitter exponential backoff from
    0.1 s up to 2 s, within ``timeout``; one warning for the wait, one line when it ends."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.failures = 0

    def failed(self, exc: psycopg.OperationalError) -> float:
        """Seconds to wait before the next try; raises ``exc`` unless it is a refusal, or
        once the time is up."""
        cause = refusal(exc)
        remaining = self.deadline - time.monotonic()
        if cause is None or remaining <= 0:
            raise exc
        self.failures += 1
        delay = min(remaining, random.uniform(0.1, min(2.0, 0.1 * 2**self.failures)))
        if self.failures == 1:
            log.warning(
                "%s; waiting up to %.0fs for a connection (retry in %.1fs)",
                cause,
                self.timeout,
                delay,
                extra=fields(Action.DB_REFUSED),
            )
        return delay

    def succeeded(self) -> None:
        if self.failures:
            log.info("PostgreSQL accepts connections again", extra=fields(Action.DB_ACCEPTING))


def connect_when_accepted(connect: Callable[[], T], timeout: float) -> T:
    """``connect()``, tried again with backoff while PostgreSQL refuses connections (one
    warning for the wait), up to ``timeout`` seconds; any other failure is raised at once.
    Returns what ``connect()`` returned."""
    wait = _WaitForAcceptance(timeout)
    while True:
        try:
            conn = connect()
        except psycopg.OperationalError as exc:
            time.sleep(wait.failed(exc))
            continue
        wait.succeeded()
        return conn


async def connect_when_accepted_async(connect: Callable[[], Awaitable[T]], timeout: float) -> T:
    """The async twin of :func:`connect_when_accepted`."""
    wait = _WaitForAcceptance(timeout)
    while True:
        try:
            conn = await connect()
        except psycopg.OperationalError as exc:
            await asyncio.sleep(wait.failed(exc))
            continue
        wait.succeeded()
        return conn
