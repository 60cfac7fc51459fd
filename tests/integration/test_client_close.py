"""A closed client is idle, not dead: ``close()`` / ``aclose()`` end every connection it opened,
and a later call opens its pools again (a module-level client outlives a test's or a request
cycle's close). Counted from ``pg_stat_activity`` by the client's application name."""

from __future__ import annotations

import asyncio

import psycopg

from pgqueue import PgQueue

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


def test_a_closed_client_ends_its_connections_and_opens_them_again_when_used(dsn):
    pgq = PgQueue(f"{dsn} application_name='{NAME}'")
    first = pgq.enqueue("close.t", {})
    assert backends(dsn) >= 1
    pgq.close()
    assert backends(dsn) == 0
    second = pgq.enqueue("close.t", {})  # the pool opens again
    assert int(second) > int(first) and backends(dsn) >= 1
    pgq.close()
    pgq.close()  # twice is harmless
    assert backends(dsn) == 0


def test_an_async_closed_client_ends_its_connections_and_opens_them_again_when_used(dsn):
    pgq = PgQueue(f"{dsn} application_name='{NAME}'")

    async def main() -> None:
        await pgq.enqueue_async("close.t", {})
        assert await asyncio.to_thread(backends, dsn) >= 1
        await pgq.aclose()
        assert await asyncio.to_thread(backends, dsn) == 0
        await pgq.enqueue_async("close.t", {})
        assert await asyncio.to_thread(backends, dsn) >= 1
        await pgq.aclose()
        assert await asyncio.to_thread(backends, dsn) == 0

    asyncio.run(main())
