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
INSERT INTO pgqueue.job_steps AS s (job_id, seq, name, kind, state, attempts, started_at,
                                    finished_at, result, error, size)
SELECT j.id, %(seq)s, %(name)s, 'step', %(state)s, %(attempts)s,
       now() - make_interval(secs => %(elapsed)s), now(), %(result)s::jsonb, %(error)s::jsonb,
       octet_length(%(result)s::text)
  FROM pgqueue.jobs AS j
 WHERE j.id = %(id)s AND j.lease_token = %(token)s AND j.state = 'running'
   FOR SHARE
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
