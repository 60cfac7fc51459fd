-- Claim: ready jobs to a worker, under flow control.
-- Loaded by pgqueue/db/queries.py; each statement starts with a "-- name: <name>" line.
-- Parameters are psycopg placeholders, always bound.

-- name: claim_jobs
-- Claim up to %(limit)s jobs for this worker in one statement: per queue, walk the ready index
-- in (priority, run_at) order and the scheduled index for due jobs, skipping rows other workers
-- hold (SKIP LOCKED). The MATERIALIZED fence makes the row locks happen exactly once, before
-- the UPDATE. Each claim bumps lease_token: the fencing token every later write must present.
-- When flow control applies to these queues or tasks (weights, limits, keyed jobs, a breaker
-- not closed), a one-time filter skips the walk: the worker learns it from next_due and claims
-- with claim_flow instead. (pgqueue.flow_controls sits in FROM so that the planner inlines its
-- checks: called as a scalar function it cost a function-manager call on every claim.)
-- %(after_*)s hold, per queue, the largest key this worker's previous claims took (NULL: from
-- the top; pgqueue/worker/claim_cursor.py). The walk starts after that key instead of stepping
-- again over the index entries of every job claimed since the last VACUUM (B-tree keeps them
-- until then, and while an old snapshot is held no scan may even mark them dead: each costs a
-- heap visit). Jobs of a higher priority (a smaller number) than the key's are walked from the
-- top of their priorities on every claim (the second branch: it crosses only what jobs of those
-- priorities left behind). Jobs of the key's priority that sort before it (an earlier run_at: a
-- row handed back, reaped, or locked by a concurrent statement during a walk) are found by the
-- worker's next walk from the top, at least every CLAIM_MAX_RESCAN seconds.
WITH candidates AS MATERIALIZED (
    SELECT c.id
      FROM unnest(%(queues)s::text[], %(after_priority)s::smallint[],
                  %(after_run_at)s::timestamptz[], %(after_id)s::bigint[])
           AS q(name, priority, run_at, id)
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
                  AND (j.priority, j.run_at, j.id)
                      > (coalesce(q.priority, -32768), coalesce(q.run_at, '-infinity'),
                         coalesce(q.id, -9223372036854775808))
                  AND j.task = ANY(%(tasks)s::text[])
                ORDER BY j.priority, j.run_at, j.id
                LIMIT %(limit)s
                  FOR UPDATE SKIP LOCKED) AS r
           UNION ALL
           SELECT h.* FROM (
               SELECT j.id, j.priority, j.run_at
                 FROM pgqueue.jobs AS j
                WHERE qa.active AND j.queue = q.name AND j.state = 'ready'
                  AND j.priority < q.priority
                  AND j.task = ANY(%(tasks)s::text[])
                ORDER BY j.priority, j.run_at, j.id
                LIMIT %(limit)s
                  FOR UPDATE SKIP LOCKED) AS h
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
     CROSS JOIN pgqueue.flow_controls(%(queues)s::text[], %(tasks)s::text[]) AS fc
     WHERE NOT fc.applies
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
 -- The candidates' ids as an array, not a join: the generic plan (which the claim runs, see
 -- generic_plans) cannot know how many rows LIMIT %(limit)s lets through and joined them to a
 -- sequential scan of the whole table; an array is looked up in the primary key whatever its
 -- length.
 WHERE j.id = ANY (ARRAY(SELECT c.id FROM candidates AS c))
RETURNING j.id, j.queue, j.task, j.args, j.attempts AS attempt, j.max_attempts, j.lease_token,
          j.priority, j.created_at, j.run_at, j.result_ttl IS NOT NULL AS wants_result, j.meta,
          j.tags, j.errors -> -1 ->> 'trace' AS last_trace

