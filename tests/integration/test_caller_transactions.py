"""The transaction promise with every connection applications hold: the job (and everything it
writes beside it) exists if and only if the caller's transaction commits.

One matrix: each API that takes ``conn=`` x each kind of caller connection (psycopg idle, in a
transaction, autocommit inside an explicit transaction, autocommit, an inner savepoint; Django
``atomic()`` as first statement and after other writes; SQLAlchemy ``Session`` before and after
a flush, a ``Connection``; the async twins with psycopg ``AsyncConnection`` and SQLAlchemy
``AsyncSession``) x {commit, rollback}. After a rollback every pgqueue table is exactly as
before; after a commit the API's effect is there; the caller's own writes, made before and
after the call, share its fate.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from sqlalchemy import create_engine, text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

from pgqueue import PgQueue, QueueFullError, UnsupportedConnectionError, chain

TABLES = ("jobs", "dead_letters", "job_history", "workflows", "workflow_nodes", "schedules",
          "queues", "idempotency_keys", "task_limits", "fair_clocks", "key_buckets")  # fmt: skip


def snapshot(admin: psycopg.Connection[Any]) -> dict[str, str]:
    """Every pgqueue table's content, hashed (so a rollback must leave each exactly as it was)."""
    out = {}
    for table in TABLES:
        row = admin.execute(
            f"SELECT count(*) || ':' || md5(coalesce(string_agg(t::text, ',' ORDER BY t::text),"  # noqa: S608
            f" '')) FROM pgqueue.{table} AS t"
        ).fetchone()
        out[table] = row[0]
    return out


def app_notes(admin: psycopg.Connection[Any]) -> list[str]:
    return [r[0] for r in admin.execute("SELECT note FROM app_log ORDER BY note").fetchall()]


# -- the APIs -------------------------------------------------------------------------------


@dataclass
class Api:
    name: str
    #: run the call on the caller's connection (sync)
    call: Callable[[PgQueue, Any, Any], Any] | None
    #: the async twin, or None
    call_async: Callable[[PgQueue, Any, Any], Any] | None = None
    #: state the call needs, committed before the caller's transaction starts
    setup: Callable[[PgQueue, Any], Any] | None = None
    #: True once the call's effect is committed
    applied: Callable[[psycopg.Connection[Any], Any], bool] | None = None


def _job_count(admin: psycopg.Connection[Any], task: str) -> int:
    return admin.execute("SELECT count(*) FROM pgqueue.jobs WHERE task = %s", (task,)).fetchone()[0]


def _has_jobs(task: str, n: int = 1) -> Callable[[psycopg.Connection[Any], Any], bool]:
    return lambda admin, _state: _job_count(admin, task) == n


def _bounded(pgq: PgQueue, _tasks: Any) -> None:
    pgq.flow.configure_queue("bounded", max_depth=100)


def _fair(pgq: PgQueue, _tasks: Any) -> None:
    pgq.flow.configure_queue("fairq", fair=True)


def _ranked(n: int) -> Callable[[psycopg.Connection[Any], Any], bool]:
    """n jobs of calls.tenant, each with its key (from limit_by) and a rank in the fair queue."""
    return lambda admin, _state: (
        admin.execute(
            "SELECT count(*) FROM pgqueue.jobs WHERE task = 'calls.tenant'"
            " AND concurrency_key = 'acme' AND fair_rank IS NOT NULL"
        ).fetchone()[0]
        == n
    )


def _enqueue_fair(pgq: PgQueue, tasks: Any, conn: Any) -> None:
    """One job (enqueue_job ranks it) and a bulk enqueue (ranks read, then COPY) of a task
    whose key comes from an argument, into a fair queue."""
    tasks.tenant.enqueue("acme", conn=conn)
    pgq.enqueue_many([tasks.tenant.s("acme") for _ in range(100)], conn=conn)


async def _enqueue_fair_async(pgq: PgQueue, tasks: Any, conn: Any) -> None:
    await tasks.tenant.enqueue_async("acme", conn=conn)
    await pgq.enqueue_many_async([tasks.tenant.s("acme") for _ in range(100)], conn=conn)


