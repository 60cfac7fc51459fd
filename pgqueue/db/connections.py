"""The connections callers hand to ``conn=``, and how pgqueue joins their transactions.

Applications hold a psycopg connection, a SQLAlchemy ``Session``/``Connection`` (sync or async,
psycopg dialect) or Django's connection (psycopg 3 backend). :func:`sync_driver` and
:func:`async_driver` unwrap each to the psycopg connection underneath, without importing either
framework (an object is recognised by where its class comes from and imported only then), and
refuse everything else with an error that names what is accepted.

Transactions: pgqueue never begins or commits a transaction on a caller's connection. Its
statements join the caller's transaction (psycopg opens it implicitly on a non-autocommit
connection), and anything that must be all-or-nothing runs in a savepoint inside it
(:func:`atomic` / :func:`atomic_async`). The one trap: psycopg's ``conn.transaction()`` on an
*idle* non-autocommit connection is ``BEGIN ... COMMIT``, not a savepoint, which would commit the
caller's transaction behind its back (the first statement inside Django's ``atomic()``, a
SQLAlchemy session before its first flush). There the transaction is opened first with a
statement of its own, so the block becomes a savepoint in it.

The one exception is a handler's ``ctx.transaction(conn=...)``: there the block *is* the
transaction (the job completes if and only if it commits), so :func:`own_transaction` /
:func:`own_transaction_async` begin it with the framework's own call (``session.begin()``,
Django's ``atomic()``), and commit or roll it back when the block ends; a connection already in
a transaction is refused, since committing it would commit what the block did not write.

Each sync function here that has an async twin is generated from it (``make sync-twins``: the
``# sync-twin:`` marks); edit the async one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeAlias, TypeVar

import psycopg
from psycopg.pq import TransactionStatus

from pgqueue.db.queries import query
from pgqueue.errors import UnsupportedConnectionError

#: What ``conn=`` takes in the sync API: a psycopg ``Connection``, a SQLAlchemy ``Session`` or
#: ``Connection`` (psycopg dialect), or Django's connection; checked at run time (``object``,
#: so that neither framework is needed to type-check a caller).
ConnectionArg: TypeAlias = object
#: What ``conn=`` takes in the async API: a psycopg ``AsyncConnection``, or a SQLAlchemy
#: ``AsyncSession`` or ``AsyncConnection`` (psycopg dialect).
AsyncConnectionArg: TypeAlias = object

ACCEPTED = (
    "a psycopg (3) Connection, a SQLAlchemy Session or Connection on the psycopg dialect, "
    "or Django's connection (psycopg 3 backend)"
)
ACCEPTED_ASYNC = (
    "a psycopg (3) AsyncConnection, or a SQLAlchemy AsyncSession or AsyncConnection on the "
    "psycopg dialect"
)


def sync_driver(conn: object) -> psycopg.Connection[Any]:
    """The psycopg connection behind ``conn`` (for the sync API)."""
    if isinstance(conn, psycopg.Connection):
        return _open(conn)
    if isinstance(conn, psycopg.AsyncConnection):
        raise UnsupportedConnectionError(
            "conn is a psycopg AsyncConnection: use the async method (..._async), or pass "
            f"{ACCEPTED}"
        )
    origin = _origin(conn)
    if origin == "sqlalchemy":
        return _open(_from_sqlalchemy(conn))
    if origin == "django":
        return _open(_from_django(conn))
    raise UnsupportedConnectionError(f"conn must be {ACCEPTED}; got {_describe(conn)}")


async def async_driver(conn: object) -> psycopg.AsyncConnection[Any]:
    """The psycopg async connection behind ``conn`` (for the async API)."""
    if isinstance(conn, psycopg.AsyncConnection):
        return _open(conn)
    if isinstance(conn, psycopg.Connection):
        raise UnsupportedConnectionError(
            f"conn is a sync psycopg Connection: use the sync method, or pass {ACCEPTED_ASYNC}"
        )
    origin = _origin(conn)
    if origin == "sqlalchemy":
        return _open(await _from_sqlalchemy_async(conn))
    if origin == "django":
        raise UnsupportedConnectionError(
            "Django's connection is synchronous: call the sync method (from async code, "
            "through asgiref's sync_to_async, as Django's own ORM calls are)"
        )
    raise UnsupportedConnectionError(f"conn must be {ACCEPTED_ASYNC}; got {_describe(conn)}")


# sync-twin: async source
@asynccontextmanager
async def atomic_async(conn: psycopg.AsyncConnection[Any]) -> AsyncIterator[None]:
    """All-or-nothing inside whatever transaction ``conn`` is in (see the module docstring):
    a savepoint in the caller's transaction, or a transaction of its own on an idle autocommit
    connection. An error inside rolls back to the savepoint, so the caller's transaction is
    neither committed nor aborted."""
    if _must_open(conn):
        await conn.execute(query("open_transaction"))
    async with conn.transaction():
        yield


# sync-twin: generated from the async source above by `make sync-twins`; do not edit


@contextmanager
def atomic(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """All-or-nothing inside whatever transaction ``conn`` is in (see the module docstring):
    a savepoint in the caller's transaction, or a transaction of its own on an idle autocommit
    connection. An error inside rolls back to the savepoint, so the caller's transaction is
    neither committed nor aborted."""
    if _must_open(conn):
        conn.execute(query("open_transaction"))
    with conn.transaction():
        yield


# sync-twin: end


def _must_open(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """An idle non-autocommit connection: the caller's transaction has not started yet, so
    ``conn.transaction()`` would be an outer BEGIN ... COMMIT rather than a savepoint."""
    return not conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE


C = TypeVar("C", psycopg.Connection[Any], psycopg.AsyncConnection[Any])


@dataclass(frozen=True, slots=True)
class Owned(Generic[C]):
    """A transaction :func:`own_transaction` began: the psycopg connection it runs on, and what
    sends the framework's pending writes before the block's last statement (a SQLAlchemy
    session's ``flush``; None where every write is sent at once)."""

    driver: C
    flush: Callable[[], Any] | None = None


_IN_TRANSACTION = (
    "conn is already in a transaction: ctx.transaction(conn=...) begins the transaction it "
    "commits, and would commit what came before; commit or roll back first"
)


@contextmanager
def _own_django(conn: object) -> Iterator[Owned[psycopg.Connection[Any]]]:
    """:func:`own_transaction` on Django's connection (sync only): ``atomic(durable=True)``."""
    from django.db import transaction

    driver = sync_driver(conn)
    if getattr(conn, "in_atomic_block", False) or not driver.autocommit:
        raise UnsupportedConnectionError(_IN_TRANSACTION)
    with transaction.atomic(using=getattr(conn, "alias", None), durable=True):
        yield Owned(sync_driver(conn))


# sync-twin: async source
@asynccontextmanager
async def own_transaction_async(
    conn: object,
) -> AsyncIterator[Owned[psycopg.AsyncConnection[Any]]]:
    """A transaction of its own on ``conn`` (any connection :func:`async_driver` accepts),
    begun and ended by the framework's own calls: committed when the block ends normally,
    rolled back when it raises. The commit's error, if any, comes out of the ``with``."""
    if isinstance(conn, psycopg.AsyncConnection):
        if _open(conn).info.transaction_status != TransactionStatus.IDLE:
            raise UnsupportedConnectionError(_IN_TRANSACTION)
        async with conn.transaction():
            yield Owned(conn)
        return
    origin = _origin(conn)
    if origin == "sqlalchemy":
        if True:  # ASYNC
            from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
        else:
            from sqlalchemy.engine import Connection  # noqa: F401
            from sqlalchemy.orm import Session  # noqa: F401

        if isinstance(conn, AsyncSession | AsyncConnection):
            if conn.in_transaction():
                raise UnsupportedConnectionError(_IN_TRANSACTION)
            async with conn.begin():
                flush = conn.flush if isinstance(conn, AsyncSession) else None
                yield Owned(await async_driver(conn), flush)
            return
    if True:  # ASYNC
        pass  # Django's connection is sync only: async_driver below says so
    elif origin == "django":
        with _own_django(conn) as owned:
            yield owned
        return
    await async_driver(conn)  # raises the error naming what is accepted
    raise UnsupportedConnectionError(f"conn must be {ACCEPTED_ASYNC}; got {_describe(conn)}")


# sync-twin: generated from the async source above by `make sync-twins`; do not edit


@contextmanager
def own_transaction(
    conn: object,
) -> Iterator[Owned[psycopg.Connection[Any]]]:
    """A transaction of its own on ``conn`` (any connection :func:`sync_driver` accepts),
    begun and ended by the framework's own calls: committed when the block ends normally,
    rolled back when it raises. The commit's error, if any, comes out of the ``with``."""
    if isinstance(conn, psycopg.Connection):
        if _open(conn).info.transaction_status != TransactionStatus.IDLE:
            raise UnsupportedConnectionError(_IN_TRANSACTION)
        with conn.transaction():
            yield Owned(conn)
        return
    origin = _origin(conn)
    if origin == "sqlalchemy":
        from sqlalchemy.engine import Connection
        from sqlalchemy.orm import Session

        if isinstance(conn, Session | Connection):
            if conn.in_transaction():
                raise UnsupportedConnectionError(_IN_TRANSACTION)
            with conn.begin():
                flush = conn.flush if isinstance(conn, Session) else None
                yield Owned(sync_driver(conn), flush)
            return
    if origin == "django":
        with _own_django(conn) as owned:
            yield owned
        return
    sync_driver(conn)  # raises the error naming what is accepted
    raise UnsupportedConnectionError(f"conn must be {ACCEPTED}; got {_describe(conn)}")


# sync-twin: end


def _open(conn: C) -> C:
    if conn.closed:
        raise UnsupportedConnectionError("conn is closed: pass an open connection")
    if conn.info.transaction_status == TransactionStatus.INERROR:
        raise UnsupportedConnectionError(
            "conn's transaction is aborted (an earlier statement failed): roll it back first"
        )
    return conn


def _origin(conn: object) -> str:
    return type(conn).__module__.partition(".")[0]


def _describe(conn: object) -> str:
    kind = type(conn)
    return f"{kind.__module__}.{kind.__qualname__}"


# sync-twin: async source
async def _from_sqlalchemy_async(conn: Any) -> psycopg.AsyncConnection[Any]:
    if True:  # ASYNC
        from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
    else:
        from sqlalchemy.engine import Connection  # noqa: F401
        from sqlalchemy.orm import Session  # noqa: F401

    if isinstance(conn, AsyncSession):
        # Begins the session's transaction if it has none (autobegin), as a query would.
        conn = await conn.connection()
    if not isinstance(conn, AsyncConnection):
        if True:  # ASYNC
            other = "a sync Session or Connection, call the sync method"
        else:
            other = "an AsyncSession or AsyncConnection, call the async method"
        raise UnsupportedConnectionError(
            f"conn must be {ACCEPTED_ASYNC}; got {_describe(conn)} (for {other})"
        )
    _check_dialect(conn.dialect)
    if not conn.in_transaction():
        # SQLAlchemy begins a transaction on a connection's first statement ("autobegin");
        # ours bypass it, so begin it here, or the application's commit() would be a no-op
        # and its jobs rolled back when the connection goes back to the pool.
        await conn.begin()
    if True:  # ASYNC
        driver = (await conn.get_raw_connection()).driver_connection
    else:
        driver = conn.connection.driver_connection
    if not isinstance(driver, psycopg.AsyncConnection):
        raise UnsupportedConnectionError(
            f"conn must be {ACCEPTED_ASYNC}; its driver connection is {_describe(driver)}"
        )
    return driver


# sync-twin: generated from the async source above by `make sync-twins`; do not edit


def _from_sqlalchemy(conn: Any) -> psycopg.Connection[Any]:
    from sqlalchemy.engine import Connection
    from sqlalchemy.orm import Session

    if isinstance(conn, Session):
        # Begins the session's transaction if it has none (autobegin), as a query would.
        conn = conn.connection()
    if not isinstance(conn, Connection):
        other = "an AsyncSession or AsyncConnection, call the async method"
        raise UnsupportedConnectionError(
            f"conn must be {ACCEPTED}; got {_describe(conn)} (for {other})"
        )
    _check_dialect(conn.dialect)
    if not conn.in_transaction():
        # SQLAlchemy begins a transaction on a connection's first statement ("autobegin");
        # ours bypass it, so begin it here, or the application's commit() would be a no-op
        # and its jobs rolled back when the connection goes back to the pool.
        conn.begin()
    driver = conn.connection.driver_connection
    if not isinstance(driver, psycopg.Connection):
        raise UnsupportedConnectionError(
            f"conn must be {ACCEPTED}; its driver connection is {_describe(driver)}"
        )
    return driver


# sync-twin: end


def _check_dialect(dialect: Any) -> None:
    name, driver = getattr(dialect, "name", "?"), getattr(dialect, "driver", "?")
    if name != "postgresql" or not str(driver).startswith("psycopg") or driver == "psycopg2":
        raise UnsupportedConnectionError(
            f"conn uses SQLAlchemy's {name}+{driver} dialect: pgqueue needs PostgreSQL through "
            "psycopg 3 (a URL starting postgresql+psycopg://)"
        )


def _from_django(conn: Any) -> psycopg.Connection[Any]:
    # django.db.connection is a proxy to the default alias's DatabaseWrapper; both have these.
    vendor = getattr(conn, "vendor", None)
    if vendor is None or not hasattr(conn, "ensure_connection"):
        raise UnsupportedConnectionError(f"conn must be {ACCEPTED}; got {_describe(conn)}")
    if vendor != "postgresql":
        raise UnsupportedConnectionError(
            f"conn is a Django {vendor} connection: pgqueue needs PostgreSQL "
            "(django.db.backends.postgresql with psycopg 3)"
        )
    conn.ensure_connection()
    driver = conn.connection
    if not isinstance(driver, psycopg.Connection):
        raise UnsupportedConnectionError(
            f"conn is a Django connection through {_describe(driver)}: pgqueue needs the "
            "psycopg 3 driver (pip install 'psycopg[binary]'; Django uses it when installed)"
        )
    return driver
