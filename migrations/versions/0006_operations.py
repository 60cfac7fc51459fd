"""Operations: per-minute job counts and the views operators query (CLI, dashboard, psql).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

from pgqueue.db.migrate import sql_script

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | None = None
depends_on: str | None = None


UPGRADE = r"""
-- Finished attempts per minute, queue and task. Each worker adds its own counts with its
-- heartbeat (one statement per heartbeat, never one per job), into the minute of the database
-- clock at which the heartbeat ran. Rows older than a day are deleted by the same statement.
CREATE TABLE pgqueue.job_counts (
    minute    timestamptz NOT NULL,
    queue     text        NOT NULL,
    task      text        NOT NULL,
    succeeded bigint      NOT NULL DEFAULT 0,
    retried   bigint      NOT NULL DEFAULT 0,
    dead      bigint      NOT NULL DEFAULT 0,
    cancelled bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (minute, queue, task)
);

\i views/throughput/0006.sql

\i views/queue_stats/0006.sql

\i views/running_jobs/0006.sql

\i views/worker_status/0006.sql

\i views/dead_letter_errors/0006.sql

\i views/recent_failures/0006.sql
"""

DOWNGRADE = r"""
DROP VIEW pgqueue.recent_failures;
DROP VIEW pgqueue.dead_letter_errors;
DROP VIEW pgqueue.worker_status;
DROP VIEW pgqueue.running_jobs;
DROP VIEW pgqueue.queue_stats;
\i views/queue_stats/0004.sql
DROP VIEW pgqueue.throughput;
DROP TABLE pgqueue.job_counts;
"""


def upgrade() -> None:
    op.execute(sql_script(UPGRADE))


def downgrade() -> None:
    op.execute(sql_script(DOWNGRADE))
