-- Complete: acks, failures, releases, dead letters for unwritable outcomes (all fenced by lease_token).
-- Loaded by pgqueue/db/queries.py; each statement starts with a "-- name: <name>" line.
-- Parameters are psycopg placeholders, always bound.

-- fragment: ack_done
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
                                     result, keep_until, meta, tags)
    SELECT d.id, d.queue, d.task, d.args,
           CASE WHEN d.cancel_requested THEN 'cancelled' ELSE 'succeeded' END, d.priority,
           d.attempts, d.max_attempts, d.created_at, d.started_at, d.errors, d.worker_id,
           CASE WHEN NOT d.cancel_requested THEN d.result_json::jsonb END,
           CASE WHEN d.result_ttl IS NOT NULL
                THEN now() + greatest(d.result_ttl, (SELECT r.history_retention
                                                       FROM pgqueue.retention AS r)) END,
           d.meta, d.tags
      FROM done AS d
      -- (The settings subqueries run once per statement, not per row.)
     WHERE d.cancel_requested OR d.result_ttl IS NOT NULL
        OR coalesce((SELECT r.record_succeeded FROM pgqueue.retention AS r), false)
)

-- name: ack_jobs
-- A batch of successes (ack_done), the ids that were still held, and whether each was
-- cancelled meanwhile.
{{ack_done}}
SELECT id, cancel_requested FROM done

