-- Enqueue: one job, bulk (COPY), idempotency keys.
-- Loaded by pgqueue/db/queries.py; each statement starts with a "-- name: <name>" line.
-- Parameters are psycopg placeholders, always bound.

-- name: enqueue_input
-- One job, its row whole (pgqueue.job_input, generated from pgqueue/db/job_rows.py); the SQL
-- function owns the idempotency-key logic, the deduplication modes, room in a bounded queue and
-- a fair queue's rank. delay is an interval from the database clock, never the client's.
SELECT e.id, e.created, e.replaced FROM pgqueue.enqueue_input({{job_input_row}}) AS e

-- name: insert_job
-- The common single job (no idempotency or concurrency key): a plain INSERT, no function call,
-- with the same columns and rules as pgqueue.enqueue_input. It writes nothing when the queue is
-- bounded (max_depth) or fair: then the caller goes through enqueue_input, which checks for
-- room and ranks the job.
INSERT INTO pgqueue.jobs (run_at, state, {{job_input_plain_columns}})
SELECT d.due, CASE WHEN d.due > now() THEN 'scheduled' ELSE 'ready' END,
       {{job_input_plain_params}}
  FROM (SELECT coalesce(%(run_at)s::timestamptz, now() + %(delay)s::interval, now()) AS due) AS d
 WHERE NOT EXISTS (SELECT FROM pgqueue.queues AS qs
                    WHERE qs.name = %(queue)s AND (qs.max_depth IS NOT NULL OR qs.fair))
RETURNING id

-- name: allocate_job_ids
-- Bulk enqueue reserves its ids up front (so COPY can write them) and reads the database clock
-- once for every run_at/delay in the batch.
SELECT now() AS now, array_agg(nextval('pgqueue.jobs_id_seq')) AS ids
  FROM generate_series(1, %(count)s)

-- name: prepare_bulk
-- Bulk enqueue's one round trip before writing: the database clock, the batch's ids, and the
-- bounded queues (max_depth) that cannot take this many more jobs (counting stops at
-- max_depth, so the check costs at most that many index entries per bounded queue), and the
-- batch's fair queues (their jobs need ranks: fair_ranks_of). Ids of a refused batch are simply
-- never used.
SELECT now(),
       (SELECT array_agg(nextval('pgqueue.jobs_id_seq')) FROM generate_series(1, %(count)s)),
       full_queues.names, full_queues.max_depths, full_queues.depths,
       (SELECT array_agg(qs.name) FROM pgqueue.queues AS qs
         WHERE qs.name = ANY(%(queues)s::text[]) AND qs.fair) AS fair_queues
  FROM (SELECT array_agg(qs.name) AS names, array_agg(qs.max_depth) AS max_depths,
               array_agg(d.depth) AS depths
          FROM unnest(%(queues)s::text[], %(counts)s::integer[]) AS b(queue, adding)
          JOIN pgqueue.queues AS qs ON qs.name = b.queue
         CROSS JOIN LATERAL (SELECT pgqueue.queue_depth_up_to(qs.name, qs.max_depth) AS depth)
               AS d
         WHERE qs.max_depth IS NOT NULL AND d.depth + b.adding > qs.max_depth) AS full_queues

-- name: copy_jobs
-- Jobs without an idempotency key; fair_rank is set for jobs of fair queues (fair_ranks_of).
COPY pgqueue.jobs ({{job_input_copy_columns}})
FROM STDIN

-- name: copy_ready_jobs
-- Jobs that are ready now and have no keys or options: run_at (now(), the transaction's
-- clock), state and the rest come from the column defaults.
COPY pgqueue.jobs ({{job_input_ready_columns}})
FROM STDIN

-- name: insert_plain_jobs
-- A batch below the COPY's threshold of jobs without an idempotency key: the COPY's columns in
-- one multi-row INSERT, no function call (pgqueue.insert_jobs is for keys and workflows).
INSERT INTO pgqueue.jobs ({{job_input_copy_columns}})
SELECT {{job_input_copy_values}}
  FROM unnest({{job_input_copy_arrays}}) AS u({{job_input_copy_columns}})

