"""Tenant fairness and partitioned limits: a token bucket per (task, key), an optional limit
of running jobs per key, and fair queues that serve their keys round-robin.

* ``task_limits.key_rate_limit`` / ``key_rate_burst``: a token bucket per (task, key) (a job's
  key is its ``concurrency_key``, which a task's ``limit_by`` fills in from an argument). Its
  state is a row of ``key_buckets``, made by the first claim that needs it and deleted by the
  workers' pruner once it is full again (``prune_key_buckets``), so keys that never come back
  leave nothing behind.
* ``task_limits.key_limit`` may be NULL: no limit of running jobs per key (a task that only
  rate-limits its keys). The default stays 1, so jobs with a concurrency key behave as before.
* ``queues.fair``: the claim serves the queue's keys round-robin (start-time fair queueing): a
  job of a fair queue gets a rank when it is enqueued (``fair_rank``: one after its key's last
  waiting job, never behind the queue's clock), and workers claim in (priority, rank, id)
  order, moving the clock (``fair_clocks``, per queue and priority) to the largest rank they
  took. A lone job of one key then waits behind about one job per other busy key, not behind
  another key's whole backlog. Two partial indexes hold only ranked jobs, so jobs of other
  queues write no more index entries than before, and the plain claim (``claim_jobs``) is
  unchanged: ``flow_controlled`` sends workers of fair queues to ``pgqueue.claim``.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-03
"""

from __future__ import annotations

from alembic import op

from pgqueue.db.migrate import sql_script

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | None = None
depends_on: str | None = None


UPGRADE = r"""
ALTER TABLE pgqueue.task_limits
    ALTER COLUMN key_limit DROP NOT NULL,
    ADD COLUMN key_rate_limit double precision CHECK (key_rate_limit > 0),
    ADD COLUMN key_rate_burst double precision CHECK (key_rate_burst >= 1);

-- One token bucket per (task, key) of a task with a key_rate_limit; no row: a full bucket.
-- Rows are small and rewritten by claims: room on each page for HOT updates.
CREATE TABLE pgqueue.key_buckets (
    task      text             NOT NULL,
    key       text             NOT NULL,
    tokens    double precision,
    tokens_at timestamptz,
    CONSTRAINT key_buckets_pkey PRIMARY KEY (task, key)
) WITH (fillfactor = 70);

ALTER TABLE pgqueue.queues ADD COLUMN fair boolean NOT NULL DEFAULT false;

-- The largest rank claimed so far per fair queue and priority.
CREATE TABLE pgqueue.fair_clocks (
    queue    text     NOT NULL,
    priority smallint NOT NULL,
    clock    bigint   NOT NULL DEFAULT 0,
    CONSTRAINT fair_clocks_pkey PRIMARY KEY (queue, priority)
);

ALTER TABLE pgqueue.jobs ADD COLUMN fair_rank bigint;
-- The claim's order in a fair queue, and each key's last rank (for the next job of that key).
CREATE INDEX jobs_fair_idx ON pgqueue.jobs (queue, priority, fair_rank, id)
    WHERE state = 'ready' AND fair_rank IS NOT NULL;
CREATE INDEX jobs_fair_key_idx ON pgqueue.jobs (queue, priority, concurrency_key, fair_rank)
    WHERE state = 'ready' AND fair_rank IS NOT NULL;

\i functions/fair_rank/0015.sql
REVOKE EXECUTE ON FUNCTION pgqueue.fair_rank(text, integer, text) FROM PUBLIC;

\i functions/fair_ranks/0015.sql
REVOKE EXECUTE ON FUNCTION pgqueue.fair_ranks(text[], smallint[], text[]) FROM PUBLIC;

\i functions/enqueue_job/0015.sql

\i functions/insert_keyed_jobs/0015.sql

\i functions/flow_controlled/0015.sql

\i functions/claim/0015.sql
"""

DOWNGRADE = r"""
\i functions/claim/0013.sql

\i functions/flow_controlled/0005.sql

\i functions/insert_keyed_jobs/0014.sql

\i functions/enqueue_job/0014.sql

DROP FUNCTION pgqueue.fair_ranks(text[], smallint[], text[]);
DROP FUNCTION pgqueue.fair_rank(text, integer, text);
DROP INDEX pgqueue.jobs_fair_key_idx;
DROP INDEX pgqueue.jobs_fair_idx;
ALTER TABLE pgqueue.jobs DROP COLUMN fair_rank;
DROP TABLE pgqueue.fair_clocks;
ALTER TABLE pgqueue.queues DROP COLUMN fair;
DROP TABLE pgqueue.key_buckets;
UPDATE pgqueue.task_limits SET key_limit = 1 WHERE key_limit IS NULL;
ALTER TABLE pgqueue.task_limits
    DROP COLUMN key_rate_limit,
    DROP COLUMN key_rate_burst,
    ALTER COLUMN key_limit SET NOT NULL;
"""


def upgrade() -> None:
    op.execute(sql_script(UPGRADE))


def downgrade() -> None:
    op.execute(sql_script(DOWNGRADE))
