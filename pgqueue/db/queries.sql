-- Every DML statement pgqueue's runtime runs. Loaded by pgqueue/db/queries.py; each query starts
-- with a "-- name: <name>" line. Parameters are psycopg placeholders, always bound.

-- ---------------------------------------------------------------------------------------------
-- Enqueue
-- ---------------------------------------------------------------------------------------------

-- name: enqueue_job
-- One job; the SQL function owns the idempotency-key logic. delay is an interval from the
-- database clock, never the client's.
SELECT e.id, e.created
  FROM pgqueue.enqueue_job(
           %(task)s, %(args)s::jsonb, %(queue)s, %(priority)s,
           coalesce(%(run_at)s::timestamptz, now() + %(delay)s::interval),
           %(max_attempts)s, %(idempotency_key)s) AS e

-- name: allocate_job_ids
-- Bulk enqueue reserves its ids up front (so COPY can write them) and reads the database clock
-- once for every run_at/delay in the batch.
SELECT now(), array_agg(nextval('pgqueue.jobs_id_seq'))
  FROM generate_series(1, %(count)s)

-- name: copy_jobs
COPY pgqueue.jobs (id, queue, task, args, priority, run_at, state, max_attempts, idempotency_key)
FROM STDIN

-- name: insert_jobs
INSERT INTO pgqueue.jobs (id, queue, task, args, priority, run_at, state, max_attempts,
                          idempotency_key)
SELECT id, queue, task, args::jsonb, priority, run_at, state, max_attempts, key
  FROM unnest(%(ids)s::bigint[], %(queues)s::text[], %(tasks)s::text[], %(args)s::text[],
              %(priorities)s::smallint[], %(run_ats)s::timestamptz[], %(states)s::text[],
              %(max_attempts)s::integer[], %(keys)s::text[])
       AS u(id, queue, task, args, priority, run_at, state, max_attempts, key)

-- name: insert_jobs_keyed
INSERT INTO pgqueue.jobs (id, queue, task, args, priority, run_at, state, max_attempts,
                          idempotency_key)
SELECT id, queue, task, args::jsonb, priority, run_at, state, max_attempts, key
  FROM unnest(%(ids)s::bigint[], %(queues)s::text[], %(tasks)s::text[], %(args)s::text[],
              %(priorities)s::smallint[], %(run_ats)s::timestamptz[], %(states)s::text[],
              %(max_attempts)s::integer[], %(keys)s::text[])
       AS u(id, queue, task, args, priority, run_at, state, max_attempts, key)
ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING id

-- name: jobs_by_idempotency_keys
SELECT idempotency_key, id FROM pgqueue.jobs WHERE idempotency_key = ANY(%(keys)s::text[])

-- ---------------------------------------------------------------------------------------------
-- Inspection
-- ---------------------------------------------------------------------------------------------

-- name: schema_version
SELECT version_num FROM pgqueue.pgqueue_alembic_version

-- name: schema_installed
SELECT to_regclass('pgqueue.pgqueue_alembic_version') IS NOT NULL

-- name: queue_stats
SELECT queue, ready, scheduled, running, dead, oldest_ready_age, paused, waiting,
       succeeded_per_min, failed_per_min
  FROM pgqueue.queue_stats
 ORDER BY queue

-- name: set_queue_paused
-- Pausing stops claims from the queue at once (enqueue still works); resuming wakes workers.
WITH upserted AS (
    INSERT INTO pgqueue.queues AS qs (name, paused) VALUES (%(queue)s, %(paused)s)
    ON CONFLICT (name) DO UPDATE SET paused = excluded.paused, updated_at = now()
    RETURNING qs.name, qs.paused
)
SELECT u.name, u.paused, pg_notify('pgqueue_jobs', u.name) AS notified
  FROM upserted AS u

-- ---------------------------------------------------------------------------------------------
-- Worker: claim, heartbeat, complete (all fenced by lease_token), release
-- ---------------------------------------------------------------------------------------------

