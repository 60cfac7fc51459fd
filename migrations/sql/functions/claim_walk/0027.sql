-- The SKIP LOCKED walk of one queue for pgqueue.claim (called once per queue, from
-- pgqueue.claim_candidates): up to p_limit ready jobs in (priority, run_at, id) order, or, in a
-- fair queue, up to p_limit ranked jobs in (priority, fair_rank, id) order plus the unranked
-- ones among the first p_limit of its FIFO order (see pgqueue.claim); then up to p_limit due
-- scheduled jobs. Tasks in p_blocked_tasks and (task, key) pairs in p_blocked_key_tasks /
-- p_blocked_keys (the flow-controlled path's snapshot of what is at its limit; empty without
-- limits) are left out. fair_rank is NULL outside fair queues.
--
-- plpgsql, not SQL: a walk that locks rows cannot be a non-volatile SQL function, so it could
-- not be inlined; plpgsql keeps its plans for the session where a SQL function would be planned
-- again at every claim. Its cost is per queue, never per row.
--
-- task and concurrency_key are typed as their rules' domains (migration 0027) and cast to text:
-- RETURN QUERY takes only the very types the function returns.
CREATE OR REPLACE FUNCTION pgqueue.claim_walk(
    p_queue             text,
    p_fair              boolean,
    p_tasks             text[],
    p_limit             integer,
    p_blocked_tasks     text[],
    p_blocked_key_tasks text[],
    p_blocked_keys      text[])
RETURNS TABLE (id bigint, task text, concurrency_key text, priority smallint,
               run_at timestamptz, fair_rank bigint)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    IF p_fair THEN
        RETURN QUERY
        SELECT j.id, j.task::text, j.concurrency_key::text, j.priority, j.run_at, j.fair_rank
          FROM pgqueue.jobs AS j
         WHERE j.queue = p_queue AND j.state = 'ready' AND j.fair_rank IS NOT NULL
           AND j.task = ANY(p_tasks) AND j.task <> ALL(p_blocked_tasks)
           AND (j.concurrency_key IS NULL OR NOT EXISTS (
                    SELECT 1 FROM unnest(p_blocked_key_tasks, p_blocked_keys) AS bk(task, key)
                     WHERE bk.task = j.task AND bk.key = j.concurrency_key))
         ORDER BY j.priority, j.fair_rank, j.id
         LIMIT p_limit
           FOR UPDATE SKIP LOCKED;
        RETURN QUERY
        SELECT j.id, j.task::text, j.concurrency_key::text, j.priority, j.run_at, j.fair_rank
          FROM pgqueue.jobs AS j
         WHERE j.state = 'ready' AND j.fair_rank IS NULL
           AND j.id IN (
               SELECT x.id FROM (
                   SELECT h.id, h.fair_rank FROM pgqueue.jobs AS h
                    WHERE h.queue = p_queue AND h.state = 'ready' AND h.task = ANY(p_tasks)
                    ORDER BY h.priority, h.run_at, h.id
                    LIMIT p_limit) AS x
                WHERE x.fair_rank IS NULL)
           AND j.task <> ALL(p_blocked_tasks)
           AND (j.concurrency_key IS NULL OR NOT EXISTS (
                    SELECT 1 FROM unnest(p_blocked_key_tasks, p_blocked_keys) AS bk(task, key)
                     WHERE bk.task = j.task AND bk.key = j.concurrency_key))
           FOR UPDATE SKIP LOCKED;
    ELSE
        RETURN QUERY
        SELECT j.id, j.task::text, j.concurrency_key::text, j.priority, j.run_at, NULL::bigint
          FROM pgqueue.jobs AS j
         WHERE j.queue = p_queue AND j.state = 'ready'
           AND j.task = ANY(p_tasks) AND j.task <> ALL(p_blocked_tasks)
           AND (j.concurrency_key IS NULL OR NOT EXISTS (
                    SELECT 1 FROM unnest(p_blocked_key_tasks, p_blocked_keys) AS bk(task, key)
                     WHERE bk.task = j.task AND bk.key = j.concurrency_key))
         ORDER BY j.priority, j.run_at, j.id
         LIMIT p_limit
           FOR UPDATE SKIP LOCKED;
    END IF;
    RETURN QUERY
    SELECT j.id, j.task::text, j.concurrency_key::text, j.priority, j.run_at,
           CASE WHEN p_fair THEN j.fair_rank END
      FROM pgqueue.jobs AS j
     WHERE j.queue = p_queue AND j.state = 'scheduled' AND j.run_at <= now()
       AND j.task = ANY(p_tasks) AND j.task <> ALL(p_blocked_tasks)
       AND (j.concurrency_key IS NULL OR NOT EXISTS (
                SELECT 1 FROM unnest(p_blocked_key_tasks, p_blocked_keys) AS bk(task, key)
                 WHERE bk.task = j.task AND bk.key = j.concurrency_key))
     ORDER BY j.run_at, j.id
     LIMIT p_limit
       FOR UPDATE SKIP LOCKED;
END
$$;
