-- Operator actions: queues, cancel, dead letters, purge, pg_cron.
-- Loaded by pgqueue/db/queries.py; each statement starts with a "-- name: <name>" line.
-- Parameters are psycopg placeholders, always bound.

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

-- name: cancel_job
SELECT pgqueue.cancel(%(job_id)s)

-- fragment: matching_dead_letters
-- The dead letters a filter (pgqueue.admin.DeadLetterFilter) selects.
  FROM pgqueue.dead_letters
 WHERE (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s::bigint[]))
   AND (%(task)s::text IS NULL OR task = %(task)s)
   AND (%(queue)s::text IS NULL OR queue = %(queue)s)
   AND (%(error)s::text IS NULL OR strpos(lower(coalesce(last_error, '')), lower(%(error)s)) > 0)
   AND (%(since)s::timestamptz IS NULL OR dead_at >= %(since)s)
   AND (%(until)s::timestamptz IS NULL OR dead_at < %(until)s)

-- name: list_dead_letters
SELECT id, queue, task, args, attempts, max_attempts, reason, last_error, errors, created_at,
       dead_at, meta, tags
{{matching_dead_letters}}
 ORDER BY dead_at DESC, id DESC
 LIMIT %(limit)s

-- name: count_dead_letters
SELECT count(*)
{{matching_dead_letters}}

-- name: replay_dead_letters
-- Move one batch of matching dead letters back to the queue with fresh attempts (same id, errors
-- kept for the record, the last one marked replayed_at, lease_token carried on so no stale
-- worker can touch the new attempt).
-- A dead letter whose idempotency key is held by a live job is left where it is (the holder, as
-- the unique index says: a unique_among 'pending' job that started no longer holds its key). In
-- a fair queue the job gets a rank again (as a job without a key: dead letters keep no
-- concurrency key).
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
                        WHERE j.idempotency_key = d.idempotency_key
                          AND (j.key_until_started IS NOT TRUE OR j.lease_token = 0))
     ORDER BY d.id
     LIMIT %(batch_size)s
       FOR UPDATE SKIP LOCKED
), moved AS (
    DELETE FROM pgqueue.dead_letters AS d USING batch AS b WHERE d.id = b.id RETURNING d.*
), listed AS (
    SELECT array_agg(m.id ORDER BY m.id) AS ids, array_agg(m.queue ORDER BY m.id) AS queues,
           array_agg(m.priority ORDER BY m.id) AS priorities
      FROM moved AS m
)
INSERT INTO pgqueue.jobs (id, queue, task, args, state, priority, run_at, attempts, max_attempts,
                          lease_token, idempotency_key, created_at, errors, meta, tags,
                          fair_rank)
SELECT m.id, m.queue, m.task, m.args, 'ready', m.priority, now(), 0, m.max_attempts,
       m.lease_token, m.idempotency_key, m.created_at,
       -- The replay is marked on the last error, so the attempt history reads 1, 2, replayed,
       -- 1, 2 (pgqueue.inspect.job_detail), not 1, 2, 1, 2.
       CASE WHEN jsonb_array_length(m.errors) > 0
            THEN jsonb_set(m.errors, '{-1,replayed_at}', to_jsonb(now()))
            ELSE m.errors END,
       m.meta, m.tags, r.rank
  FROM moved AS m
  LEFT JOIN (SELECT u.id, u.rank
               FROM listed AS l,
                    unnest(l.ids, pgqueue.fair_ranks(l.queues, l.priorities,
                                                     array_fill(NULL::text,
                                                                ARRAY[coalesce(cardinality(l.ids),
                                                                               0)])))
                    AS u(id, rank)) AS r ON r.id = m.id
RETURNING id

-- name: retry_waiting_jobs
-- `pgq retry`: waiting jobs (a retry's backoff, or scheduled for later) become ready now.
UPDATE pgqueue.jobs AS j
   SET state = 'ready', run_at = now()
 WHERE j.id = ANY(%(ids)s::bigint[]) AND j.state IN ('scheduled', 'ready')
RETURNING j.id

-- name: make_scheduled_due
-- pgqueue.testing's drain, once nothing is ready: the scheduled jobs of its queues and tasks (a
-- retry's backoff, a run_at later) become ready now, as if their time had come. The claim then
-- takes them like any other.
UPDATE pgqueue.jobs AS j
   SET state = 'ready', run_at = now()
 WHERE j.state = 'scheduled' AND j.queue = ANY(%(queues)s::text[])
   AND j.task = ANY(%(tasks)s::text[])
RETURNING j.id

-- name: enqueued_jobs
-- pgqueue.testing's enqueued(): live jobs, oldest first, by task, queue and state, whose
-- arguments contain %(args)s (jsonb containment: a subset of the arguments).
SELECT j.id, j.queue, j.task, j.args, j.state, j.priority, j.run_at, j.attempts,
       j.max_attempts, j.idempotency_key, j.meta, j.tags
  FROM pgqueue.jobs AS j
 WHERE (%(task)s::text IS NULL OR j.task = %(task)s)
   AND (%(queue)s::text IS NULL OR j.queue = %(queue)s)
   AND (%(states)s::text[] IS NULL OR j.state = ANY(%(states)s::text[]))
   AND (%(args)s::jsonb IS NULL OR j.args @> %(args)s::jsonb)
 ORDER BY j.id

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

-- name: pg_cron_setup
-- Which database pg_cron runs its jobs from (NULL when pg_cron is not preloaded), and its
-- version when the extension exists in the current database.
SELECT current_database() AS database,
       current_setting('cron.database_name', true) AS cron_database,
       (SELECT extversion FROM pg_extension WHERE extname = 'pg_cron') AS version

-- name: pg_cron_schedule
-- Creates the job, or updates the one with this name (pg_cron upserts named jobs).
SELECT cron.schedule_in_database(%(name)s, %(schedule)s, %(command)s, %(database)s)

-- name: pg_cron_unschedule
SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname = %(name)s

-- name: pg_cron_jobs
SELECT jobid AS id, jobname AS name, schedule, command, database, active
  FROM cron.job
 WHERE jobname = %(name)s
