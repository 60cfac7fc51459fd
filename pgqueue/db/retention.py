"""Retention: how long finished jobs, results and dead letters are kept, and the pruning pass.

The settings are one row, ``pgqueue.retention``, which every worker's ack and pruner read, so
all workers agree and an operator changes them with ``pgq retention set`` or plain SQL:

* ``history_retention`` (default 7 days): how long rows stay in ``job_history`` (cancelled
  jobs, and succeeded ones when recorded). ``0`` keeps none.
* ``record_succeeded`` (default off): record every succeeded job in ``job_history``. Off, a
  successful ack is one DELETE and only jobs that keep a result (and workflow members) leave a
  row.
* ``dead_letter_retention`` (default NULL: until replayed or purged by hand): dead letters
  older than this are purged.
* results: a row with a kept result stays until ``keep_until`` (the job's ``result_ttl``, at
  least the history retention at the time it finished).

Pruning deletes in small batches (``DELETE ... WHERE id IN (SELECT ... LIMIT n FOR UPDATE SKIP
LOCKED)``), each its own short transaction, so it never holds many locks or bloats a
transaction, and several workers can prune at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypedDict

from psycopg.rows import class_row

from pgqueue.db.plan import Plan, Query, fetch_first, fetch_one
from pgqueue.errors import InvalidJobError
from pgqueue.rules.options import to_timedelta

if TYPE_CHECKING:
    from typing import Unpack

#: Rows deleted per statement, and at most this many statements per pruning pass.
PRUNE_BATCH = 500
MAX_BATCHES = 200


@dataclass(frozen=True, slots=True)
class RetentionSettings:
    history_retention: timedelta
    record_succeeded: bool
    dead_letter_retention: timedelta | None
    updated_at: datetime | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "history_retention": self.history_retention,
            "record_succeeded": self.record_succeeded,
            "dead_letter_retention": self.dead_letter_retention,
            "updated_at": self.updated_at,
        }


@dataclass(slots=True)
class PruneReport:
    history: int = 0  # job_history rows deleted (expired history and results)
    dead_letters: int = 0
    workflows: int = 0  # workflows whose every member was pruned
    steps: int = 0  # step checkpoints of jobs no table holds any more (durable jobs)
    events: int = 0  # events past their keep_until

    def as_dict(self) -> dict[str, int]:
        return {
            "history": self.history,
            "dead_letters": self.dead_letters,
            "workflows": self.workflows,
            "steps": self.steps,
            "events": self.events,
        }


#: pgq.retention.set(dead_letters=KEEP_FOREVER) keeps dead letters until replayed or purged.
KEEP_FOREVER = "never"


def get_settings() -> Plan[RetentionSettings]:
    settings = class_row(RetentionSettings)
    row = yield from fetch_first("get_retention", row=settings)
    if row is None:
        yield Query("ensure_retention")
        row = yield from fetch_one("get_retention", row=settings)
    return row


class RetentionChanges(TypedDict, total=False):
    """Changes to the retention settings (``pgq.retention.set``); a setting left out (or None)
    stays as it is."""

    history: float | timedelta | None
    """How long ``job_history`` rows are kept (seconds or a timedelta; 0: none)."""
    record_succeeded: bool | None
    """Record every succeeded job in ``job_history``."""
    dead_letters: float | timedelta | str | None
    """Purge dead letters older than this, or ``"never"``: keep them until replayed or purged
    by hand."""


def set_settings(**changes: Unpack[RetentionChanges]) -> Plan[RetentionSettings]:
    """Change the given settings (None leaves one as it is). ``dead_letters="never"`` keeps
    dead letters until replayed or purged by hand."""
    history = changes.get("history")
    record_succeeded = changes.get("record_succeeded")
    dead_letters = changes.get("dead_letters")
    history_ttl = to_timedelta(history, "history retention") if history is not None else None
    if record_succeeded is not None and not isinstance(record_succeeded, bool):
        raise InvalidJobError("record_succeeded must be True or False")
    dead_ttl: timedelta | None = None
    if isinstance(dead_letters, str):
        if dead_letters != KEEP_FOREVER:
            raise InvalidJobError(
                f"dead letter retention must be a duration or {KEEP_FOREVER!r}, "
                f"got {dead_letters!r}"
            )
    elif dead_letters is not None:
        dead_ttl = to_timedelta(dead_letters, "dead letter retention")
        if dead_ttl <= timedelta(0):
            raise InvalidJobError(f"dead letter retention must be positive, got {dead_letters!r}")
    yield Query("ensure_retention")
    params = {
        "history": history_ttl,
        "record_succeeded": record_succeeded,
        "set_dead_letters": dead_letters is not None,
        "dead_letters": dead_ttl,
    }
    return (yield from fetch_one("set_retention", params, row=class_row(RetentionSettings)))


def prune(batch_size: int = PRUNE_BATCH, max_batches: int = MAX_BATCHES) -> Plan[PruneReport]:
    """One pruning pass: expired history and results, old dead letters, emptied workflows.
    Run it on an autocommit connection so every batch commits on its own."""
    if batch_size < 1 or max_batches < 1:
        raise InvalidJobError("batch_size and max_batches must be at least 1")
    report = PruneReport()
    for name in ("prune_history", "prune_dead_letters"):
        for _ in range(max_batches):
            # The worker's pruner drives this plan on its own pool (tuples, in the columns'
            # order: deleted, workflow_ids), so no row factory here.
            rows = yield Query(name, {"batch_size": batch_size})
            deleted, workflow_ids = rows[0]
            if name == "prune_history":
                report.history += deleted
            else:
                report.dead_letters += deleted
            if workflow_ids:
                emptied = yield Query("prune_workflows", {"ids": workflow_ids})
                report.workflows += len(emptied)
            if deleted < batch_size:
                break
    # Durable jobs' checkpoints go with their job (after the history and dead letters above,
    # so a job pruned now loses its steps in the same pass), and events after keep_until.
    for name in ("prune_job_steps", "prune_events"):
        for _ in range(max_batches):
            rows = yield Query(name, {"batch_size": batch_size})
            deleted = int(rows[0][0])
            if name == "prune_job_steps":
                report.steps += deleted
            else:
                report.events += deleted
            if deleted < batch_size:
                break
    return report


def settle_waiting(max_parents: int = 1000) -> Plan[int]:
    """The safety net for waiting jobs whose parent left without settling them."""
    # Driven by the worker's pruner too (tuples): see prune.
    rows = yield Query("settle_waiting", {"max_parents": max_parents})
    return int(rows[0][0])