def _dead_letter(pgq: PgQueue, tasks: Any) -> int:
    job_id = tasks.add.enqueue(1, 2)
    with psycopg.connect(pgq.dsn, autocommit=True) as admin:
        admin.execute(
            "WITH gone AS (DELETE FROM pgqueue.jobs WHERE id = %s RETURNING *) "
            "INSERT INTO pgqueue.dead_letters (id, queue, task, args, priority, attempts, "
            "max_attempts, lease_token, reason, errors, created_at) SELECT id, queue, task, args, "
            "priority, 1, max_attempts, lease_token, 'failed', '[]'::jsonb, created_at FROM gone",
            (job_id,),
        )
    return int(job_id)


def _committed_job(pgq: PgQueue, tasks: Any) -> int:
    return int(tasks.add.enqueue(1, 2))


# Deduplication modes: a replace (an UPDATE of the pending job) and a bulk enqueue of jobs
# with modes (pgqueue.enqueue_job per job, in one statement).
_DEBOUNCE = {"idempotency_key": "deb", "unique_among": "pending", "on_conflict": "replace"}


def _dedupe(pgq: PgQueue, tasks: Any, conn: Any) -> None:
    assert tasks.add.enqueue(5, 5, conn=conn, **_DEBOUNCE).replaced
    pgq.enqueue_many([tasks.add.s(i, i, unique_by=True, throttle=60) for i in range(3)], conn=conn)


async def _dedupe_async(pgq: PgQueue, tasks: Any, conn: Any) -> None:
    assert (await tasks.add.enqueue_async(5, 5, conn=conn, **_DEBOUNCE)).replaced
    await pgq.enqueue_many_async(
        [tasks.add.s(i, i, unique_by=True, throttle=60) for i in range(3)], conn=conn
    )


def _deduped(admin: psycopg.Connection[Any], _state: Any) -> bool:
    args = admin.execute("SELECT args FROM pgqueue.jobs WHERE idempotency_key = 'deb'").fetchone()
    return args == ({"a": 5, "b": 5},) and _job_count(admin, "calls.add") == 4