-- name: claim_jobs
-- Claim up to %(limit)s jobs for this worker in one statement: per queue, walk the ready index
-- in (priority, run_at) order and the scheduled index for due jobs, skipping rows other workers
-- hold (SKIP LOCKED). The MATERIALIZED fence makes the row locks happen exactly once, before
-- the UPDATE. Each claim bumps lease_token: the fencing token every later write must present.
WITH candidates AS MATERIALIZED (
    SELECT c.id
      FROM unnest(%(queues)s::text[]) AS q(name)
      -- paused queues are not claimed from
     CROSS JOIN LATERAL (SELECT NOT EXISTS (
               SELECT 1 FROM pgqueue.queues AS qs WHERE qs.name = q.name AND qs.paused)
           AS active) AS qa
     CROSS JOIN LATERAL (
           -- (FOR UPDATE is not allowed directly in a UNION branch, only in a subquery.)
           SELECT r.* FROM (
               SELECT j.id, j.priority, j.run_at
                 FROM pgqueue.jobs AS j
                WHERE qa.active AND j.queue = q.name AND j.state = 'ready'
                  AND j.task = ANY(%(tasks)s::text[])
                ORDER BY j.priority, j.run_at, j.id
                LIMIT %(limit)s
                  FOR UPDATE SKIP LOCKED) AS r
           UNION ALL
           SELECT s.* FROM (
               SELECT j.id, j.priority, j.run_at
                 FROM pgqueue.jobs AS j
                WHERE qa.active AND j.queue = q.name AND j.state = 'scheduled'
                  AND j.run_at <= now()
                  AND j.task = ANY(%(tasks)s::text[])
                ORDER BY j.run_at, j.id
                LIMIT %(limit)s
                  FOR UPDATE SKIP LOCKED) AS s
     ) AS c
     ORDER BY c.priority, c.run_at, c.id
     LIMIT %(limit)s
)
UPDATE pgqueue.jobs AS j
   SET state = 'running',
       attempts = j.attempts + 1,
       lease_token = j.lease_token + 1,
       lease_expires_at = now() + %(lease)s::interval,
       worker_id = %(worker_id)s,
       started_at = now()
  FROM candidates AS c
 WHERE j.id = c.id
RETURNING j.id, j.queue, j.task, j.args, j.attempts, j.max_attempts, j.lease_token,
          j.priority, j.created_at, j.run_at, j.result_ttl IS NOT NULL

-- name: next_due
-- When the worker is idle: seconds until the earliest scheduled job in its queues is due (by the
-- database clock), so it can sleep exactly that long.
SELECT extract(epoch FROM min(n.run_at) - now())
  FROM unnest(%(queues)s::text[]) AS q(name)
 CROSS JOIN LATERAL (
       SELECT j.run_at FROM pgqueue.jobs AS j
        WHERE j.queue = q.name AND j.state = 'scheduled'
        ORDER BY j.run_at LIMIT 1) AS n

-- name: heartbeat
-- Extend the leases of every job this worker still holds, in one statement, and refresh the
-- worker's own row. Jobs missing from the result were lost (reaped, or the token moved on);
-- cancel_requested tells the worker to stop a handler. Only unindexed columns change: HOT.
-- The same statement adds the attempts finished since the last heartbeat to the per-minute
-- counts (sorted, so concurrent workers lock the rows in one order) and drops day-old counts.
WITH me AS (
    UPDATE pgqueue.workers
       SET last_seen = now(), jobs_succeeded = %(succeeded)s, jobs_retried = %(retried)s,
           jobs_dead = %(dead)s, jobs_cancelled = %(cancelled)s, leases_lost = %(lost)s
     WHERE id = %(worker_id)s
    RETURNING id
), counted AS (
    INSERT INTO pgqueue.job_counts AS c (minute, queue, task, succeeded, retried, dead,
                                         cancelled)
    SELECT date_trunc('minute', now()), u.queue, u.task, u.succeeded, u.retried, u.dead,
           u.cancelled
      FROM unnest(%(count_queues)s::text[], %(count_tasks)s::text[],
                  %(count_succeeded)s::bigint[], %(count_retried)s::bigint[],
                  %(count_dead)s::bigint[], %(count_cancelled)s::bigint[])
           AS u(queue, task, succeeded, retried, dead, cancelled)
     ORDER BY u.queue, u.task
    ON CONFLICT (minute, queue, task) DO UPDATE
       SET succeeded = c.succeeded + excluded.succeeded, retried = c.retried + excluded.retried,
           dead = c.dead + excluded.dead, cancelled = c.cancelled + excluded.cancelled
), expired_counts AS (
    DELETE FROM pgqueue.job_counts WHERE minute < now() - interval '1 day'
)
UPDATE pgqueue.jobs AS j
   SET lease_expires_at = now() + %(lease)s::interval
  FROM unnest(%(ids)s::bigint[], %(tokens)s::integer[]) AS h(id, token)
 WHERE j.id = h.id AND j.lease_token = h.token AND j.state = 'running'
