-- Insert jobs given as rows of pgqueue.job_input, in order; the one statement that lists the
-- stored columns (a new stored option is a new version of this function). Returns the ids it
-- inserted: a job whose idempotency key is held is skipped (ON CONFLICT needs SELECT on the key
-- column, which would let a producer list every key: hence SECURITY DEFINER).
--   id: NULL takes the next from the sequence; run_at: NULL is now() + delay (or now());
--   state: NULL is 'scheduled' or 'ready' by the due time; fair_rank: NULL ranks the jobs of
--   fair queues (pgqueue.fair_ranks: consecutive ranks per queue, priority and key);
--   unique_among 'pending' makes the job hold its key only until it starts.
-- Called by pgqueue.enqueue_input (one job, its key and modes already settled), by bulk
-- enqueue (keyed jobs, and small batches) and by workflow enqueue. PL/pgSQL, not SQL: its plan
-- is kept for the session (a SQL function's body is planned again at every call before
-- PostgreSQL 18), which the single keyed enqueue calls once per job.
--
-- Version 0023: pgqueue.fair_ranks is called only when a job without a rank is in a fair
-- queue (one probe of pgqueue.queues per job otherwise). It was called for every batch, a
-- single keyed job too, and a SECURITY DEFINER SQL function costs a call of its own (the
-- search_path set and reset, its statement started) even when no queue is fair. The ranks
-- are the same: a batch with no such job used none of them.
CREATE OR REPLACE FUNCTION pgqueue.insert_jobs(jobs pgqueue.job_input[])
RETURNS TABLE (id bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    ranks bigint[];
BEGIN
    IF EXISTS (SELECT FROM unnest(jobs) AS x
                 JOIN pgqueue.queues AS qs ON qs.name = x.queue AND qs.fair
                WHERE x.fair_rank IS NULL) THEN
        SELECT pgqueue.fair_ranks(array_agg(x.queue ORDER BY x.ordinality),
                                  array_agg(x.priority ORDER BY x.ordinality),
                                  array_agg(x.concurrency_key ORDER BY x.ordinality))
          INTO ranks
          FROM unnest(jobs) WITH ORDINALITY AS x;
    END IF;
    RETURN QUERY
    INSERT INTO pgqueue.jobs AS j (id, queue, task, args, priority, run_at, state, max_attempts,
                                   idempotency_key, concurrency_key, unique_for, unique_states,
                                   key_until_started, fair_rank, result_ttl, meta, tags,
                                   caused_by)
    SELECT coalesce(u.id, nextval('pgqueue.jobs_id_seq')), u.queue, u.task,
           coalesce(u.args, '{}'::jsonb), u.priority, d.due,
           coalesce(u.state, CASE WHEN d.due > now() THEN 'scheduled' ELSE 'ready' END),
           u.max_attempts, u.idempotency_key, u.concurrency_key, u.unique_for, u.unique_states,
           CASE WHEN u.unique_among = 'pending' AND u.idempotency_key IS NOT NULL THEN true END,
           coalesce(u.fair_rank, ranks[u.ordinality]), u.result_ttl, u.meta,
           nullif(u.tags, '{}'), u.caused_by
      FROM unnest(jobs) WITH ORDINALITY AS u
     CROSS JOIN LATERAL (SELECT coalesce(u.run_at, now() + u.delay, now()) AS due) AS d
     ORDER BY u.ordinality
    ON CONFLICT (idempotency_key)
       WHERE idempotency_key IS NOT NULL AND (key_until_started IS NOT TRUE OR lease_token = 0)
       DO NOTHING
    RETURNING j.id;
END
$$;
