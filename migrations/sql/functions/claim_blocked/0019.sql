-- What is already at its limit for a flow-controlled claim (pgqueue.claim, step 1): a snapshot
-- read, the exact checks come later under locks (pgqueue.claim_admit). paused: the paused
-- queues of p_queues; blocked_queues: queues at their concurrency limit or out of tokens;
-- blocked_tasks: tasks likewise, and tasks whose breaker is open and cooling down or
-- half-open with its probe still running; blocked_key_tasks / blocked_keys: (task, key) pairs
-- at their key limit or whose key bucket is empty; wait_hint: seconds until the first of those
-- empty buckets has a token (NULL: none is empty). p_at: the claim's clock.
CREATE OR REPLACE FUNCTION pgqueue.claim_blocked(
    p_queues              text[],
    p_tasks               text[],
    p_at                  timestamptz,
    OUT paused            text[],
    OUT blocked_queues    text[],
    OUT blocked_tasks     text[],
    OUT blocked_key_tasks text[],
    OUT blocked_keys      text[],
    OUT wait_hint         double precision)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    SELECT coalesce(array_agg(qs.name) FILTER (WHERE qs.paused), '{}'),
           coalesce(array_agg(qs.name) FILTER (WHERE NOT qs.paused AND (
               (qs.concurrency_limit IS NOT NULL
                AND (SELECT count(*) FROM pgqueue.jobs AS j
                      WHERE j.state = 'running' AND j.queue = qs.name) >= qs.concurrency_limit)
               OR (qs.rate_limit IS NOT NULL
                   AND pgqueue.bucket_tokens(qs.tokens, qs.tokens_at, qs.rate_limit,
                                             qs.rate_burst, p_at) < 1))), '{}'),
           min((1 - pgqueue.bucket_tokens(qs.tokens, qs.tokens_at, qs.rate_limit, qs.rate_burst,
                                          p_at)) / qs.rate_limit)
               FILTER (WHERE NOT qs.paused AND qs.rate_limit IS NOT NULL
                       AND pgqueue.bucket_tokens(qs.tokens, qs.tokens_at, qs.rate_limit,
                                                 qs.rate_burst, p_at) < 1)
      INTO paused, blocked_queues, wait_hint
      FROM pgqueue.queues AS qs
     WHERE qs.name = ANY(p_queues);

    SELECT coalesce(array_agg(tl.task), '{}'),
           least(wait_hint, min((1 - pgqueue.bucket_tokens(tl.tokens, tl.tokens_at,
                                   tl.rate_limit, tl.rate_burst, p_at)) / tl.rate_limit)
                          FILTER (WHERE tl.rate_limit IS NOT NULL
                                  AND pgqueue.bucket_tokens(tl.tokens, tl.tokens_at,
                                          tl.rate_limit, tl.rate_burst, p_at) < 1))
      INTO blocked_tasks, wait_hint
      FROM pgqueue.task_limits AS tl
     WHERE tl.task = ANY(p_tasks)
       AND ((tl.concurrency_limit IS NOT NULL
             AND (SELECT count(*) FROM pgqueue.jobs AS j
                   WHERE j.state = 'running' AND j.task = tl.task) >= tl.concurrency_limit)
            OR (tl.rate_limit IS NOT NULL
                AND pgqueue.bucket_tokens(tl.tokens, tl.tokens_at, tl.rate_limit,
                                          tl.rate_burst, p_at) < 1));

    -- Breakers: open and cooling down, or half-open with its probe still running.
    blocked_tasks := blocked_tasks || coalesce((
        SELECT array_agg(b.task) FROM pgqueue.circuit_breakers AS b
         WHERE b.task = ANY(p_tasks)
           AND ((b.state = 'open' AND b.open_until > now())
                OR (b.state = 'half_open' AND EXISTS (
                        SELECT 1 FROM pgqueue.jobs AS j
                         WHERE j.id = b.probe_job_id AND j.lease_token = b.probe_token
                           AND j.state = 'running')))), '{}');

    -- (task, key) pairs at their key limit, or whose key bucket is empty.
    SELECT coalesce(array_agg(k.task), '{}'), coalesce(array_agg(k.key), '{}'),
           least(wait_hint, min(k.wait))
      INTO blocked_key_tasks, blocked_keys, wait_hint
      FROM (SELECT r.task, r.key, NULL::double precision AS wait
              FROM (SELECT j.task, j.concurrency_key AS key, count(*) AS n
                      FROM pgqueue.jobs AS j
                     WHERE j.state = 'running' AND j.concurrency_key IS NOT NULL
                       AND j.task = ANY(p_tasks)
                     GROUP BY j.task, j.concurrency_key) AS r
              LEFT JOIN pgqueue.task_limits AS tl ON tl.task = r.task
             WHERE r.n >= CASE WHEN tl.task IS NULL THEN 1 ELSE tl.key_limit END
            UNION ALL
            SELECT b.task, b.key,
                   (1 - pgqueue.bucket_tokens(b.tokens, b.tokens_at, tl.key_rate_limit,
                                              tl.key_rate_burst, p_at)) / tl.key_rate_limit
              FROM pgqueue.key_buckets AS b
              JOIN pgqueue.task_limits AS tl ON tl.task = b.task
             WHERE b.task = ANY(p_tasks) AND tl.key_rate_limit IS NOT NULL
               AND pgqueue.bucket_tokens(b.tokens, b.tokens_at, tl.key_rate_limit,
                                         tl.key_rate_burst, p_at) < 1) AS k;
END
$$;
