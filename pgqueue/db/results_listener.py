"""One LISTEN connection per event loop for every ``await pgq.result_async(...)`` in it.

A web app awaiting results (FastAPI endpoints) would otherwise open a connection per call. The
listener holds one autocommit connection that ``LISTEN``s on ``pgqueue_results`` and wakes the
waiters of the ids each notification names; reads go through the client's pool. Waiters
register before their first read, and the listener is listening before it is handed out, so an
outcome committed between the read and the wait still wakes them. If the connection drops, every
waiter is woken (they re-read) and the listener reconnects with backoff; waiters also re-read
every :data:`pgqueue.db.results.RECHECK_SECONDS` whatever happens.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import psycopg

from pgqueue.db.liveness import dead_peer_checked
from pgqueue.db.queries import query
from pgqueue.rules.log_actions import Action, fields

log = logging.getLogger("pgqueue.db.results")

_MAX_BACKOFF = 10.0


class ResultListener:
    """Shared by the ``result_async`` calls of one :class:`~pgqueue.PgQueue` on one loop."""

    def __init__(self, dsn: str, conn_kwargs: dict[str, Any]) -> None:
        self._dsn = dsn
        # Named, so operators see what the one extra connection of a web app is.
        self._conn_kwargs = {"application_name": "pgqueue results listener", **conn_kwargs,
                             "autocommit": True}  # fmt: skip
        self._waiters: dict[int, set[asyncio.Event]] = {}
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._closed = False

    async def start(self) -> None:
        """Connect and LISTEN (raises the connection error of the first attempt)."""
        self._conn = await self._connect()
        self._ready.set()
        self._task = asyncio.create_task(self._run(), name="pgqueue-results-listener")

    @contextlib.contextmanager
    def watch(self, job_id: int) -> Iterator[asyncio.Event]:
        """An event set whenever a notification names ``job_id`` (or the listener reconnected)."""
        event = asyncio.Event()
        self._waiters.setdefault(job_id, set()).add(event)
        try:
            yield event
        finally:
            waiting = self._waiters.get(job_id)
            if waiting is not None:
                waiting.discard(event)
                if not waiting:
                    del self._waiters[job_id]

    async def close(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._conn is not None:
            await self._conn.close()

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        conn = await psycopg.AsyncConnection.connect(
            dead_peer_checked(self._dsn), **self._conn_kwargs
        )
        await conn.execute(query("listen_results"))
        return conn

    async def _run(self) -> None:
        failures = 0
        while not self._closed:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = await self._connect()
                    self._wake_all()  # notifications may have been missed while away
                    failures = 0
                async for note in self._conn.notifies():
                    self._wake(note.payload)
            except psycopg.Error as exc:
                failures += 1
                delay = min(_MAX_BACKOFF, 0.1 * 2**failures)
                log.warning(
                    "results listener lost its connection (%s); retrying in %.1fs",
                    str(exc).strip()[:200],
                    delay,
                    extra=fields(Action.RESULTS_LISTENER_LOST),
                )
                self._wake_all()
                if self._conn is not None:
                    await self._conn.close()
                self._conn = None
                await asyncio.sleep(delay)

    def _wake(self, payload: str) -> None:
        for part in payload.split(","):
            try:
                job_id = int(part)
            except ValueError:
                continue
            for event in self._waiters.get(job_id, ()):
                event.set()

    def _wake_all(self) -> None:
        for events in self._waiters.values():
            for event in events:
                event.set()
