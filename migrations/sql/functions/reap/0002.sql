-- The reaper: jobs whose lease expired (their worker died, hung, or lost the database) go back
-- to the queue with full-jitter backoff, or to the dead letters when their attempts are used up
-- (a job that kills its worker every time is a poison pill and must end there). A cancelled job
-- ends cancelled. Every decision uses the database clock. Idempotent and safe to run
-- concurrently (SKIP LOCKED): run it from every worker, `pgq reaper`, or pg_cron.
CREATE OR REPLACE FUNCTION pgqueue.reap(max_jobs integer DEFAULT 1000,
                             backoff_base double precision DEFAULT 1.0,
                             backoff_cap double precision DEFAULT 300.0,
                             worker_ttl interval DEFAULT interval '1 hour')
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    expired bigint[];
BEGIN
    SELECT coalesce(array_agg(s.id), '{}') INTO expired FROM (
        SELECT j.id FROM pgqueue.jobs AS j
         WHERE j.state = 'running' AND j.lease_expires_at < now()
         ORDER BY j.lease_expires_at
         LIMIT max_jobs
           FOR UPDATE SKIP LOCKED) AS s;

    IF cardinality(expired) > 0 THEN
        -- The rows are locked by this transaction from here on.
        UPDATE pgqueue.jobs AS j
           SET errors = j.errors || jsonb_build_array(jsonb_build_object(
                   'attempt', j.attempts, 'at', now(), 'error', 'LeaseExpired',
                   'message', 'lease expired: the worker stopped heartbeating (crashed, killed,'
                              ' hung, or lost the database)',
                   'worker_id', j.worker_id))
         WHERE j.id = ANY(expired);

        WITH gone AS (
            DELETE FROM pgqueue.jobs AS j
             WHERE j.id = ANY(expired) AND j.cancel_requested
            RETURNING j.*)
        INSERT INTO pgqueue.job_history (id, queue, task, args, state, priority, attempts,
                                         max_attempts, created_at, started_at, errors, worker_id)
        SELECT id, queue, task, args, 'cancelled', priority, attempts, max_attempts, created_at,
               started_at, errors, worker_id
          FROM gone;

        WITH gone AS (
            DELETE FROM pgqueue.jobs AS j
             WHERE j.id = ANY(expired) AND j.attempts >= j.max_attempts
            RETURNING j.*)
        INSERT INTO pgqueue.dead_letters (id, queue, task, args, priority, attempts, max_attempts,
                                          lease_token, idempotency_key, created_at, errors,
                                          last_error, reason, worker_id)
        SELECT id, queue, task, args, priority, attempts, max_attempts, lease_token,
               idempotency_key, created_at, errors, errors -> -1 ->> 'message',
               'lease expired with no attempts left', worker_id
          FROM gone;

        UPDATE pgqueue.jobs AS j
           SET state = 'scheduled',
               run_at = now() + make_interval(secs => random() * least(
                   backoff_cap, backoff_base * power(2.0, least(j.attempts, 60)))),
               lease_expires_at = NULL,
               worker_id = NULL
         WHERE j.id = ANY(expired);

        PERFORM pg_notify('pgqueue_jobs', q.queue)
           FROM (SELECT DISTINCT queue FROM pgqueue.jobs WHERE id = ANY(expired)) AS q;
    END IF;

    -- Forget workers that have not been seen for a long time (crashed without deregistering,
    -- or stopped cleanly a while ago).
    DELETE FROM pgqueue.workers AS w WHERE w.last_seen < now() - worker_ttl;

    RETURN cardinality(expired);
END
$$;
