-- Ranks for jobs written together (one element per job, in the order written): the jobs of one
-- (queue, priority, key) get consecutive ranks from pgqueue.fair_rank, so a batch of one key
-- takes one job per round like any other backlog. NULL for jobs of queues that are not fair,
-- and NULL altogether when none is (the common case costs one probe per distinct queue).
CREATE OR REPLACE FUNCTION pgqueue.fair_ranks(queues text[], priorities smallint[], keys text[])
RETURNS bigint[]
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN EXISTS (SELECT FROM pgqueue.queues AS qs
                              WHERE qs.name = ANY(queues) AND qs.fair) THEN (
        SELECT array_agg(r.rank ORDER BY r.ord)
          FROM (SELECT u.ord,
                       b.base + row_number() OVER (PARTITION BY u.queue, u.priority, u.key
                                                   ORDER BY u.ord) - 1 AS rank
                  FROM unnest(queues, priorities, keys) WITH ORDINALITY
                       AS u(queue, priority, key, ord)
                  LEFT JOIN (SELECT g.queue, g.priority, g.key,
                                    pgqueue.fair_rank(g.queue, g.priority, g.key) AS base
                               FROM (SELECT DISTINCT x.queue, x.priority, x.key
                                       FROM unnest(queues, priorities, keys)
                                            AS x(queue, priority, key)
                                       JOIN pgqueue.queues AS qs
                                         ON qs.name = x.queue AND qs.fair) AS g) AS b
                    ON b.queue = u.queue AND b.priority = u.priority
                       AND b.key IS NOT DISTINCT FROM u.key) AS r)
    END
$$;
