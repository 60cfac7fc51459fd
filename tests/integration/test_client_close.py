"""A closed client is idle, not dead: ``close()`` / ``aclose()`` end every connection it opened,
and a later call opens its pools again (a module-level client outlives a test's or a request
cycle's close). Counted from ``pg_stat_activity`` by the client's application name."""

from __future__ import annotations

import asyncio

import psycopg

from pgqueue import PgQueue
from tests.helpers import wait_for

NAME = "pgqueue close test"


def backends(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = %s",
            (NAME,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def all_ended(dsn: str) -> None:
    """Every backend of the client gone. A backend leaves pg_stat_activity once its process
    has exited, a moment after the client closed its socket (longer on a busy machine): a
    connection left open stays, and fails this."""
    wait_for(lambda: backends(dsn) == 0, timeout=10, message="the client's backends to end")


def test_a_closed_client_ends_its_connections_and_opens_them_again_when_used(dsn):
    pgq = PgQueue(f"{dsn} application_name='{NAME}'")
    first = pgq.enqueue("close.t", {})
    assert backends(dsn) >= 1
    pgq.close()
    all_ended(dsn)
    second = pgq.enqueue("close.t", {})  # the pool opens again
    assert int(second) > int(first) and backends(dsn) >= 1
    pgq.close()
    pgq.close()  # twice is harmless
    all_ended(dsn)


def test_an_async_closed_client_ends_its_connections_and_opens_them_again_when_used(dsn):
    pgq = PgQueue(f"{dsn} application_name='{NAME}'")

    async def main() -> None:
        await pgq.enqueue_async("close.t", {})
        assert await asyncio.to_thread(backends, dsn) >= 1
        await pgq.aclose()
        await asyncio.to_thread(all_ended, dsn)
        await pgq.enqueue_async("close.t", {})
        assert await asyncio.to_thread(backends, dsn) >= 1
        await pgq.aclose()
        await asyncio.to_thread(all_ended, dsn)

    asyncio.run(main())
