-- Cancel a job: a waiting job is removed at once (recorded as cancelled); a running job is
-- flagged and its worker is told (NOTIFY now, and its next heartbeat) to stop the handler.
-- Returns 'cancelled', 'cancelling', or 'not_found' (unknown, finished or dead). The record
-- keeps the job's metadata and tags.
CREATE OR REPLACE FUNCTION pgqueue.cancel(job_id bigint)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    current_state text;
BEGIN
    SELECT j.state INTO current_state FROM pgqueue.jobs AS j WHERE j.id = job_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'not_found';
    END IF;
    IF current_state = 'running' THEN
        UPDATE pgqueue.jobs SET cancel_requested = true WHERE id = job_id;
        PERFORM pg_notify('pgqueue_cancel', job_id::text);
        RETURN 'cancelling';
    END IF;
    WITH gone AS (DELETE FROM pgqueue.jobs AS j WHERE j.id = job_id RETURNING j.*)
    INSERT INTO pgqueue.job_history (id, queue, task, args, state, priority, attempts,
                                     max_attempts, created_at, started_at, errors, worker_id,
                                     meta, tags)
    SELECT id, queue, task, args, 'cancelled', priority, attempts, max_attempts, created_at,
           started_at, errors, worker_id, meta, tags
      FROM gone;
    RETURN 'cancelled';
END
$$;
