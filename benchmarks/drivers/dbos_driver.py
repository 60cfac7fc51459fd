"""DBOS Transact's side of ``benchmarks.durable`` (runs in its own virtualenv, imports no pgqueue).

    python -m benchmarks.drivers.dbos_driver --url URL setup
    python -m benchmarks.drivers.dbos_driver --url URL enqueue --jobs 500 --steps 3
    python -m benchmarks.drivers.dbos_driver --url URL work

The system database is ``URL`` (its own database on the server being measured). The workload is
the one pgqueue runs: a workflow of ``--steps`` ``@DBOS.step`` calls of a function that returns a
small dict (0: a workflow with no step). As DBOS's docs recommend for running many workflows, they
go through a queue (``DBOS.register_queue``) with ``worker_concurrency`` 64 (the slots pgqueue's
worker has) and a 0.1 s polling interval (the default is 1 s, which would cap a short run). Jobs
are enqueued with ``DBOSClient`` before the worker starts; ``work`` runs until it is terminated.
"""

from __future__ import annotations

import argparse
import signal
import threading
from typing import Any

from dbos import DBOS, DBOSClient

NAME = "durable-bench"
VERSION = "bench"
QUEUE = "durable_bench"
CONCURRENCY = 64
POLLING_INTERVAL = 0.1


@DBOS.step()
def compute(i: int) -> dict[str, Any]:
    return {"step": i, "ok": True}


@DBOS.workflow()
def stepped(count: int) -> None:
    for i in range(count):
        compute(i)


def _launch(url: str) -> None:
    DBOS(
        config={
            "name": NAME,
            "system_database_url": url,
            "application_version": VERSION,
            "executor_id": "durable-bench-worker",
            "log_level": "WARNING",
        }
    )
    DBOS.launch()
    DBOS.register_queue(
        QUEUE, worker_concurrency=CONCURRENCY, polling_interval_sec=POLLING_INTERVAL
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True, help="the system database (postgresql:// URL)")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("setup", help="create the system database and the queue")
    enqueue = commands.add_parser("enqueue", help="enqueue --jobs workflows of --steps steps")
    enqueue.add_argument("--jobs", type=int, required=True)
    enqueue.add_argument("--steps", type=int, required=True)
    commands.add_parser("work", help="run the queue until terminated")
    args = parser.parse_args(argv)
    if args.command == "setup":
        _launch(args.url)
        DBOS.destroy()
    elif args.command == "enqueue":
        client = DBOSClient(system_database_url=args.url)
        try:
            for _ in range(args.jobs):
                client.enqueue(
                    {
                        "queue_name": QUEUE,
                        "workflow_name": stepped.__qualname__,
                        "app_version": VERSION,
                        "application_name": NAME,
                    },
                    args.steps,
                )
        finally:
            client.destroy()
    else:
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        _launch(args.url)
        print("ready", flush=True)
        stop.wait()
        DBOS.destroy(workflow_completion_timeout_sec=0)


if __name__ == "__main__":
    main()
