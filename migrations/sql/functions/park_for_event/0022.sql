-- A running job waits for an event (ctx.wait_for_event; the worker's completer parks the job
-- with it). One call, fenced by the job's lease token: 'lost' when this worker no longer holds
-- the job, nothing written. Otherwise the job always leaves its worker: 'scheduled', its lease
-- given up and the attempt not counted; the wait is the job's step `seq` (kind 'wait'):
--   already settled (an emit completed it, or it timed out): the job is due now, and its next
--   run reads the step: 'succeeded' (with the payload) or 'timed_out';
--   the event is kept (emitted before the wait): the step succeeds, the job is due now;
--   the timeout has passed: the step timed out, the job is due now;
--   else 'parked': the step is 'waiting' and the job scheduled at its timeout (now() +
--   timeout when the wait is first parked, kept when it parks again; NULL: a hundred
--   years). pgqueue.emit_event completes the step and makes the job due.
-- The advisory lock is the one emit_event takes, here shared and only tried: when an emit of
-- the name is under way (its transaction holds the lock) the job parks for a second and looks
-- again, so a worker never waits on a producer's transaction, and no emit is missed.
CREATE OR REPLACE FUNCTION pgqueue.park_for_event(job_id bigint, token integer, seq integer,
                                                  step_name text, event_name text,
                                                  timeout interval)
RETURNS TABLE (state text, payload jsonb)
LANGUAGE plpgsql AS $$
DECLARE
    cancelling boolean;
    locked boolean;
    step pgqueue.job_steps%ROWTYPE;
    kept pgqueue.events%ROWTYPE;
    wake timestamptz;
    settled text;
    settled_payload jsonb;
BEGIN
    SELECT j.cancel_requested INTO cancelling FROM pgqueue.jobs AS j
     WHERE j.id = park_for_event.job_id AND j.lease_token = token AND j.state = 'running'
       FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'lost'::text, NULL::jsonb;
        RETURN;
    END IF;
    IF cancelling THEN
        RETURN QUERY SELECT 'cancel_requested'::text, NULL::jsonb;
        RETURN;
    END IF;
    locked := pg_catalog.pg_try_advisory_xact_lock_shared(1885827443,
                                                          pg_catalog.hashtext(event_name));
    -- Each statement below takes a new snapshot (READ COMMITTED): an emit that held the lock
    -- has committed or rolled back by now.
    SELECT * INTO step FROM pgqueue.job_steps AS s
     WHERE s.job_id = park_for_event.job_id AND s.seq = park_for_event.seq;
    wake := coalesce(step.wake_at, now() + coalesce(timeout, interval '100 years'));
    IF FOUND AND step.state IN ('succeeded', 'timed_out') THEN
        settled := step.state;
        settled_payload := step.result;
    ELSE
        SELECT * INTO kept FROM pgqueue.events AS e
         WHERE e.name = event_name AND e.keep_until > now();
        IF FOUND THEN
            settled := 'succeeded';
            settled_payload := kept.payload;
        ELSIF wake <= now() THEN
            settled := 'timed_out';
        END IF;
        INSERT INTO pgqueue.job_steps AS s (job_id, seq, name, kind, state, attempts,
                                            started_at, finished_at, result, size, wake_at,
                                            event)
        VALUES (park_for_event.job_id, park_for_event.seq, step_name, 'wait',
                coalesce(settled, 'waiting'), 1, now(),
                CASE WHEN settled IS NOT NULL THEN now() END, settled_payload,
                pg_catalog.octet_length(settled_payload::text), wake, event_name)
        ON CONFLICT ON CONSTRAINT job_steps_pkey DO UPDATE
           SET name = excluded.name, kind = excluded.kind, state = excluded.state,
               attempts = s.attempts + 1, finished_at = excluded.finished_at,
               result = excluded.result, size = excluded.size, wake_at = excluded.wake_at,
               event = excluded.event;
    END IF;
    UPDATE pgqueue.jobs AS j
       SET state = 'scheduled',
           run_at = CASE WHEN settled IS NOT NULL THEN now()
                         WHEN locked THEN wake
                         ELSE least(wake, now() + interval '1 second') END,
           attempts = greatest(j.attempts - 1, 0), lease_expires_at = NULL,
           worker_id = NULL
     WHERE j.id = park_for_event.job_id;
    RETURN QUERY SELECT coalesce(settled, 'parked'), settled_payload;
END
$$;