APIS = [
    Api(
        "enqueue",
        lambda pgq, t, c: t.add.enqueue(1, 2, conn=c),
        lambda pgq, t, c: t.add.enqueue_async(1, 2, conn=c),
        applied=_has_jobs("calls.add"),
    ),
    Api(
        "enqueue_wait_if_full",
        lambda pgq, t, c: t.add.enqueue(1, 2, queue="bounded", wait_if_full=5, conn=c),
        lambda pgq, t, c: t.add.enqueue_async(1, 2, queue="bounded", wait_if_full=5, conn=c),
        setup=_bounded,
        applied=_has_jobs("calls.add"),
    ),
    Api(
        "enqueue_keyed_result",
        lambda pgq, t, c: t.add.enqueue(1, 2, idempotency_key="k1", result_ttl=60, conn=c),
        lambda pgq, t, c: t.add.enqueue_async(1, 2, idempotency_key="k1", result_ttl=60, conn=c),
        applied=_has_jobs("calls.add"),
    ),
    Api(
        "enqueue_meta_tags",
        lambda pgq, t, c: t.add.enqueue(1, 2, meta={"k": "v"}, tags=["x"], conn=c),
        lambda pgq, t, c: t.add.enqueue_async(1, 2, meta={"k": "v"}, tags=["x"], conn=c),
        applied=_has_jobs("calls.add"),
    ),
    Api(
        "enqueue_many_tags",
        lambda pgq, t, c: pgq.enqueue_many([t.add.s(i, i, tags=["x"]) for i in range(100)], conn=c),
        lambda pgq, t, c: pgq.enqueue_many_async(
            [t.add.s(i, i, tags=["x"]) for i in range(100)], conn=c
        ),
        applied=_has_jobs("calls.add", 100),
    ),
    Api(
        "enqueue_dedupe_modes",
        _dedupe,
        _dedupe_async,
        setup=lambda pgq, t: t.add.enqueue(1, 2, **_DEBOUNCE),
        applied=_deduped,
    ),
    Api(
        "enqueue_concurrency_key",
        lambda pgq, t, c: t.limited.enqueue(1, concurrency_key="tenant-1", conn=c),
        lambda pgq, t, c: t.limited.enqueue_async(1, concurrency_key="tenant-1", conn=c),
        applied=_has_jobs("calls.limited"),
    ),
    Api(
        "enqueue_limit_by_fair_queue",
        _enqueue_fair,
        _enqueue_fair_async,
        setup=_fair,
        applied=_ranked(101),
    ),
    Api(
        "enqueue_many",
        lambda pgq, t, c: pgq.enqueue_many([t.add.s(i, i) for i in range(100)], conn=c),
        lambda pgq, t, c: pgq.enqueue_many_async([t.add.s(i, i) for i in range(100)], conn=c),
        applied=_has_jobs("calls.add", 100),
    ),
    Api(
        "enqueue_many_keyed_bounded",
        lambda pgq, t, c: pgq.enqueue_many(
            [t.add.s(i, i, idempotency_key=f"k{i % 3}", queue="bounded") for i in range(6)], conn=c
        ),
        lambda pgq, t, c: pgq.enqueue_many_async(
            [t.add.s(i, i, idempotency_key=f"k{i % 3}", queue="bounded") for i in range(6)], conn=c
        ),
        setup=_bounded,
        applied=_has_jobs("calls.add", 3),
    ),
    Api(
        "publish",
        lambda pgq, t, c: pgq.publish("user.created", {"user": 1}, conn=c),
        lambda pgq, t, c: pgq.publish_async("user.created", {"user": 1}, conn=c),
        applied=_has_jobs("calls.on_user"),
    ),
    Api(
        "workflow",
        lambda pgq, t, c: chain(t.add.s(1, 2), t.double.s()).enqueue(conn=c),
        lambda pgq, t, c: chain(t.add.s(1, 2), t.double.s()).enqueue_async(conn=c),
        applied=lambda admin, _s: (
            admin.execute("SELECT count(*) FROM pgqueue.workflows").fetchone()[0] == 1
        ),
    ),
    Api(
        "depends_on",
        lambda pgq, t, c: t.double.enqueue(5, depends_on=[t.parent], conn=c),
        lambda pgq, t, c: t.double.enqueue_async(5, depends_on=[t.parent], conn=c),
        setup=lambda pgq, t: setattr(t, "parent", int(t.add.enqueue(1, 2))),
        applied=_has_jobs("calls.double"),
    ),
    Api(
        "schedule",
        lambda pgq, t, c: pgq.cron.schedule(
            "nightly", "0 3 * * *", t.add, {"a": 1, "b": 2}, conn=c
        ),
        lambda pgq, t, c: pgq.cron.schedule_async(
            "nightly", "0 3 * * *", t.add, {"a": 1, "b": 2}, conn=c
        ),
        applied=lambda admin, _s: (
            admin.execute("SELECT count(*) FROM pgqueue.schedules").fetchone()[0] == 1
        ),
    ),
    Api(
        "cancel",
        lambda pgq, t, c: pgq.cancel(t.state, conn=c),
        lambda pgq, t, c: pgq.cancel_async(t.state, conn=c),
        setup=lambda pgq, t: setattr(t, "state", _committed_job(pgq, t)),
        applied=_has_jobs("calls.add", 0),
    ),
    Api(
        "replay_dead_letters",
        lambda pgq, t, c: pgq.admin.replay_dead_letters(ids=[t.state], conn=c),
        lambda pgq, t, c: pgq.admin.replay_dead_letters_async(ids=[t.state], conn=c),
        setup=lambda pgq, t: setattr(t, "state", _dead_letter(pgq, t)),
        applied=_has_jobs("calls.add"),
    ),
    Api(
        "configure_queue",
        lambda pgq, t, c: pgq.flow.configure_queue("emails", max_depth=5, conn=c),
        lambda pgq, t, c: pgq.flow.configure_queue_async("emails", max_depth=5, conn=c),
        applied=lambda admin, _s: (
            admin.execute(
                "SELECT count(*) FROM pgqueue.queues WHERE name = 'emails' AND max_depth = 5"
            ).fetchone()[0]
            == 1
        ),
    ),
]


