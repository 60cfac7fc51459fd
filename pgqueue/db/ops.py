"""Operator actions beyond cancel and replay: retry jobs now, purge waiting jobs or dead letters.

Shared by the CLI and the dashboard; every action is one plan of named queries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pgqueue.db import admin
from pgqueue.db.plan import Plan, Runner, fetch_value, fetch_values
from pgqueue.errors import InvalidJobError


@dataclass(frozen=True, slots=True)
class RetryResult:
    """Which jobs ``retry`` moved: waiting jobs made ready now, and dead letters replayed."""

    made_ready: list[int]
    replayed: list[int]


def _retry(ids: list[int]) -> Plan[RetryResult]:
    made_ready = [int(i) for i in (yield from fetch_values("retry_waiting_jobs", {"ids": ids}))]
    rest = tuple(sorted(set(ids) - set(made_ready)))
    replayed: list[int] = []
    if rest:
        replayed = yield from admin.replay_batch(admin.where({"ids": rest}), len(rest))
    return RetryResult(sorted(made_ready), sorted(replayed))


def retry(pgq: Runner, job_ids: Sequence[int]) -> RetryResult:
    """Run jobs again now: a waiting job (retry backoff, scheduled) becomes ready at once; a
    dead letter is replayed with fresh attempts. Running and unknown jobs are left alone."""
    ids = sorted({int(i) for i in job_ids})
    if not ids:
        raise InvalidJobError("say which job ids to retry")
    return pgq.run(_retry(ids), atomic=True)


def _purge(dead: bool, queue: str | None, task: str | None, dry_run: bool) -> Plan[int]:
    if dead:
        name = "count_purgeable_dead_letters" if dry_run else "purge_dead_letters"
    else:
        name = "count_purgeable_jobs" if dry_run else "purge_jobs"
    return int((yield from fetch_value(name, {"queue": queue, "task": task})))


def purge(
    pgq: Runner,
    *,
    queue: str | None = None,
    task: str | None = None,
    dead: bool = False,
    everything: bool = False,
    dry_run: bool = False,
) -> int:
    """Delete waiting jobs (``ready``/``scheduled``; running ones are left to ``cancel``), or
    with ``dead`` dead letters, of a queue and/or task (``everything``: of all). Returns how
    many were (with ``dry_run``: would be) deleted."""
    if queue is None and task is None and not everything:
        raise InvalidJobError("say what to purge: a queue, a task, or everything")
    return pgq.run(_purge(dead, queue, task, dry_run))
