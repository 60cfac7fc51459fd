"""One definition of each multi-step database operation, driven by a sync or an async connection.

An operation is written once as a generator (a *plan*) that yields :class:`Query` / :class:`CopyIn`
steps and receives each step's rows back. :func:`run` drives it on a ``psycopg.Connection`` and
:func:`run_async` on a ``psycopg.AsyncConnection``, so the sync and async APIs share every line of
query building and result handling and cannot drift apart. The drivers themselves are one too:
:func:`run` is generated from :func:`run_async` (``make sync-twins``, scripts/async_to_sync.py).

Rows come back by column name: :func:`fetch_all` / :func:`fetch_one` / :func:`fetch_first` build
each row with a psycopg row factory (``class_row`` of a NamedTuple whose fields are the query's
columns, or ``dict_row``); :func:`fetch_value` / :func:`fetch_values` take the values of a
one-column result. A column renamed or missing in the SQL then fails at once instead of shifting
every value after it.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import psycopg
from psycopg.adapt import AdaptersMap
from psycopg.pq import Format
from psycopg.rows import BaseRowFactory, scalar_row

from pgqueue.db.connections import atomic, atomic_async
from pgqueue.db.queries import query

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Query:
    """Run the named query with ``params``; the plan receives all result rows (or [])."""

    name: str
    params: Mapping[str, Any] | None = None
    #: The statement may fail with an error the plan turns into an exception of its own (a
    #: full queue): in a transaction it runs in a savepoint, so that the error leaves the
    #: transaction usable (drivers skip this when the whole plan already runs in one).
    guarded: bool = False
    #: psycopg's ``prepare``: None follows the connection's threshold; False plans the
    #: statement with each call's values (optional filters written ``%(x)s IS NULL OR ...``
    #: need that to reach their indexes: a generic plan cannot tell which filters are set).
    prepare: bool | None = None
    #: How each row is built (a psycopg row factory); None: a tuple. Plans pass one through
    #: :func:`fetch_all` and its siblings, which type what they return.
    row: BaseRowFactory[Any] | None = None


@dataclass(frozen=True, slots=True)
class CopyIn:
    """Stream ``rows`` with the named ``COPY ... FROM STDIN (FORMAT BINARY)`` query."""

    name: str
    rows: Iterable[Sequence[Any]]
    types: Sequence[str] = field(default_factory=tuple)


@dataclass(frozen=True, slots=True)
class Wait:
    """Wait up to ``timeout`` seconds for NOTIFY on a channel the connection LISTENs to (an
    autocommit connection); the plan receives ``[(payload,)]``, or ``[]`` on timeout."""

    timeout: float


Step = Query | CopyIn | Wait
# What a step sends back: rows as its Query's row factory built them.
Plan = Generator[Step, list[Any], T]


class Runner(Protocol):
    """What drives plans on pooled connections (a :class:`~pgqueue.PgQueue`): operators'
    reads and actions take one, so they need nothing above this layer."""

    def run(self, plan: Plan[T], conn: object | None = None, *, atomic: bool = False) -> T: ...

    async def run_async(
        self, plan: Plan[T], conn: object | None = None, *, atomic: bool = False
    ) -> T: ...


def fetch_all(
    name: str,
    params: Mapping[str, Any] | None = None,
    *,
    row: BaseRowFactory[R],
    guarded: bool = False,
    prepare: bool | None = None,
) -> Plan[list[R]]:
    """Run the named query; every row built by ``row`` (``class_row(SomeRow)``, ``dict_row``)."""
    rows: list[R] = yield Query(name, params, guarded=guarded, prepare=prepare, row=row)
    return rows


def fetch_first(
    name: str, params: Mapping[str, Any] | None = None, *, row: BaseRowFactory[R]
) -> Plan[R | None]:
    """The named query's first row (built by ``row``), None when it returned none."""
    rows = yield from fetch_all(name, params, row=row)
    return rows[0] if rows else None


