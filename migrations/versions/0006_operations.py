"""Operations: per-minute job counts and the views operators query (CLI, dashboard, psql).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

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

-- Jobs finished per minute and queue over the last hour (throughput charts).
CREATE VIEW pgqueue.throughput AS
SELECT minute, queue,
       sum(succeeded)::bigint AS succeeded,
       sum(retried)::bigint   AS retried,
       sum(dead)::bigint      AS dead,
       sum(cancelled)::bigint AS cancelled
  FROM pgqueue.job_counts
 WHERE minute >= date_trunc('minute', now()) - interval '59 minutes'
 GROUP BY minute, queue;

-- One row per queue: depth by state, oldest ready age, paused, and throughput: the average
-- per minute over the last five complete minutes (succeeded, and failed = retried + dead).
CREATE OR REPLACE VIEW pgqueue.queue_stats AS
WITH live AS (
    SELECT queue,
           count(*) FILTER (WHERE state = 'ready' OR (state = 'scheduled' AND run_at <= now()))
               AS ready,
           count(*) FILTER (WHERE state = 'scheduled' AND run_at > now()) AS scheduled,
           count(*) FILTER (WHERE state = 'running') AS running,
           min(run_at) FILTER (WHERE state = 'ready' OR (state = 'scheduled' AND run_at <= now()))
               AS oldest_ready_at,
           count(*) FILTER (WHERE state = 'waiting') AS waiting
      FROM pgqueue.jobs
     GROUP BY queue
), dead AS (
    SELECT queue, count(*) AS dead FROM pgqueue.dead_letters GROUP BY queue
), recent AS (
    SELECT queue, sum(succeeded) AS succeeded, sum(retried + dead) AS failed
      FROM pgqueue.job_counts
     WHERE minute >= date_trunc('minute', now()) - interval '5 minutes'
       AND minute < date_trunc('minute', now())
     GROUP BY queue
), names AS (
    SELECT queue FROM live UNION SELECT queue FROM dead UNION SELECT name FROM pgqueue.queues
    UNION SELECT queue FROM recent
)
SELECT n.queue,
       coalesce(live.ready, 0)                    AS ready,
       coalesce(live.scheduled, 0)                AS scheduled,
       coalesce(live.running, 0)                  AS running,
       coalesce(dead.dead, 0)                     AS dead,
       CASE WHEN live.oldest_ready_at IS NOT NULL
            THEN greatest(now() - live.oldest_ready_at, interval '0') END AS oldest_ready_age,
       coalesce(qs.paused, false)                 AS paused,
       coalesce(live.waiting, 0)                  AS waiting,
       round(coalesce(recent.succeeded, 0) / 5.0, 1)::double precision AS succeeded_per_min,
       round(coalesce(recent.failed, 0) / 5.0, 1)::double precision    AS failed_per_min
  FROM names AS n
  LEFT JOIN live ON live.queue = n.queue
  LEFT JOIN dead ON dead.queue = n.queue
  LEFT JOIN recent ON recent.queue = n.queue
  LEFT JOIN pgqueue.queues AS qs ON qs.name = n.queue;

-- Jobs running now, with the worker holding each and how long its lease has left.
CREATE VIEW pgqueue.running_jobs AS
SELECT j.id, j.queue, j.task, j.attempts AS attempt, j.max_attempts, j.worker_id,
       w.host, w.pid, j.started_at,
       now() - j.started_at         AS running_for,
       j.lease_expires_at - now()   AS lease_left,
       j.cancel_requested
  FROM pgqueue.jobs AS j
  LEFT JOIN pgqueue.workers AS w ON w.id = j.worker_id
 WHERE j.state = 'running';

-- Worker processes (rows are pruned by pgqueue.reap() an hour after they were last seen).
-- status: 'stopped' (exited cleanly), 'running' (heartbeat within two minutes), else 'lost'.
CREATE VIEW pgqueue.worker_status AS
SELECT w.id, w.host, w.pid, w.queues, w.concurrency, w.version, w.started_at, w.last_seen,
       w.stopped_at,
       CASE WHEN w.stopped_at IS NOT NULL THEN 'stopped'
            WHEN w.last_seen >= now() - interval '2 minutes' THEN 'running'
            ELSE 'lost' END        AS status,
       coalesce(held.jobs, 0)      AS jobs_held,
       w.jobs_succeeded, w.jobs_retried, w.jobs_dead, w.jobs_cancelled, w.leases_lost
  FROM pgqueue.workers AS w
  LEFT JOIN LATERAL (
        SELECT count(*) AS jobs FROM pgqueue.jobs AS j
         WHERE j.worker_id = w.id AND j.state = 'running') AS held ON true;

-- Dead letters with their final error spelled out (class, message, traceback).
CREATE VIEW pgqueue.dead_letter_errors AS
SELECT d.id, d.queue, d.task, d.attempts, d.max_attempts, d.reason,
       d.errors -> -1 ->> 'error'     AS error_class,
       d.last_error,
       d.errors -> -1 ->> 'traceback' AS traceback,
       d.worker_id, d.created_at, d.dead_at
  FROM pgqueue.dead_letters AS d;

-- Failures over the last hour by queue and task: retried and dead-lettered attempts (from the
-- per-minute counts) and the latest recorded error (from live jobs and dead letters).
CREATE VIEW pgqueue.recent_failures AS
WITH counts AS (
    SELECT queue, task, sum(retried)::bigint AS retried, sum(dead)::bigint AS dead
      FROM pgqueue.job_counts
     WHERE minute >= now() - interval '1 hour'
     GROUP BY queue, task
    HAVING sum(retried) + sum(dead) > 0
), errors AS (
    SELECT DISTINCT ON (e.queue, e.task) e.queue, e.task, e.error ->> 'error' AS error_class,
           e.error ->> 'message' AS last_error, (e.error ->> 'at')::timestamptz AS failed_at
      FROM (SELECT queue, task, errors -> -1 AS error FROM pgqueue.jobs
             WHERE jsonb_array_length(errors) > 0
            UNION ALL
            SELECT queue, task, errors -> -1 FROM pgqueue.dead_letters
             WHERE dead_at >= now() - interval '1 hour') AS e
     WHERE (e.error ->> 'at')::timestamptz >= now() - interval '1 hour'
     ORDER BY e.queue, e.task, (e.error ->> 'at')::timestamptz DESC
)
SELECT coalesce(c.queue, e.queue) AS queue, coalesce(c.task, e.task) AS task,
       coalesce(c.retried, 0) AS retried, coalesce(c.dead, 0) AS dead,
       e.error_class, e.last_error, e.failed_at
  FROM counts AS c
  FULL JOIN errors AS e ON e.queue = c.queue AND e.task = c.task;
"""