-- name: settle_claims
-- Before a worker claims again after a claim whose reply never came (the connection was cut:
-- did it commit?). Its jobs running under its id are either held (%(ids)s, %(tokens)s: the
-- worker runs them, writes their outcomes, or started them on a claim whose COMMIT's reply was
-- lost) or were taken by a lost claim whose rows it never saw. The latter go back to the queue
-- as a graceful shutdown gives jobs back (release_jobs: the attempt not counted, the place in
-- the queue kept), and their queues are woken. The held ones running under this worker are
-- returned: the early claims among them committed. No claim of this worker is in flight
-- meanwhile (its rows would look lost); a job in the queue's index walk order before the
-- worker's claim cursor is found by its next walk from the top.
WITH held AS (
    SELECT h.id, h.token FROM unnest(%(ids)s::bigint[], %(tokens)s::integer[]) AS h(id, token)
), released AS (
    UPDATE pgqueue.jobs AS j
       SET state = 'ready', attempts = greatest(j.attempts - 1, 0), lease_expires_at = NULL,
           worker_id = NULL
     WHERE j.worker_id = %(worker_id)s::uuid AND j.state = 'running'
       AND NOT EXISTS (SELECT 1 FROM held AS h WHERE h.id = j.id AND h.token = j.lease_token)
    RETURNING j.id, j.lease_token, j.queue
), woken AS (
    SELECT pg_notify('pgqueue_jobs', q.queue) FROM (SELECT DISTINCT queue FROM released) AS q
)
SELECT j.id, j.lease_token, false AS released
  FROM pgqueue.jobs AS j
  JOIN held AS h ON h.id = j.id AND h.token = j.lease_token
 WHERE j.worker_id = %(worker_id)s::uuid AND j.state = 'running'
UNION ALL
SELECT r.id, r.lease_token, true FROM released AS r
 WHERE (SELECT count(*) FROM woken) >= 0

-- name: confirm_claims
-- A claim's rows that reached the worker late: more than half a lease after the claim was
-- sent (a lossy link retransmitting them, a handler blocking the worker's event loop while they
-- waited in its socket). Their leases may have run out meanwhile: a claim that commits at once
-- may have had its jobs taken back by the reaper and claimed again, and an idle worker's claim
-- would commit leases already expired. Extended under the claim's token before any handler
-- starts: only the jobs returned are still this worker's. An idle worker's claim runs it in its
-- own transaction, before the commit; statement_timestamp(), not now(), which is that
-- transaction's start. Also while an idle claim's COMMIT reply is late (the jobs run, the
-- heartbeat leaves them out): a claim whose commit is not visible yet is not matched, and is
-- asked again. The rows are taken in one order.
WITH held AS MATERIALIZED (
    SELECT j.id
      FROM pgqueue.jobs AS j
      JOIN unnest(%(ids)s::bigint[], %(tokens)s::integer[]) AS h(id, token)
        ON j.id = h.id AND j.lease_token = h.token
     WHERE j.state = 'running' AND j.worker_id = %(worker_id)s::uuid
     ORDER BY j.id
       FOR NO KEY UPDATE OF j
)
UPDATE pgqueue.jobs AS j
   SET lease_expires_at = statement_timestamp() + %(lease)s::interval
  FROM held AS h
 WHERE j.id = h.id
RETURNING j.id, j.lease_token

-- name: claim_flow
-- The claim when flow control applies (see pgqueue.claim). A row with a NULL id says limits
-- held work back (throttled: seconds until the next token, or 0), or, with throttled = -1,
-- that flow control no longer applies (claim with claim_jobs again). wake_on_exit: the job took
-- the last free place under a concurrency limit (see ack_jobs_waking).
SELECT c.id, c.queue, c.task, c.args, c.attempts AS attempt, c.max_attempts, c.lease_token,
       c.priority, c.created_at, c.run_at, c.wants_result, c.meta, c.tags, c.last_trace,
       c.throttled, c.wake_on_exit
  FROM pgqueue.claim(%(queues)s::text[], %(tasks)s::text[], %(limit)s, %(lease)s::interval,
                     %(worker_id)s::uuid, %(running)s::integer[]) AS c

-- name: next_due
-- When the worker is idle: seconds until the earliest scheduled job in its queues is due (by the
-- database clock), so it can sleep exactly that long; and whether flow control applies to its
-- queues and tasks (then claim_jobs claims nothing: use claim_flow).
SELECT (SELECT extract(epoch FROM min(n.run_at) - now())
          FROM unnest(%(queues)s::text[]) AS q(name)
         CROSS JOIN LATERAL (
               SELECT j.run_at FROM pgqueue.jobs AS j
                WHERE j.queue = q.name AND j.state = 'scheduled'
                ORDER BY j.run_at LIMIT 1) AS n),
       fc.applies
  FROM pgqueue.flow_controls(%(queues)s::text[], %(tasks)s::text[]) AS fc