class Tasks:
    """The tasks the calls use, registered on the test's PgQueue."""

    def __init__(self, pgq: PgQueue) -> None:
        @pgq.task(name="calls.add")
        def add(a: int, b: int) -> int:
            return a + b

        @pgq.task(name="calls.double")
        def double(n: int) -> int:
            return 2 * n

        @pgq.task(name="calls.limited", key_limit=1)
        def limited(n: int) -> int:
            return n

        @pgq.task(name="calls.on_user", on="user.created")
        def on_user(user: int) -> None: ...

        @pgq.task(name="calls.tenant", queue="fairq", limit_by="customer")
        def tenant(customer: str) -> None: ...

        self.add, self.double, self.limited, self.on_user = add, double, limited, on_user
        self.tenant = tenant
        self.parent = 0
        self.state: Any = None


# -- the caller's connections ---------------------------------------------------------------


class Finish(Exception):
    """Raised inside a session to roll it back (the frameworks' context managers re-raise it)."""


def _note(cursor_like: Any, note: str) -> None:
    cursor_like.execute("INSERT INTO app_log VALUES (%s)", (note,))


@contextlib.contextmanager
def psycopg_idle(dsn: str, commit: bool) -> Iterator[tuple[Any, Callable[[str], Any]]]:
    with psycopg.connect(dsn) as c:
        yield c, lambda note: _note(c, note)
        c.commit() if commit else c.rollback()


@contextlib.contextmanager
def psycopg_in_transaction(dsn: str, commit: bool) -> Iterator[tuple[Any, Callable[[str], Any]]]:
    with psycopg.connect(dsn) as c:
        _note(c, "before")
        yield c, lambda note: _note(c, note)
        c.commit() if commit else c.rollback()


@contextlib.contextmanager
def psycopg_autocommit_transaction(
    dsn: str, commit: bool
) -> Iterator[tuple[Any, Callable[[str], Any]]]:
    with psycopg.connect(dsn, autocommit=True) as c, contextlib.suppress(Finish), c.transaction():
        _note(c, "before")
        yield c, lambda note: _note(c, note)
        if not commit:
            raise Finish


@contextlib.contextmanager
def psycopg_inner_savepoint(dsn: str, commit: bool) -> Iterator[tuple[Any, Callable[[str], Any]]]:
    """The call inside a savepoint of the caller's that is rolled back (or released); the
    outer transaction always commits, with its own write kept."""
    with psycopg.connect(dsn) as c:
        _note(c, "outer")
        with contextlib.suppress(Finish), c.transaction():
            yield c, lambda note: _note(c, note)
            if not commit:
                raise Finish
        c.commit()


@contextlib.contextmanager
def sqlalchemy_session(
    dsn: str, commit: bool, *, flush: bool
) -> Iterator[tuple[Any, Callable[[str], Any]]]:
    engine = create_engine(
        "postgresql+psycopg://", creator=lambda: psycopg.connect(dsn), poolclass=NullPool
    )
    try:
        with Session(engine) as session:
            if flush:
                session.execute(text("INSERT INTO app_log VALUES ('before')"))
            yield (
                session,
                lambda note: session.execute(text("INSERT INTO app_log VALUES (:n)"), {"n": note}),
            )
            session.commit() if commit else session.rollback()
    finally:
        engine.dispose()


@contextlib.contextmanager
def sqlalchemy_connection(dsn: str, commit: bool) -> Iterator[tuple[Any, Callable[[str], Any]]]:
    """Commit-as-you-go: the call is the connection's first statement."""
    engine = create_engine(
        "postgresql+psycopg://", creator=lambda: psycopg.connect(dsn), poolclass=NullPool
    )
    try:
        with engine.connect() as connection:
            yield (
                connection,
                lambda note: connection.execute(
                    text("INSERT INTO app_log VALUES (:n)"), {"n": note}
                ),
            )
            connection.commit() if commit else connection.rollback()
    finally:
        engine.dispose()


def _django(dsn: str) -> Any:
    """Django configured once per process; each test points the default alias at its own
    database (as Django's test runner does with its test databases)."""
    import django
    from django.conf import settings
    from django.db import connection

    params = conninfo_to_dict(dsn)
    database = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": params["dbname"],
        "USER": params.get("user", ""),
        "PASSWORD": params.get("password", ""),
        "HOST": params.get("host", ""),
        "PORT": params.get("port", ""),
    }
    if not settings.configured:
        settings.configure(DATABASES={"default": database}, INSTALLED_APPS=[], USE_TZ=True)
        django.setup()
    connection.close()
    connection.settings_dict.update(database)
    return connection


