"""Flow control: per-queue and per-task limits, fair shares, concurrency keys, rate limits,
circuit breakers, kept idempotency keys, backpressure, cron schedules, the claim function.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

from pgqueue.db.migrate import sql_script

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None


UPGRADE = r"""
-- ---------------------------------------------------------------------------------------------
-- Per-queue settings (a queue still needs no row until someone configures it).
--   weight            share of a worker's slots when several queues have work (fair sharing);
--                     NULL: the queue takes part in plain priority order
--   max_depth         enqueue fails (or waits) while this many jobs wait in the queue
--   concurrency_limit jobs of this queue running at once, across every worker
--   rate_limit/burst  a token bucket (jobs started per second, bucket size); tokens/tokens_at
--                     are the bucket's state, changed only by claims
-- ---------------------------------------------------------------------------------------------
ALTER TABLE pgqueue.queues
    ADD COLUMN weight            integer CHECK (weight BETWEEN 1 AND 1000000),
    ADD COLUMN max_depth         integer CHECK (max_depth >= 1),
    ADD COLUMN concurrency_limit integer CHECK (concurrency_limit >= 1),
    ADD COLUMN rate_limit        double precision CHECK (rate_limit > 0),
    ADD COLUMN rate_burst        double precision CHECK (rate_burst >= 1),
    ADD COLUMN tokens            double precision,
    ADD COLUMN tokens_at         timestamptz;

-- Per-task limits. Rows come from task declarations (synced by workers at start-up,
-- from_code = true) or from operators (`pgq task set`, SQL).
CREATE TABLE pgqueue.task_limits (
    task              text        PRIMARY KEY CHECK (length(task) BETWEEN 1 AND 200),
    concurrency_limit integer     CHECK (concurrency_limit >= 1),
    -- at most this many running jobs of this task per concurrency_key
    key_limit         integer     NOT NULL DEFAULT 1 CHECK (key_limit >= 1),
    -- set by the first enqueue of a job of this task with a concurrency_key: from then on the
    -- claim checks keys for this task
    keyed             boolean     NOT NULL DEFAULT false,
    rate_limit        double precision CHECK (rate_limit > 0),
    rate_burst        double precision CHECK (rate_burst >= 1),
    tokens            double precision,
    tokens_at         timestamptz,
    from_code         boolean     NOT NULL DEFAULT false,
    updated_at        timestamptz NOT NULL DEFAULT now()
);

-- Circuit breakers, one per task that declares one. closed: jobs run; open: the claim skips the
-- task until open_until; then one probe job may run (half_open, probe_job_id/probe_token); its
-- success closes the breaker, its failure opens it again.
CREATE TABLE pgqueue.circuit_breakers (
    task              text        PRIMARY KEY,
    failure_threshold double precision NOT NULL CHECK (failure_threshold > 0 AND
                                                       failure_threshold <= 1),
    min_calls         integer     NOT NULL CHECK (min_calls >= 1),
    window_length     interval    NOT NULL CHECK (window_length > interval '0'),
    cooldown          interval    NOT NULL CHECK (cooldown > interval '0'),
    state             text        NOT NULL DEFAULT 'closed'
                      CHECK (state IN ('closed', 'open', 'half_open')),
    window_start      timestamptz NOT NULL DEFAULT now(),
    successes         integer     NOT NULL DEFAULT 0,
    failures          integer     NOT NULL DEFAULT 0,
    opened_at         timestamptz,
    open_until        timestamptz,
    probe_job_id      bigint,
    probe_token       integer,
    trips             bigint      NOT NULL DEFAULT 0,
    updated_at        timestamptz NOT NULL DEFAULT now()
);

-- ---------------------------------------------------------------------------------------------
-- Jobs: concurrency keys and uniqueness after completion.
-- ---------------------------------------------------------------------------------------------
ALTER TABLE pgqueue.jobs
    ADD COLUMN concurrency_key text CHECK (length(concurrency_key) BETWEEN 1 AND 1000),
    -- keep the idempotency key this long after the job finished in one of unique_states
    ADD COLUMN unique_for      interval CHECK (unique_for > interval '0'),
    ADD COLUMN unique_states   text[]
               CHECK (unique_states <@ ARRAY['succeeded', 'dead', 'cancelled']);

-- Keys of finished jobs, kept until expires_at: an enqueue with such a key returns the finished
-- job's id instead of creating a new one. Expired rows are ignored and pruned by workers.
CREATE TABLE pgqueue.idempotency_keys (
    key         text        PRIMARY KEY,
    job_id      bigint      NOT NULL,
    queue       text        NOT NULL,
    task        text        NOT NULL,
    state       text        NOT NULL CHECK (state IN ('succeeded', 'dead', 'cancelled')),
    finished_at timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);
CREATE INDEX idempotency_keys_expires_at_idx ON pgqueue.idempotency_keys (expires_at);

\i functions/keep_finished_key/0005.sql
CREATE TRIGGER jobs_keep_finished_key
    AFTER DELETE ON pgqueue.jobs
    FOR EACH ROW
    WHEN (OLD.unique_for IS NOT NULL AND OLD.idempotency_key IS NOT NULL)
    EXECUTE FUNCTION pgqueue.keep_finished_key();

