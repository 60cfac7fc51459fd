-- Heartbeat: leases extended, progress, cancel requests.
-- Loaded by pgqueue/db/queries.py; each statement starts with a "-- name: <name>" line.
-- Parameters are psycopg placeholders, always bound.

-- name: heartbeat
-- Extend the leases of every job this worker still holds, in one statement, and refresh the
-- worker's own row. Jobs missing from the result were lost (reaped, or the token moved on);
-- cancel_requested tells the worker to stop a handler. Only unindexed columns change: HOT.
-- The same statement adds the attempts finished since the last heartbeat to the per-minute
-- counts (sorted, so concurrent workers lock the rows in one order), drops day-old counts and
-- the idle_workers rows of workers that stopped or vanished. A held row another transaction
-- has locked is skipped, never waited for: the worker's own ack of it (a DELETE of a large
-- batch takes its rows in the order its plan reads them, the table's physical order under a
-- hash join: waiting, the two could each hold a row the other wants), its claim's commit on
-- its way, a reaper or an operator's statement. A skipped row that is still this worker's is
-- returned with extended false: held, not extended (its progress waits for the next beat);
-- the next beat tries it again. Only a row missing from the result was lost.
-- Progress handlers reported since the last beat is written with the leases (progress_at
-- tells a value of this attempt from one of an earlier: see the running_jobs view).
WITH me AS (
    UPDATE pgqueue.workers
       SET last_seen = now(), concurrency = %(concurrency)s,
           jobs_succeeded = %(succeeded)s, jobs_retried = %(retried)s,
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
), stale_idle AS (
    -- Workers that died while idle: producers would notify for them forever. SKIP LOCKED:
    -- every worker's heartbeat sweeps, and two deleting the same rows in different orders
    -- would deadlock.
    DELETE FROM pgqueue.idle_workers AS i
     WHERE i.worker_id IN (
           SELECT s.worker_id FROM pgqueue.idle_workers AS s
            WHERE NOT EXISTS (SELECT 1 FROM pgqueue.workers AS w
                               WHERE w.id = s.worker_id AND w.stopped_at IS NULL
                                 AND w.last_seen > now() - interval '5 minutes')
              FOR UPDATE SKIP LOCKED)
), held AS MATERIALIZED (
    SELECT j.id
      FROM pgqueue.jobs AS j
      JOIN unnest(%(ids)s::bigint[], %(tokens)s::integer[]) AS h(id, token)
        ON j.id = h.id AND j.lease_token = h.token
     WHERE j.state = 'running'
       FOR NO KEY UPDATE OF j SKIP LOCKED
), extended AS (
    UPDATE pgqueue.jobs AS j
       SET lease_expires_at = now() + %(lease)s::interval,
           progress = coalesce(p.value, j.progress),
           progress_at = CASE WHEN p.value IS NULL THEN j.progress_at ELSE now() END
      FROM held AS h
      LEFT JOIN unnest(%(progress_ids)s::bigint[], %(progress)s::jsonb[]) AS p(id, value)
        ON p.id = h.id
     WHERE j.id = h.id
    RETURNING j.id, j.lease_token, j.cancel_requested
)
SELECT e.id, e.lease_token, e.cancel_requested, true AS extended FROM extended AS e
UNION ALL
-- Skipped: as the statement's snapshot saw them, still running under this worker's token.
SELECT j.id, j.lease_token, j.cancel_requested, false
  FROM pgqueue.jobs AS j
  JOIN unnest(%(ids)s::bigint[], %(tokens)s::integer[]) AS h(id, token)
    ON j.id = h.id AND j.lease_token = h.token
 WHERE j.state = 'running' AND NOT EXISTS (SELECT 1 FROM held AS l WHERE l.id = j.id)

-- name: extend_leases
-- The loop watchdog's beat while the worker's event loop is stalled by a handler (see
-- pgqueue/worker/watchdog.py): every job this worker holds, by worker id rather than by the
-- (id, token) list the loop keeps, so that jobs claimed while the loop could not look at the
-- claim's reply are covered too. Only leases not yet expired (an expired one may be the
-- reaper's already); a row another transaction holds is skipped, as the heartbeat does.
WITH me AS (
    UPDATE pgqueue.workers SET last_seen = now() WHERE id = %(worker_id)s
), held AS MATERIALIZED (
    SELECT j.id
      FROM pgqueue.jobs AS j
     WHERE j.worker_id = %(worker_id)s AND j.state = 'running' AND j.lease_expires_at > now()
       FOR NO KEY UPDATE OF j SKIP LOCKED
)
UPDATE pgqueue.jobs AS j
   SET lease_expires_at = now() + %(lease)s::interval
  FROM held AS h
 WHERE j.id = h.id
