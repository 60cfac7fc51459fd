"""The maintenance service: gives back the room a held snapshot made pgqueue's tables take.

While a snapshot is held (a transaction left open, an analytics query, a replica with
``hot_standby_feedback``), every finished job leaves row versions in ``pgqueue.jobs`` and
entries in its indexes that VACUUM may not remove. Once it ends, VACUUM removes them, but a
B-tree keeps its emptied pages for ever, and autovacuum may skip the index cleanup, leaving
dead line pointers that stop the table from shrinking. So, every ``every`` seconds, when no
snapshot older than ``held_after`` holds the horizon, one session per database (an advisory
lock: the other workers skip the pass) reads the view ``pgqueue.bloat`` and, for what takes
more than :data:`~pgqueue.rules.maintenance.BLOAT_FACTOR` times its estimated size:

* ``VACUUM (INDEX_CLEANUP ON)`` the table (it truncates the emptied end of the table);
* ``REINDEX INDEX CONCURRENTLY`` each bloated index, one at a time, largest waste first.

Both run on the service's own autocommit connection (never in a transaction) with a
``lock_timeout``: a statement that would wait for a lock gives up instead of queueing in front
of claims (neither takes a lock that blocks a claim: ``SHARE UPDATE EXCLUSIVE`` on the table),
and a REINDEX that gave up leaves an invalid copy that the next pass drops. Only the tables'
owner (or a member of its role, or a superuser) may do either; a worker logging in as the
``pgq roles`` worker role may not, so it says so once and leaves the work to ``pgq maintain``
run as the owner (the same service on its own).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psycopg

from pgqueue.db.startup import check_database_async
from pgqueue.errors import DatabaseUnavailableError
from pgqueue.rules.log_actions import Action, Seconds, fields
from pgqueue.worker.observer import WorkerObserver
from pgqueue.worker.service import Outage, Service, jittered, one_line
from pgqueue.worker.store import application_name
from pgqueue.worker.supervisor import Supervisor

if TYPE_CHECKING:
    # Imported by the pass itself (a worker's first pass is an interval after its start): the
    # queries and rules of maintenance are not on a worker's start path.
    from pgqueue.db import maintenance as db
    from pgqueue.rules.maintenance import Floor, Relation, Thresholds

#: Seconds between passes (``pgq work --maintenance-interval``, ``pgq maintain --interval``).
EVERY = 60.0
#: A snapshot older than this holds the horizon: nothing can be reclaimed until it ends.
HELD_AFTER = 2.0
#: How long a statement of the pass waits for a lock before it gives up.
LOCK_TIMEOUT = 2.0
#: The longest a VACUUM or REINDEX may run.
STATEMENT_TIMEOUT = 3600.0
# What pg_stat_activity shows after "pgqueue maintenance" for ``pgq maintain``: its process.
_ID = f"pid-{os.getpid()}"
#: What a statement of the pass may fail with and leave the next pass to try again: a lock it
#: would have waited for, a statement timeout, a deadlock with another maintenance command.
_GAVE_UP = (
    psycopg.errors.InsufficientPrivilege,  # with MAINTAIN only (PostgreSQL 17+): no DROP
    psycopg.errors.LockNotAvailable,
    psycopg.errors.QueryCanceled,
    psycopg.errors.DeadlockDetected,
)


@dataclass
class Report:
    """What one pass did. ``waiting``: why it did nothing (a held horizon, another
    maintainer); sizes are (before, after) in bytes."""

    waiting: str | None = None
    vacuumed: dict[str, tuple[int, int]] = field(default_factory=dict)
    rebuilt: dict[str, tuple[int, int]] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)  # leftovers of a failed REINDEX
    gave_up: dict[str, str] = field(default_factory=dict)  # relation: error
    not_ours: list[str] = field(default_factory=list)  # bloated, owned by another role

    def lines(self) -> list[str]:
        """The report for ``pgq maintain --once``, a line per relation."""
        if self.waiting:
            return [f"nothing done: {self.waiting}"]
        out = [f"vacuumed {t}: {_mb(a)} -> {_mb(b)}" for t, (a, b) in self.vacuumed.items()]
        out += [f"rebuilt {i}: {_mb(a)} -> {_mb(b)}" for i, (a, b) in self.rebuilt.items()]
        out += [f"dropped {i} (left by a failed REINDEX)" for i in self.dropped]
        out += [f"gave up on {r}: {e}" for r, e in self.gave_up.items()]
        if self.not_ours:
            out.append(f"bloated but owned by another role: {', '.join(self.not_ours)}")
        return out or ["nothing to reclaim"]


def _mb(size: int) -> str:
    return f"{size / 2**20:.2f} MB"


class Maintainer(Service):
    name = "maintenance"

    def __init__(
        self,
        dsn: str,
        *,
        every: float = EVERY,
        held_after: float = HELD_AFTER,
        lock_timeout: float = LOCK_TIMEOUT,
        statement_timeout: float = STATEMENT_TIMEOUT,
        thresholds: Thresholds | None = None,
        application_name: str | None = None,
        wait_first: bool = True,
    ) -> None:
        super().__init__()
        self.wait_first = wait_first
        self.dsn = dsn
        self.every = every
        self.held_after = held_after
        self.lock_timeout = lock_timeout
        self.statement_timeout = statement_timeout
        #: None: the default thresholds (pgqueue.rules.maintenance.Thresholds()).
        self.thresholds = thresholds
        self.application_name = application_name
        #: What each relation was brought down to (see pgqueue.rules.maintenance: floors).
        self.floors: dict[str, Floor] = {}
        self.passes = 0  # passes that read the relations (the floors' clock)
        self._said: set[str] = set()  # what was logged once (a held horizon, missing rights)

    def interval(self) -> float:
        return self.every

    async def run(self) -> None:
        # In a worker, the first pass an interval after start: starting costs no extra
        # connection, and a fleet started together spreads its passes.
        if self.wait_first:
            await self.sleep(jittered(self.every, self.jitter))
        await super().run()

    async def run_once(self) -> None:
        await self.maintain()

    async def maintain(self) -> Report:
        """One pass (see the module's docstring)."""
        from pgqueue.db import maintenance as db

        named: dict[str, Any] = (
            {} if self.application_name is None else {"application_name": self.application_name}
        )
        async with await psycopg.AsyncConnection.connect(
            self.dsn, autocommit=True, **named
        ) as conn:
            if not await db.try_lock(conn):
                return Report(waiting="another session is maintaining this database")
            try:
                return await self._pass(conn)
            finally:
                if not conn.closed:
                    await db.unlock(conn)

    async def _pass(self, conn: db.Connection) -> Report:
        from pgqueue.db import maintenance as db
        from pgqueue.rules.maintenance import (
            Thresholds,
            not_ours,
            standing,
            to_rebuild,
            to_vacuum,
        )

        thresholds = Thresholds() if self.thresholds is None else self.thresholds
        held = (await db.horizon(conn)).warning(self.held_after)
        if held is not None:
            if "held" not in self._said:
                self._said.add("held")
                self.log.info(
                    "maintenance waits for the horizon",
                    extra=fields(Action.MAINTENANCE_WAITING, holder=held),
                )
            return Report(waiting=held)
        self._said.discard("held")
        await db.set_timeouts(
            conn, lock_timeout=self.lock_timeout, statement_timeout=self.statement_timeout
        )
        report = Report()
        for leftover in await db.leftovers(conn):
            if await self._step(conn, report, "drop", leftover, db.drop_index):
                report.dropped.append(leftover)
        relations = await db.relations(conn)
        report.not_ours = not_ours(relations, thresholds)
        if report.not_ours and "not ours" not in self._said:
            self._said.add("not ours")
            self.log.warning(
                "bloated relations owned by another role: run pgq maintain as the owner of "
                "pgqueue's tables",
                extra=fields(Action.MAINTENANCE_NOT_OURS, relations=",".join(report.not_ours)),
            )
        self.passes += 1
        floors = standing(self.floors, self.passes)
        for table in to_vacuum(relations, thresholds, floors):
            await self._reclaim(conn, report, "vacuum", table, db.vacuum, report.vacuumed)
        relations = await db.relations(conn)  # the VACUUM refreshed the counts
        for index in to_rebuild(relations, thresholds, floors):
            await self._reclaim(conn, report, "reindex", index, db.reindex, report.rebuilt)
        return report

    async def _reclaim(
        self,
        conn: db.Connection,
        report: Report,
        action: str,
        relation: Relation,
        run: db.Step,
        done: dict[str, tuple[int, int]],
    ) -> None:
        from pgqueue.db import maintenance as db
        from pgqueue.rules.maintenance import floor_after

        name = relation.name
        before = await db.size(conn, name)
        if not await self._step(conn, report, action, name, run):
            return
        after = await db.size(conn, name)
        self.floors[name] = floor_after(
            self.floors.get(name),
            action == "vacuum",
            before,
            after,
            relation.estimated_bytes or 0,
            self.passes,
        )
        done[name] = (before, after)
        self.observer.maintained(action, name, before - after)
        self.log.info(
            "maintenance done",
            extra=fields(
                Action.MAINTENANCE_DONE,
                step=action,
                relation=name,
                bytes_before=before,
                bytes_after=after,
            ),
        )

    async def _step(
        self, conn: db.Connection, report: Report, action: str, name: str, run: db.Step
    ) -> bool:
        try:
            await run(conn, name)
        except _GAVE_UP as exc:
            report.gave_up[name] = one_line(exc)
            self.observer.maintained("gave_up", name, 0)
            self.log.warning(
                "maintenance gave up",
                extra=fields(
                    Action.MAINTENANCE_GAVE_UP, step=action, relation=name, error=one_line(exc)
                ),
            )
            return False
        return True


async def maintain_once(dsn: str, maintainer: Maintainer | None = None) -> Report:
    """``pgq maintain --once``: one pass."""
    await check_database_async(dsn)
    maintainer = maintainer or Maintainer(dsn, application_name=own_application_name(dsn))
    return await maintainer.maintain()


async def maintain_forever(dsn: str, maintainer: Maintainer) -> None:
    """``pgq maintain``: the service on its own, supervised as in a worker (the same backoff
    through outages), until SIGTERM or SIGINT."""
    with contextlib.suppress(DatabaseUnavailableError):
        await check_database_async(dsn)
    supervisor = Supervisor(WorkerObserver())
    supervisor.add(maintainer, Outage())
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopped.set)
    maintainer.log.info(
        "maintenance started",
        extra=fields(Action.MAINTENANCE_STARTED, interval=Seconds(maintainer.every)),
    )
    try:
        supervisor.start()
        await stopped.wait()
    finally:
        await supervisor.stop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)


def own_application_name(dsn: str) -> str | None:
    """``pgqueue maintenance pid-<pid>`` for ``pgq maintain``'s connection."""
    return application_name(dsn, "maintenance", _ID)
