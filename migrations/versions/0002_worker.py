"""Worker: cancellation, job history, worker registry, reaper and cancel functions.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

from pgqueue.db.migrate import sql_script

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None


UPGRADE = r"""
-- Set by pgqueue.cancel() on a running job; the worker's heartbeat reads it back.
ALTER TABLE pgqueue.jobs ADD COLUMN cancel_requested boolean NOT NULL DEFAULT false;

-- Jobs that left the hot table other than by dying: cancelled ones always, succeeded ones when
-- history is kept. Written in the same statement that removes the job from pgqueue.jobs.
CREATE TABLE pgqueue.job_history (
    id           bigint      PRIMARY KEY,
    queue        text        NOT NULL,
    task         text        NOT NULL,
    args         jsonb       NOT NULL,
    state        text        NOT NULL CHECK (state IN ('succeeded', 'cancelled')),
    priority     smallint    NOT NULL,
    attempts     integer     NOT NULL,
    max_attempts integer     NOT NULL,
    created_at   timestamptz NOT NULL,
    started_at   timestamptz,
    finished_at  timestamptz NOT NULL DEFAULT now(),
    errors       jsonb       NOT NULL DEFAULT '[]'::jsonb,
    worker_id    uuid
);
CREATE INDEX job_history_finished_at_idx ON pgqueue.job_history (finished_at);

-- One row per worker process: registered at start, refreshed by every heartbeat, marked at a
-- clean exit; rows of workers not seen for a while are pruned by pgqueue.reap().
CREATE TABLE pgqueue.workers (
    id            uuid        PRIMARY KEY,
    host          text        NOT NULL,
    pid           integer     NOT NULL,
    queues        text[]      NOT NULL,
    concurrency   integer     NOT NULL,
    version       text        NOT NULL,
    started_at    timestamptz NOT NULL DEFAULT now(),
    last_seen     timestamptz NOT NULL DEFAULT now(),
    stopped_at    timestamptz,
    -- Running totals reported by the worker with each heartbeat.
    jobs_succeeded bigint     NOT NULL DEFAULT 0,
    jobs_retried   bigint     NOT NULL DEFAULT 0,
    jobs_dead      bigint     NOT NULL DEFAULT 0,
    jobs_cancelled bigint     NOT NULL DEFAULT 0,
    leases_lost    bigint     NOT NULL DEFAULT 0
);

\i functions/reap/0002.sql

\i functions/cancel/0002.sql
"""

DOWNGRADE = r"""
DROP FUNCTION pgqueue.cancel(bigint);
DROP FUNCTION pgqueue.reap(integer, double precision, double precision, interval);
DROP TABLE pgqueue.workers;
DROP TABLE pgqueue.job_history;
ALTER TABLE pgqueue.jobs DROP COLUMN cancel_requested;
"""


def upgrade() -> None:
    op.execute(sql_script(UPGRADE))


def downgrade() -> None:
    op.execute(DOWNGRADE)
