-- The rank a new job of `key` (NULL: the jobs without a key) gets in a fair queue at
-- `priority`: one after the last ready job of that key, and never behind the queue's clock
-- (the largest rank claimed so far at that priority), so a key that had nothing waiting starts
-- at the jobs being served now instead of behind every other key's backlog. NULL when the
-- queue is not fair. Workers claim a fair queue in (priority, rank, id) order: each key's
-- next job comes up once per round, whatever its backlog (start-time fair queueing).
--
-- Read without locks: two enqueues of one key at the same instant may get the same rank (that
-- key then has two jobs in one round), which is fair enough and never blocks a producer.
-- SECURITY DEFINER: it reads other jobs' ranks, which a producer may not select.
CREATE OR REPLACE FUNCTION pgqueue.fair_rank(p_queue text, p_priority integer, p_key text)
RETURNS bigint
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_clock bigint;
    v_last  bigint;
BEGIN
    IF NOT EXISTS (SELECT FROM pgqueue.queues AS qs WHERE qs.name = p_queue AND qs.fair) THEN
        RETURN NULL;
    END IF;
    SELECT c.clock INTO v_clock FROM pgqueue.fair_clocks AS c
     WHERE c.queue = p_queue AND c.priority = p_priority;
    IF p_key IS NULL THEN
        SELECT j.fair_rank INTO v_last FROM pgqueue.jobs AS j
         WHERE j.queue = p_queue AND j.priority = p_priority AND j.concurrency_key IS NULL
           AND j.state = 'ready' AND j.fair_rank IS NOT NULL
         ORDER BY j.fair_rank DESC LIMIT 1;
    ELSE
        SELECT j.fair_rank INTO v_last FROM pgqueue.jobs AS j
         WHERE j.queue = p_queue AND j.priority = p_priority AND j.concurrency_key = p_key
           AND j.state = 'ready' AND j.fair_rank IS NOT NULL
         ORDER BY j.fair_rank DESC LIMIT 1;
    END IF;
    RETURN greatest(coalesce(v_clock, 0), coalesce(v_last + 1, 0));
END
$$;