@contextlib.contextmanager
def django_atomic(
    dsn: str, commit: bool, *, writes_first: bool
) -> Iterator[tuple[Any, Callable[[str], Any]]]:
    from django.db import transaction

    connection = _django(dsn)
    try:
        with contextlib.suppress(Finish), transaction.atomic():
            with connection.cursor() as cur:
                if writes_first:
                    _note(cur, "before")

                def note(text_: str) -> None:
                    with connection.cursor() as c:
                        _note(c, text_)

                yield connection, note
            if not commit:
                raise Finish
    finally:
        connection.close()


SYNC_SESSIONS: dict[str, Callable[[str, bool], Any]] = {
    "psycopg-idle": psycopg_idle,
    "psycopg-in-transaction": psycopg_in_transaction,
    "psycopg-autocommit-transaction": psycopg_autocommit_transaction,
    "psycopg-inner-savepoint": psycopg_inner_savepoint,
    "django-atomic-first": lambda d, c: django_atomic(d, c, writes_first=False),
    "django-atomic-after-writes": lambda d, c: django_atomic(d, c, writes_first=True),
    "sqlalchemy-session": lambda d, c: sqlalchemy_session(d, c, flush=False),
    "sqlalchemy-session-flushed": lambda d, c: sqlalchemy_session(d, c, flush=True),
    "sqlalchemy-connection": sqlalchemy_connection,
}


@contextlib.asynccontextmanager
async def psycopg_async(dsn: str, commit: bool) -> AsyncIterator[tuple[Any, Any]]:
    async with await psycopg.AsyncConnection.connect(dsn) as c:

        async def note(text_: str) -> None:
            await c.execute("INSERT INTO app_log VALUES (%s)", (text_,))

        yield c, note
        await (c.commit() if commit else c.rollback())


@contextlib.asynccontextmanager
async def sqlalchemy_async_session(
    dsn: str, commit: bool, *, flush: bool
) -> AsyncIterator[tuple[Any, Any]]:
    engine = create_async_engine(
        "postgresql+psycopg://",
        async_creator=lambda: psycopg.AsyncConnection.connect(dsn),
        poolclass=NullPool,
    )
    try:
        async with AsyncSession(engine) as session:

            async def note(text_: str) -> None:
                await session.execute(text("INSERT INTO app_log VALUES (:n)"), {"n": text_})

            if flush:
                await note("before")
            yield session, note
            await (session.commit() if commit else session.rollback())
    finally:
        await engine.dispose()


ASYNC_SESSIONS: dict[str, Callable[[str, bool], Any]] = {
    "psycopg-async": psycopg_async,
    "sqlalchemy-async-session": lambda d, c: sqlalchemy_async_session(d, c, flush=False),
    "sqlalchemy-async-session-flushed": lambda d, c: sqlalchemy_async_session(d, c, flush=True),
}


#: pgqueue's tables a fresh database has rows in, kept by the reset below.
_KEPT = ("pgqueue_alembic_version", "retention")


def _reset(admin: psycopg.Connection[Any]) -> None:
    """The module's database as a fresh one at head: every other pgqueue table emptied (their
    sequences restarted), the caller's own table made again. One database for the module's
    ~440 tests: a new one per test (a template copy and a drop) was a third of the suite's
    set-up time. A connection a failed test left in a transaction fails the next test here,
    rather than holding it up."""
    tables = admin.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = 'pgqueue'"
        " AND tablename <> ALL(%s) ORDER BY tablename",
        (list(_KEPT),),
    ).fetchall()
    admin.execute("SET lock_timeout = '10s'")
    admin.execute(
        sql.SQL("TRUNCATE {} RESTART IDENTITY").format(
            sql.SQL(", ").join(sql.Identifier("pgqueue", name) for (name,) in tables)
        )
    )
    admin.execute("DROP TABLE IF EXISTS app_log")
    admin.execute("CREATE TABLE app_log (note text)")


@pytest.fixture
def caller_db(module_dsn: str) -> Iterator[tuple[PgQueue, Tasks, psycopg.Connection[Any]]]:
    with psycopg.connect(module_dsn, autocommit=True) as admin:
        _reset(admin)
        pgq = PgQueue(module_dsn)
        tasks = Tasks(pgq)
        try:
            yield pgq, tasks, admin
        finally:
            pgq.close()


