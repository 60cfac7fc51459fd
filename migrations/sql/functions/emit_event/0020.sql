-- Emit an event: the first emit of a name wins (it is kept until keep_until, so a job that
-- waits for it later still gets it); every job parked waiting for it has its wait completed
-- with the payload and is made due now, in the emitter's transaction: a rolled-back emit wakes
-- nobody. Returns true for the emit that won, false when the name was already emitted (and is
-- still kept). keep: how long the event is kept (NULL: the history retention, at least a day).
-- The advisory lock orders an emit and a job parking on the same name (pgqueue.park_for_event
-- takes it shared and never waits): whichever commits second sees the other's row.
CREATE OR REPLACE FUNCTION pgqueue.emit_event(name text, payload jsonb DEFAULT NULL,
                                              keep interval DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    event_name text := emit_event.name;
    event_payload jsonb := emit_event.payload;
    queues text[];
BEGIN
    IF event_name IS NULL OR event_name = '' THEN
        RAISE EXCEPTION 'an event needs a name' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF keep IS NOT NULL AND keep <= interval '0' THEN
        RAISE EXCEPTION 'an event''s keep must be positive, got %', keep
              USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock(1885827443, pg_catalog.hashtext(event_name));
    INSERT INTO pgqueue.events AS e (name, payload, keep_until)
    VALUES (event_name, event_payload,
            now() + coalesce(keep,
                             (SELECT greatest(r.history_retention, interval '1 day')
                                FROM pgqueue.retention AS r),
                             interval '7 days'))
    ON CONFLICT ON CONSTRAINT events_pkey DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;  -- emitted before: its waiters were woken by that emit
    END IF;
    WITH done AS (
        UPDATE pgqueue.job_steps AS s
           SET state = 'succeeded', result = event_payload, finished_at = now(),
               size = pg_catalog.octet_length(event_payload::text)
         WHERE s.event = event_name AND s.state = 'waiting'
        RETURNING s.job_id
    ), woken AS (
        UPDATE pgqueue.jobs AS j
           SET run_at = now()
          FROM done AS d
         WHERE j.id = d.job_id AND j.state = 'scheduled'
        RETURNING j.queue
    )
    SELECT pg_catalog.array_agg(DISTINCT w.queue) INTO queues FROM woken AS w;
    -- Polling workers find the woken jobs anyway; this wakes idle ones at the commit.
    PERFORM pg_catalog.pg_notify('pgqueue_jobs', q) FROM pg_catalog.unnest(queues) AS q;
    RETURN true;
END
$$;