RETURNING j.id, j.lease_token, j.cancel_requested

-- name: ack_jobs
-- Success: the job leaves the hot table, but only if this worker still holds it (token match).
-- Stale acks change nothing and are reported by their absence from the result. Most acks end
-- there (one DELETE for the batch). A row goes to job_history only when it is wanted: the job
-- was cancelled while its handler ran, it keeps its result (result_ttl: the task's or the
-- call's, and every workflow member, whose dependents are settled by the history trigger in
-- this same statement), or the operator records every succeeded job (pgqueue.retention).
WITH done AS (
    DELETE FROM pgqueue.jobs AS j
     USING unnest(%(ids)s::bigint[], %(tokens)s::integer[], %(results)s::text[])
           AS a(id, token, result)
     WHERE j.id = a.id AND j.lease_token = a.token AND j.state = 'running'
    RETURNING j.*, a.result AS result_json
), recorded AS (
    INSERT INTO pgqueue.job_history (id, queue, task, args, state, priority, attempts,
                                     max_attempts, created_at, started_at, errors, worker_id,
                                     result, keep_until)
    SELECT d.id, d.queue, d.task, d.args,
           CASE WHEN d.cancel_requested THEN 'cancelled' ELSE 'succeeded' END, d.priority,
           d.attempts, d.max_attempts, d.created_at, d.started_at, d.errors, d.worker_id,
           CASE WHEN NOT d.cancel_requested THEN d.result_json::jsonb END,
           CASE WHEN d.result_ttl IS NOT NULL
                THEN now() + greatest(d.result_ttl, (SELECT r.history_retention
                                                       FROM pgqueue.retention AS r)) END
      FROM done AS d
      -- (The settings subqueries run once per statement, not per row.)
     WHERE d.cancel_requested OR d.result_ttl IS NOT NULL
        OR coalesce((SELECT r.record_succeeded FROM pgqueue.retention AS r), false)
)
SELECT id, cancel_requested FROM done

