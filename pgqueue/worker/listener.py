"""The listener: LISTEN on a dedicated connection, so idle fetchers wake within milliseconds.

It uses its own direct connection (never a transaction pooler, where LISTEN does not work).
When the connection drops it reconnects with backoff and wakes the fetcher once, which claims
whatever arrived meanwhile; between notifications it checks the connection is alive, so a
silently dead connection is noticed within ``health_interval``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from pgqueue.db.queries import query
from pgqueue.worker.service import Service


class Listener(Service):
    name = "listener"

    def __init__(
        self,
        dsn: str,
        queues: list[str],
        *,
        on_jobs: Callable[[], None],
        on_cancel: Callable[[int], None],
        health_interval: float = 10.0,
        application_name: str | None = None,
    ) -> None:
        super().__init__()
        self.dsn = dsn
        self.queues = set(queues)
        self.on_jobs = on_jobs
        self.on_cancel = on_cancel
        self.health_interval = health_interval
        self.extra: dict[str, Any] = (
            {"application_name": application_name} if application_name else {}
        )
        self.connected = False
        self.notifications = 0

    def interval(self) -> float:
        return 0.0

    async def run_once(self) -> None:
        conn = await psycopg.AsyncConnection.connect(
            self.dsn, autocommit=True, connect_timeout=10, **self.extra
        )
        try:
            await conn.execute(query("listen_jobs"))
            await conn.execute(query("listen_cancel"))
            self.connected = True
            self.log.info("listening for notifications")
            self.on_jobs()  # catch up on anything enqueued while we were not listening
            while not self.stopping.is_set():
                async for notify in conn.notifies(timeout=self.health_interval):
                    self.notifications += 1
                    if notify.channel == "pgqueue_cancel":
                        self.on_cancel(int(notify.payload))
                    elif notify.payload in self.queues:
                        self.on_jobs()
                await conn.execute(query("ping"))
        finally:
            self.connected = False
            await conn.close()