-- name: fair_ranks_of
-- Bulk enqueue into fair queues: the first rank of each (queue, priority, key) of the batch;
-- the batch's jobs of one group take consecutive ranks from there.
SELECT pgqueue.fair_rank(g.queue, g.priority, g.key)
  FROM unnest(%(queues)s::text[], %(priorities)s::integer[], %(keys)s::text[])
       WITH ORDINALITY AS g(queue, priority, key, ord)
 ORDER BY g.ord

-- name: insert_jobs
-- Many jobs as rows of pgqueue.job_input (one array per attribute, in input order) through
-- pgqueue.insert_jobs: a SECURITY DEFINER function, because ON CONFLICT on the idempotency key
-- needs SELECT on the key column, which a producer role does not have (it would reveal other
-- jobs' keys). It ranks the jobs of fair queues. Returns the ids it inserted; the other jobs'
-- keys are held.
SELECT i.id FROM pgqueue.insert_jobs(ARRAY(SELECT r.job FROM ({{job_input_rows}}) AS r
                                            ORDER BY r.n)) AS i

-- name: kept_idempotency_keys
-- Keys finished jobs still hold (unique_for not yet over). Through SECURITY DEFINER functions
-- here and below, so a producer role needs no access to other jobs' keys.
SELECT k.key, k.job_id FROM pgqueue.kept_keys(%(keys)s::text[]) AS k

-- name: drop_raced_keyed_jobs
-- Bulk enqueue, after inserting keyed jobs: a holder that finished and kept its key while we
-- inserted wins; our job is taken back (this statement's snapshot sees the holder's commit).
SELECT d.id, d.idempotency_key, d.holder FROM pgqueue.drop_raced_keyed_jobs(%(ids)s::bigint[]) AS d

-- name: enqueue_jobs_in_order
-- Bulk enqueue of the jobs with a deduplication mode (unique_among 'pending', on_conflict
-- 'replace'/'replace_args', throttle): pgqueue.enqueue_input for each, in input order, in one
-- statement. Each call's statements see the earlier calls' jobs, so a key repeated in the batch
-- behaves as consecutive single enqueues would (a replace updates the batch's own earlier job).
SELECT e.id, e.created, e.replaced
  FROM ({{job_input_rows}}) AS r
 CROSS JOIN LATERAL pgqueue.enqueue_input(r.job) AS e
 ORDER BY r.n

-- name: mark_keyed_tasks
SELECT pgqueue.mark_keyed(%(tasks)s::text[])

-- name: jobs_by_idempotency_keys
-- Through a SECURITY DEFINER function, so a producer role needs no SELECT on pgqueue.jobs.
SELECT k.idempotency_key, k.id FROM pgqueue.job_ids_by_key(%(keys)s::text[]) AS k

-- name: insert_job_group
-- Group commit (pgqueue/client/group_commit.py): insert_job for the jobs of several callers in
-- one statement (one transaction, one WAL flush), with insert_job's columns and rules. Each
-- job's id comes back in its place in the arrays: NULL where its queue is bounded or fair
-- (that job then goes through enqueue_input alone, as a single enqueue does).
WITH given AS MATERIALIZED (
    SELECT u.n, nextval('pgqueue.jobs_id_seq') AS id,
           coalesce(u.run_at, now() + u.delay, now()) AS due, {{job_input_plain_values}}
      FROM unnest({{job_input_plain_arrays}}, %(run_at)s::timestamptz[], %(delay)s::interval[])
           WITH ORDINALITY AS u({{job_input_plain_columns}}, run_at, delay, n)
), written AS (
    INSERT INTO pgqueue.jobs (id, run_at, state, {{job_input_plain_columns}})
    SELECT g.id, g.due, CASE WHEN g.due > now() THEN 'scheduled' ELSE 'ready' END,
           {{job_input_plain_columns}}
      FROM given AS g
     WHERE NOT EXISTS (SELECT FROM pgqueue.queues AS qs
                        WHERE qs.name = g.queue AND (qs.max_depth IS NOT NULL OR qs.fair))
    RETURNING id
)
SELECT w.id FROM given AS g LEFT JOIN written AS w ON w.id = g.id ORDER BY g.n
