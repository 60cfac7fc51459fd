-- The reaper's moves for some expired (and locked) jobs: cancelled ones to job_history, those
-- out of attempts to dead_letters, the rest back to the queue with backoff. A record whose id
-- is already taken goes under a fresh id, saying so. Metadata and tags go with the job.
CREATE OR REPLACE FUNCTION pgqueue.reap_jobs(expired bigint[], backoff_base double precision,
                                  backoff_cap double precision)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE pgqueue.jobs AS j
       SET errors = j.errors || jsonb_build_array(jsonb_build_object(
               'attempt', j.attempts, 'at', now(), 'error', 'LeaseExpired',
               'message', 'lease expired: the worker stopped heartbeating (crashed, killed,'
                          ' hung, or lost the database)',
               'worker_id', j.worker_id))
     WHERE j.id = ANY(expired) AND j.state = 'running';

    WITH gone AS (
        DELETE FROM pgqueue.jobs AS j
         WHERE j.id = ANY(expired) AND j.state = 'running' AND j.cancel_requested
        RETURNING j.*
    ), placed AS (
        SELECT g.*, CASE WHEN EXISTS (SELECT 1 FROM pgqueue.job_history AS h WHERE h.id = g.id)
                         THEN nextval('pgqueue.jobs_id_seq') ELSE g.id END AS new_id
          FROM gone AS g
    )
    INSERT INTO pgqueue.job_history (id, queue, task, args, state, priority, attempts,
                                     max_attempts, created_at, started_at, errors, worker_id,
                                     meta, tags)
    SELECT new_id, queue, task, args, 'cancelled', priority, attempts, max_attempts, created_at,
           started_at,
           CASE WHEN new_id = id THEN errors
                ELSE errors || jsonb_build_array(jsonb_build_object(
                         'attempt', attempts, 'at', now(), 'error', 'IdTaken',
                         'message', 'id ' || id || ' is taken by another history row, so this '
                                    || 'job is recorded as id ' || new_id)) END,
           worker_id, meta, tags
      FROM placed;

    WITH gone AS (
        DELETE FROM pgqueue.jobs AS j
         WHERE j.id = ANY(expired) AND j.state = 'running' AND j.attempts >= j.max_attempts
        RETURNING j.*
    ), placed AS (
        SELECT g.*, CASE WHEN EXISTS (SELECT 1 FROM pgqueue.dead_letters AS d WHERE d.id = g.id)
                         THEN nextval('pgqueue.jobs_id_seq') ELSE g.id END AS new_id
          FROM gone AS g
    )
    INSERT INTO pgqueue.dead_letters (id, queue, task, args, priority, attempts, max_attempts,
                                      lease_token, idempotency_key, created_at, errors,
                                      last_error, reason, worker_id, meta, tags)
    SELECT new_id, queue, task, args, priority, attempts, max_attempts, lease_token,
           idempotency_key, created_at, errors, errors -> -1 ->> 'message',
           'lease expired with no attempts left'
           || CASE WHEN new_id = id THEN ''
                   ELSE '; id ' || id || ' is taken by another dead letter, so this job is '
                        || 'recorded as id ' || new_id END,
           worker_id, meta, tags
      FROM placed;

    UPDATE pgqueue.jobs AS j
       SET state = 'scheduled',
           run_at = now() + make_interval(secs => random() * least(
               backoff_cap, backoff_base * power(2.0, least(j.attempts, 60)))),
           lease_expires_at = NULL,
           worker_id = NULL
     WHERE j.id = ANY(expired) AND j.state = 'running';
END
$$;
