-- Lease the jobs p_ids (rows this transaction has locked) to worker p_worker for p_lease, and
-- return them as pgqueue.claim's rows, in p_ids' order. Each claim bumps lease_token: the
-- fencing token every later write must present. p_fair: move the clock of each fair queue of
-- p_queues (pgqueue.fair_clocks, per priority) to the largest rank claimed; p_probes: a claimed
-- job of a task whose breaker is not closed becomes its probe (the breaker rows are locked by
-- pgqueue.claim_admit); wake_on_exit: whether the job is in p_wake (NULL when p_wake is).
--
-- The row output lives here and in the type pgqueue.claimed_job: a new column is a new
-- attribute of the type and a new version of this function, nothing else.
--
-- The columns typed as their rules' domains (migration 0027) are cast to the type's base types:
-- RETURN QUERY takes only the very types the function returns.
CREATE OR REPLACE FUNCTION pgqueue.claim_grant(
    p_ids    bigint[],
    p_lease  interval,
    p_worker uuid,
    p_queues text[],
    p_fair   boolean,
    p_probes boolean,
    p_wake   bigint[])
RETURNS SETOF pgqueue.claimed_job
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY
    WITH claimed AS (
        UPDATE pgqueue.jobs AS j
           SET state = 'running',
               attempts = j.attempts + 1,
               lease_token = j.lease_token + 1,
               lease_expires_at = now() + p_lease,
               worker_id = p_worker,
               started_at = now()
          FROM unnest(p_ids) AS c(id)
         WHERE j.id = c.id
        RETURNING j.id, j.queue::text, j.task::text, j.args, j.attempts::integer,
                  j.max_attempts::integer,
                  j.lease_token, j.priority, j.created_at, j.run_at,
                  j.result_ttl IS NOT NULL AS wants_result, j.meta, j.tags,
                  j.errors -> -1 ->> 'trace' AS last_trace, j.fair_rank
    ), probes AS (
        -- A claimed job of a task whose breaker is not closed is its probe.
        UPDATE pgqueue.circuit_breakers AS b
           SET state = 'half_open', probe_job_id = cl.id, probe_token = cl.lease_token,
               updated_at = now()
          FROM claimed AS cl
         WHERE p_probes AND b.task = cl.task AND b.state <> 'closed'
        RETURNING b.task
    ), clocked AS (
        INSERT INTO pgqueue.fair_clocks AS fc (queue, priority, clock)
        SELECT cl.queue, cl.priority, max(cl.fair_rank)
          FROM claimed AS cl
         WHERE p_fair AND cl.fair_rank IS NOT NULL
           AND cl.queue IN (SELECT qs.name FROM pgqueue.queues AS qs
                             WHERE qs.name = ANY(p_queues) AND qs.fair)
         GROUP BY cl.queue, cl.priority
         ORDER BY cl.queue, cl.priority
        ON CONFLICT ON CONSTRAINT fair_clocks_pkey DO UPDATE SET clock = excluded.clock
         WHERE fc.clock < excluded.clock
    )
    SELECT cl.id, cl.queue, cl.task, cl.args, cl.attempts, cl.max_attempts,
           cl.lease_token, cl.priority, cl.created_at, cl.run_at, cl.wants_result,
           cl.meta, cl.tags, cl.last_trace,
           NULL::double precision, cl.id = ANY(p_wake)
      FROM claimed AS cl;
END
$$;
