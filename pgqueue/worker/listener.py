"""The listener: LISTEN on a dedicated connection, so idle fetchers wake within milliseconds.

It uses its own direct connection (never a transaction pooler, where LISTEN does not work). On
connecting it checks that a notification sent from another connection arrives; if none does
(a transaction-pooling PgBouncer in the way), it says so in the log and stops: the fetcher then
finds jobs by polling.
When the connection drops it reconnects with backoff and wakes the fetcher once, which claims
whatever arrived meanwhile; between notifications it checks the connection is alive, so a
silently dead connection is noticed within ``health_interval`` and ``probe_timeout``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import psycopg

from pgqueue.db.queries import query
from pgqueue.rules.log_actions import Action, fields
from pgqueue.worker.service import Service


class Listener(Service):
    name = "listener"

    def __init__(
        self,
        dsn: str,
        queues: list[str],
        *,
        on_jobs: Callable[[int | None], None],
        on_cancel: Callable[[int], None],
        on_listening: Callable[[], None] = lambda: None,
        health_interval: float = 10.0,
        probe_timeout: float = 3.0,
        application_name: str | None = None,
    ) -> None:
        super().__init__()
        self.dsn = dsn
        self.queues = set(queues)
        self.on_jobs = on_jobs
        self.on_cancel = on_cancel
        self.on_listening = on_listening
        self.health_interval = health_interval
        self.extra: dict[str, Any] = (
            {"application_name": application_name} if application_name else {}
        )
        self.connected = False
        self.notifications = 0
        self.probe_timeout = probe_timeout

    def interval(self) -> float:
        return 0.0

    async def run_once(self) -> None:
        conn = await psycopg.AsyncConnection.connect(
            self.dsn, autocommit=True, connect_timeout=10, **self.extra
        )
        try:
            await conn.execute(query("listen_jobs"))
            await conn.execute(query("listen_cancel"))
            if not await self._notifications_arrive(conn):
                self.log.warning(
                    "LISTEN does not work on this connection (a transaction-pooling proxy such "
                    "as PgBouncer?): falling back to polling; pass --listen-dsn with a direct "
                    "connection to wake up at once",
                    extra=fields(Action.LISTENER_POLLING),
                )
                self.stop()
                return
            self.connected = True
            # It stays in run_once while connected: say now that the database is back, so an
            # outage ends (and the services backing off retry) the moment it reconnects.
            self.outage.succeeded(self)
            self.log.info("listening for notifications", extra=fields(Action.LISTENER_LISTENING))
            self.on_jobs(None)  # catch up on anything enqueued while we were not listening
            self.on_listening()  # ... and on cancels sent meanwhile (a heartbeat reads them)
            while not self.stopping.is_set():
                async for notify in conn.notifies(timeout=self.health_interval):
                    self.notifications += 1
                    if notify.channel == "pgqueue_cancel":
                        self.on_cancel(int(notify.payload))
                    elif notify.payload in self.queues:
                        self.on_jobs(notify.pid)
                await self._ping(conn)
        finally:
            self.connected = False
            await conn.close()

    async def _ping(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Is the server still there? A host that vanished without a word never answers,
        and TCP would wait for hours: no answer within ``probe_timeout`` ends the connection
        (the listener connects again; meanwhile the fetcher polls). Closed, not cancelled:
        psycopg's cancellation would first ask the silent server to cancel, for 10 s more."""
        ping = asyncio.ensure_future(conn.execute(query("ping")))
        done, _ = await asyncio.wait({ping}, timeout=self.probe_timeout)
        if not done:
            await conn.close()  # the ping can only fail now
            ping.cancel()
            await asyncio.gather(ping, return_exceptions=True)
            raise psycopg.OperationalError(
                f"the listener's connection did not answer its ping within {self.probe_timeout:g} s"
            )
        ping.result()

    async def _notifications_arrive(self, conn: psycopg.AsyncConnection[Any]) -> bool:
        """Does a NOTIFY sent from another connection reach this one? Not through a
        transaction pooler, where LISTEN stays on a server connection others then use."""
        token = uuid.uuid4().hex
        await conn.execute(query("listen_probe"))
        other = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True, connect_timeout=10)
        try:
            await other.execute(query("notify_probe"), {"token": token})
        finally:
            await other.close()
        arrived = False
        async for notify in conn.notifies(timeout=self.probe_timeout):
            if notify.channel == "pgqueue_probe" and notify.payload == token:
                arrived = True
                break
        await conn.execute(query("unlisten_probe"))
        return arrived
