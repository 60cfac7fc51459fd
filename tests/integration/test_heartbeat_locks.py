"""A heartbeat never waits for a job row another transaction holds.

The completer's ack deletes a batch of rows in whatever order its plan reads them (a hash join
over a large batch reads the table in its physical order), while the heartbeat extends the
same rows' leases. Had the heartbeat waited for the rows it could not lock, the two could each
hold a row the other waits for: a deadlock (seen in the burst scenario of the fault suite, with
batches of a thousand acks). The heartbeat skips a locked row instead, extends the others, and
reports the skipped one as still held but not extended: not lost, and its lease clock keeps
what the last beat that did extend it said.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import psycopg

from pgqueue.worker.heartbeater import Heartbeater
from pgqueue.worker.leases import LeaseClock
from pgqueue.worker.observer import WorkerStats
from pgqueue.worker.store import WorkerDB

TOKEN = 7


class _Held:
    """What the heartbeater reads of the worker's holdings: two jobs, nothing reported."""

    def __init__(self, leases: list[tuple[int, int]]) -> None:
        self._leases = leases
        self.stopped: list[tuple[tuple[int, int], str]] = []
        self.slots = 4

    def leases(self) -> list[tuple[int, int]]:
        return list(self._leases)

    def progress(self) -> list[Any]:
        return []

    def job(self, lease: tuple[int, int]) -> object:
        return object()

    def completing(self, lease: tuple[int, int]) -> bool:
        return False

    def stop(self, lease: tuple[int, int], reason: str) -> None:
        self.stopped.append((lease, reason))


def _running(dsn: str, job_ids: list[int], worker_id: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE pgqueue.jobs SET state = 'running', lease_token = %s, worker_id = %s,"
            " lease_expires_at = now() + interval '30 seconds', started_at = now()"
            " WHERE id = ANY(%s)",
            (TOKEN, worker_id, job_ids),
        )


