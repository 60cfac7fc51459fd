"""pgqueue's benchmark driver (see ``benchmarks.drivers.protocol``), and its worker app.

    python -m benchmarks.drivers.pgqueue_driver --dsn DSN enqueue --producers 8 --count 8000
    python -m pgqueue.cli work benchmarks.drivers.pgqueue_driver:pgq --concurrency 64

Producers use the sync API from threads (the API most applications call); bulk uses
``enqueue_many`` (COPY). The worker is a real ``pgq work`` process (see ``work_command``).
"""

from __future__ import annotations

import sys
import time

from benchmarks.drivers import protocol
from pgqueue import PgQueue
from pgqueue.db import migrate

pgq = PgQueue()
TASK = "bench.job"
#: The same no-op as a plain function (thread pool): `benchmarks.profile_drain --sync`.
SYNC_TASK = "bench.sync_job"
DEFAULT_CONCURRENCY = 64


@pgq.task(name=TASK)
async def job(sent: float | None = None) -> None:
    protocol.STATS.job(sent)


@pgq.task(name=SYNC_TASK)
def sync_job(sent: float | None = None) -> None:
    protocol.STATS.job(sent)


def work_command(python: str, concurrency: int) -> list[str]:
    """The worker as users run it: ``pgq work`` (DSN from ``PGQUEUE_DSN``)."""
    return [
        python,
        "-m",
        "pgqueue.cli",
        "work",
        "benchmarks.drivers.pgqueue_driver:pgq",
        "--concurrency",
        str(concurrency or DEFAULT_CONCURRENCY),
        "--log-level",
        "WARNING",
    ]


def main(argv: list[str] | None = None) -> None:
    args = protocol.parser(__doc__ or "").parse_args(argv)
    dsn: str = args.dsn
    if args.command == "setup":
        migrate.upgrade(dsn)
    elif args.command == "enqueue":

        def make():
            app = PgQueue(dsn, pool_size=1)
            return lambda: app.enqueue(TASK, {})

        rate = protocol.threaded_rate(args.producers, args.count // args.producers, make)
        protocol.emit(rate=rate)
    elif args.command == "bulk":
        with PgQueue(dsn, pool_size=1) as app:
            app.enqueue_many([])  # open the pool before the clock starts
            app.enqueue(TASK, {})
            started = time.perf_counter()
            for n in protocol.chunks(args.count, args.chunk):
                app.enqueue_many([job.s() for _ in range(n)])
            protocol.emit(rate=args.count / (time.perf_counter() - started))
    elif args.command == "latency":
        with PgQueue(dsn, pool_size=1) as app:
            sent = 0
            for _ in protocol.paced(args.rate, args.seconds):
                app.enqueue(TASK, {"sent": time.time()})
                sent += 1
            protocol.emit(sent=sent)
    elif args.command == "work":
        sys.exit("run the worker with work_command(): it is `pgq work`")


if __name__ == "__main__":
    main()
