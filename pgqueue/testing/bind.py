"""An application's :class:`~pgqueue.PgQueue` pointed at a test's database for a while."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pgqueue.client import PgQueue
from pgqueue.client.pools import Pools


@contextmanager
def bind(pgq: PgQueue, dsn: str) -> Iterator[PgQueue]:
    """Point ``pgq`` (the application's queue, whose tasks the code under test enqueues) at the
    database ``dsn`` inside the block, with pools of its own, closed at the end; then back to
    where it was. Its tasks' ``.enqueue()`` go there too (a task enqueues through its queue).
    Sync only: an async pool opened inside the block is closed with ``aclose`` by the caller."""
    old = pgq._pools
    pools = Pools(
        dsn,
        pool_size=old.size,
        prepare="prepare_threshold" not in old.conn_kwargs,
        pool=None,
    )
    # The group commit writes through the client's pools too: both point there, and back.
    pgq._pools = pgq._group_commit.pools = pools
    try:
        yield pgq
    finally:
        pgq._pools = pgq._group_commit.pools = old
        pools.close()
