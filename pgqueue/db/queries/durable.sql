-- Durable jobs: step checkpoints (ctx.step), events, parking a sleeping or waiting job.
-- Loaded by pgqueue/db/queries.py; each statement starts with a "-- name: <name>" line.
-- Parameters are psycopg placeholders, always bound.

-- name: load_steps
-- A run's first ctx.step: every step its job recorded, in the order they ran (one query per
-- run, only for jobs that use steps).
SELECT seq, name, kind, state, attempts, result
  FROM pgqueue.job_steps
 WHERE job_id = %(id)s
 ORDER BY seq

-- name: write_step
-- A step's checkpoint: one statement, fenced by the job's lease token. It writes only while
-- this worker holds the job (no row back: the lease was lost, nothing written), and FOR SHARE
-- holds the row against a reaper or a new claim until the statement's transaction ends (a
-- transactional step's: its effects and its checkpoint commit together). 'succeeded' with the
-- step's JSON result, or 'failed' with its error (the step runs again on the next attempt).
-- A succeeded step is never written again. elapsed: the step's seconds by the worker's clock.
-- The row is locked by its id alone and the fence checked on what the lock returns: an idle
-- worker starts a job while its claim's COMMIT is on its way, and a fence in the locking scan
-- would test the row as it was before that claim (not running: the job taken for lost),
-- where the lock waits for the claim's transaction and returns the row as it left it. The
-- worker is checked too: a claim the server lost (a crash before its WAL flush) can hand the
-- same token to another worker.
WITH j AS MATERIALIZED (
    SELECT id, lease_token, state, worker_id FROM pgqueue.jobs WHERE id = %(id)s FOR SHARE
)
INSERT INTO pgqueue.job_steps AS s (job_id, seq, name, kind, state, attempts, started_at,
                                    finished_at, result, error, size)
SELECT j.id, %(seq)s, %(name)s, 'step', %(state)s, %(attempts)s,
       now() - make_interval(secs => %(elapsed)s), now(), %(result)s::jsonb, %(error)s::jsonb,
       octet_length(%(result)s::text)
  FROM j
 WHERE j.lease_token = %(token)s AND j.state = 'running' AND j.worker_id = %(worker)s::uuid
ON CONFLICT ON CONSTRAINT job_steps_pkey DO UPDATE
   SET name = excluded.name, kind = excluded.kind, state = excluded.state,
       attempts = s.attempts + excluded.attempts, started_at = excluded.started_at,
       finished_at = excluded.finished_at, result = excluded.result, error = excluded.error,
       size = excluded.size
 WHERE s.state <> 'succeeded'
RETURNING s.seq

-- name: emit_event
-- pgq.emit_event(): in the caller's transaction (see pgqueue.emit_event). True: this emit won.
SELECT pgqueue.emit_event(%(name)s, %(payload)s::jsonb, %(keep)s::interval)

-- name: park_sleep
-- Phase 2 of durable jobs (the worker does not run it yet): a running job sleeps. The job is
-- parked, fenced by its lease token: 'scheduled' until the wake time (by the database's clock:
-- until, else now() + delay), its lease given up and the attempt not counted; the sleep is
-- recorded as the job's step seq (kind 'sleep', 'waiting'): on the run that resumes it, a
-- sleep found in the checkpoints is over. No row: the lease was lost, nothing written.
WITH parked AS (
    UPDATE pgqueue.jobs AS j
       SET state = 'scheduled',
           run_at = coalesce(%(until)s::timestamptz, now() + make_interval(secs => %(delay)s)),
           attempts = greatest(j.attempts - 1, 0), lease_expires_at = NULL, worker_id = NULL
     WHERE j.id = %(id)s AND j.lease_token = %(token)s AND j.state = 'running'
    RETURNING j.id, j.run_at
)
INSERT INTO pgqueue.job_steps AS s (job_id, seq, name, kind, state, attempts, started_at,
                                    wake_at)
SELECT p.id, %(seq)s, %(name)s, 'sleep', 'waiting', 1, now(), p.run_at
  FROM parked AS p
ON CONFLICT ON CONSTRAINT job_steps_pkey DO UPDATE
   SET name = excluded.name, kind = 'sleep', state = 'waiting', attempts = s.attempts + 1,
       started_at = excluded.started_at, wake_at = excluded.wake_at
RETURNING s.wake_at

-- name: park_for_event
-- Phase 2 of durable jobs: a running job waits for an event; the job always leaves its worker
-- (see pgqueue.park_for_event):
-- 'succeeded' with the payload, 'timed_out', 'parked', or 'lost'.
SELECT state, payload
  FROM pgqueue.park_for_event(%(id)s, %(token)s, %(seq)s, %(name)s, %(event)s,
                              %(timeout)s::interval)

-- name: job_steps
-- pgq jobs show: a job's steps, as pgqueue.job_step_status shows them.
SELECT seq, name, kind, state, attempts, started_at, finished_at,
       extract(epoch FROM duration)::double precision AS duration, result_size, error, message,
       wake_at, event
  FROM pgqueue.job_step_status
 WHERE job_id = %(id)s
 ORDER BY seq

