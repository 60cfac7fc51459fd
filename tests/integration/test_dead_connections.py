"""A worker notices a connection whose server went silent, rather than waiting on it for hours.

A database host that dies without a word (power lost, a failover that moves its address, a
firewall or NAT that forgets the connection) leaves every connection to it open and silent: a
read of a reply that will never come waits until TCP gives up, which with the system's
defaults is more than two hours (keepalives after 7,200 s of silence), or some 15 minutes for a
request never acknowledged. Two checks here:

* the listener's ping between notifications gives up after ``probe_timeout`` and the listener
  connects again (a proxy that stops passing traffic, ``tests/chaos/proxy.py``'s ``pause``);
* every connection a worker or a client opens over TCP carries keepalives and a user timeout
  (``pgqueue.db.liveness``), read back from their own sockets: the kernel then ends a
  connection to a vanished host within about half a minute (a proxy cannot show that: its own
  kernel answers for the vanished server).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
from collections.abc import Iterator

import pytest

from pgqueue import PgQueue, ResultTimeoutError
from pgqueue.db.liveness import KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, USER_TIMEOUT, dead_peer_checked
from pgqueue.worker.listener import Listener
from tests.chaos.proxy import Proxy
from tests.helpers import ThreadWorker, run_closing, wait_for


@contextlib.contextmanager
def running_listener(
    dsn: str, *, health_interval: float, probe_timeout: float
) -> Iterator[Listener]:
    """A real Listener service on its own event loop in a thread."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder: dict[str, Listener] = {}

    async def main() -> None:
        listener = Listener(
            dsn,
            ["dead_conn"],
            on_jobs=lambda pid: None,
            on_cancel=lambda job_id: None,
            health_interval=health_interval,
            probe_timeout=probe_timeout,
        )
        holder["listener"] = listener
        ready.set()
        await listener.run()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    ready.wait(10)
    listener = holder["listener"]
    try:
        yield listener
    finally:
        loop.call_soon_threadsafe(listener.stop)
        thread.join(30)
        loop.close()


def test_a_listener_whose_server_went_silent_connects_again(dsn):
    proxy = Proxy(dsn).start()
    try:
        with running_listener(proxy.dsn(), health_interval=0.5, probe_timeout=1.0) as listener:
            wait_for(lambda: listener.connected, message="the listener to connect")
            proxy.pause()
            try:
                # The ping after half a second of quiet gets no answer within a second.
                wait_for(lambda: not listener.connected, timeout=10,
                         message="the listener to give its silent connection up")  # fmt: skip
            finally:
                proxy.heal()
            wait_for(lambda: listener.connected, timeout=30, message="the listener to reconnect")
    finally:
        proxy.close()


app = PgQueue()


@app.task(name="dead_conn.noop", queue="dead_conn")
def noop() -> None:
    pass


def _tcp_sockets_to(port: int) -> list[socket.socket]:
    """This process's TCP sockets connected to ``port`` (duplicates, for the caller to close)."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            fd = os.dup(int(name))
        except OSError:
            continue
        try:
            sock = socket.socket(fileno=fd)
        except OSError:
            os.close(fd)  # not a socket
            continue
        try:
            ours = (sock.family, sock.type) == (socket.AF_INET, socket.SOCK_STREAM) and (
                sock.getpeername()[1] == port
            )
        except OSError:
            ours = False
        if ours:
            found.append(sock)
        else:
            sock.close()
    return found


def test_every_worker_connection_gives_up_on_a_vanished_server(dsn):
    proxy = Proxy(dsn).start()  # (only for its TCP address: the tests' server is on a socket)
    worker = ThreadWorker(app, proxy.dsn(), queues=["dead_conn"])
    worker.start()
    try:
        wait_for(lambda: worker.worker.executor is not None, message="the worker to start")
        # The pool's connections and the listener's, at least.
        sockets = wait_for(lambda: (s := _tcp_sockets_to(proxy.port)) and len(s) >= 2 and s,
                           message="the worker's connections")  # fmt: skip
        _assert_checked(sockets)
    finally:
        worker.stop()
        proxy.close()


def _assert_checked(sockets: list[socket.socket]) -> None:
    for sock in sockets:
        with sock:
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == KEEPALIVE_IDLE
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == KEEPALIVE_INTERVAL
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == (
                USER_TIMEOUT * 1000
            )


def test_a_clients_own_connections_give_up_on_a_vanished_server(dsn):
    """The pool a PgQueue opens, sync and async, and its result listener; its ``dsn`` is the
    one it was given."""
    proxy = Proxy(dsn).start()
    pgq = PgQueue(proxy.dsn())
    try:
        job = pgq.enqueue("dead_conn.noop", {}, result_ttl=60)
        assert pgq.dsn == proxy.dsn()

        async def both() -> list[socket.socket]:
            await pgq.enqueue_async("dead_conn.noop", {})
            with pytest.raises(ResultTimeoutError):  # (no worker: it waits, listening)
                await pgq.result_async(job, timeout=0.3)
            return _tcp_sockets_to(proxy.port)

        sockets = run_closing(pgq, both)
        # The sync pool's connection, the async pool's and the result listener's.
        assert len(sockets) >= 3
        _assert_checked(sockets)
    finally:
        pgq.close()
        proxy.close()


@pytest.mark.parametrize(
    ("dsn", "expected"),
    [
        ("host=db", {"keepalives_idle": str(KEEPALIVE_IDLE)}),
        # A DSN that says otherwise is left as it is.
        ("host=db keepalives_idle=60", {"keepalives_idle": "60"}),
        ("postgresql://db/app?keepalives=0", {"keepalives": "0"}),
    ],
)
def test_the_dsn_keeps_what_it_says(dsn, expected):
    from psycopg.conninfo import conninfo_to_dict

    got = conninfo_to_dict(dead_peer_checked(dsn))
    assert {key: got[key] for key in expected} == expected
