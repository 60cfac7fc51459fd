"""The xmin horizon and the bloat it causes, for operators (``pgq status``, the dashboard,
metrics).

PostgreSQL's VACUUM removes a dead row version only once no snapshot can still see it. One
old snapshot (a transaction left open, an analytics query, a replica with
``hot_standby_feedback``, a stale replication slot) keeps every row version deleted or updated
since it began: in a queue, every finished job leaves such versions in ``pgqueue.jobs`` and its
indexes, claims walk over them and the table grows. This module reads what holds the horizon
(view ``pgqueue.horizon``) and the dead tuples and sizes of pgqueue's tables (view
``pgqueue.table_health``), and says when the horizon is old enough to warn about.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from psycopg.rows import class_row

from pgqueue.db.plan import Plan, Runner, fetch_all
from pgqueue.rules.maintenance import BLOAT_FACTOR, MIN_BYTES

#: A snapshot older than this (seconds) gets a warning (``pgq status --snapshot-warn``).
WARN_AFTER_SECONDS = 60.0
#: A replication slot has no age in seconds: it gets a warning once its xmin is this many
#: transactions old.
WARN_XMIN_AGE = 100_000


class SnapshotHolder(NamedTuple):
    """A row of ``pgqueue.horizon``: something that holds back the xmin horizon."""

    holder: str  # backend, prepared transaction or replication slot
    pid: int | None
    name: str | None  # application_name, the prepared transaction's gid or the slot's name
    role: str | None
    state: str | None
    since: datetime | None
    age_seconds: float | None
    xmin: str | None
    xmin_age: int | None
    catalog_only: bool  # a logical slot's catalog_xmin: it holds only the system catalogs


class TableHealth(NamedTuple):
    """A row of ``pgqueue.table_health``: dead tuples and sizes of one of pgqueue's tables."""

    table_name: str
    live_tuples: int
    dead_tuples: int
    table_bytes: int
    index_bytes: int
    total_bytes: int
    last_vacuum: datetime | None
    vacuums: int
    #: What the table and its B-tree indexes would take rebuilt (view ``pgqueue.bloat``).
    estimated_table_bytes: int | None
    estimated_index_bytes: int | None

    def bloated(self) -> bool:
        """It takes far more than rebuilt: the maintenance service's rule (more than
        :data:`~pgqueue.rules.maintenance.BLOAT_FACTOR` times and
        :data:`~pgqueue.rules.maintenance.MIN_BYTES` more), for the table and indexes together."""
        if self.estimated_table_bytes is None or self.estimated_index_bytes is None:
            return False
        held = self.table_bytes + self.index_bytes
        estimate = self.estimated_table_bytes + self.estimated_index_bytes
        return held > BLOAT_FACTOR * estimate and held - estimate >= MIN_BYTES


class Horizon(NamedTuple):
    """What holds the horizon (oldest first) and the state of pgqueue's tables."""

    holders: list[SnapshotHolder]
    tables: list[TableHealth]

    @property
    def oldest(self) -> SnapshotHolder | None:
        """The holder that keeps the most dead rows: the oldest xmin (catalog-only slots left
        out: they do not hold pgqueue's tables)."""
        held = [h for h in self.holders if not h.catalog_only]
        return held[0] if held else None

    @property
    def oldest_age_seconds(self) -> float:
        """Age of the oldest snapshot or transaction holding the horizon (0: none)."""
        ages = [h.age_seconds for h in self.holders if h.age_seconds is not None]
        return max(ages, default=0.0)

    @property
    def oldest_xmin_age(self) -> int:
        """How many transactions old the horizon is (0: nothing holds it)."""
        oldest = self.oldest
        return (oldest.xmin_age or 0) if oldest else 0

    def warning(self, after_seconds: float = WARN_AFTER_SECONDS) -> str | None:
        """One line naming the holder to deal with, when one is old enough (else None)."""
        for h in self.holders:
            if h.catalog_only:
                continue
            old = (
                h.age_seconds > after_seconds
                if h.age_seconds is not None
                else (h.xmin_age or 0) > WARN_XMIN_AGE
            )
            if old:
                return f"snapshot held {describe(h)}: VACUUM cannot remove dead rows until it ends"
        return None

    def bloat_warning(self) -> str | None:
        """One line when pgqueue's tables take far more than rebuilt (else None)."""
        bloated = [t for t in self.tables if t.bloated()]
        if not bloated:
            return None
        held = sum(t.table_bytes + t.index_bytes for t in bloated)
        estimate = sum(
            (t.estimated_table_bytes or 0) + (t.estimated_index_bytes or 0) for t in bloated
        )
        names = ", ".join(t.table_name for t in bloated)
        return (
            f"pgqueue's tables take {held / 2**20:,.1f} MB where about {estimate / 2**20:,.1f} MB"
            f" would do ({names}: bloat a held snapshot left): the workers' maintenance service"
            " rebuilds them once no old snapshot holds the horizon (pgq maintain, as the"
            " tables' owner, when the workers' role may not)"
        )

    def as_dict(self, after_seconds: float = WARN_AFTER_SECONDS) -> dict[str, Any]:
        """The report as plain values (``--json``, the dashboard's API)."""
        return {
            "oldest_snapshot_age_seconds": self.oldest_age_seconds,
            "oldest_xmin_age": self.oldest_xmin_age,
            "warning": self.warning(after_seconds),
            "bloat_warning": self.bloat_warning(),
            "holders": [h._asdict() for h in self.holders],
            "tables": [t._asdict() for t in self.tables],
        }


def describe(h: SnapshotHolder) -> str:
    """``for 312 s by backend pid 4242 (application_name 'report', state idle in transaction,
    role app, xmin age 51,000)``."""
    age = f"for {h.age_seconds:,.0f} s " if h.age_seconds is not None else ""
    who = f"{h.holder} pid {h.pid}" if h.pid is not None else h.holder
    label = "application_name" if h.holder == "backend" else "name"
    details = [f"{label} {h.name!r}", f"state {h.state or 'unknown'}"]
    if h.role:
        details.append(f"role {h.role}")
    if h.xmin_age is not None:
        details.append(f"xmin age {h.xmin_age:,}")
    return f"{age}by {who} ({', '.join(details)})"


def horizon_plan() -> Plan[Horizon]:
    """Both views, read in one plan (a sync or async connection drives it)."""
    holders = yield from fetch_all("horizon_holders", row=class_row(SnapshotHolder))
    tables = yield from fetch_all("table_health", row=class_row(TableHealth))
    return Horizon(holders, tables)


def horizon(pgq: Runner) -> Horizon:
    """What holds the xmin horizon, and pgqueue's tables' dead tuples and sizes."""
    return pgq.run(horizon_plan())
