-- The reaper: jobs whose lease expired go back to the queue with full-jitter backoff, to the
-- dead letters when their attempts are used up, to job_history when they were cancelled
-- (reap_jobs moves them). A batch that fails with an error about a row is redone job by job,
-- and a job that fails alone is parked for an hour. Workers not seen for worker_ttl are
-- forgotten. Idempotent and safe to run concurrently (SKIP LOCKED): run it from every worker,
-- `pgq reaper`, or pg_cron.
CREATE OR REPLACE FUNCTION pgqueue.reap(max_jobs integer DEFAULT 1000,
                                        backoff_base double precision DEFAULT 1.0,
                                        backoff_cap double precision DEFAULT 300.0,
                                        worker_ttl interval DEFAULT interval '1 hour')
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    expired bigint[];
    one bigint;
    problem text;
BEGIN
    SELECT coalesce(array_agg(s.id), '{}') INTO expired FROM (
        SELECT j.id FROM pgqueue.jobs AS j
         WHERE j.state = 'running' AND j.lease_expires_at < now()
         ORDER BY j.lease_expires_at
         LIMIT max_jobs
           FOR UPDATE SKIP LOCKED) AS s;

    IF cardinality(expired) > 0 THEN
        -- The rows are locked by this transaction from here on (a failed block below rolls
        -- back its changes, not the locks taken before it).
        BEGIN
            PERFORM pgqueue.reap_jobs(expired, backoff_base, backoff_cap);
        EXCEPTION WHEN OTHERS THEN
            -- Only errors about a row are isolated: data exceptions (22), constraint
            -- violations (23), errors raised by triggers (P0). Anything else (privileges, a
            -- lock or statement timeout, resources) would fail every job alike: raise it.
            IF left(SQLSTATE, 2) NOT IN ('22', '23', 'P0') THEN
                RAISE;
            END IF;
            FOREACH one IN ARRAY expired LOOP
                BEGIN
                    PERFORM pgqueue.reap_jobs(ARRAY[one], backoff_base, backoff_cap);
                EXCEPTION WHEN OTHERS THEN
                    IF left(SQLSTATE, 2) NOT IN ('22', '23', 'P0') THEN
                        RAISE;
                    END IF;
                    problem := SQLSTATE || ' ' || SQLERRM;
                    -- Parked where nothing holds it and every operator view shows it; a worker
                    -- tries it again in an hour (the claim counts the attempt, the executor
                    -- dead-letters a job without attempts left).
                    UPDATE pgqueue.jobs AS j
                       SET state = 'scheduled', run_at = now() + interval '1 hour',
                           lease_expires_at = NULL, worker_id = NULL,
                           errors = j.errors || jsonb_build_array(jsonb_build_object(
                               'attempt', j.attempts, 'at', now(), 'error', 'NotReaped',
                               'message', 'the reaper could not move this job on ('
                                          || problem || '); it is tried again in an hour',
                               'worker_id', j.worker_id))
                     WHERE j.id = one;
                    RAISE WARNING 'pgqueue.reap: job % parked for an hour: %', one, problem;
                END;
            END LOOP;
        END;

        PERFORM pg_notify('pgqueue_jobs', q.queue)
           FROM (SELECT DISTINCT queue FROM pgqueue.jobs WHERE id = ANY(expired)) AS q;
    END IF;

    -- Forget workers that have not been seen for a long time (crashed without deregistering,
    -- or stopped cleanly a while ago).
    DELETE FROM pgqueue.workers AS w WHERE w.last_seen < now() - worker_ttl;

    RETURN cardinality(expired);
END
$$;
