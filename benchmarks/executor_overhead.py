"""The executor's own cost per no-op job, without a database: what the worker's Python spends
between a claim's hand-over and the outcome, for async and plain (handler thread) tasks.

    python benchmarks/executor_overhead.py [--rounds 60] [--jobs 1000] [--slots 64]

Each round hands ``--jobs`` claimed no-op jobs to an :class:`~pgqueue.worker.executor.Executor`
and waits for their outcomes; the figure is the fastest round per job (the least disturbed by
the rest of the machine). To compare with another checkout, run this file with that checkout
first on the path: ``PYTHONPATH=../other python benchmarks/executor_overhead.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from datetime import UTC, datetime

from pgqueue import PgQueue
from pgqueue.handler.job_context import ClaimedJob
from pgqueue.worker.executor import Executor


async def per_job(app: PgQueue, rounds: int, jobs: int, slots: int) -> float:
    """Seconds per job of the fastest round."""
    outcomes: list[object] = []
    done = asyncio.Event()

    def submit(outcome: object) -> None:
        outcomes.append(outcome)
        if len(outcomes) == jobs:
            done.set()

    executor = Executor(app.tasks, slots, "bench", submit)
    now = datetime.now(UTC)
    best = float("inf")
    for r in range(rounds):
        claimed = [
            ClaimedJob(i, "default", "noop", {}, 1, 5, 1, 0, now, now)
            for i in range(r * jobs, (r + 1) * jobs)
        ]
        outcomes.clear()
        done.clear()
        started = time.perf_counter()
        executor.accept(claimed)
        await done.wait()
        best = min(best, time.perf_counter() - started)
        executor.held()  # what each heartbeat asks
    executor.shutdown_threads()
    return best / jobs


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--slots", type=int, default=64)
    args = parser.parse_args()
    for kind in ("async", "sync"):
        app = PgQueue("postgresql://nobody@localhost/none")  # never connects
        if kind == "async":

            @app.task(name="noop")
            async def noop_async() -> None: ...

        else:

            @app.task(name="noop")
            def noop() -> None: ...

        seconds = asyncio.run(per_job(app, args.rounds, args.jobs, args.slots))
        print(f"{kind}: {seconds * 1e6:.2f} us/job", flush=True)


if __name__ == "__main__":
    main()
