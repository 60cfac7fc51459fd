"""Helpers for tests that run real workers: in-process (a thread with its own event loop) or as
real `pgq work` processes, plus polling and the effects ledger."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
import pytest

from pgqueue import PgQueue
from pgqueue.worker import Worker, WorkerSettings

if TYPE_CHECKING:
    from tests.chaos.proxy import Proxy

ROOT = Path(__file__).resolve().parent.parent
PGQ = shutil.which("pgq") or str(Path(sys.executable).parent / "pgq")
APP = "tests.integration.worker_app:pgq"

LEDGER_DDL = """
CREATE TABLE public.ledger (
    seq     bigserial PRIMARY KEY,
    job_id  bigint,
    attempt integer,
    pid     integer,
    worker  text,
    event   text NOT NULL,
    note    text,
    at      timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""


def wait_for(
    predicate: Callable[[], Any],
    timeout: float = 20.0,
    interval: float = 0.05,
    message: str = "condition",
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


def ledger(dsn: str, event: str | None = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT job_id, attempt, pid, worker, event, note FROM ledger"
            " WHERE %(event)s::text IS NULL OR event = %(event)s ORDER BY seq",
            {"event": event},
        ).fetchall()


def terminate_clients(dsn: str) -> int:
    """End every other client backend of the database (the server closing them): how many.
    Returns once they have exited (their clients' sockets say so), not when they were only
    signalled: a call right after must not race the server's goodbye."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(pg_terminate_backend(pid, 10000)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND backend_type = 'client backend'"
        ).fetchone()
    assert row is not None
    return int(row[0])


@contextmanager
def counting(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> Iterator[list[int]]:
    """Count the calls of ``owner.name`` (a method) inside the block."""
    calls = [0]
    original = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    yield calls
    monkeypatch.setattr(owner, name, original)


def run_closing(pgq: PgQueue, work: Callable[[], Awaitable[Any]]) -> Any:
    """``asyncio.run`` of ``work()``, the client's async side closed after it."""

    async def main() -> Any:
        try:
            return await work()
        finally:
            await pgq.aclose()

    return asyncio.run(main())


def stray_watches() -> dict[int, Any]:
    """Registrations with the running loop of the client's connections that are closed or
    broken, or whose socket is not the descriptor watched (pgqueue.db.async_wait)."""
    from pgqueue.db.async_wait import LeanWaits

    selector = asyncio.get_running_loop()._selector  # type: ignore[attr-defined]
    found = {}
    for fd, key in selector.get_map().items():
        owner = getattr(getattr(key.data[0], "_callback", None), "__self__", None)
        if isinstance(owner, LeanWaits) and (
            owner.closed or owner.broken or owner.pgconn.socket != fd
        ):
            found[fd] = owner
    return found


def scalar(dsn: str, sql: str, params: Any = None) -> Any:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(sql, params).fetchone()
    return row[0] if row else None


class ThreadWorker:
    """A Worker running on its own event loop in a background thread."""

    def __init__(self, app: PgQueue, dsn: str, **settings: Any) -> None:
        settings.setdefault("poll_interval", 0.5)
        settings.setdefault("reaper_interval", 0.5)
        settings.setdefault("shutdown_grace", 5.0)
        self.worker = Worker(app, WorkerSettings(**settings), dsn=dsn)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        try:
            asyncio.run(self.worker.run(handle_signals=False))
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def start(self) -> ThreadWorker:
        self.thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        self.worker.request_stop()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "worker did not stop"
        if self.error is not None:
            raise self.error

    def join(self, timeout: float = 60.0) -> None:
        """Wait for a --burst worker to finish on its own."""
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "burst worker did not finish"
        if self.error is not None:
            raise self.error


@contextmanager
def thread_worker(app: PgQueue, dsn: str, **settings: Any) -> Iterator[ThreadWorker]:
    worker = ThreadWorker(app, dsn, **settings).start()
    try:
        yield worker
    finally:
        if worker.thread.is_alive():
            worker.stop()


@contextmanager
def worker_through_proxy(
    app: PgQueue, dsn: str, *, release: threading.Event | None = None, **settings: Any
) -> Iterator[tuple[ThreadWorker, Proxy]]:
    """A worker whose connections go through the fault-injection proxy
    (``tests/chaos/proxy.py``), yielded once it is idle: done with its start-up, whose own
    statements must not meet a trap set by the test. ``release``: set before the worker stops
    (the event its test's held jobs wait on, so that they end)."""
    from tests.chaos.proxy import Proxy

    proxy = Proxy(dsn).start()
    worker = ThreadWorker(app, proxy.dsn(), **settings)
    worker.start()
    try:
        wait_for(
            lambda: scalar(
                dsn,
                "SELECT count(*) FROM pgqueue.idle_workers WHERE worker_id = %s",
                (worker.worker.id,),
            ),
            message="the worker to start",
        )
        yield worker, proxy
    finally:
        if release is not None:
            release.set()
        worker.stop()
        proxy.close()


def spawn_worker(
    dsn: str, *args: str, log: Path | None = None, app: str = APP
) -> subprocess.Popen[bytes]:
    """A real `pgq work` process (the tests' task module, the test's database)."""
    env = {**os.environ, "PGQUEUE_DSN": dsn, "PYTHONUNBUFFERED": "1"}
    command = [PGQ, "work", app, "--poll-interval", "0.5", "--reaper-interval", "0.5", *args]
    if log is None:
        return subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
        )
    with open(log, "ab") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def stop_workers(workers: list[subprocess.Popen[bytes]], timeout: float = 60) -> None:
    """SIGTERM every worker process, then check each drained and exited 0."""
    for worker in workers:
        worker.terminate()
    for worker in workers:
        try:
            assert worker.wait(timeout) == 0
        except subprocess.TimeoutExpired:
            worker.kill()
            raise


def spawn_fleet(
    dsn: str, count: int, *args: str, app: str = APP, log_dir: Path | None = None
) -> list[subprocess.Popen[bytes]]:
    """``count`` real workers, returned once all of them are registered (so a SIGTERM finds
    their signal handlers installed)."""
    before = scalar(dsn, "SELECT count(*) FROM pgqueue.workers")
    workers = [
        spawn_worker(dsn, *args, app=app, log=log_dir / f"w{i}.log" if log_dir else None)
        for i in range(count)
    ]
    wait_for(
        lambda: scalar(dsn, "SELECT count(*) FROM pgqueue.workers") >= before + count,
        timeout=60,
        message=f"{count} workers registered",
    )
    return workers
