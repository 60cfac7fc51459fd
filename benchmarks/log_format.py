"""The cost of one log record, from the logging call to the formatted line (no database).

    python -m benchmarks.log_format [--records 100000] [--runs 5]

What the worker logs per job at INFO (``job started``, ``job succeeded``, ``job rescheduled``
with its error) and an application's line inside a job, each logged ``--records`` times through
a handler with pgqueue's filter and its text or JSON formatter writing to a null stream; prints
the best of ``--runs`` in microseconds of CPU time per record.
"""

from __future__ import annotations

import argparse
import io
import logging
import time
from collections.abc import Callable

from pgqueue.handler.logs import ContextFilter, JsonFormatter, TextFormatter, bind
from pgqueue.rules.log_actions import Action, Seconds, fields


class Null(io.TextIOBase):
    def write(self, text: str) -> int:
        return len(text)


def started(log: logging.Logger, n: int) -> None:
    log.info(
        "job started",
        extra=fields(Action.JOB_STARTED, job_id=n, task="send_mail", queue="default", attempt=1),
    )


def succeeded(log: logging.Logger, n: int) -> None:
    log.info(
        "job succeeded",
        extra=fields(
            Action.JOB_SUCCEEDED,
            job_id=n,
            task="send_mail",
            queue="default",
            attempt=1,
            duration=Seconds(0.0042),
        ),
    )


def rescheduled(log: logging.Logger, n: int) -> None:
    log.info(
        "job rescheduled",
        extra=fields(
            Action.JOB_RESCHEDULED,
            job_id=n,
            task="send_mail",
            queue="default",
            attempt=1,
            max_attempts=3,
            outcome="error",
            delay=Seconds(2.0),
            error="ValueError: bad address: x=1",
        ),
    )


def app_line(log: logging.Logger, n: int) -> None:
    log.info("charging card", extra={"order": n})


LINES: dict[str, Callable[[logging.Logger, int], None]] = {
    "job started": started,
    "job succeeded": succeeded,
    "job rescheduled": rescheduled,
    "app line (extra=)": app_line,
}


def measure(
    formatter: logging.Formatter, line: Callable[[logging.Logger, int], None], n: int
) -> float:
    handler = logging.StreamHandler(Null())
    handler.setFormatter(formatter)
    handler.addFilter(ContextFilter())
    log = logging.getLogger("bench.logs")
    log.handlers[:] = [handler]
    log.propagate = False
    log.setLevel(logging.INFO)
    # CPU time of this process: the figure stays put on a machine busy with other work.
    start = time.process_time()
    for i in range(n):
        line(log, i)
    return (time.process_time() - start) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    bind(worker_id="7ce13e63-0000-4000-8000-000000000000")
    print(f"{'line':<22} {'text us/record':>15} {'json us/record':>15}")
    for name, line in LINES.items():
        text = min(measure(TextFormatter(), line, args.records) for _ in range(args.runs))
        json = min(measure(JsonFormatter(), line, args.records) for _ in range(args.runs))
        print(f"{name:<22} {text:>15.2f} {json:>15.2f}")


if __name__ == "__main__":
    main()
