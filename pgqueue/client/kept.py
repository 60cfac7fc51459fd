"""The connection a pool of the client's own keeps for its next call, sync and async alike.

psycopg_pool's ``getconn`` and ``putconn`` take a lock each, do their bookkeeping and make three
logging calls per checkout and return: about a fifth of a sync single enqueue's client CPU, a
tenth of an async one's. So the client keeps the connection it last gave back (one per pool: the
sync pool's threads share it, a loop's pool is its tasks') and the next call takes it:

- at once when nothing arrived on its socket since its last statement
  (:func:`pgqueue.db.pool_check.quiet`), else after the check the pool runs on what it hands
  out (a round trip), given back to the pool when that check fails;
- it is kept again only when no call waits for the pool (that call gets it), none is kept
  already, the pool is open, the connection is idle and working, and the pool handed it out
  less than :data:`KEEP_SECONDS` ago: then it goes back to the pool, so that the pool's rules
  (``max_lifetime``, a drain, its statistics, shrinking) still see it every so often;
- a closing pool gets it back (:func:`release`).

An application's pool (``PgQueue(pool=...)``) has no kept connection: every call goes through
its ``getconn`` and ``putconn``.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from pgqueue.db import pool_check

#: How long (seconds) after the pool handed a connection out it may still be kept for the next
#: call rather than given back.
KEEP_SECONDS = 1.0


class Kept:
    """The connection kept for a pool's next call (None: none), and how many calls wait for
    the pool meanwhile; ``lock`` (a C lock: its enter and exit run no Python code) makes each
    look at both one step for the sync pool's threads."""

    __slots__ = ("conn", "lock", "waiting")

    def __init__(self) -> None:
        self.conn: Any = None
        self.waiting = 0
        self.lock = threading.Lock()


def attach(pool: ConnectionPool | AsyncConnectionPool) -> None:
    """Give a pool of the client's own its kept connection (an attribute of the pool: no
    mapping's lookup per call)."""
    setattr(pool, _KEPT, Kept())


def quiet(pool: ConnectionPool | AsyncConnectionPool) -> Any:
    """The connection kept for ``pool``'s next call, taken, if nothing arrived on it since its
    last statement (the common call); else None (then :func:`kept_or_pooled`)."""
    kept: Kept | None = getattr(pool, _KEPT, None)
    if kept is None:
        return None
    with kept.lock:
        conn = kept.conn
        if conn is None or not pool_check.quiet(conn):
            return None
        kept.conn = None
    return conn


# sync-twin: async source
async def kept_or_pooled_async(pool: AsyncConnectionPool) -> psycopg.AsyncConnection[Any]:
    """The connection kept for ``pool``'s next call if it still works, else the pool's."""
    kept: Kept | None = getattr(pool, _KEPT, None)
    if kept is None:  # an application's pool
        return await pool.getconn()
    with kept.lock:  # (counted as waiting at once: nobody keeps a connection meanwhile)
        pooled: psycopg.AsyncConnection[Any] | None = kept.conn
        kept.conn = None
        kept.waiting += 1
    try:
        if pooled is not None:
            try:
                await pool_check.check_async(pooled)  # as the pool checks what it hands out
                return pooled
            except Exception:
                await pool.putconn(pooled)  # the pool drops it (broken) or checks it again
            except BaseException:
                # A cancelled call gives it back too (as the pool's getconn does): kept by
                # nobody, it would be a slot the pool never gets back.
                await pool.putconn(pooled)
                raise
        pooled = await pool.getconn()
    finally:
        with kept.lock:
            kept.waiting -= 1
    setattr(pooled, _TAKEN, time.monotonic())
    return pooled


async def give_back_async(pool: AsyncConnectionPool, pooled: psycopg.AsyncConnection[Any]) -> None:
    """Keep ``pooled`` for the next call (:func:`keep`), or give it back to the pool."""
    if not keep(pool, pooled):
        await pool.putconn(pooled)


# sync-twin: generated from the async source above by `make sync-twins`; do not edit


def kept_or_pooled(pool: ConnectionPool) -> psycopg.Connection[Any]:
    """The connection kept for ``pool``'s next call if it still works, else the pool's."""
    kept: Kept | None = getattr(pool, _KEPT, None)
    if kept is None:  # an application's pool
        return pool.getconn()
    with kept.lock:  # (counted as waiting at once: nobody keeps a connection meanwhile)
        pooled: psycopg.Connection[Any] | None = kept.conn
        kept.conn = None
        kept.waiting += 1
    try:
        if pooled is not None:
            try:
                pool_check.check(pooled)  # as the pool checks what it hands out
                return pooled
            except Exception:
                pool.putconn(pooled)  # the pool drops it (broken) or checks it again
            except BaseException:
                # A cancelled call gives it back too (as the pool's getconn does): kept by
                # nobody, it would be a slot the pool never gets back.
                pool.putconn(pooled)
                raise
        pooled = pool.getconn()
    finally:
        with kept.lock:
            kept.waiting -= 1
    setattr(pooled, _TAKEN, time.monotonic())
    return pooled


def give_back(pool: ConnectionPool, pooled: psycopg.Connection[Any]) -> None:
    """Keep ``pooled`` for the next call (:func:`keep`), or give it back to the pool."""
    if not keep(pool, pooled):
        pool.putconn(pooled)


# sync-twin: end


def keep(
    pool: ConnectionPool | AsyncConnectionPool,
    pooled: psycopg.Connection[Any] | psycopg.AsyncConnection[Any],
) -> bool:
    """Keep ``pooled`` for ``pool``'s next call (True), unless a call waits for the pool, one
    is kept already, the pool is closed or an application's, the connection is not idle and
    working, or the pool handed it out :data:`KEEP_SECONDS` ago."""
    kept: Kept | None = getattr(pool, _KEPT, None)
    if (
        kept is None
        or pooled.closed
        or not pooled.autocommit
        or pooled.pgconn.transaction_status != _IDLE
        or time.monotonic() - getattr(pooled, _TAKEN, 0.0) >= KEEP_SECONDS
    ):
        return False
    with kept.lock:  # (the pool's closing is looked at here: release() takes the same lock)
        if kept.conn is not None or kept.waiting or pool.closed:
            return False
        kept.conn = pooled
        return True


def release(pool: ConnectionPool | AsyncConnectionPool) -> Any:
    """The connection kept for ``pool``, taken for good (the pool is closing): None if none."""
    kept: Kept | None = getattr(pool, _KEPT, None)
    if kept is None:
        return None
    with kept.lock:
        conn, kept.conn = kept.conn, None
        return conn


# When a pool handed a connection out (an attribute of the connection, so that it goes with
# it); a pool's kept connection (an attribute of the pool).
_TAKEN = "_pgqueue_taken"
_KEPT = "_pgqueue_kept"
_IDLE = psycopg.pq.TransactionStatus.IDLE