-- name: fail_jobs
-- Every unsuccessful outcome, decided in one place with the row locked:
--   cancelled (cancel requested, or the handler was cancelled) -> job_history as cancelled;
--   'fail' (handler raised Fail) or an error with no attempts left -> dead_letters;
--   'retry' (handler raised Retry: the attempt is not burned, no error recorded) or an error
--   with attempts left -> back to the queue at now() + delay (delay from the task's backoff).
WITH input AS (
    SELECT *
      FROM unnest(%(ids)s::bigint[], %(tokens)s::integer[], %(kinds)s::text[],
                  %(delays)s::double precision[], %(errors)s::text[])
           AS i(id, token, kind, delay, error)
), locked AS MATERIALIZED (
    SELECT j.id, j.queue, i.kind, i.delay,
           i.error::jsonb || jsonb_build_object('at', now()) AS error,
           CASE WHEN j.cancel_requested OR i.kind = 'cancelled' THEN 'cancelled'
                WHEN i.kind = 'fail' OR (i.kind = 'error' AND j.attempts >= j.max_attempts)
                    THEN 'dead'
                ELSE 'retry'
           END AS outcome
      FROM pgqueue.jobs AS j
      JOIN input AS i ON i.id = j.id AND i.token = j.lease_token
     WHERE j.state = 'running'
       FOR UPDATE OF j
), retried AS (
    UPDATE pgqueue.jobs AS j
       SET state = CASE WHEN l.delay > 0 THEN 'scheduled' ELSE 'ready' END,
           run_at = now() + make_interval(secs => l.delay),
           attempts = CASE WHEN l.kind = 'retry' THEN j.attempts - 1 ELSE j.attempts END,
           errors = CASE WHEN l.kind = 'retry' THEN j.errors
                         ELSE j.errors || jsonb_build_array(l.error) END,
           lease_expires_at = NULL,
           worker_id = NULL
      FROM locked AS l
     WHERE j.id = l.id AND l.outcome = 'retry'
    RETURNING j.id, j.queue
), dead AS (
    DELETE FROM pgqueue.jobs AS j
     USING locked AS l
     WHERE j.id = l.id AND l.outcome = 'dead'
    RETURNING j.*, l.error AS final_error, l.kind
), buried AS (
    INSERT INTO pgqueue.dead_letters (id, queue, task, args, priority, attempts, max_attempts,
                                      lease_token, idempotency_key, created_at, errors,
                                      last_error, reason, worker_id)
    SELECT id, queue, task, args, priority, attempts, max_attempts, lease_token,
           idempotency_key, created_at, errors || jsonb_build_array(final_error),
           final_error ->> 'message',
           CASE WHEN kind = 'fail' THEN 'failed permanently (Fail raised)'
                ELSE 'max attempts reached' END,
           worker_id
      FROM dead
), cancelled AS (
    DELETE FROM pgqueue.jobs AS j
     USING locked AS l
     WHERE j.id = l.id AND l.outcome = 'cancelled'
    RETURNING j.*, l.error AS final_error, l.kind
), archived AS (
    INSERT INTO pgqueue.job_history (id, queue, task, args, state, priority, attempts,
                                     max_attempts, created_at, started_at, errors, worker_id)
    SELECT id, queue, task, args, 'cancelled', priority, attempts, max_attempts, created_at,
           started_at, CASE WHEN kind = 'cancelled' THEN errors
                            ELSE errors || jsonb_build_array(final_error) END, worker_id
      FROM cancelled
), woken AS (
    -- Wake idle workers so they (re)arm their timers for retried jobs.
    SELECT pg_notify('pgqueue_jobs', r.queue) FROM (SELECT DISTINCT queue FROM retried) AS r
)
SELECT l.id, l.outcome FROM locked AS l
 WHERE (SELECT count(*) FROM woken) >= 0

-- name: release_jobs
-- Graceful shutdown: give unfinished jobs back without burning their attempt.
UPDATE pgqueue.jobs AS j
   SET state = 'ready', attempts = greatest(j.attempts - 1, 0), lease_expires_at = NULL,
       worker_id = NULL, run_at = now()
  FROM unnest(%(ids)s::bigint[], %(tokens)s::integer[]) AS r(id, token)
 WHERE j.id = r.id AND j.lease_token = r.token AND j.state = 'running'
RETURNING j.id

-- name: register_worker
INSERT INTO pgqueue.workers (id, host, pid, queues, concurrency, version)
VALUES (%(worker_id)s, %(host)s, %(pid)s, %(queues)s, %(concurrency)s, %(version)s)

-- name: deregister_worker
UPDATE pgqueue.workers
   SET stopped_at = now(), last_seen = now(), jobs_succeeded = %(succeeded)s,
       jobs_retried = %(retried)s, jobs_dead = %(dead)s, jobs_cancelled = %(cancelled)s,
       leases_lost = %(lost)s
 WHERE id = %(worker_id)s

-- name: reap
SELECT pgqueue.reap(%(max_jobs)s)

-- name: notify_queue
SELECT pg_notify('pgqueue_jobs', %(queue)s)

-- ---------------------------------------------------------------------------------------------
-- Operator actions: cancel, dead letters
-- ---------------------------------------------------------------------------------------------

-- name: cancel_job
SELECT pgqueue.cancel(%(job_id)s)

-- name: list_dead_letters
SELECT id, queue, task, args, attempts, max_attempts, reason, last_error, errors, created_at,
       dead_at
  FROM pgqueue.dead_letters
 WHERE (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s::bigint[]))
   AND (%(task)s::text IS NULL OR task = %(task)s)
   AND (%(queue)s::text IS NULL OR queue = %(queue)s)
   AND (%(error)s::text IS NULL OR strpos(lower(coalesce(last_error, '')), lower(%(error)s)) > 0)
   AND (%(since)s::timestamptz IS NULL OR dead_at >= %(since)s)
   AND (%(until)s::timestamptz IS NULL OR dead_at < %(until)s)
 ORDER BY dead_at DESC, id DESC
 LIMIT %(limit)s

-- name: count_dead_letters
SELECT count(*)
  FROM pgqueue.dead_letters
 WHERE (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s::bigint[]))
   AND (%(task)s::text IS NULL OR task = %(task)s)
   AND (%(queue)s::text IS NULL OR queue = %(queue)s)
   AND (%(error)s::text IS NULL OR strpos(lower(coalesce(last_error, '')), lower(%(error)s)) > 0)
   AND (%(since)s::timestamptz IS NULL OR dead_at >= %(since)s)
   AND (%(until)s::timestamptz IS NULL OR dead_at < %(until)s)

