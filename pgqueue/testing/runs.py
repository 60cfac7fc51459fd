"""What a drain reports: each attempt it ran (:class:`JobRun`), the whole
(:class:`DrainSummary`), and the errors it raises (:class:`JobsFailed`, :class:`DrainError`)."""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Any, Literal

from pgqueue.errors import PgQueueError

RunOutcome = Literal["succeeded", "retried", "dead", "cancelled", "lost", "parked"]
"""What became of an attempt: ``succeeded``; ``retried`` (failed, or raised ``Retry``, with
attempts left: back in the queue); ``dead`` (dead-lettered: ``Fail``, an error the retry policy
excludes, or the last attempt failed); ``cancelled``; ``lost`` (its lease was no longer held
when the outcome was written: another worker or the reaper took the job); ``parked`` (a
durable sleep or wait: the job left until it wakes; not an attempt, and the drain runs it again
when it does)."""

# What the worker's statements say (pgqueue.worker.outcome.acked / failed) in a drain's words.
_WRITTEN: dict[str, RunOutcome] = {
    "succeeded": "succeeded",
    "cancelled": "cancelled",
    "retry": "retried",
    "dead": "dead",
    "stale": "lost",
    "parked": "parked",
}


def run_outcome(written: str) -> RunOutcome:
    return _WRITTEN[written]


@dataclass(frozen=True, slots=True)
class JobRun:
    """One attempt a drain ran."""

    id: int
    task: str
    queue: str
    args: dict[str, Any]
    #: 1 for the first attempt.
    attempt: int
    max_attempts: int
    outcome: RunOutcome
    #: What the handler returned (None when it raised).
    value: Any = None
    #: What the handler raised, if it did (``Retry`` included).
    exception: BaseException | None = None
    #: The error as stored in the job's row: "ValueError: card declined".
    error: str | None = None

    def describe(self) -> str:
        """One line: ``job 7 app.charge (attempt 3 of 3): dead: ValueError: declined``."""
        line = (
            f"job {self.id} {self.task} (attempt {self.attempt} of {self.max_attempts}): "
            f"{self.outcome}"
        )
        return f"{line}: {self.error}" if self.error else line


@dataclass(slots=True)
class DrainSummary:
    """Every attempt a drain ran, in order, and what became of it."""

    runs: list[JobRun] = field(default_factory=list)
    #: Jobs the cron schedules owed and the drain enqueued.
    cron_ticks: int = 0

    @property
    def succeeded(self) -> list[JobRun]:
        """The attempts that succeeded."""
        return [run for run in self.runs if run.outcome == "succeeded"]

    @property
    def failed(self) -> list[JobRun]:
        """The attempts that raised (retried or dead-lettered; ``Retry`` included)."""
        return [run for run in self.runs if run.outcome in ("retried", "dead")]

    @property
    def dead(self) -> list[JobRun]:
        """The attempts whose job went to the dead letters."""
        return [run for run in self.runs if run.outcome == "dead"]

    def __str__(self) -> str:
        """``3 attempt(s): 1 retried, 2 succeeded``."""
        counts: dict[str, int] = {}
        for run in self.runs:
            counts[run.outcome] = counts.get(run.outcome, 0) + 1
        told = ", ".join(f"{n} {outcome}" for outcome, n in counts.items()) or "nothing to run"
        return f"{len(self.runs)} attempt(s): {told}"


class DrainError(PgQueueError):
    """A drain could not go on: a job that cannot be run here, or more attempts than
    ``max_jobs`` (a job that enqueues itself, or retries for ever)."""


class JobsFailed(AssertionError):
    """Raised by :func:`~pgqueue.testing.drain` (``raise_on_failure=True``, the default) when
    jobs were dead-lettered, and by :func:`~pgqueue.testing.run_job` when its attempt failed.
    Its message names each such job with its error, then the first one's traceback;
    ``summary`` holds every attempt, and the first failure's exception is the cause."""

    def __init__(self, failures: list[JobRun], summary: DrainSummary) -> None:
        self.failures = failures
        self.summary = summary
        what = "dead-lettered" if all(run.outcome == "dead" for run in failures) else "failed"
        lines = [f"{len(failures)} job(s) {what} ({summary}):"]
        lines += [f"  {run.describe()}" for run in failures]
        first = failures[0].exception
        if first is not None:
            trace = "".join(traceback.format_exception(first)).rstrip()
            lines += ["", f"job {failures[0].id}'s error:", trace]
        super().__init__("\n".join(lines))
        self.__cause__ = first
