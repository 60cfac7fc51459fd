"""Tasks for the fault-injection harness, run by real ``pgq work`` processes:

    pgq work tests.chaos.chaos_app:pgq

Every job carries a unique number ``n``. Every execution is written to the effects ledger
(``chaos_ledger``: job id, n, lease token, attempt, worker, pid, start/end, database time) on a
connection of its own (``CHAOS_LEDGER_DSN``, else ``PGQUEUE_DSN``), so the record survives
whatever happens to the worker's own connections, and a partition between the worker and the
queue does not stop the effect from happening (the interesting case for duplicates).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from typing import Any

from psycopg_pool import AsyncConnectionPool, ConnectionPool

from pgqueue import EventTimeout, PgQueue, current_job

pgq = PgQueue()

# One ledger writer per process (a worker has one event loop). It group-commits: rows written
# while an INSERT is in flight go out together in the next one, and each handler waits until its
# own row is committed, so an effect is durable before the handler returns (and before the ack).
# A handler stopped while its row waits to go out leaves none (see _flush).
_writers: dict[str, _LedgerWriter] = {}


class _LedgerWriter:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.pool: AsyncConnectionPool | None = None
        self.pending: list[tuple[tuple[Any, ...], asyncio.Future[None]]] = []
        self.flushing: asyncio.Task[None] | None = None

    async def write(self, row: tuple[Any, ...]) -> None:
        done = asyncio.get_running_loop().create_future()
        self.pending.append((row, done))
        if self.flushing is None or self.flushing.done():
            self.flushing = asyncio.create_task(self._flush())
        await done

    async def _flush(self) -> None:
        while self.pending:
            batch, self.pending = self.pending, []
            try:
                if self.pool is None:
                    pool = AsyncConnectionPool(
                        self.dsn, min_size=1, max_size=1, open=False, kwargs={"autocommit": True}
                    )
                    await pool.open(wait=True)
                    self.pool = pool
                async with self.pool.connection() as conn:
                    # A row whose handler was stopped while it waited (a lost lease, a crash
                    # or a shutdown: its await cancelled) is not written: the execution ended
                    # before its effect, which must not land later (seconds later, when the
                    # database is back) as if it had happened then. Nothing awaits between
                    # this and the INSERT going out.
                    batch = [(row, done) for row, done in batch if not done.cancelled()]
                    if not batch:
                        continue
                    columns = [list(c) for c in zip(*(row for row, _ in batch), strict=True)]
                    await conn.execute(
                        "INSERT INTO chaos_ledger (job_id, n, token, attempt, worker, pid, event)"
                        " SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::int[], %s::int[],"
                        " %s::text[], %s::int[], %s::text[])",
                        columns,
                    )
            except Exception as exc:  # the handlers see it: the job fails and is retried
                for _, done in batch:
                    if not done.done():
                        done.set_exception(exc)
            else:
                for _, done in batch:
                    if not done.done():
                        done.set_result(None)


async def record(event: str, n: int) -> None:
    ctx = current_job()
    dsn = os.environ.get("CHAOS_LEDGER_DSN") or os.environ["PGQUEUE_DSN"]
    writer = _writers.get(dsn) or _writers.setdefault(dsn, _LedgerWriter(dsn))
    await writer.write(
        (ctx.id, n, ctx.job.lease_token, ctx.attempt, ctx.worker_id, os.getpid(), event)
    )


TX_INSERT = (
    "INSERT INTO chaos_tx_ledger (job_id, n, token, attempt, worker, pid)"
    " VALUES (%s, %s, %s, %s, %s, %s)"
)


def _tx_row(n: int) -> tuple[Any, ...]:
    ctx = current_job()
    return (ctx.id, n, ctx.job.lease_token, ctx.attempt, ctx.worker_id, os.getpid())


@pgq.task(name="chaos.work", max_attempts=1000)
async def work(n: int, ms: float = 0.0, block_ms: float = 0.0, tx: bool = False) -> None:
    """The effect: a start record, some work, an end record (the end is the effect).
    ``block_ms``: first block the whole event loop that long (a careless handler). ``tx``:
    then the effect again, in the transaction that completes the job (the transactional
    ledger, in the queue's database)."""
    await record("start", n)
    if block_ms:
        time.sleep(block_ms / 1000)  # noqa: ASYNC251 - the fault under test
    if ms:
        await asyncio.sleep(ms / 1000)
    await record("end", n)
    if tx:
        async with current_job().transaction() as conn:
            await conn.execute(TX_INSERT, _tx_row(n))


@pgq.task(name="chaos.poison", max_attempts=3)
async def poison(n: int) -> None:
    """Kills its worker process every time it runs."""
    await record("start", n)
    os._exit(1)


# -- durable jobs (scenario 14) ----------------------------------------------------------------

#: How long a durable job waits for its event: far beyond what the emitter takes, short enough
#: that a wait nobody woke ends the run with figures (the report counts it) instead of a hang.
EVENT_TIMEOUT_S = 120.0


def event_name(n: int) -> str:
    return f"chaos-{n}"


def sleep_seconds(n: int, ms: float) -> float:
    """Job n's durable sleep: between 0 and ``ms`` milliseconds, spread by n."""
    return ms / 1000 * (n * 7919 % 997) / 996


async def _plain_step(step: str, n: int) -> int:
    """A plain step's function: its execution is its ledger row, committed before it returns
    (and so before the checkpoint's statement starts). Returns the run's lease token."""
    await record(f"step:{step}", n)
    return current_job().job.lease_token


async def _transactional_step(conn: Any, n: int) -> int:
    """A transactional step's function: the execution recorded on the ledger's own connection
    first, then the effect on the step's connection (committed with the checkpoint, or not at
    all: the transactional ledger must end with exactly one row per job)."""
    await record("step:B", n)
    await conn.execute(TX_INSERT, _tx_row(n))
    return current_job().job.lease_token


@pgq.task(name="chaos.durable", max_attempts=1000)
async def durable(n: int, ms: float = 0.0, tx: bool = False) -> None:
    """Steps, a durable sleep and a wait: step A (plain), step B (transactional, with ``tx``),
    a sleep of up to ``ms``, a wait for the event ``chaos-<n>``, step C. Each run writes a
    start record, the run that completes an end record."""
    ctx = current_job()
    await record("start", n)
    await ctx.step_async("A", _plain_step, "A", n)
    if tx:
        await ctx.step_async("B", _transactional_step, n, transaction=True)
    await ctx.sleep_async(sleep_seconds(n, ms))
    with contextlib.suppress(EventTimeout):  # the wait's step is 'timed_out': the check counts it
        await ctx.wait_for_event_async(event_name(n), timeout=EVENT_TIMEOUT_S)
    await ctx.step_async("C", _plain_step, "C", n)
    await record("end", n)


# -- sync handlers (run in child processes under --pool process) ------------------------------

_sync_pools: dict[str, ConnectionPool] = {}


def record_sync(event: str, n: int) -> None:
    """The sync twin of record(): one row, committed before the handler goes on."""
    ctx = current_job()
    dsn = os.environ.get("CHAOS_LEDGER_DSN") or os.environ["PGQUEUE_DSN"]
    pool = _sync_pools.get(dsn)
    if pool is None:
        pool = ConnectionPool(dsn, min_size=1, max_size=1, open=True, kwargs={"autocommit": True})
        _sync_pools[dsn] = pool
    with pool.connection() as conn:
        conn.execute(
            "INSERT INTO chaos_ledger (job_id, n, token, attempt, worker, pid, event)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (ctx.id, n, ctx.job.lease_token, ctx.attempt, ctx.worker_id, os.getpid(), event),
        )


@pgq.task(name="chaos.sync_work", max_attempts=1000)
def sync_work(n: int, ms: float = 0.0, crash: str = "", tx: bool = False) -> None:
    """The effect from a plain ``def`` handler. ``crash``: on its first attempt, the process
    running it dies mid-job (``exit``: os._exit(3); ``kill``: SIGKILL, as the OOM killer does).
    ``tx``: as for chaos.work."""
    record_sync("start", n)
    if crash and current_job().attempt == 1:
        if crash == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(3)
    if ms:
        time.sleep(ms / 1000)
    record_sync("end", n)
    if tx:
        with current_job().transaction() as conn:
            conn.execute(TX_INSERT, _tx_row(n))