DOWNGRADE = r"""
DROP VIEW pgqueue.recent_failures;
DROP VIEW pgqueue.dead_letter_errors;
DROP VIEW pgqueue.worker_status;
DROP VIEW pgqueue.running_jobs;
DROP VIEW pgqueue.queue_stats;
CREATE VIEW pgqueue.queue_stats AS
WITH live AS (
    SELECT queue,
           count(*) FILTER (WHERE state = 'ready' OR (state = 'scheduled' AND run_at <= now()))
               AS ready,
           count(*) FILTER (WHERE state = 'scheduled' AND run_at > now()) AS scheduled,
           count(*) FILTER (WHERE state = 'running') AS running,
           min(run_at) FILTER (WHERE state = 'ready' OR (state = 'scheduled' AND run_at <= now()))
               AS oldest_ready_at,
           count(*) FILTER (WHERE state = 'waiting') AS waiting
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
       coalesce(qs.paused, false)                 AS paused,
       coalesce(live.waiting, 0)                  AS waiting
  FROM names AS n
  LEFT JOIN live ON live.queue = n.queue
  LEFT JOIN dead ON dead.queue = n.queue
  LEFT JOIN pgqueue.queues AS qs ON qs.name = n.queue;
DROP VIEW pgqueue.throughput;
DROP TABLE pgqueue.job_counts;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