def fetch_one(
    name: str, params: Mapping[str, Any] | None = None, *, row: BaseRowFactory[R]
) -> Plan[R]:
    """The one row (built by ``row``) of a query that always returns one (an upsert's
    ``RETURNING``, an aggregate)."""
    rows = yield from fetch_all(name, params, row=row)
    if len(rows) != 1:
        raise LookupError(f"query {name!r} returned {len(rows)} rows, not one")
    return rows[0]


def fetch_values(
    name: str, params: Mapping[str, Any] | None = None, *, guarded: bool = False
) -> Plan[list[Any]]:
    """The values of a one-column result (ids, a function's result), one per row."""
    return (yield from fetch_all(name, params, row=scalar_row, guarded=guarded))


def fetch_value(name: str, params: Mapping[str, Any] | None = None) -> Plan[Any]:
    """The value of a one-column, one-row result (``count(*)``, a function's result); None when
    it returned no row."""
    values = yield from fetch_values(name, params)
    return values[0] if values else None


# sync-twin: async source
async def run_async(
    plan: Plan[T],
    conn: psycopg.AsyncConnection[Any],
    *,
    foreign: bool = False,
    guard: bool = True,
    held: bool = False,
) -> T:
    """Drive ``plan`` on ``conn``, in whatever transaction the connection is in.

    ``foreign``: the caller's connection, whose adapters may have been changed by its framework
    (Django loads ``jsonb`` as text), so pgqueue's statements use psycopg's standard loaders.
    ``guard``: run ``guarded`` steps in a savepoint when in a transaction (off when the caller
    already runs the whole plan in one). ``held``: a connection of pgqueue's own pool that
    this plan holds alone until it ends (no other task or thread runs statements on it
    meanwhile), so its statements with tuple rows run on a cursor kept on the connection.
    """
    try:
        step = next(plan)
        while True:
            if isinstance(step, Wait):
                notes = conn.notifies(timeout=max(0.0, step.timeout), stop_after=1)
                step = plan.send([(note.payload,) async for note in notes])
                continue
            if held and isinstance(step, Query) and step.row is None:
                # The common statement (a single enqueue's): the connection's kept cursor
                # (a cursor made and closed per statement was about a sixth of an async single
                # enqueue's client CPU: its adapters' map copied, its close awaited), made on
                # first use.
                kept: psycopg.AsyncCursor[Any] | None = getattr(conn, _KEPT, None)
                if kept is None or kept.closed:
                    kept = conn.cursor()
                    setattr(conn, _KEPT, kept)
                step = plan.send(await _execute_async(kept, conn, step, guard))
                continue
            async with _cursor_async(conn, step) as cur:
                if foreign:
                    _standard_loaders(cur.adapters)
                if isinstance(step, Query):
                    rows = await _execute_async(cur, conn, step, guard)
                else:
                    async with cur.copy(query(step.name)) as copy:
                        if step.types:
                            copy.set_types(step.types)
                        for row in step.rows:
                            await copy.write_row(row)
                    rows = []
            step = plan.send(rows)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def _execute_async(
    cur: psycopg.AsyncCursor[Any], conn: psycopg.AsyncConnection[Any], step: Query, guard: bool
) -> list[Any]:
    """Run ``step`` on ``cur``; its rows (or [] for a statement that returns none: what
    ``cur.description is None`` says, read from the result's status without building the
    description's column objects, several microseconds per statement)."""
    sql = _SQL.get(step.name) or _query_text(step.name)
    if guard and step.guarded and _in_transaction(conn):
        async with atomic_async(conn):
            await cur.execute(sql, step.params, prepare=step.prepare)
    else:
        await cur.execute(sql, step.params, prepare=step.prepare)
    result = cur.pgresult
    return await cur.fetchall() if result is not None and result.status == _TUPLES_OK else []


def _cursor_async(
    conn: psycopg.AsyncConnection[Any], step: Query | CopyIn
) -> psycopg.AsyncCursor[Any]:
    if isinstance(step, Query) and step.row is not None:
        return conn.cursor(row_factory=step.row)
    return conn.cursor()


# sync-twin: generated from the async source above by `make sync-twins`; do not edit