-- name: replay_dead_letters
-- Move one batch of matching dead letters back to the queue with fresh attempts (same id, errors
-- kept for the record, lease_token carried on so no stale worker can touch the new attempt).
-- A dead letter whose idempotency key is held by a live job is left where it is.
WITH batch AS (
    SELECT d.id
      FROM pgqueue.dead_letters AS d
     WHERE (%(ids)s::bigint[] IS NULL OR d.id = ANY(%(ids)s::bigint[]))
       AND (%(task)s::text IS NULL OR d.task = %(task)s)
       AND (%(queue)s::text IS NULL OR d.queue = %(queue)s)
       AND (%(error)s::text IS NULL
            OR strpos(lower(coalesce(d.last_error, '')), lower(%(error)s)) > 0)
       AND (%(since)s::timestamptz IS NULL OR d.dead_at >= %(since)s)
       AND (%(until)s::timestamptz IS NULL OR d.dead_at < %(until)s)
       AND NOT EXISTS (SELECT 1 FROM pgqueue.jobs AS j
                        WHERE j.idempotency_key = d.idempotency_key)
     ORDER BY d.id
     LIMIT %(batch_size)s
       FOR UPDATE SKIP LOCKED
), moved AS (
    DELETE FROM pgqueue.dead_letters AS d USING batch AS b WHERE d.id = b.id RETURNING d.*
)
INSERT INTO pgqueue.jobs (id, queue, task, args, state, priority, run_at, attempts, max_attempts,
                          lease_token, idempotency_key, created_at, errors)
SELECT id, queue, task, args, 'ready', priority, now(), 0, max_attempts, lease_token,
       idempotency_key, created_at, errors
  FROM moved
RETURNING id

-- ---------------------------------------------------------------------------------------------
-- Listener
-- ---------------------------------------------------------------------------------------------

-- name: listen_jobs
LISTEN pgqueue_jobs

-- name: listen_cancel
LISTEN pgqueue_cancel

-- name: listen_probe
-- At start-up the listener checks that notifications reach it (they do not through a
-- transaction-pooling PgBouncer): it listens here and has another connection notify it.
LISTEN pgqueue_probe

-- name: unlisten_probe
UNLISTEN pgqueue_probe

-- name: notify_probe
SELECT pg_notify('pgqueue_probe', %(token)s)

-- name: ping
SELECT 1

-- ---------------------------------------------------------------------------------------------
-- Operations: inspection (CLI, dashboard, metrics) and operator actions on jobs
-- ---------------------------------------------------------------------------------------------

-- name: list_jobs
-- Live jobs, oldest first, optionally by queue, state and task.
SELECT j.id, j.queue, j.task, j.state, j.priority, j.attempts, j.max_attempts, j.run_at,
       j.created_at, j.worker_id, j.lease_expires_at - now() AS lease_left,
       j.errors -> -1 ->> 'message' AS last_error
  FROM pgqueue.jobs AS j
 WHERE (%(queue)s::text IS NULL OR j.queue = %(queue)s)
   AND (%(state)s::text IS NULL OR j.state = %(state)s)
   AND (%(task)s::text IS NULL OR j.task = %(task)s)
 ORDER BY j.id
 LIMIT %(limit)s

-- name: find_job
-- One job wherever it is now: live (jobs), dead (dead_letters) or finished (job_history).
SELECT 'live' AS place, to_jsonb(j) AS job FROM pgqueue.jobs AS j WHERE j.id = %(id)s
UNION ALL
SELECT 'dead', to_jsonb(d) FROM pgqueue.dead_letters AS d WHERE d.id = %(id)s
UNION ALL
SELECT 'history', to_jsonb(h) FROM pgqueue.job_history AS h WHERE h.id = %(id)s

-- name: list_running_jobs
SELECT id, queue, task, attempt, max_attempts, worker_id, host, pid, started_at, running_for,
       lease_left, cancel_requested
  FROM pgqueue.running_jobs
 ORDER BY started_at, id
 LIMIT %(limit)s

-- name: list_workers
SELECT id, host, pid, queues, concurrency, version, started_at, last_seen, stopped_at, status,
       jobs_held, jobs_succeeded, jobs_retried, jobs_dead, jobs_cancelled, leases_lost
  FROM pgqueue.worker_status
 WHERE %(all)s OR status <> 'stopped'
 ORDER BY started_at, id

