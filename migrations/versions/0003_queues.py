"""Queues as rows: pause/resume (paused queues are not claimed), shown in queue_stats.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

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

CREATE OR REPLACE VIEW pgqueue.queue_stats AS
WITH live AS (
    SELECT queue,
           count(*) FILTER (WHERE state = 'ready' OR (state = 'scheduled' AND run_at <= now()))
               AS ready,
           count(*) FILTER (WHERE state = 'scheduled' AND run_at > now()) AS scheduled,
           count(*) FILTER (WHERE state = 'running') AS running,
           min(run_at) FILTER (WHERE state = 'ready' OR (state = 'scheduled' AND run_at <= now()))
               AS oldest_ready_at
      FROM pgqueue.jobs
     GROUP BY queue
), dead AS (
    SELECT queue, count(*) AS dead FROM pgqueue.dead_letters GROUP BY queue
), names AS (
    SELECT queue FROM live UNION SELECT queue FROM dead UNION SELECT name FROM pgqueue.queues
)
SELECT n.queue,
       coalesce(live.ready, 0)                    AS ready,
       coalesce(live.scheduled, 0)                AS scheduled,
       coalesce(live.running, 0)                  AS running,
       coalesce(dead.dead, 0)                     AS dead,
       CASE WHEN live.oldest_ready_at IS NOT NULL
            THEN greatest(now() - live.oldest_ready_at, interval '0') END AS oldest_ready_age,
       coalesce(qs.paused, false)                 AS paused
  FROM names AS n
  LEFT JOIN live ON live.queue = n.queue
  LEFT JOIN dead ON dead.queue = n.queue
  LEFT JOIN pgqueue.queues AS qs ON qs.name = n.queue;
"""

DOWNGRADE = r"""
DROP VIEW pgqueue.queue_stats;
CREATE VIEW pgqueue.queue_stats AS
WITH live AS (
    SELECT queue,
           count(*) FILTER (WHERE state = 'ready' OR (state = 'scheduled' AND run_at <= now()))
               AS ready,
           count(*) FILTER (WHERE state = 'scheduled' AND run_at > now()) AS scheduled,
           count(*) FILTER (WHERE state = 'running') AS running,
           min(run_at) FILTER (WHERE state = 'ready' OR (state = 'scheduled' AND run_at <= now()))
               AS oldest_ready_at
      FROM pgqueue.jobs
     GROUP BY queue
), dead AS (
    SELECT queue, count(*) AS dead FROM pgqueue.dead_letters GROUP BY queue
)
SELECT coalesce(live.queue, dead.queue)           AS queue,
       coalesce(live.ready, 0)                    AS ready,
       coalesce(live.scheduled, 0)                AS scheduled,
       coalesce(live.running, 0)                  AS running,
       coalesce(dead.dead, 0)                     AS dead,
       CASE WHEN live.oldest_ready_at IS NOT NULL
            THEN greatest(now() - live.oldest_ready_at, interval '0') END AS oldest_ready_age
  FROM live FULL JOIN dead ON dead.queue = live.queue;
DROP TABLE pgqueue.queues;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