-- ---------------------------------------------------------------------------------------------
-- Enqueue: one function, now with concurrency keys, kept keys and backpressure.
-- ---------------------------------------------------------------------------------------------
DROP FUNCTION pgqueue.enqueue(text, jsonb, text, integer, timestamptz, integer, text);
DROP FUNCTION pgqueue.enqueue_job(text, jsonb, text, integer, timestamptz, integer, text);

\i functions/queue_depth_up_to/0005.sql

\i functions/take_queue_room/0005.sql

\i functions/mark_keyed/0005.sql

\i functions/enqueue_job/0005.sql

\i functions/enqueue/0005.sql

-- ---------------------------------------------------------------------------------------------
-- The claim.
-- ---------------------------------------------------------------------------------------------

\i functions/bucket_tokens/0005.sql

\i functions/flow_controlled/0005.sql

CREATE TYPE pgqueue.claim_candidate AS (
    id              bigint,
    queue           text,
    task            text,
    concurrency_key text,
    priority        smallint,
    run_at          timestamptz,
    ord             double precision
);

\i functions/claim/0005.sql

-- ---------------------------------------------------------------------------------------------
-- Cron schedules: one row per schedule. Workers enqueue a tick by moving next_tick forward with
-- a compare-and-set in the same statement that enqueues the tick's job, so each tick is
-- enqueued exactly once however many workers race for it.
-- ---------------------------------------------------------------------------------------------
CREATE TABLE pgqueue.schedules (
    name             text        PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 200),
    cron             text        NOT NULL,
    timezone         text        NOT NULL DEFAULT 'UTC',
    task             text        NOT NULL CHECK (length(task) BETWEEN 1 AND 200),
    args             jsonb       NOT NULL DEFAULT '{}'::jsonb,
    queue            text        NOT NULL DEFAULT 'default',
    priority         smallint    NOT NULL DEFAULT 0,
    max_attempts     integer     NOT NULL DEFAULT 5 CHECK (max_attempts >= 1),
    -- missed ticks (no worker ran, or the schedule was late by more than `grace`):
    -- 'skip' drops them, 'catch_up' enqueues each (at most max_catch_up, the latest ones)
    missed           text        NOT NULL DEFAULT 'skip' CHECK (missed IN ('skip', 'catch_up')),
    grace            interval    NOT NULL DEFAULT interval '1 minute',
    max_catch_up     integer     NOT NULL DEFAULT 100 CHECK (max_catch_up >= 1),
    paused           boolean     NOT NULL DEFAULT false,
    next_tick        timestamptz NOT NULL,
    last_tick        timestamptz,
    last_enqueued_at timestamptz,
    ticks_enqueued   bigint      NOT NULL DEFAULT 0,
    ticks_skipped    bigint      NOT NULL DEFAULT 0,
    from_code        boolean     NOT NULL DEFAULT false,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX schedules_due_idx ON pgqueue.schedules (next_tick) WHERE NOT paused;

-- ---------------------------------------------------------------------------------------------
-- Views for operators and autoscalers.
-- ---------------------------------------------------------------------------------------------

\i views/queue_depth/0005.sql

\i views/circuit_breaker_status/0005.sql
"""

DOWNGRADE = r"""
DROP VIEW pgqueue.circuit_breaker_status;
DROP VIEW pgqueue.queue_depth;
DROP TABLE pgqueue.schedules;
DROP FUNCTION pgqueue.claim(text[], text[], integer, interval, uuid, integer[]);
DROP TYPE pgqueue.claim_candidate;
DROP FUNCTION pgqueue.flow_controlled(text[], text[]);
DROP FUNCTION pgqueue.bucket_tokens(double precision, timestamptz, double precision,
                                    double precision, timestamptz);
DROP FUNCTION pgqueue.enqueue(text, jsonb, text, integer, timestamptz, integer, text, text);
DROP FUNCTION pgqueue.enqueue_job(text, jsonb, text, integer, timestamptz, integer, text, text,
                                  interval, text[]);
DROP FUNCTION pgqueue.mark_keyed(text[]);
DROP FUNCTION pgqueue.take_queue_room(text, integer);
DROP FUNCTION pgqueue.queue_depth_up_to(text, integer);
DROP TRIGGER jobs_keep_finished_key ON pgqueue.jobs;
DROP FUNCTION pgqueue.keep_finished_key();
DROP TABLE pgqueue.idempotency_keys;
ALTER TABLE pgqueue.jobs
    DROP COLUMN concurrency_key,
    DROP COLUMN unique_for,
    DROP COLUMN unique_states;
DROP TABLE pgqueue.circuit_breakers;
DROP TABLE pgqueue.task_limits;
ALTER TABLE pgqueue.queues
    DROP COLUMN weight,
    DROP COLUMN max_depth,
    DROP COLUMN concurrency_limit,
    DROP COLUMN rate_limit,
    DROP COLUMN rate_burst,
    DROP COLUMN tokens,
    DROP COLUMN tokens_at;

-- The enqueue functions as revision 0001 made them.
\i functions/enqueue_job/0001.sql

\i functions/enqueue/0001.sql
"""


def upgrade() -> None:
    op.execute(sql_script(UPGRADE))


def downgrade() -> None:
    op.execute(sql_script(DOWNGRADE))
