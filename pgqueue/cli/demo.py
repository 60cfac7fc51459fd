"""``pgq demo``: a few thousand jobs through real worker processes on the embedded PostgreSQL.

The tasks below are the demo's own (queue ``demo``): quick ones, slow ones, a flaky API call
that succeeds after retries, and one poison job that always fails and ends in the dead letters.
``pgq work pgqueue.cli.demo:pgq --queue demo`` runs them; :func:`run` drives the whole show.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, LiteralString, NamedTuple, TypeVar

import psycopg
from psycopg.rows import class_row
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.syntax import Syntax
from rich.table import Table

from pgqueue.client import PgQueue
from pgqueue.db.migrate import upgrade
from pgqueue.rules.retry import ExponentialBackoff

QUEUE = "demo"
R = TypeVar("R")
#: Retries a few tenths of a second apart, so a demo shows them within its run.
QUICK_RETRIES = ExponentialBackoff(base=0.2, cap=2.0)
pgq = PgQueue()


@pgq.task(name="demo.resize_image", queue=QUEUE)
async def resize_image(image_id: int, width: int) -> None:
    await asyncio.sleep(random.uniform(0.001, 0.005))


@pgq.task(name="demo.send_report", queue=QUEUE)
def send_report(customer_id: int) -> None:
    time.sleep(random.uniform(0.05, 0.2))  # a slow, blocking call: runs in the thread pool


@pgq.task(name="demo.call_flaky_api", queue=QUEUE, max_attempts=6, backoff=QUICK_RETRIES)
def call_flaky_api(order_id: int) -> None:
    from pgqueue.handler.job_context import current_job

    # Fails on its first attempts about half the time; always succeeds by the third.
    if current_job().attempt < 3 and random.random() < 0.5:
        raise ConnectionError(f"upstream API timed out for order {order_id}")


@pgq.task(name="demo.parse_corrupt_file", queue=QUEUE, max_attempts=3, backoff=QUICK_RETRIES)
def parse_corrupt_file(path: str) -> None:
    raise ValueError(f"{path}: unexpected end of data at byte 4096")


@dataclass
class Totals:
    succeeded: int = 0
    retried: int = 0
    dead: int = 0


_INSPECT_SQL = """\
-- queues at a glance
SELECT * FROM pgqueue.queue_stats;
-- what died, and why
SELECT id, task, attempts, reason, last_error FROM pgqueue.dead_letters ORDER BY dead_at DESC;
-- every attempt's error and traceback of one dead job
SELECT e->>'attempt', e->>'error', e->>'message' FROM pgqueue.dead_letters,
       jsonb_array_elements(errors) AS e WHERE task = 'demo.parse_corrupt_file';
-- the workers that ran the demo
SELECT host, pid, jobs_succeeded, jobs_retried, jobs_dead, started_at, stopped_at
  FROM pgqueue.workers ORDER BY started_at DESC;
