"""What typed arguments cost, without a database: a producer's ``task.s(...).spec()`` (bind,
encode, validate) and a worker's ``task.binder.bind(stored)`` (the handler's arguments), for a
task with plain JSON parameters and one with typed ones (``datetime``, ``UUID``).

    python -m benchmarks.codec [--rounds 7] [--calls 50000]

The figure is the fastest round, timed in CPU time of this process (the least disturbed by the
rest of a shared machine). To compare with another checkout, run it with that checkout first on
the path: ``PYTHONPATH=../other python -m benchmarks.codec`` (a checkout without typed
arguments refuses the typed task's values: its line says so).
"""

from __future__ import annotations

import argparse
import time
import timeit
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any
from uuid import UUID

from pgqueue import PgQueue

pgq = PgQueue()


@pgq.task(name="bench.plain")
def plain(when: str, ref: str) -> None: ...


@pgq.task(name="bench.typed")
def typed(when: datetime, ref: UUID) -> None: ...


WHEN = datetime(2026, 12, 6, 9, 30, tzinfo=UTC)
REF = UUID("12345678-1234-5678-1234-567812345678")


def rate(call: Callable[[], Any], rounds: int, calls: int) -> float:
    """Calls per CPU second of the fastest round."""
    best = min(timeit.timeit(call, number=calls, timer=time.process_time) for _ in range(rounds))
    return calls / best


def _spec(task: Any, values: tuple[Any, ...]) -> Any:
    return task.s(*values).spec()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=50_000)
    args = parser.parse_args()
    cases: list[tuple[Any, tuple[Any, ...]]] = [
        (plain, (WHEN.isoformat(), str(REF))),
        (typed, (WHEN, REF)),
    ]
    for task, values in cases:
        try:
            stored = task.binder.pack(values, {})
            task.s(*values).spec()
        except Exception as exc:
            print(f"{task.name:<12} refused: {exc}")
            continue
        produce = rate(partial(_spec, task, values), args.rounds, args.calls)
        bind = rate(partial(task.binder.bind, stored), args.rounds, args.calls * 4)
        print(f"{task.name:<12} enqueue s().spec() {produce:>9,.0f}/s   bind {bind:>11,.0f}/s")


if __name__ == "__main__":
    main()
