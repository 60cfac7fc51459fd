"""Worker: cancellation, job history, worker registry, reaper and cancel functions.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

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

-- The reaper: jobs whose lease expired (their worker died, hung, or lost the database) go back
-- to the queue with full-jitter backoff, or to the dead letters when their attempts are used up
-- (a job that kills its worker every time is a poison pill and must end there). A cancelled job
-- ends cancelled. Every decision uses the database clock. Idempotent and safe to run
-- concurrently (SKIP LOCKED): run it from every worker, `pgq reaper`, or pg_cron.
CREATE FUNCTION pgqueue.reap(max_jobs integer DEFAULT 1000,
                             backoff_base double precision DEFAULT 1.0,
                             backoff_cap double precision DEFAULT 300.0,
                             worker_ttl interval DEFAULT interval '1 hour')
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    expired bigint[];
BEGIN
    SELECT coalesce(array_agg(s.id), '{}') INTO expired FROM (
        SELECT j.id FROM pgqueue.jobs AS j
         WHERE j.state = 'running' AND j.lease_expires_at < now()
         ORDER BY j.lease_expires_at
         LIMIT max_jobs
           FOR UPDATE SKIP LOCKED) AS s;

    IF cardinality(expired) > 0 THEN
        -- The rows are locked by this transaction from here on.
        UPDATE pgqueue.jobs AS j
           SET errors = j.errors || jsonb_build_array(jsonb_build_object(
                   'attempt', j.attempts, 'at', now(), 'error', 'LeaseExpired',
                   'message', 'lease expired: the worker stopped heartbeating (crashed, killed,'
                              ' hung, or lost the database)',
                   'worker_id', j.worker_id))
         WHERE j.id = ANY(expired);

        WITH gone AS (
            DELETE FROM pgqueue.jobs AS j
             WHERE j.id = ANY(expired) AND j.cancel_requested
            RETURNING j.*)
        INSERT INTO pgqueue.job_history (id, queue, task, args, state, priority, attempts,
                                         max_attempts, created_at, started_at, errors, worker_id)
        SELECT id, queue, task, args, 'cancelled', priority, attempts, max_attempts, created_at,
               started_at, errors, worker_id
          FROM gone;

        WITH gone AS (
            DELETE FROM pgqueue.jobs AS j
             WHERE j.id = ANY(expired) AND j.attempts >= j.max_attempts
            RETURNING j.*)
        INSERT INTO pgqueue.dead_letters (id, queue, task, args, priority, attempts, max_attempts,
                                          lease_token, idempotency_key, created_at, errors,
                                          last_error, reason, worker_id)
        SELECT id, queue, task, args, priority, attempts, max_attempts, lease_token,
               idempotency_key, created_at, errors, errors -> -1 ->> 'message',
               'lease expired with no attempts left', worker_id
          FROM gone;

        UPDATE pgqueue.jobs AS j
           SET state = 'scheduled',
               run_at = now() + make_interval(secs => random() * least(
                   backoff_cap, backoff_base * power(2.0, least(j.attempts, 60)))),
               lease_expires_at = NULL,
               worker_id = NULL
         WHERE j.id = ANY(expired);

        PERFORM pg_notify('pgqueue_jobs', q.queue)
           FROM (SELECT DISTINCT queue FROM pgqueue.jobs WHERE id = ANY(expired)) AS q;
    END IF;

    -- Forget workers that have not been seen for a long time (crashed without deregistering,
    -- or stopped cleanly a while ago).
    DELETE FROM pgqueue.workers AS w WHERE w.last_seen < now() - worker_ttl;

    RETURN cardinality(expired);
END
$$;

-- Cancel a job: a waiting job is removed at once (recorded as cancelled); a running job is
-- flagged and its worker is told (NOTIFY now, and its next heartbeat) to stop the handler.
-- Returns 'cancelled', 'cancelling', or 'not_found' (unknown, finished or dead).
CREATE FUNCTION pgqueue.cancel(job_id bigint)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    current_state text;
BEGIN
    SELECT j.state INTO current_state FROM pgqueue.jobs AS j WHERE j.id = job_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'not_found';
    END IF;
    IF current_state = 'running' THEN
        UPDATE pgqueue.jobs SET cancel_requested = true WHERE id = job_id;
        PERFORM pg_notify('pgqueue_cancel', job_id::text);
        RETURN 'cancelling';
    END IF;
    WITH gone AS (DELETE FROM pgqueue.jobs AS j WHERE j.id = job_id RETURNING j.*)
    INSERT INTO pgqueue.job_history (id, queue, task, args, state, priority, attempts,
                                     max_attempts, created_at, started_at, errors, worker_id)
    SELECT id, queue, task, args, 'cancelled', priority, attempts, max_attempts, created_at,
           started_at, errors, worker_id
      FROM gone;
    RETURN 'cancelled';
END
$$;
"""

DOWNGRADE = r"""
DROP FUNCTION pgqueue.cancel(bigint);
DROP FUNCTION pgqueue.reap(integer, double precision, double precision, interval);
DROP TABLE pgqueue.workers;
DROP TABLE pgqueue.job_history;
ALTER TABLE pgqueue.jobs DROP COLUMN cancel_requested;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