def _leases(dsn: str, job_ids: list[int]) -> dict[int, datetime]:
    """When each job's lease expires."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT id, lease_expires_at FROM pgqueue.jobs WHERE id = ANY(%s)", (job_ids,)
        ).fetchall()
    return {int(job_id): expires for job_id, expires in rows}


def _deadlocks(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    assert row is not None
    return int(row[0])


def _waiting_on(dsn: str, holder_pid: int) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
            (holder_pid,),
        ).fetchone()
    return bool(row and row[0])


def _heartbeater(
    dsn: str, held: _Held, worker_id: str, leases: LeaseClock | None = None
) -> Heartbeater:
    """The real heartbeater on a real one-connection store, beating 30 s leases."""
    return Heartbeater(
        WorkerDB(dsn, size=1),
        held,  # type: ignore[arg-type]
        WorkerStats(),
        worker_id=worker_id,
        lease=30.0,
        leases=leases,
    )


def _beating(
    heartbeater: Heartbeater,
    body: Callable[[], Awaitable[None]],
    outcome: list[BaseException | None],
) -> threading.Thread:
    """A started thread running ``body`` on an event loop of its own, with the heartbeater's
    store open around it; what it raised (or None) goes to ``outcome``."""

    async def main() -> None:
        store = heartbeater.store
        assert isinstance(store, WorkerDB)
        await store.open()
        try:
            await body()
        finally:
            await store.close()

    def run() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:
            outcome.append(exc)
        else:
            outcome.append(None)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_heartbeat_skips_a_row_an_ack_holds_and_they_do_not_deadlock(dsn, pgq):
    first, second = pgq.enqueue("t", {}), pgq.enqueue("t", {})
    worker_id = str(uuid.uuid4())
    _running(dsn, [first, second], worker_id)
    before = _leases(dsn, [first, second])
    deadlocks = _deadlocks(dsn)
    held = _Held([(first, TOKEN), (second, TOKEN)])
    leases = LeaseClock(30.0)
    leases.beat(1.0, [(second, TOKEN)])  # an earlier beat extended the second job's lease
    heartbeater = _heartbeater(dsn, held, worker_id, leases)
    outcome: list[BaseException | None] = []
    # An ack of both jobs, in the order its plan took them: the second job first.
    with psycopg.connect(dsn) as ack:
        ack.execute("DELETE FROM pgqueue.jobs WHERE id = %s", (second,))
        beating = _beating(heartbeater, heartbeater.run_once, outcome)
        deadline = time.monotonic() + 30
        while beating.is_alive() and not _waiting_on(dsn, ack.info.backend_pid):
            assert time.monotonic() < deadline, "the heartbeat neither ended nor waited"
            time.sleep(0.02)
        # Had the heartbeat waited for the second job's row, it would hold the first job's,
        # the one the ack takes next: a deadlock, and one of the two statements fails.
        ack_error: list[psycopg.Error] = []
        try:
            ack.execute("DELETE FROM pgqueue.jobs WHERE id = %s", (first,))
        except psycopg.errors.DeadlockDetected as exc:
            ack_error.append(exc)
        ack.rollback()  # (the rows stay, to be looked at)
        beating.join(timeout=60)

    assert ack_error == []
    assert outcome == [None]
    assert _deadlocks(dsn) == deadlocks
    after = _leases(dsn, [first, second])
    assert after[first] > before[first]  # extended
    assert after[second] == before[second]  # skipped: not extended ...
    assert held.stopped == []  # ... and not taken for lost
    assert heartbeater.lost == set()
    # Its lease clock still has the beat that last extended it; the first job's is this beat's.
    assert leases._extended[(second, TOKEN)] == 1.0
    assert leases._extended[(first, TOKEN)] > 1.0


def test_a_row_an_operator_held_past_its_lease_is_extended_within_seconds_of_its_release(dsn, pgq):
    """An operator's transaction keeps one job's row locked (``SELECT ... FOR UPDATE`` left
    open) while the worker's heartbeats run: the lease of that job cannot be extended, and
    may run out. Once the row is free, the heartbeater tries it again within a second or two,
    alone, rather than at its next full beat (a third of the lease: 10 s here), the window in
    which a reaper could take the job from a worker still running it."""
    first, second = pgq.enqueue("t", {}), pgq.enqueue("t", {})
    worker_id = str(uuid.uuid4())
    _running(dsn, [first, second], worker_id)
    held = _Held([(first, TOKEN), (second, TOKEN)])
    heartbeater = _heartbeater(dsn, held, worker_id)
    stop = threading.Event()
    outcome: list[BaseException | None] = []

    async def loop() -> None:
        task = asyncio.ensure_future(heartbeater.run())
        await asyncio.to_thread(stop.wait)
        heartbeater.stop()
        await task

    initial = _leases(dsn, [first, second])
    with psycopg.connect(dsn) as operator:
        operator.execute("SELECT 1 FROM pgqueue.jobs WHERE id = %s FOR UPDATE", (second,))
        beating = _beating(heartbeater, loop, outcome)
        try:
            deadline = time.monotonic() + 30
            while _leases(dsn, [first])[first] == initial[first]:  # the first beat
                assert time.monotonic() < deadline and not outcome, "no heartbeat"
                time.sleep(0.02)
            before = _leases(dsn, [first, second])
            assert before[second] == initial[second]  # skipped while the operator holds it
            operator.rollback()  # the row is free again
            released = time.monotonic()
            extended_after = None
            while time.monotonic() - released < 6:
                if _leases(dsn, [second])[second] > before[second]:
                    extended_after = time.monotonic() - released
                    break
                time.sleep(0.05)
            after = _leases(dsn, [first, second])
        finally:
            stop.set()
            beating.join(timeout=30)

    assert outcome == [None]
    assert extended_after is not None, "not extended within 6 s of its release"
    assert after[first] == before[first]  # tried again alone: the other lease is not touched
    assert held.stopped == [] and heartbeater.lost == set()
