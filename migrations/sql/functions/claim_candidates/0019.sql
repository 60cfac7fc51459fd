-- pgqueue.claim's candidates, best first: each queue of p_queues not paused and not in p_skip
-- walked by pgqueue.claim_walk, a fair queue's candidates (in fair order) put in the places FIFO
-- order would have given that queue's candidates (their run_at slots, in order), then ordered
-- by weighted fair share when p_weighted (virtual time (running + rank) / weight, with the
-- worker's running jobs per queue in p_running, by position in p_queues), else by (priority,
-- run_at, id); ord is that order's key. NULL when there are none. The walk leaves out what
-- p_blocked_* name (see pgqueue.claim_walk). Every candidate's row is locked.
CREATE OR REPLACE FUNCTION pgqueue.claim_candidates(
    p_queues            text[],
    p_tasks             text[],
    p_limit             integer,
    p_running           integer[],
    p_weighted          boolean,
    p_skip              text[],
    p_blocked_tasks     text[],
    p_blocked_key_tasks text[],
    p_blocked_keys      text[])
RETURNS pgqueue.claim_candidate[]
LANGUAGE plpgsql AS $$
DECLARE
    v_cands pgqueue.claim_candidate[];
BEGIN
    WITH mine AS (
        SELECT q.name, coalesce(p_running[q.pos::integer], 0) AS running,
               coalesce(qs.weight, 1)::double precision AS weight,
               coalesce(qs.fair, false) AS fair
          FROM unnest(p_queues) WITH ORDINALITY AS q(name, pos)
          LEFT JOIN pgqueue.queues AS qs ON qs.name = q.name
         WHERE NOT coalesce(qs.paused, false) AND q.name <> ALL(p_skip)
    ), walked AS (
        SELECT m.name AS queue, m.running, m.weight, c.*
          FROM mine AS m
         CROSS JOIN LATERAL pgqueue.claim_walk(m.name, m.fair, p_tasks, p_limit, p_blocked_tasks,
                                               p_blocked_key_tasks, p_blocked_keys) AS c
    ), placed AS (
        SELECT w.*,
               row_number() OVER (PARTITION BY w.queue, w.priority
                                  ORDER BY w.fair_rank NULLS FIRST, w.run_at, w.id) AS fpos,
               row_number() OVER (PARTITION BY w.queue, w.priority
                                  ORDER BY w.run_at, w.id) AS tpos
          FROM walked AS w
    ), zipped AS (
        -- A fair queue's candidates, in fair order, take its FIFO places (see above).
        SELECT a.queue, a.running, a.weight, a.id, a.task, a.concurrency_key, a.priority,
               b.run_at AS at, b.id AS at_id
          FROM placed AS a
          JOIN placed AS b ON b.queue = a.queue AND b.priority = a.priority AND b.tpos = a.fpos
    ), ranked AS (
        SELECT z.*,
               CASE WHEN p_weighted
                    THEN (z.running + row_number() OVER (
                              PARTITION BY z.queue ORDER BY z.priority, z.at, z.at_id))
                         / z.weight
                    ELSE row_number() OVER (ORDER BY z.priority, z.at, z.at_id)
               END AS ord
          FROM zipped AS z
    )
    SELECT array_agg(ROW(r.id, r.queue, r.task, r.concurrency_key, r.priority, r.at,
                         r.ord)::pgqueue.claim_candidate
                     ORDER BY r.ord, r.priority, r.at, r.at_id)
      INTO v_cands
      FROM ranked AS r;
    RETURN v_cands;
END
$$;