def _expect(admin: Any, api: Api, tasks: Tasks, before: dict[str, str], commit: bool,
            notes_before: list[str]) -> None:  # fmt: skip
    assert api.applied is not None
    if commit:
        assert api.applied(admin, tasks.state), f"{api.name}: committed, but its effect is missing"
        assert "after" in app_notes(admin), "the caller's write after the call was lost"
    else:
        assert snapshot(admin) == before, f"{api.name}: rolled back, but pgqueue's rows changed"
        assert app_notes(admin) == notes_before, "the caller's writes survived its rollback"


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "rollback"])
@pytest.mark.parametrize("session", list(SYNC_SESSIONS))
@pytest.mark.parametrize("api", [a for a in APIS if a.call], ids=lambda a: a.name)
def test_sync_apis_join_the_callers_transaction(caller_db, api, session, commit):
    pgq, tasks, admin = caller_db
    if api.setup:
        api.setup(pgq, tasks)
    before, notes_before = snapshot(admin), app_notes(admin)
    # Rows a session kind keeps whatever happens (the outer write of the savepoint case).
    with SYNC_SESSIONS[session](pgq.dsn, commit) as (conn, note):
        assert api.call is not None
        api.call(pgq, tasks, conn)
        note("after")  # the caller's transaction is still alive and still the caller's
    if session == "psycopg-inner-savepoint":
        notes_before = [*notes_before, "outer"]
    _expect(admin, api, tasks, before, commit, notes_before)


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "rollback"])
@pytest.mark.parametrize("session", list(ASYNC_SESSIONS))
@pytest.mark.parametrize("api", [a for a in APIS if a.call_async], ids=lambda a: a.name)
def test_async_apis_join_the_callers_transaction(caller_db, api, session, commit):
    pgq, tasks, admin = caller_db
    if api.setup:
        api.setup(pgq, tasks)
    before, notes_before = snapshot(admin), app_notes(admin)

    async def main() -> None:
        async with ASYNC_SESSIONS[session](pgq.dsn, commit) as (conn, note):
            assert api.call_async is not None
            await api.call_async(pgq, tasks, conn)
            await note("after")
        await pgq.aclose()

    asyncio.run(main())
    _expect(admin, api, tasks, before, commit, notes_before)


@pytest.mark.parametrize("api", [a for a in APIS if a.call], ids=lambda a: a.name)
def test_autocommit_connection_commits_each_call(caller_db, api):
    """No transaction at all: the call's effect is committed when it returns."""
    pgq, tasks, admin = caller_db
    if api.setup:
        api.setup(pgq, tasks)
    with psycopg.connect(pgq.dsn, autocommit=True) as c:
        assert api.call is not None
        api.call(pgq, tasks, c)
        assert api.applied is not None and api.applied(admin, tasks.state)


@pytest.mark.parametrize("session", list(SYNC_SESSIONS))
def test_a_full_queue_leaves_the_callers_transaction_usable(caller_db, session):
    """QueueFullError (with and without waiting) neither commits nor aborts the caller's
    transaction: the caller can go on and commit its own writes."""
    pgq, tasks, admin = caller_db
    pgq.flow.configure_queue("tiny", max_depth=1)
    tasks.add.enqueue(0, 0, queue="tiny")
    with SYNC_SESSIONS[session](pgq.dsn, True) as (conn, note):
        with pytest.raises(QueueFullError):
            tasks.add.enqueue(1, 2, queue="tiny", conn=conn)
        with pytest.raises(QueueFullError):
            tasks.add.enqueue(1, 2, queue="tiny", wait_if_full=0.05, conn=conn)
        with pytest.raises(QueueFullError):
            tasks.add.enqueue(1, 2, queue="tiny", idempotency_key="x", conn=conn)
        with pytest.raises(QueueFullError):
            pgq.enqueue_many([tasks.add.s(1, 2, queue="tiny")], conn=conn)
        note("after")
    assert "after" in app_notes(admin)
    assert _job_count(admin, "calls.add") == 1