-- name: list_recent_failures
SELECT queue, task, retried, dead, error_class, last_error, failed_at
  FROM pgqueue.recent_failures
 ORDER BY failed_at DESC NULLS LAST, queue, task

-- name: list_throughput
SELECT minute, queue, succeeded, retried, dead, cancelled
  FROM pgqueue.throughput
 ORDER BY minute, queue

-- name: queue_depths
-- The metrics exporter's one query per scrape: live jobs by queue and state, and the age of
-- the oldest ready job per queue. Reads only the (small) hot table.
SELECT queue,
       count(*) FILTER (WHERE state = 'ready' OR (state = 'scheduled' AND run_at <= now())),
       count(*) FILTER (WHERE state = 'scheduled' AND run_at > now()),
       count(*) FILTER (WHERE state = 'running'),
       coalesce(extract(epoch FROM now() - min(run_at) FILTER (
           WHERE state = 'ready' OR (state = 'scheduled' AND run_at <= now()))), 0)
  FROM pgqueue.jobs
 GROUP BY queue

-- name: retry_waiting_jobs
-- `pgq retry`: waiting jobs (a retry's backoff, or scheduled for later) become ready now.
UPDATE pgqueue.jobs AS j
   SET state = 'ready', run_at = now()
 WHERE j.id = ANY(%(ids)s::bigint[]) AND j.state IN ('scheduled', 'ready')
RETURNING j.id

-- name: count_purgeable_jobs
SELECT count(*)
  FROM pgqueue.jobs AS j
 WHERE j.state IN ('ready', 'scheduled')
   AND (%(queue)s::text IS NULL OR j.queue = %(queue)s)
   AND (%(task)s::text IS NULL OR j.task = %(task)s)

-- name: purge_jobs
-- `pgq purge`: delete waiting jobs (never running ones: cancel those).
WITH gone AS (
    DELETE FROM pgqueue.jobs AS j
     WHERE j.state IN ('ready', 'scheduled')
       AND (%(queue)s::text IS NULL OR j.queue = %(queue)s)
       AND (%(task)s::text IS NULL OR j.task = %(task)s)
    RETURNING 1)
SELECT count(*) FROM gone

-- name: count_purgeable_dead_letters
SELECT count(*)
  FROM pgqueue.dead_letters AS d
 WHERE (%(queue)s::text IS NULL OR d.queue = %(queue)s)
   AND (%(task)s::text IS NULL OR d.task = %(task)s)

-- name: purge_dead_letters
WITH gone AS (
    DELETE FROM pgqueue.dead_letters AS d
     WHERE (%(queue)s::text IS NULL OR d.queue = %(queue)s)
       AND (%(task)s::text IS NULL OR d.task = %(task)s)
    RETURNING 1)
SELECT count(*) FROM gone

-- ---------------------------------------------------------------------------------------------
-- pg_cron: schedule pgqueue.reap() inside the database (`pgq cron install-reaper`)
-- ---------------------------------------------------------------------------------------------

-- name: pg_cron_setup
-- Which database pg_cron runs its jobs from (NULL when pg_cron is not preloaded), and its
-- version when the extension exists in the current database.
SELECT current_database(), current_setting('cron.database_name', true),
       (SELECT extversion FROM pg_extension WHERE extname = 'pg_cron')

-- name: pg_cron_schedule
-- Creates the job, or updates the one with this name (pg_cron upserts named jobs).
SELECT cron.schedule_in_database(%(name)s, %(schedule)s, %(command)s, %(database)s)

-- name: pg_cron_unschedule
SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname = %(name)s

-- name: pg_cron_jobs
SELECT jobid, jobname, schedule, command, database, active
  FROM cron.job
 WHERE jobname = %(name)s
-- Results, workflows and retention
-- ---------------------------------------------------------------------------------------------

-- name: set_result_ttl
-- Jobs that keep their result: set in the enqueue's own transaction, before any worker can see
-- the job.
UPDATE pgqueue.jobs AS j
   SET result_ttl = u.ttl
  FROM unnest(%(ids)s::bigint[], %(ttls)s::interval[]) AS u(id, ttl)
 WHERE j.id = u.id

-- name: lock_parent_jobs
-- depends_on: live parents are locked FOR KEY SHARE until the enqueue commits, so a parent
-- cannot finish (its ack would wait) before its new dependents are linked; heartbeats and
-- other updates of the parent are not blocked by this lock mode.
SELECT j.id, n.workflow_id
  FROM pgqueue.jobs AS j
  LEFT JOIN pgqueue.workflow_nodes AS n ON n.job_id = j.id
 WHERE j.id = ANY(%(ids)s::bigint[])
 ORDER BY j.id
   FOR KEY SHARE OF j

-- name: finished_parents
-- depends_on on jobs that already left the hot table: what became of them.
SELECT h.id, h.state, h.result, n.workflow_id
  FROM pgqueue.job_history AS h
  LEFT JOIN pgqueue.workflow_nodes AS n ON n.job_id = h.id
 WHERE h.id = ANY(%(ids)s::bigint[])
UNION ALL
SELECT d.id, 'dead', NULL, NULL
  FROM pgqueue.dead_letters AS d
 WHERE d.id = ANY(%(ids)s::bigint[])

-- name: insert_workflow
INSERT INTO pgqueue.workflows (name, on_failure)
VALUES (%(name)s, %(on_failure)s::jsonb)
RETURNING id

-- name: insert_workflow_jobs
INSERT INTO pgqueue.jobs (id, queue, task, args, priority, run_at, state, max_attempts,
                          result_ttl)
SELECT id, queue, task, args::jsonb, priority, run_at, state, max_attempts, result_ttl
  FROM unnest(%(ids)s::bigint[], %(queues)s::text[], %(tasks)s::text[], %(args)s::text[],
              %(priorities)s::smallint[], %(run_ats)s::timestamptz[], %(states)s::text[],
              %(max_attempts)s::integer[], %(result_ttls)s::interval[])
       AS u(id, queue, task, args, priority, run_at, state, max_attempts, result_ttl)

-- name: insert_workflow_nodes
INSERT INTO pgqueue.workflow_nodes (job_id, workflow_id, name, parents, dependents, receive,
                                    result_arg, parent_results)
SELECT n.job_id, %(workflow_id)s, n.name, n.parents, n.dependents, n.receive, n.result_arg,
       coalesce(n.parent_results, '{}'::jsonb)
  FROM jsonb_to_recordset(%(nodes)s::jsonb)
       AS n(job_id bigint, name text, parents bigint[], dependents bigint[], receive text,
            result_arg text, parent_results jsonb)

-- name: link_parents
-- New dependents of live jobs that existed before this enqueue: appended to the parent's node
-- (a parent outside any workflow joins this one), and the parent keeps its result from now on
-- so that its ack records it and settles the dependents in the same statement.
WITH edges AS (
    SELECT parent, array_agg(child ORDER BY child) AS children
      FROM unnest(%(parents)s::bigint[], %(children)s::bigint[]) AS e(parent, child)
     GROUP BY parent
), kept AS (
    UPDATE pgqueue.jobs AS j
       SET result_ttl = %(result_ttl)s::interval
      FROM edges AS e
     WHERE j.id = e.parent AND j.result_ttl IS NULL
)
INSERT INTO pgqueue.workflow_nodes AS n (job_id, workflow_id, dependents)
SELECT parent, %(workflow_id)s, children FROM edges
ON CONFLICT (job_id) DO UPDATE SET dependents = n.dependents || excluded.dependents

-- name: listen_results
LISTEN pgqueue_results

-- name: job_outcome
-- Where a job is now, for pgq.result(): live, recorded in job_history, or dead.
SELECT 'live', j.state, j.result_ttl IS NOT NULL, NULL::jsonb, j.errors -> -1 ->> 'message',
       false
  FROM pgqueue.jobs AS j
 WHERE j.id = %(job_id)s
UNION ALL
SELECT 'history', h.state, h.keep_until IS NOT NULL, h.result, h.errors -> -1 ->> 'message',
       coalesce(h.keep_until < now(), false)
  FROM pgqueue.job_history AS h
 WHERE h.id = %(job_id)s
UNION ALL
SELECT 'dead', 'dead', true, NULL, d.last_error, false
  FROM pgqueue.dead_letters AS d
 WHERE d.id = %(job_id)s

-- name: list_workflows
SELECT id, name, state, jobs, waiting, ready, running, succeeded, cancelled, dead, created_at,
       last_finished_at
  FROM pgqueue.workflow_overview
 WHERE (%(state)s::text IS NULL OR state = %(state)s)
 ORDER BY id DESC
 LIMIT %(limit)s

-- name: get_workflow
SELECT o.id, o.name, o.state, o.created_at, o.last_finished_at, w.on_failure ->> 'task',
       w.on_failure_job
  FROM pgqueue.workflow_overview AS o
  JOIN pgqueue.workflows AS w ON w.id = o.id
 WHERE o.id = %(workflow_id)s

-- name: workflow_members
SELECT job_id, role, name, task, queue, state, parents, dependents, attempts, result,
       last_error, created_at, finished_at
  FROM pgqueue.workflow_jobs
 WHERE workflow_id = %(workflow_id)s
 ORDER BY job_id

-- name: get_retention
SELECT history_retention, record_succeeded, dead_letter_retention, updated_at
  FROM pgqueue.retention

-- name: ensure_retention
INSERT INTO pgqueue.retention DEFAULT VALUES ON CONFLICT (id) DO NOTHING

-- name: set_retention
-- NULL parameters leave a setting as it is; dead_letter_retention is set (to a value, or NULL:
-- keep forever) only when set_dead_letters is true.
UPDATE pgqueue.retention AS r
   SET history_retention = coalesce(%(history)s::interval, r.history_retention),
       record_succeeded = coalesce(%(record_succeeded)s::boolean, r.record_succeeded),
       dead_letter_retention = CASE WHEN %(set_dead_letters)s::boolean
                                    THEN %(dead_letters)s::interval
                                    ELSE r.dead_letter_retention END,
       updated_at = now()
RETURNING history_retention, record_succeeded, dead_letter_retention, updated_at

-- name: prune_history
-- One small batch of job_history past its retention: rows without a kept result once the
-- history retention has passed, rows with one once keep_until has. SKIP LOCKED lets every
-- worker's pruner run at once. Workflow nodes of pruned jobs go with them; the ids of their
-- workflows come back so that emptied workflows can be removed.
WITH doomed AS MATERIALIZED (
    SELECT o.id FROM (
        SELECT h.id
          FROM pgqueue.job_history AS h
         WHERE h.keep_until IS NULL
           AND h.finished_at < now() - (SELECT r.history_retention FROM pgqueue.retention AS r)
         ORDER BY h.finished_at
         LIMIT %(batch_size)s
           FOR UPDATE SKIP LOCKED) AS o
    UNION ALL
    SELECT k.id FROM (
        SELECT h.id
          FROM pgqueue.job_history AS h
         WHERE h.keep_until < now()
         ORDER BY h.keep_until
         LIMIT %(batch_size)s
           FOR UPDATE SKIP LOCKED) AS k
), gone AS (
    DELETE FROM pgqueue.job_history AS h USING doomed AS d WHERE h.id = d.id RETURNING h.id
), nodes AS (
    DELETE FROM pgqueue.workflow_nodes AS n USING gone AS g WHERE n.job_id = g.id
    RETURNING n.workflow_id
)
SELECT (SELECT count(*) FROM gone), (SELECT array_agg(DISTINCT workflow_id) FROM nodes)

-- name: prune_dead_letters
-- One small batch of dead letters older than dead_letter_retention (none when it is NULL).
WITH doomed AS MATERIALIZED (
    SELECT d.id
      FROM pgqueue.dead_letters AS d
     WHERE d.dead_at < now() - (SELECT r.dead_letter_retention FROM pgqueue.retention AS r)
     ORDER BY d.dead_at
     LIMIT %(batch_size)s
       FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM pgqueue.dead_letters AS d USING doomed AS x WHERE d.id = x.id RETURNING d.id
), nodes AS (
    DELETE FROM pgqueue.workflow_nodes AS n USING gone AS g WHERE n.job_id = g.id
    RETURNING n.workflow_id
)
SELECT (SELECT count(*) FROM gone), (SELECT array_agg(DISTINCT workflow_id) FROM nodes)

-- name: prune_workflows
-- Workflows whose every member has been pruned.
DELETE FROM pgqueue.workflows AS w
 WHERE w.id = ANY(%(ids)s::bigint[])
   AND NOT EXISTS (SELECT 1 FROM pgqueue.workflow_nodes AS n WHERE n.workflow_id = w.id)
RETURNING w.id

-- name: settle_waiting
SELECT pgqueue.settle_waiting(%(max_parents)s)