def run(
    plan: Plan[T],
    conn: psycopg.Connection[Any],
    *,
    foreign: bool = False,
    guard: bool = True,
    held: bool = False,
) -> T:
    """Drive ``plan`` on ``conn``, in whatever transaction the connection is in.

    ``foreign``: the caller's connection, whose adapters may have been changed by its framework
    (Django loads ``jsonb`` as text), so pgqueue's statements use psycopg's standard loaders.
    ``guard``: run ``guarded`` steps in a savepoint when in a transaction (off when the caller
    already runs the whole plan in one). ``held``: a connection of pgqueue's own pool that
    this plan holds alone until it ends (no other task or thread runs statements on it
    meanwhile), so its statements with tuple rows run on a cursor kept on the connection.
    """
    try:
        step = next(plan)
        while True:
            if isinstance(step, Wait):
                notes = conn.notifies(timeout=max(0.0, step.timeout), stop_after=1)
                step = plan.send([(note.payload,) for note in notes])
                continue
            if held and isinstance(step, Query) and step.row is None:
                # The common statement (a single enqueue's): the connection's kept cursor
                # (a cursor made and closed per statement was about a sixth of an async single
                # enqueue's client CPU: its adapters' map copied, its close awaited), made on
                # first use.
                kept: psycopg.Cursor[Any] | None = getattr(conn, _KEPT, None)
                if kept is None or kept.closed:
                    kept = conn.cursor()
                    setattr(conn, _KEPT, kept)
                step = plan.send(_execute(kept, conn, step, guard))
                continue
            with _cursor(conn, step) as cur:
                if foreign:
                    _standard_loaders(cur.adapters)
                if isinstance(step, Query):
                    rows = _execute(cur, conn, step, guard)
                else:
                    with cur.copy(query(step.name)) as copy:
                        if step.types:
                            copy.set_types(step.types)
                        for row in step.rows:
                            copy.write_row(row)
                    rows = []
            step = plan.send(rows)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def _execute(
    cur: psycopg.Cursor[Any], conn: psycopg.Connection[Any], step: Query, guard: bool
) -> list[Any]:
    """Run ``step`` on ``cur``; its rows (or [] for a statement that returns none: what
    ``cur.description is None`` says, read from the result's status without building the
    description's column objects, several microseconds per statement)."""
    sql = _SQL.get(step.name) or _query_text(step.name)
    if guard and step.guarded and _in_transaction(conn):
        with atomic(conn):
            cur.execute(sql, step.params, prepare=step.prepare)
    else:
        cur.execute(sql, step.params, prepare=step.prepare)
    result = cur.pgresult
    return cur.fetchall() if result is not None and result.status == _TUPLES_OK else []


def _cursor(conn: psycopg.Connection[Any], step: Query | CopyIn) -> psycopg.Cursor[Any]:
    if isinstance(step, Query) and step.row is not None:
        return conn.cursor(row_factory=step.row)
    return conn.cursor()


# sync-twin: end


# The SQL of the queries run so far, by name (the query files' text is read once; this saves
# a call per statement).
_SQL: dict[str, str] = {}


def _query_text(name: str) -> str:
    _SQL[name] = text = query(name)
    return text


_TUPLES_OK = psycopg.pq.ExecStatus.TUPLES_OK


def _in_transaction(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """In a transaction, or about to be (psycopg opens one before a non-autocommit
    connection's first statement)."""
    return not conn.autocommit or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE


# Where a connection of pgqueue's keeps its cursor (an attribute of the connection object, so
# that it goes with it; never set on a caller's connection).
_KEPT = "_pgqueue_cursor"

# The loaders pgqueue's results rely on, as psycopg ships them.
_STANDARD = [
    (name, fmt, psycopg.adapters.get_loader(psycopg.adapters.types[name].oid, fmt))
    for name in ("json", "jsonb")
    for fmt in (Format.TEXT, Format.BINARY)
]


def _standard_loaders(adapters: AdaptersMap) -> None:
    for name, fmt, loader in _STANDARD:
        if loader is not None and adapters.get_loader(adapters.types[name].oid, fmt) is not loader:
            adapters.register_loader(name, loader)
