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
SELECT queue, ready, scheduled, running, dead, oldest_ready_age
  FROM pgqueue.queue_stats
 ORDER BY queue