-- name: ack_jobs_waking
-- ack_jobs for a batch holding jobs that took the last free place under a concurrency limit
-- (claim_flow's wake_on_exit): the same statement, and it notifies those jobs' queues, so
-- workers whose claims that limit held back look again the moment the places are free (the
-- notifications are delivered at this commit). Other batches use ack_jobs, unchanged.
{{ack_done}}, woken AS (
    SELECT pg_notify('pgqueue_jobs', w.queue) FROM unnest(%(wake)s::text[]) AS w(queue)
)
SELECT id, cancel_requested FROM done
 WHERE (SELECT count(*) FROM woken) >= 0

-- name: complete_job
-- A handler's ctx.transaction(): the job's fenced completion, run in the handler's own
-- transaction as its last statement, so the job completes if and only if the handler's writes
-- commit (pgqueue/job_transaction.py). The same success as ack_jobs (history, result,
-- workflow settling) for one job; its row lock is taken here, just before the COMMIT, so the
-- heartbeat never waits long on a handler's open transaction. No row: the lease was lost and
-- the handler rolls back. The transaction id and the backend's pid tell what became of a
-- commit whose reply was lost (transaction_status, end_transaction). wake: the job took a
-- limit's last free place (see ack_jobs_waking).
{{ack_done}}, woken AS (
    SELECT pg_notify('pgqueue_jobs', w.queue) FROM unnest(%(wake)s::text[]) AS w(queue)
)
SELECT d.id, d.cancel_requested, pg_current_xact_id()::text AS xid, pg_backend_pid() AS pid
  FROM done AS d
 WHERE (SELECT count(*) FROM woken) >= 0

-- name: lock_claimed_job
-- Before a handler's completion, when the claim that gave it the job may not have committed
-- yet (an idle worker starts jobs while its claim's COMMIT is on its way): waits for that
-- claim's transaction and locks the row for the handler's (complete_job's snapshot, a new
-- statement's, then sees the claim). The handler completes only if the row is running under
-- its lease and its worker: a claim the server lost (a crash before its WAL flush) can hand
-- the same token to another worker.
SELECT lease_token, state, worker_id::text AS worker_id
  FROM pgqueue.jobs
 WHERE id = %(id)s
   FOR NO KEY UPDATE

-- name: transaction_status
-- Did a transaction whose COMMIT got no reply commit? 'committed', 'aborted', or
-- 'in progress' (the server has not received the COMMIT yet).
SELECT pg_xact_status(%(xid)s::xid8)

-- name: end_transaction
-- A transaction still in progress after its client lost the connection (the COMMIT was never
-- received, or the server has not noticed the client is gone): end its backend, waiting up to
-- five seconds, so that transaction_status then says for good whether it committed. The pid
-- alone could name another session by now; the transaction id cannot.
SELECT pg_terminate_backend(a.pid, 5000)
  FROM pg_stat_activity AS a
 WHERE a.pid = %(pid)s AND a.backend_xid = xid(%(xid)s::xid8)

-- name: fail_jobs
-- Every unsuccessful outcome, decided in one place with the row locked:
--   cancelled (cancel requested, or the handler was cancelled) -> job_history as cancelled;
--   'fail' (handler raised Fail), 'no_retry' (an error the retry policy excludes) or an error
--   with no attempts left -> dead_letters;
--   'retry' (handler raised Retry: the attempt is not burned, no error recorded) or an error
--   with attempts left -> back to the queue at now() + delay (delay from the task's backoff).
WITH input AS (
    SELECT *
      FROM unnest(%(ids)s::bigint[], %(tokens)s::integer[], %(kinds)s::text[],
                  %(delays)s::double precision[], %(errors)s::text[])
           AS i(id, token, kind, delay, error)
), locked AS MATERIALIZED (
    SELECT j.id, j.queue, i.kind, i.delay,
           -- when the attempt started, beside when it failed: dead letters keep no started_at
           i.error::jsonb || jsonb_build_object('at', now(), 'started_at', j.started_at) AS error,
           CASE WHEN j.cancel_requested OR i.kind = 'cancelled' THEN 'cancelled'
                WHEN i.kind IN ('fail', 'no_retry')
                     OR (i.kind = 'error' AND j.attempts >= j.max_attempts)
                    THEN 'dead'
                ELSE 'retry'
           END AS outcome
      FROM pgqueue.jobs AS j
      JOIN input AS i ON i.id = j.id AND i.token = j.lease_token
     WHERE j.state = 'running'
     ORDER BY j.id
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
), removed AS (
    -- Dead and cancelled jobs both leave the hot table, in one DELETE; each goes on below.
    DELETE FROM pgqueue.jobs AS j
     USING locked AS l
     WHERE j.id = l.id AND l.outcome IN ('dead', 'cancelled')
    RETURNING j.*, l.error AS final_error, l.kind, l.outcome
), buried AS (
    INSERT INTO pgqueue.dead_letters (id, queue, task, args, priority, attempts, max_attempts,
                                      lease_token, idempotency_key, created_at, errors,
                                      last_error, reason, worker_id, meta, tags)
    SELECT id, queue, task, args, priority, attempts, max_attempts, lease_token,
           idempotency_key, created_at, errors || jsonb_build_array(final_error),
           final_error ->> 'message',
           CASE WHEN kind = 'fail' THEN 'failed permanently (Fail raised)'
                WHEN kind = 'no_retry' THEN 'not retried: the task''s retry policy excludes '
                                            || (final_error ->> 'error')
                ELSE 'max attempts reached' END,
           worker_id, meta, tags
      FROM removed
     WHERE outcome = 'dead'
), archived AS (
    INSERT INTO pgqueue.job_history (id, queue, task, args, state, priority, attempts,
                                     max_attempts, created_at, started_at, errors, worker_id,
                                     meta, tags)
    SELECT id, queue, task, args, 'cancelled', priority, attempts, max_attempts, created_at,
           started_at, CASE WHEN kind = 'cancelled' THEN errors
                            ELSE errors || jsonb_build_array(final_error) END, worker_id,
           meta, tags
      FROM removed
     WHERE outcome = 'cancelled'
), woken AS (
    -- Wake idle workers so they (re)arm their timers for retried jobs; and, for jobs that took
    -- the last free place under a concurrency limit (the wake parameter: their queues, NULL
    -- for most batches), the workers that limit holds back (see ack_jobs_waking).
    SELECT pg_notify('pgqueue_jobs', r.queue)
      FROM (SELECT queue FROM retried UNION SELECT unnest(%(wake)s::text[])) AS r
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

-- name: locate_jobs
-- Where jobs stand now, for writes retried after a lost reply (the rare path: see
-- pgqueue/worker/leases.py). A job gone, or moved past this worker's token, or released under
-- it, is what its committed first try left; a smaller token means the database lost the claim.
SELECT id, lease_token, state FROM pgqueue.jobs WHERE id = ANY(%(ids)s::bigint[])

-- name: dead_letter_unwritable
-- The completer, for one job whose outcome could not be written even on its own (a constraint,
-- a hand-edited row, its id already taken in job_history or dead_letters): the job goes to the
-- dead letters with what was meant to happen and why it could not. If a dead letter already
-- holds its id, under a fresh id from the sequence, saying so: the existing row is never
-- touched (it is another job's record). Fenced like every other write.
WITH gone AS (
    DELETE FROM pgqueue.jobs AS j
     WHERE j.id = %(id)s AND j.lease_token = %(token)s AND j.state = 'running'
    RETURNING j.*
), placed AS (
    SELECT g.*,
           CASE WHEN EXISTS (SELECT 1 FROM pgqueue.dead_letters AS d WHERE d.id = g.id)
                THEN nextval('pgqueue.jobs_id_seq') ELSE g.id END AS new_id,
           -- What fail_jobs / ack_jobs would have made of it.
           CASE WHEN g.cancel_requested OR %(kind)s = 'cancelled' THEN 'cancelled'
                WHEN %(kind)s = 'ack' THEN 'succeeded'
                WHEN %(kind)s = 'fail' THEN 'failed permanently (Fail raised)'
                WHEN %(kind)s = 'no_retry' THEN 'not retried: the task''s retry policy excludes '
                                                || (%(error)s::jsonb ->> 'error')
                WHEN %(kind)s = 'error' AND g.attempts >= g.max_attempts
                    THEN 'max attempts reached'
                ELSE 'to be retried' END AS meant
      FROM gone AS g
)
INSERT INTO pgqueue.dead_letters (id, queue, task, args, priority, attempts, max_attempts,
                                  lease_token, idempotency_key, created_at, errors, last_error,
                                  reason, worker_id, meta, tags)
SELECT p.new_id, p.queue, p.task, p.args, p.priority, p.attempts, p.max_attempts, p.lease_token,
       p.idempotency_key, p.created_at,
       p.errors
       || CASE WHEN %(error)s::text IS NULL THEN '[]'::jsonb
               ELSE jsonb_build_array(%(error)s::jsonb || jsonb_build_object('at', now())) END
       || jsonb_build_array(jsonb_build_object(
              'attempt', p.attempts, 'at', now(), 'error', 'OutcomeNotWritten',
              'message', %(problem)s::text, 'worker_id', p.worker_id)),
       %(problem)s::text,
       p.meant || ', but that outcome could not be written: ' || %(problem)s::text
       || CASE WHEN p.new_id <> p.id
               THEN '; id ' || p.id || ' is taken by another dead letter, so this job is '
                    || 'recorded as id ' || p.new_id
               ELSE '' END,
       p.worker_id, p.meta, p.tags
  FROM placed AS p
RETURNING id

-- name: expire_unwritable
-- The completer, when not even dead_letter_unwritable could record the job: end its lease now
-- (with the reason in its errors) so the reaper takes it at once instead of it sitting
-- running; the reaper retries it while attempts remain, else dead-letters or parks it.
UPDATE pgqueue.jobs AS j
   SET lease_expires_at = now(),
       errors = j.errors || jsonb_build_array(jsonb_build_object(
                    'attempt', j.attempts, 'at', now(), 'error', 'OutcomeNotWritten',
                    'message', %(problem)s::text, 'worker_id', j.worker_id))
 WHERE j.id = %(id)s AND j.lease_token = %(token)s AND j.state = 'running'
RETURNING j.id