-- enqueue from SQL, then run `pgq work pgqueue.cli.demo:pgq --queue demo --burst`
SELECT pgqueue.enqueue('demo.send_report', '{"customer_id": 7}', queue => 'demo');"""


def run(
    jobs: int = 3000,
    workers: int = 2,
    concurrency: int = 16,
    dsn: str | None = None,
    console: Console | None = None,
) -> Totals:
    console = console or Console()
    app = PgQueue(dsn)
    url = app.dsn
    console.print(f"[bold]pgqueue demo[/bold] on [cyan]{url}[/cyan]", soft_wrap=True)
    upgrade(url)
    _clear_previous_run(url)
    total = _enqueue(app, jobs)
    app.close()
    console.print(
        f"enqueued [bold]{total}[/bold] jobs in one transaction; starting {workers} "
        f"worker processes x {concurrency} slots"
    )
    log = Path(tempfile.gettempdir()) / "pgqueue-demo-workers.log"
    started = time.monotonic()
    procs = _start_workers(url, workers, concurrency, log)
    try:
        _show_progress(url, total, console)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(60)
    elapsed = time.monotonic() - started
    totals = _totals(url, [p.pid for p in procs])
    _summary(console, totals, elapsed, log)
    return totals


def _clear_previous_run(url: str) -> None:
    with psycopg.connect(url) as conn:
        for table in ("jobs", "dead_letters", "job_history"):
            conn.execute(
                psycopg.sql.SQL("DELETE FROM {} WHERE queue = %s").format(
                    psycopg.sql.Identifier("pgqueue", table)
                ),
                (QUEUE,),
            )


def _enqueue(app: PgQueue, jobs: int) -> int:
    calls = []
    for i in range(jobs):
        roll = i % 10
        if roll < 6:
            calls.append(resize_image.s(i, width=random.choice([320, 640, 1280])))
        elif roll < 8:
            calls.append(send_report.s(i))
        else:
            calls.append(call_flaky_api.s(i))
    calls.append(parse_corrupt_file.s("invoices/2026-11.csv"))
    app.enqueue_many(calls)
    return len(calls)


def _start_workers(
    url: str, count: int, concurrency: int, log: Path
) -> list[subprocess.Popen[bytes]]:
    env = {**os.environ, "PGQUEUE_DSN": url}
    command = [
        sys.executable,
        "-m",
        "pgqueue.cli",
        "work",
        "pgqueue.cli.demo:pgq",
        "--queue",
        QUEUE,
        "--concurrency",
        str(concurrency),
        "--lease",
        "10s",
        "--log-level",
        "WARNING",
        "--poll-interval",
        "1s",
    ]
    with open(log, "wb") as out:
        return [
            subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
            for _ in range(count)
        ]


class _Counts(NamedTuple):
    waiting: int
    running: int
    dead: int


def _aggregate(url: str, row: type[R], sql: LiteralString, params: tuple[Any, ...]) -> R:
    """The one row of an aggregate query, as a ``row``."""
    with psycopg.connect(url) as conn, conn.cursor(row_factory=class_row(row)) as cur:
        found = cur.execute(sql, params).fetchone()
    assert found is not None  # an aggregate returns one row
    return found


def _counts(url: str) -> _Counts:
    return _aggregate(
        url,
        _Counts,
        "SELECT coalesce(sum(ready + scheduled), 0)::bigint AS waiting,"
        " coalesce(sum(running), 0)::bigint AS running, coalesce(sum(dead), 0)::bigint AS dead"
        " FROM pgqueue.queue_stats WHERE queue = %s",
        (QUEUE,),
    )


def _show_progress(url: str, total: int, console: Console) -> None:
    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as progress:
        done_bar = progress.add_task("finished", total=total)
        running_bar = progress.add_task("running", total=total)
        waiting_bar = progress.add_task("waiting", total=total)
        dead_bar = progress.add_task("dead-lettered", total=total)
        while True:
            counts = _counts(url)
            waiting, running, dead = counts.waiting, counts.running, counts.dead
            finished = total - waiting - running
            progress.update(done_bar, completed=finished)
            progress.update(running_bar, completed=running)
            progress.update(waiting_bar, completed=waiting)
            progress.update(dead_bar, completed=dead)
            if waiting == 0 and running == 0:
                return
            time.sleep(0.2)


def _totals(url: str, pids: list[int]) -> Totals:
    return _aggregate(
        url,
        Totals,
        "SELECT coalesce(sum(jobs_succeeded), 0)::bigint AS succeeded,"
        " coalesce(sum(jobs_retried), 0)::bigint AS retried,"
        " coalesce(sum(jobs_dead), 0)::bigint AS dead FROM pgqueue.workers"
        " WHERE pid = ANY(%s) AND started_at > now() - interval '1 hour'",
        (pids,),
    )


def _summary(console: Console, totals: Totals, elapsed: float, log: Path) -> None:
    table = Table(title="demo summary")
    table.add_column("processed", justify="right")
    table.add_column("retried", justify="right")
    table.add_column("dead-lettered", justify="right")
    table.add_column("elapsed", justify="right")
    table.add_column("jobs/s", justify="right")
    table.add_row(
        str(totals.succeeded),
        str(totals.retried),
        str(totals.dead),
        f"{elapsed:.1f}s",
        f"{(totals.succeeded + totals.dead) / elapsed:,.0f}",
    )
    console.print(table)
    console.print(f"worker logs: {log}")
    console.print(
        'Look around with [bold]psql "$(pgq db url)"[/bold] (or `pgq stats`, '
        "`pgq dlq list --traceback`):"
    )
    console.print(
        Syntax(_INSPECT_SQL, "sql", theme="ansi_dark", background_color="default"), soft_wrap=True
    )
