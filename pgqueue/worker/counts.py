"""Per-queue, per-task counts of finished attempts, flushed with each heartbeat.

The heartbeat statement adds them to ``pgqueue.job_counts`` (one row per minute, queue and
task), which feeds the throughput columns of ``pgqueue.queue_stats`` and the
``pgqueue.throughput`` view. Counting in memory and flushing with the heartbeat costs no
statement per job; the minute is the database clock's at flush time.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from pgqueue.worker.observer import WorkerObserver, Written
from pgqueue.worker.outcome import Outcome

# Columns of pgqueue.job_counts, in the order the heartbeat's arrays list them.
_KINDS = ("succeeded", "retried", "dead", "cancelled")
_WRITTEN = {"succeeded": 0, "retry": 1, "dead": 2, "cancelled": 3}


class JobCounts(WorkerObserver):
    def __init__(self) -> None:
        self.pending: defaultdict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0])

    def job_written(self, outcome: Outcome, written: Written) -> None:
        index = _WRITTEN.get(written)
        if index is not None:  # a stale write changed nothing: not counted
            self.pending[outcome.job.queue, outcome.job.task][index] += 1

    def take(self) -> dict[tuple[str, str], list[int]]:
        """Hand the counts to a flush (give them back with :meth:`restore` if it fails)."""
        taken, self.pending = dict(self.pending), defaultdict(lambda: [0, 0, 0, 0])
        return taken

    def restore(self, taken: dict[tuple[str, str], list[int]]) -> None:
        for key, values in taken.items():
            current = self.pending[key]
            for index, value in enumerate(values):
                current[index] += value

    @staticmethod
    def as_params(taken: dict[tuple[str, str], list[int]]) -> dict[str, Any]:
        keys = sorted(taken)
        params: dict[str, Any] = {
            "count_queues": [queue for queue, _ in keys],
            "count_tasks": [task for _, task in keys],
        }
        for index, kind in enumerate(_KINDS):
            params[f"count_{kind}"] = [taken[key][index] for key in keys]
        return params
