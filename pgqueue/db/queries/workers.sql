-- Workers: registration, idle hand-shake, declared tasks, the reaper.
-- Loaded by pgqueue/db/queries.py; each statement starts with a "-- name: <name>" line.
-- Parameters are psycopg placeholders, always bound.

-- name: register_worker
INSERT INTO pgqueue.workers (id, host, pid, queues, concurrency, version, tasks)
VALUES (%(worker_id)s, %(host)s, %(pid)s, %(queues)s, %(concurrency)s, %(version)s, %(tasks)s)

-- name: unserved_tasks
-- Tasks whose jobs wait (ready or scheduled) with no running worker for them: none that
-- serves their queue runs the task (a worker that recorded no tasks, from before migration
-- 0016, counts as running every task of its queues). Such jobs would wait for ever without a
-- word. Running: not stopped and seen within the last two minutes, as worker_status says.
SELECT j.queue, j.task, count(*) AS jobs, min(j.created_at) AS oldest
  FROM pgqueue.jobs AS j
 WHERE j.state IN ('ready', 'scheduled')
   AND NOT EXISTS (
       SELECT 1
         FROM pgqueue.workers AS w
        WHERE w.stopped_at IS NULL
          AND w.last_seen >= now() - interval '2 minutes'
          AND j.queue = ANY (w.queues)
          AND (w.tasks IS NULL OR j.task = ANY (w.tasks)))
 GROUP BY j.queue, j.task
 ORDER BY count(*) DESC, j.queue, j.task
 LIMIT %(limit)s

-- name: register_idle
-- The worker waits for a NOTIFY from now on: producers notify while any such row exists
-- (migration 0008 explains the handshake that follows).
INSERT INTO pgqueue.idle_workers (worker_id) VALUES (%(worker_id)s)
ON CONFLICT (worker_id) DO NOTHING

-- name: idle_handshake
-- True once no producer that may have read idle_workers before this worker's row was there is
-- still in its transaction (they hold the lock shared until they end). Never waits.
SELECT CASE WHEN pg_try_advisory_lock(1885827442, 1)
            THEN pg_advisory_unlock(1885827442, 1) ELSE false END

-- name: unregister_idle
-- Claims come back full again: this worker claims as soon as a slot frees, no NOTIFY needed.
DELETE FROM pgqueue.idle_workers WHERE worker_id = %(worker_id)s

-- name: deregister_worker
WITH idle AS (
    DELETE FROM pgqueue.idle_workers WHERE worker_id = %(worker_id)s
)
UPDATE pgqueue.workers
   SET stopped_at = now(), last_seen = now(), jobs_succeeded = %(succeeded)s,
       jobs_retried = %(retried)s, jobs_dead = %(dead)s, jobs_cancelled = %(cancelled)s,
       leases_lost = %(lost)s
 WHERE id = %(worker_id)s

-- name: reap
SELECT pgqueue.reap(%(max_jobs)s)

-- name: declare_tasks
-- A worker's start-up: the task names its code registered (producers check names against
-- them). A row declared in the last minute is left alone: a fleet starting at once writes each
-- name about once.
INSERT INTO pgqueue.declared_tasks AS d (task)
SELECT t.task FROM unnest(%(tasks)s::text[]) AS t(task) ORDER BY t.task
ON CONFLICT (task) DO UPDATE SET declared_at = now()
 WHERE d.declared_at < now() - interval '1 minute'

-- name: declared_task_names
-- A producer's miss: the task names workers declared (a few hundred rows at most).
SELECT task FROM pgqueue.declared_tasks
