"""Notify only while some worker waits for a notification.

PostgreSQL serialises the commits of all transactions that sent a ``NOTIFY`` (a database-wide
lock on the notification queue, held through each commit's WAL flush), so with the wake-up
trigger notifying on every enqueue, concurrent producers committed one at a time. Now a worker
that goes idle registers in ``pgqueue.idle_workers`` and the trigger notifies only while that
table has a row: while every worker is busy (a backlog), enqueues commit without the lock.

The race this opens is closed with an advisory lock. The trigger takes it shared (until its
transaction ends) before it reads ``idle_workers``. A worker going idle first commits its row,
then takes the lock exclusively for an instant (``pg_try_advisory_lock``, never waiting, so it
cannot stall producers), then claims once more. Every producer that read ``idle_workers`` before
the row was there held the lock, so once the worker got it they have all committed (or rolled
back) and that last claim sees their jobs; every producer after it sees the row and notifies.
While the lock is busy the worker polls briefly and tries again. A producer transaction that is
not READ COMMITTED reads with an older snapshot, so it always notifies.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

from pgqueue.db.migrate import sql_script

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | None = None
depends_on: str | None = None


UPGRADE = r"""
-- Workers waiting for a NOTIFY (their last claim came back short). Rows are written when a
-- worker goes idle and deleted when its claims come back full again or it stops; rows of
-- workers that died are swept by the heartbeat of the others.
CREATE TABLE pgqueue.idle_workers (
    worker_id uuid        PRIMARY KEY,
    since     timestamptz NOT NULL DEFAULT now()
);

\i functions/notify_new_jobs/0008.sql
"""

DOWNGRADE = r"""
\i functions/notify_new_jobs/0001.sql
DROP TABLE pgqueue.idle_workers;
"""


def upgrade() -> None:
    op.execute(sql_script(UPGRADE))


def downgrade() -> None:
    op.execute(sql_script(DOWNGRADE))
