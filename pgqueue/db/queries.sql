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
-- ON CONFLICT needs SELECT on the key column, which a producer role does not have (it would
-- reveal other jobs' keys), so the insert runs in a SECURITY DEFINER function.
SELECT k.id
  FROM pgqueue.insert_keyed_jobs(
           %(ids)s::bigint[], %(queues)s::text[], %(tasks)s::text[], %(args)s::text[],
           %(priorities)s::smallint[], %(run_ats)s::timestamptz[], %(states)s::text[],
           %(max_attempts)s::integer[], %(keys)s::text[]) AS k

-- name: jobs_by_idempotency_keys
-- Through a SECURITY DEFINER function, so a producer role needs no SELECT on pgqueue.jobs.
SELECT k.idempotency_key, k.id FROM pgqueue.job_ids_by_key(%(keys)s::text[]) AS k

-- ---------------------------------------------------------------------------------------------
-- Inspection
-- ---------------------------------------------------------------------------------------------

-- name: schema_version
SELECT version_num FROM pgqueue.pgqueue_alembic_version

-- name: schema_installed
SELECT to_regclass('pgqueue.pgqueue_alembic_version') IS NOT NULL

-- name: queue_stats
SELECT queue, ready, scheduled, running, dead, oldest_ready_age, paused
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
       -- Neither can overflow, whatever a hand-edited row holds: one bad row must not make
       -- every claim of its queue fail. Tokens are only compared for equality, so wrapping
       -- around after 2^32 claims of one job is safe.
       attempts = least(j.attempts, 2147483646) + 1,
       lease_token = CASE WHEN j.lease_token = 2147483647 THEN -2147483648
                          ELSE j.lease_token + 1 END,
       lease_expires_at = now() + %(lease)s::interval,
       worker_id = %(worker_id)s,
       started_at = now()
  FROM candidates AS c
 WHERE j.id = c.id
RETURNING j.id, j.queue, j.task, j.args, j.attempts, j.max_attempts, j.lease_token,
          j.priority, j.created_at, j.run_at

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
WITH me AS (
    UPDATE pgqueue.workers
       SET last_seen = now(), jobs_succeeded = %(succeeded)s, jobs_retried = %(retried)s,
           jobs_dead = %(dead)s, jobs_cancelled = %(cancelled)s, leases_lost = %(lost)s
     WHERE id = %(worker_id)s
    RETURNING id)
UPDATE pgqueue.jobs AS j
   SET lease_expires_at = now() + %(lease)s::interval
  FROM unnest(%(ids)s::bigint[], %(tokens)s::integer[]) AS h(id, token)
 WHERE j.id = h.id AND j.lease_token = h.token AND j.state = 'running'
RETURNING j.id, j.lease_token, j.cancel_requested

-- name: ack_jobs
-- Success: the job leaves the hot table, but only if this worker still holds it (token match).
-- A job cancelled while its handler ran is recorded as cancelled. Stale acks change nothing and
-- are reported by their absence from the result.
WITH done AS (
    DELETE FROM pgqueue.jobs AS j
     USING unnest(%(ids)s::bigint[], %(tokens)s::integer[]) AS a(id, token)
     WHERE j.id = a.id AND j.lease_token = a.token AND j.state = 'running'
    RETURNING j.*
), cancelled AS (
    INSERT INTO pgqueue.job_history (id, queue, task, args, state, priority, attempts,
                                     max_attempts, created_at, started_at, errors, worker_id)
    SELECT id, queue, task, args, 'cancelled', priority, attempts, max_attempts, created_at,
           started_at, errors, worker_id
      FROM done WHERE cancel_requested
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

-- name: ping
SELECT 1
