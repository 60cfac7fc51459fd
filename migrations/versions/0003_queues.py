"""Queues as rows: pause/resume (paused queues are not claimed), shown in queue_stats.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

from pgqueue.db.migrate import sql_script

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None


UPGRADE = r"""
-- Per-queue settings. A queue needs no row to work; a row exists once someone configured it
-- (paused it, for now). The claim reads this table once per queue per claim.
CREATE TABLE pgqueue.queues (
    name       text        PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 200),
    paused     boolean     NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL DEFAULT now()
);

\i views/queue_stats/0003.sql
"""

DOWNGRADE = r"""
DROP VIEW pgqueue.queue_stats;
\i views/queue_stats/0001.sql
DROP TABLE pgqueue.queues;
"""


def upgrade() -> None:
    op.execute(sql_script(UPGRADE))


def downgrade() -> None:
    op.execute(sql_script(DOWNGRADE))
