"""A worker through a database outage: how soon it is whole again, and what it logs.

    python -m benchmarks.outage [--runs 3] [--down 8]

Starts a private embedded PostgreSQL and a real ``pgq work`` process (the test suite's task
module), stops the server for ``--down`` seconds (long enough for every service's backoff to
reach its cap), starts it again and enqueues one job at once. Prints, per run and as medians:
seconds from the server's start to that job's ack (its row gone), the worker's
``database unavailable`` warnings and its ``database reachable again`` lines over the outage.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import statistics
import tempfile
import time
from pathlib import Path

import psycopg

from pgqueue import PgQueue
from pgqueue.db import embedded
from tests.conftest import OwnServer
from tests.helpers import ledger, spawn_worker, wait_for


def one_outage(down: float) -> tuple[float, int, int]:
    base = Path(tempfile.mkdtemp(prefix="pgqueue-outage-"))
    server = OwnServer(base)
    log = base / "worker.log"
    worker = spawn_worker(server.dsn, "--concurrency", "4", "--lease", "30s", log=log)
    try:
        with PgQueue(server.dsn) as pgq:
            pgq.enqueue("noop", {})
        wait_for(lambda: ledger(server.dsn, "end"), timeout=60, message="the worker to run a job")
        time.sleep(1.0)
        server.stop("fast")
        time.sleep(down)
        server.start()
        up = time.monotonic()
        with PgQueue(server.dsn) as pgq:
            # A job that touches nothing but pgqueue (the test app's ledger connection has an
            # outage of its own to get over).
            job = pgq.enqueue("instant", {})

            def acked() -> bool:
                with psycopg.connect(server.dsn) as conn:
                    row = conn.execute(
                        "SELECT count(*) FROM pgqueue.jobs WHERE id = %s", (job,)
                    ).fetchone()
                return row is not None and row[0] == 0

            wait_for(acked, timeout=60, interval=0.005, message="the job's ack after the outage")
        recovered = time.monotonic() - up
        time.sleep(6.0)  # every service back from its backoff
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(30)
        embedded.stop(server.data)
    lines = log.read_text().splitlines()
    shutil.rmtree(base, ignore_errors=True)
    warnings = sum(1 for line in lines if "WARNING" in line and "database unavailable" in line)
    back = sum(1 for line in lines if "database reachable again" in line)
    return recovered, warnings, back


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--down", type=float, default=8.0, help="seconds the server is down")
    args = parser.parse_args()
    results = []
    for run in range(1, args.runs + 1):
        recovered, warnings, back = one_outage(args.down)
        results.append((recovered, warnings, back))
        print(
            f"run {run}: server up -> job acked {recovered:.3f} s, "
            f"'database unavailable' warnings {warnings}, 'reachable again' lines {back}"
        )
    print(
        f"median over {args.runs} runs (server down {args.down:g} s): server up -> job acked "
        f"{statistics.median(r[0] for r in results):.3f} s, warnings "
        f"{statistics.median(r[1] for r in results):g}, 'reachable again' lines "
        f"{statistics.median(r[2] for r in results):g}"
    )


if __name__ == "__main__":
    main()