def test_waiting_for_room_in_the_callers_transaction(caller_db):
    """wait_if_full inside Django-style "first statement" transactions: room appears while the
    call waits; the job then commits (or rolls back) with the caller."""
    pgq, tasks, admin = caller_db
    pgq.flow.configure_queue("tiny", max_depth=1)
    first = tasks.add.enqueue(0, 0, queue="tiny")

    def make_room() -> None:
        import time

        time.sleep(0.3)
        admin.execute("DELETE FROM pgqueue.jobs WHERE id = %s", (first,))

    for commit in (False, True):
        if commit:
            first = tasks.add.enqueue(0, 0, queue="tiny")
        import threading

        helper = threading.Thread(target=make_room)
        with psycopg.connect(pgq.dsn) as conn:
            helper.start()
            tasks.add.enqueue(1, 2, queue="tiny", wait_if_full=10, conn=conn)
            _note(conn, "after")
            conn.commit() if commit else conn.rollback()
        helper.join()
        assert _job_count(admin, "calls.add") == (1 if commit else 0)


class _NotAConnection:
    pass


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda dsn: _NotAConnection(), "conn must be a psycopg (3) Connection"),
        (lambda dsn: __import__("sqlite3").connect(":memory:"), "sqlite3.Connection"),
        (lambda dsn: psycopg.AsyncConnection, "conn must be"),
    ],
    ids=["object", "sqlite3", "a-class"],
)
def test_unusable_connections_are_refused_with_what_is_accepted(caller_db, make, message):
    pgq, tasks, admin = caller_db
    with pytest.raises(UnsupportedConnectionError, match=re.escape(message)) as raised:
        tasks.add.enqueue(1, 2, conn=make(pgq.dsn))
    assert isinstance(raised.value, TypeError)
    assert _job_count(admin, "calls.add") == 0


def test_closed_aborted_and_mismatched_connections_are_refused(caller_db):
    pgq, tasks, admin = caller_db
    closed = psycopg.connect(pgq.dsn)
    closed.close()
    with pytest.raises(UnsupportedConnectionError, match="closed"):
        tasks.add.enqueue(1, 2, conn=closed)
    with psycopg.connect(pgq.dsn) as aborted:
        with pytest.raises(psycopg.errors.DivisionByZero):
            aborted.execute("SELECT 1/0")
        with pytest.raises(UnsupportedConnectionError, match="aborted"):
            tasks.add.enqueue(1, 2, conn=aborted)

    async def wrong_kind() -> None:
        with (
            psycopg.connect(pgq.dsn) as sync_conn,
            pytest.raises(UnsupportedConnectionError, match="use the sync method"),
        ):
            await tasks.add.enqueue_async(1, 2, conn=sync_conn)
        async with await psycopg.AsyncConnection.connect(pgq.dsn) as async_conn:
            with pytest.raises(UnsupportedConnectionError, match="async method"):
                tasks.add.enqueue(1, 2, conn=async_conn)

    asyncio.run(wrong_kind())
    sqlite_engine = create_engine("sqlite://")
    with (
        Session(sqlite_engine) as session,
        pytest.raises(UnsupportedConnectionError, match=r"sqlite\+pysqlite"),
    ):
        tasks.add.enqueue(1, 2, conn=session)
    assert _job_count(admin, "calls.add") == 0


def test_a_sqlalchemy_session_of_the_other_kind_is_refused_naming_the_method(caller_db):
    """A sync Session to an async method, an AsyncSession to a sync one: each refused with the
    method to call (the sync side's check is generated from the async one's)."""
    pgq, tasks, admin = caller_db

    async def both() -> None:
        async with sqlalchemy_async_session(pgq.dsn, False, flush=False) as (session, _):
            with pytest.raises(
                UnsupportedConnectionError,
                match=re.escape("(for an AsyncSession or AsyncConnection, call the async method)"),
            ):
                tasks.add.enqueue(1, 2, conn=session)
        other = re.escape("(for a sync Session or Connection, call the sync method)")
        with (
            sqlalchemy_session(pgq.dsn, False, flush=False) as (sync_session, _),
            pytest.raises(UnsupportedConnectionError, match=other),
        ):
            await tasks.add.enqueue_async(1, 2, conn=sync_session)

    asyncio.run(both())
    assert _job_count(admin, "calls.add") == 0
