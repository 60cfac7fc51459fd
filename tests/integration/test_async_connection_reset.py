"""A pooled async connection reset by the network (no FATAL message from the server first: a
load balancer's or a proxy's RST, a backend killed) leaves no registration with the loop.

libpq closes a connection's socket itself when a read or a write finds it reset. If the loop
still watches that descriptor, the next socket given the same number (the pool's replacement
connection, opened at once) cannot be watched: the loop believes it already is, and the kernel
forgot the old one with its socket. Its connection attempt fails (``FileNotFoundError`` from
the selector) and the pool retries a second later, or its waits go unanswered. So a statement
that fails in any step, the first one included (the write of a statement the server cannot
receive any more), takes the watch away before the socket is reused.

The reset comes from a small TCP proxy between the client and PostgreSQL that closes its
sockets with ``SO_LINGER`` 0.
"""

from __future__ import annotations

import asyncio
import selectors
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgqueue import PgQueue
from pgqueue.db.async_wait import LeanWaits
from tests.helpers import stray_watches

PROMPT = 10.0


class _ResettingProxy:
    """Forwards TCP connections to the server; :meth:`reset` ends them all with an RST."""

    def __init__(self, upstream: tuple[int, Any]) -> None:
        self._upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self._resetting = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        with selectors.DefaultSelector() as sel:
            sel.register(self._listener, selectors.EVENT_READ)
            while not self._stopped.is_set():
                if self._resetting.is_set():
                    with self._lock:
                        for pair in self._pairs:
                            for s in pair:
                                sel.unregister(s)
                                s.setsockopt(
                                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                                )
                                s.close()
                        self._pairs.clear()
                    self._resetting.clear()
                for key, _ in sel.select(0.01):
                    if key.fileobj is self._listener:
                        client, _addr = self._listener.accept()
                        server = socket.socket(self._upstream[0], socket.SOCK_STREAM)
                        server.connect(self._upstream[1])
                        with self._lock:
                            self._pairs.append((client, server))
                        sel.register(client, selectors.EVENT_READ, server)
                        sel.register(server, selectors.EVENT_READ, client)
                        continue
                    source: socket.socket = key.fileobj  # type: ignore[assignment]
                    try:
                        data = source.recv(65536)
                    except OSError:
                        data = b""
                    if data:
                        key.data.sendall(data)
                    else:  # one side closed: close both
                        with self._lock:
                            for pair in [p for p in self._pairs if source in p]:
                                self._pairs.remove(pair)
                                for s in pair:
                                    sel.unregister(s)
                                    s.close()

    def reset(self) -> None:
        self._resetting.set()
        while self._resetting.is_set():
            time.sleep(0.005)

    def close(self) -> None:
        self._stopped.set()
        self._thread.join(5)
        self._listener.close()


@pytest.fixture
def proxied_dsn(dsn: str) -> Iterator[tuple[str, _ResettingProxy]]:
    params = conninfo_to_dict(dsn)
    host = str(params.get("host") or "/tmp")
    port = int(params.get("port") or 5432)
    if host.startswith("/"):
        upstream: tuple[int, Any] = (socket.AF_UNIX, f"{host}/.s.PGSQL.{port}")
    else:
        upstream = (socket.AF_INET, (host, port))
    proxy = _ResettingProxy(upstream)
    params.update(host="127.0.0.1", port=str(proxy.port))
    params.pop("hostaddr", None)
    try:
        yield make_conninfo("", **params), proxy
    finally:
        proxy.close()


def test_a_statement_on_a_reset_connection_leaves_no_registration(
    proxied_dsn: tuple[str, _ResettingProxy],
) -> None:
    """Reset while it waits for nothing (the loop has not looked at it since): its next
    statement fails in its first step, and the loop no longer watches its descriptor."""
    dsn, proxy = proxied_dsn

    async def work() -> tuple[type[BaseException], dict[int, Any]]:
        conn = await LeanWaits.connect(dsn, autocommit=True)
        try:
            await conn.execute("SELECT 1")  # watched from now on
            proxy.reset()
            time.sleep(0.1)  # noqa: ASYNC251 (the loop must not see the reset first)
            with pytest.raises(psycopg.OperationalError) as failed:
                await conn.execute("SELECT 1")
            return failed.type, stray_watches()
        finally:
            await conn.close()

    failure, stray = asyncio.run(work())
    assert issubclass(failure, psycopg.OperationalError)
    assert stray == {}


def test_the_pool_replaces_a_reset_kept_connection_at_once(
    proxied_dsn: tuple[str, _ResettingProxy],
) -> None:
    """The next call finds the kept connection reset (its check fails) and gets a new one:
    the new connection's attempt succeeds the first time, whatever descriptor it gets."""
    dsn, proxy = proxied_dsn
    pgq = PgQueue(dsn, pool_size=2)

    @pgq.task(name="t")
    def t() -> None: ...

    async def work() -> tuple[list[int], dict[str, int]]:
        try:
            jobs = [int(await pgq.enqueue_async("t", {}))]
            for _ in range(3):
                proxy.reset()
                time.sleep(0.1)  # noqa: ASYNC251 (as above)
                jobs.append(int(await asyncio.wait_for(pgq.enqueue_async("t", {}), PROMPT)))
            pool = pgq._pools._async_pools[asyncio.get_running_loop()]
            return jobs, pool.get_stats()
        finally:
            await pgq.aclose()

    try:
        jobs, stats = asyncio.run(work())
    finally:
        pgq.close()
    assert len(jobs) == 4
    assert stats.get("connections_errors", 0) == 0, stats
