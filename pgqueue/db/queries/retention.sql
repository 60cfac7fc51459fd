-- Retention: history, dead letters, workflows, idempotency keys pruned.
-- Loaded by pgqueue/db/queries.py; each statement starts with a "-- name: <name>" line.
-- Parameters are psycopg placeholders, always bound.

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
SELECT (SELECT count(*) FROM gone) AS deleted,
       (SELECT array_agg(DISTINCT workflow_id) FROM nodes) AS workflow_ids

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
SELECT (SELECT count(*) FROM gone) AS deleted,
       (SELECT array_agg(DISTINCT workflow_id) FROM nodes) AS workflow_ids

-- name: prune_workflows
-- Workflows whose every member has been pruned.
DELETE FROM pgqueue.workflows AS w
 WHERE w.id = ANY(%(ids)s::bigint[])
   AND NOT EXISTS (SELECT 1 FROM pgqueue.workflow_nodes AS n WHERE n.workflow_id = w.id)
RETURNING w.id

-- name: prune_key_buckets
-- One small batch of per-key token buckets that are full again, or whose task no longer has a
-- key rate limit. A missing row is a full bucket, so deleting one changes nothing, and keys
-- that never come back leave no row. SKIP LOCKED: a bucket a claim holds is left for the next
-- pass, so the pruner never waits for a claim (nor deadlocks with one); the row it locks is
-- checked again as it is now.
WITH doomed AS MATERIALIZED (
    SELECT b.task, b.key
      FROM pgqueue.key_buckets AS b
      LEFT JOIN pgqueue.task_limits AS tl ON tl.task = b.task
     WHERE tl.key_rate_limit IS NULL
        OR pgqueue.bucket_tokens(b.tokens, b.tokens_at, tl.key_rate_limit, tl.key_rate_burst,
                                 now()) >= coalesce(tl.key_rate_burst, tl.key_rate_limit)
     LIMIT %(batch_size)s
       FOR UPDATE OF b SKIP LOCKED
), gone AS (
    DELETE FROM pgqueue.key_buckets AS b USING doomed AS x
     WHERE b.task = x.task AND b.key = x.key
    RETURNING b.task
)
SELECT count(*) FROM gone

-- name: settle_waiting
SELECT pgqueue.settle_waiting(%(max_parents)s)

-- name: prune_idempotency_keys
DELETE FROM pgqueue.idempotency_keys
 WHERE key IN (SELECT key FROM pgqueue.idempotency_keys WHERE expires_at <= now() LIMIT 10000)

-- name: prune_job_steps
-- Retention: one small batch of steps whose job is in none of jobs, job_history and
-- dead_letters any more (it succeeded without a record, or its record was pruned).
WITH doomed AS MATERIALIZED (
    SELECT s.job_id, s.seq
      FROM pgqueue.job_steps AS s
     WHERE NOT EXISTS (SELECT 1 FROM pgqueue.jobs AS j WHERE j.id = s.job_id)
       AND NOT EXISTS (SELECT 1 FROM pgqueue.job_history AS h WHERE h.id = s.job_id)
       AND NOT EXISTS (SELECT 1 FROM pgqueue.dead_letters AS d WHERE d.id = s.job_id)
     LIMIT %(batch_size)s
       FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM pgqueue.job_steps AS s USING doomed AS x
     WHERE s.job_id = x.job_id AND s.seq = x.seq
    RETURNING 1
)
SELECT count(*) FROM gone

-- name: prune_events
-- Retention: one small batch of events past their keep_until.
WITH doomed AS MATERIALIZED (
    SELECT e.name FROM pgqueue.events AS e
     WHERE e.keep_until < now()
     ORDER BY e.keep_until
     LIMIT %(batch_size)s
       FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM pgqueue.events AS e USING doomed AS x WHERE e.name = x.name RETURNING 1
)
SELECT count(*) FROM gone
