-- Enqueue: one job, bulk (COPY), idempotency keys.
-- Loaded by pgqueue/db/queries.py; each statement starts with a "-- name: <name>" line.
-- Parameters are psycopg placeholders, always bound.

-- name: enqueue_job
-- One job; the SQL function owns the idempotency-key logic and the deduplication modes. delay
-- is an interval from the database clock, never the client's.
SELECT e.id, e.created, e.replaced
  FROM pgqueue.enqueue_job(
           %(task)s, %(args)s::jsonb, %(queue)s, %(priority)s,
           coalesce(%(run_at)s::timestamptz, now() + %(delay)s::interval),
           %(max_attempts)s, %(idempotency_key)s, %(concurrency_key)s,
           %(unique_for)s::interval, %(unique_states)s::text[], %(meta)s::jsonb,
           %(tags)s::text[], %(unique_among)s, %(on_conflict)s, %(throttle)s::interval) AS e

-- name: insert_job
-- The common single job (no idempotency or concurrency key): a plain INSERT, no function call,
-- with the same columns and rules as pgqueue.enqueue_job. It writes nothing when the queue is
-- bounded (max_depth) or fair: then the caller goes through enqueue_job, which checks for room
-- and ranks the job.
INSERT INTO pgqueue.jobs (queue, task, args, priority, run_at, state, max_attempts, result_ttl,
                          meta, tags)
SELECT %(queue)s, %(task)s, %(args)s::jsonb, %(priority)s::smallint, d.due,
       CASE WHEN d.due > now() THEN 'scheduled' ELSE 'ready' END, %(max_attempts)s::integer,
       %(result_ttl)s::interval, %(meta)s::jsonb, %(tags)s::text[]
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
COPY pgqueue.jobs (id, queue, task, args, priority, run_at, state, max_attempts, idempotency_key,
                   concurrency_key, meta, tags)
FROM STDIN

-- name: copy_ready_jobs
-- Jobs that are ready now and have no keys, metadata or tags: run_at (now(), the transaction's
-- clock), state, the keys, meta and tags come from the column defaults.
COPY pgqueue.jobs (id, queue, task, args, priority, max_attempts)
FROM STDIN

-- name: fair_ranks_of
-- Bulk enqueue into fair queues: the first rank of each (queue, priority, key) of the batch;
-- the batch's jobs of one group take consecutive ranks from there.
SELECT pgqueue.fair_rank(g.queue, g.priority, g.key)
  FROM unnest(%(queues)s::text[], %(priorities)s::integer[], %(keys)s::text[])
       WITH ORDINALITY AS g(queue, priority, key, ord)
 ORDER BY g.ord

-- name: copy_fair_jobs
-- Jobs of fair queues, with their ranks (other jobs never write the column).
COPY pgqueue.jobs (id, queue, task, args, priority, run_at, state, max_attempts, idempotency_key,
                   concurrency_key, fair_rank, meta, tags)
FROM STDIN

-- name: insert_jobs
-- Tags travel as one JSON array per job (unnest would flatten an array of arrays).
INSERT INTO pgqueue.jobs (id, queue, task, args, priority, run_at, state, max_attempts,
                          idempotency_key, concurrency_key, meta, tags)
SELECT id, queue, task, args::jsonb, priority, run_at, state, max_attempts, key, ckey, meta,
       CASE WHEN tags IS NOT NULL THEN ARRAY(SELECT jsonb_array_elements_text(tags)) END
  FROM unnest(%(ids)s::bigint[], %(queues)s::text[], %(tasks)s::text[], %(args)s::text[],
              %(priorities)s::smallint[], %(run_ats)s::timestamptz[], %(states)s::text[],
              %(max_attempts)s::integer[], %(keys)s::text[], %(concurrency_keys)s::text[],
              %(metas)s::jsonb[], %(tag_lists)s::jsonb[])
       AS u(id, queue, task, args, priority, run_at, state, max_attempts, key, ckey, meta, tags)

-- name: insert_jobs_keyed
-- ON CONFLICT needs SELECT on the key column, which a producer role does not have (it would
-- reveal other jobs' keys), so the insert runs in a SECURITY DEFINER function. unique_states
-- travel as comma-separated text (unnest would flatten an array of arrays).
SELECT k.id
  FROM pgqueue.insert_keyed_jobs(
           %(ids)s::bigint[], %(queues)s::text[], %(tasks)s::text[], %(args)s::text[],
           %(priorities)s::smallint[], %(run_ats)s::timestamptz[], %(states)s::text[],
           %(max_attempts)s::integer[], %(keys)s::text[], %(concurrency_keys)s::text[],
           %(unique_fors)s::interval[], %(unique_states)s::text[], %(metas)s::jsonb[],
           %(tag_lists)s::jsonb[]) AS k

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
-- 'replace'/'replace_args', throttle): pgqueue.enqueue_job for each, in input order, in one
-- statement. Each call's statements see the earlier calls' jobs, so a key repeated in the batch
-- behaves as consecutive single enqueues would (a replace updates the batch's own earlier job).
-- unique_states travel as comma-separated text, tags as JSON arrays (unnest would flatten an
-- array of arrays).
SELECT e.id, e.created, e.replaced
  FROM unnest(%(tasks)s::text[], %(args)s::text[], %(queues)s::text[], %(priorities)s::integer[],
              %(run_ats)s::timestamptz[], %(max_attempts)s::integer[], %(keys)s::text[],
              %(concurrency_keys)s::text[], %(unique_fors)s::interval[],
              %(unique_states)s::text[], %(metas)s::jsonb[], %(tag_lists)s::jsonb[],
              %(unique_among)s::text[], %(on_conflict)s::text[], %(throttles)s::interval[])
       WITH ORDINALITY AS u(task, args, queue, priority, run_at, max_attempts, key, ckey, ufor,
                            ustates, meta, tags, among, on_conflict, throttle, n)
 CROSS JOIN LATERAL pgqueue.enqueue_job(
           u.task, u.args::jsonb, u.queue, u.priority, u.run_at, u.max_attempts, u.key, u.ckey,
           u.ufor, string_to_array(u.ustates, ','), u.meta,
           CASE WHEN u.tags IS NOT NULL THEN ARRAY(SELECT jsonb_array_elements_text(u.tags)) END,
           u.among, u.on_conflict, u.throttle) AS e
 ORDER BY u.n

-- name: mark_keyed_tasks
SELECT pgqueue.mark_keyed(%(tasks)s::text[])

-- name: jobs_by_idempotency_keys
-- Through a SECURITY DEFINER function, so a producer role needs no SELECT on pgqueue.jobs.
SELECT k.idempotency_key, k.id FROM pgqueue.job_ids_by_key(%(keys)s::text[]) AS k

-- Results, workflows and retention

-- name: set_result_ttl
-- Jobs that keep their result: set in the enqueue's own transaction, before any worker can see
-- the job.
UPDATE pgqueue.jobs AS j
   SET result_ttl = u.ttl
  FROM unnest(%(ids)s::bigint[], %(ttls)s::interval[]) AS u(id, ttl)
 WHERE j.id = u.id