-- name: park_sleeps
-- The worker's completer: park_sleep for a batch of sleeping jobs, in one statement (ids in
-- ascending order, as every statement that locks several jobs takes them). Each job is fenced
-- by its lease token; a row back per job parked (its wake time, 'parked'), none for a lost
-- lease. A job whose cancel was requested while it ran is not parked (it would wake days later
-- and run on, the request forgotten): 'cancel_requested', and the completer writes it
-- cancelled. The rows are locked first and the request read from what the lock returns, so a
-- cancel committed while this statement waited for a row is seen.
WITH input AS (
    SELECT *
      FROM unnest(%(ids)s::bigint[], %(tokens)s::integer[], %(seqs)s::integer[],
                  %(names)s::text[], %(delays)s::double precision[], %(untils)s::timestamptz[])
           AS i(id, token, seq, name, delay, until)
), held AS MATERIALIZED (
    SELECT j.id, j.cancel_requested
      FROM pgqueue.jobs AS j
      JOIN input AS i ON i.id = j.id
     WHERE j.lease_token = i.token AND j.state = 'running'
     ORDER BY j.id
       FOR NO KEY UPDATE OF j
), parked AS (
    UPDATE pgqueue.jobs AS j
       SET state = 'scheduled',
           run_at = coalesce(i.until, now() + make_interval(secs => i.delay)),
           attempts = greatest(j.attempts - 1, 0), lease_expires_at = NULL, worker_id = NULL
      FROM input AS i, held AS h
     WHERE j.id = i.id AND h.id = i.id AND NOT h.cancel_requested
    RETURNING j.id, j.run_at, i.seq, i.name
), slept AS (
    INSERT INTO pgqueue.job_steps AS s (job_id, seq, name, kind, state, attempts, started_at,
                                        wake_at)
    SELECT p.id, p.seq, p.name, 'sleep', 'waiting', 1, now(), p.run_at
      FROM parked AS p
    ON CONFLICT ON CONSTRAINT job_steps_pkey DO UPDATE
       SET name = excluded.name, kind = 'sleep', state = 'waiting', attempts = s.attempts + 1,
           started_at = excluded.started_at, wake_at = excluded.wake_at
    RETURNING s.job_id, s.wake_at
)
SELECT job_id, wake_at, 'parked' AS state FROM slept
UNION ALL
SELECT id, NULL, 'cancel_requested' FROM held WHERE cancel_requested

-- name: park_for_events
-- The worker's completer: pgqueue.park_for_event for a batch of waiting jobs, in one
-- statement, in the order given (ascending ids). One row per job: 'succeeded', 'timed_out',
-- 'parked', 'lost' or 'cancel_requested' (see pgqueue.park_for_event).
SELECT i.id, w.state
  FROM unnest(%(ids)s::bigint[], %(tokens)s::integer[], %(seqs)s::integer[],
              %(names)s::text[], %(events)s::text[], %(timeouts)s::double precision[])
       WITH ORDINALITY AS i(id, token, seq, name, event, timeout, n)
 CROSS JOIN LATERAL pgqueue.park_for_event(i.id, i.token, i.seq, i.name, i.event,
                                           make_interval(secs => i.timeout)) AS w
 ORDER BY i.n

-- name: collapse_waits
-- pgqueue.testing's drain, right after make_scheduled_due (time collapsed): of the jobs it
-- made due, those parked in a wait for an event not emitted. A wait with a timeout times out
-- (its next run raises EventTimeout, as once its time had come); one without (parked for a
-- hundred years) goes back to waiting, scheduled at its wake time. Returns the ids held back.
WITH last AS (
    SELECT DISTINCT ON (s.job_id) s.job_id, s.seq, s.state, s.kind, s.wake_at
      FROM pgqueue.job_steps AS s
     WHERE s.job_id = ANY(%(ids)s::bigint[])
     ORDER BY s.job_id, s.seq DESC
), waits AS (
    SELECT l.job_id, l.seq, l.wake_at, l.wake_at > now() + interval '99 years' AS forever
      FROM last AS l
     WHERE l.kind = 'wait' AND l.state = 'waiting'
), timed_out AS (
    UPDATE pgqueue.job_steps AS s
       SET state = 'timed_out', finished_at = now()
      FROM waits AS w
     WHERE s.job_id = w.job_id AND s.seq = w.seq AND NOT w.forever
)
UPDATE pgqueue.jobs AS j
   SET state = 'scheduled', run_at = w.wake_at
  FROM waits AS w
 WHERE j.id = w.job_id AND w.forever AND j.state = 'ready'
RETURNING j.id

-- name: parked_jobs
-- The metrics' gauges: parked jobs per queue, sleeping or waiting for an event. A job is
-- parked while it is scheduled and its last step is a sleep or wait still 'waiting' (a sleep
-- parked for this very wake time: a sleep that woke and then retried is not asleep). One
-- primary-key lookup per scheduled job, through jobs_scheduled_idx; read once per scrape.
SELECT j.queue,
       count(*) FILTER (WHERE s.kind = 'sleep') AS sleeping,
       count(*) FILTER (WHERE s.kind = 'wait') AS waiting
  FROM pgqueue.jobs AS j
 CROSS JOIN LATERAL (
        SELECT s.kind, s.state, s.wake_at
          FROM pgqueue.job_steps AS s
         WHERE s.job_id = j.id
         ORDER BY s.seq DESC
         LIMIT 1) AS s
 WHERE j.state = 'scheduled' AND s.state = 'waiting'
   AND (s.kind = 'wait' OR s.wake_at = j.run_at)
 GROUP BY j.queue
 ORDER BY j.queue
