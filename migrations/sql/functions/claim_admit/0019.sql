-- Keep the candidates of a flow-controlled claim (pgqueue.claim, steps 3 and 4) that fit every
-- limit, and spend their tokens. p_cands: pgqueue.claim_candidates' array, best first; p_at: the
-- claim's clock. accepted: the ids kept (NULL: none), at most p_limit, best first; wake: those
-- that take the last free place under one of their concurrency limits (NULL: none).
--
-- Locks first, for the limits the candidates touch; then each check is a new statement, whose
-- fresh snapshot sees every claim committed by the previous holders of those locks.
CREATE OR REPLACE FUNCTION pgqueue.claim_admit(
    p_cands      pgqueue.claim_candidate[],
    p_limit      integer,
    p_at         timestamptz,
    OUT accepted bigint[],
    OUT wake     bigint[])
LANGUAGE plpgsql AS $$
BEGIN
    -- 3. Lock the limits these candidates touch: concurrency limits as advisory locks in one
    --    global order, then buckets and breakers by name. A key bucket that does not exist
    --    yet is made here (a full bucket), so the lock is never on a missing row; ON CONFLICT
    --    DO UPDATE ... WHERE false locks an existing row without writing it.
    PERFORM pg_advisory_xact_lock(1885827441, l.k)
       FROM (SELECT DISTINCT hashtext(x.name) AS k FROM (
                 SELECT 'queue:' || c.queue AS name
                   FROM unnest(p_cands) AS c
                   JOIN pgqueue.queues AS qs ON qs.name = c.queue
                  WHERE qs.concurrency_limit IS NOT NULL
                 UNION ALL
                 SELECT 'task:' || c.task
                   FROM unnest(p_cands) AS c
                   JOIN pgqueue.task_limits AS tl ON tl.task = c.task
                  WHERE tl.concurrency_limit IS NOT NULL
                 UNION ALL
                 SELECT 'key:' || c.task || chr(31) || c.concurrency_key
                   FROM unnest(p_cands) AS c
                   LEFT JOIN pgqueue.task_limits AS tl ON tl.task = c.task
                  WHERE c.concurrency_key IS NOT NULL
                    AND (tl.task IS NULL OR tl.key_limit IS NOT NULL)) AS x
             ORDER BY 1) AS l;
    PERFORM 1 FROM pgqueue.queues AS qs
     WHERE qs.name IN (SELECT c.queue FROM unnest(p_cands) AS c) AND qs.rate_limit IS NOT NULL
     ORDER BY qs.name
       FOR NO KEY UPDATE;
    PERFORM 1 FROM pgqueue.task_limits AS tl
     WHERE tl.task IN (SELECT c.task FROM unnest(p_cands) AS c) AND tl.rate_limit IS NOT NULL
     ORDER BY tl.task
       FOR NO KEY UPDATE;
    INSERT INTO pgqueue.key_buckets AS b (task, key)
    SELECT DISTINCT c.task, c.concurrency_key
      FROM unnest(p_cands) AS c
      JOIN pgqueue.task_limits AS tl ON tl.task = c.task
     WHERE c.concurrency_key IS NOT NULL AND tl.key_rate_limit IS NOT NULL
     ORDER BY 1, 2
    ON CONFLICT ON CONSTRAINT key_buckets_pkey DO UPDATE SET tokens = b.tokens WHERE false;
    PERFORM 1 FROM pgqueue.circuit_breakers AS b
     WHERE b.task IN (SELECT c.task FROM unnest(p_cands) AS c) AND b.state <> 'closed'
     ORDER BY b.task
       FOR NO KEY UPDATE;

    -- 4. Under those locks, with a fresh snapshot: keep what fits every limit. A candidate's
    --    rank among all candidates sharing a limit must be within that limit's room (ranks
    --    count candidates another limit rejects, so this never exceeds a limit; what it
    --    leaves out is claimed next time).
    WITH c AS (
        SELECT * FROM unnest(p_cands)
    ), ranked AS (
        SELECT c.*,
               row_number() OVER (PARTITION BY c.queue ORDER BY c.ord, c.id) AS rq,
               row_number() OVER (PARTITION BY c.task ORDER BY c.ord, c.id) AS rt,
               row_number() OVER (PARTITION BY c.task, c.concurrency_key
                                  ORDER BY c.ord, c.id) AS rk
          FROM c
    ), qroom AS (
        SELECT qs.name,
               qs.concurrency_limit - (SELECT count(*) FROM pgqueue.jobs AS j
                                        WHERE j.state = 'running' AND j.queue = qs.name)
                   AS slots,
               floor(pgqueue.bucket_tokens(qs.tokens, qs.tokens_at, qs.rate_limit,
                                           qs.rate_burst, p_at)) AS tokens
          FROM pgqueue.queues AS qs
         WHERE qs.name IN (SELECT c.queue FROM c)
    ), troom AS (
        SELECT tl.task, tl.key_limit,
               tl.concurrency_limit - (SELECT count(*) FROM pgqueue.jobs AS j
                                        WHERE j.state = 'running' AND j.task = tl.task)
                   AS slots,
               floor(pgqueue.bucket_tokens(tl.tokens, tl.tokens_at, tl.rate_limit,
                                           tl.rate_burst, p_at)) AS tokens
          FROM pgqueue.task_limits AS tl
         WHERE tl.task IN (SELECT c.task FROM c)
    ), kroom AS (
        SELECT j.task, j.concurrency_key AS key, count(*) AS running
          FROM pgqueue.jobs AS j
         WHERE j.state = 'running'
           AND (j.task, j.concurrency_key) IN (
                   SELECT c.task, c.concurrency_key FROM c WHERE c.concurrency_key IS NOT NULL)
         GROUP BY j.task, j.concurrency_key
    ), kbucket AS (
        SELECT b.task, b.key,
               floor(pgqueue.bucket_tokens(b.tokens, b.tokens_at, tl.key_rate_limit,
                                           tl.key_rate_burst, p_at)) AS tokens
          FROM pgqueue.key_buckets AS b
          JOIN pgqueue.task_limits AS tl ON tl.task = b.task
         WHERE tl.key_rate_limit IS NOT NULL
           AND (b.task, b.key) IN (
                   SELECT c.task, c.concurrency_key FROM c WHERE c.concurrency_key IS NOT NULL)
    ), breaker AS (
        -- Tasks whose breaker is not closed may run one probe, if none is running.
        SELECT b.task,
               (b.state = 'open' AND b.open_until <= now())
               OR (b.state = 'half_open' AND NOT EXISTS (
                       SELECT 1 FROM pgqueue.jobs AS j
                        WHERE j.id = b.probe_job_id AND j.lease_token = b.probe_token
                          AND j.state = 'running')) AS may_probe
          FROM pgqueue.circuit_breakers AS b
         WHERE b.task IN (SELECT c.task FROM c) AND b.state <> 'closed'
    )
    SELECT array_agg(f.id ORDER BY f.ord, f.priority, f.run_at, f.id),
           array_agg(f.id) FILTER (WHERE f.last_place)
      INTO accepted, wake
      FROM (
    -- Accepted jobs that take the last free place under one of their concurrency limits.
    SELECT ok.id, ok.ord, ok.priority, ok.run_at,
           coalesce(count(*) OVER (PARTITION BY ok.queue) >= ok.qslots, false)
           OR coalesce(count(*) OVER (PARTITION BY ok.task) >= ok.tslots, false)
           OR coalesce(count(*) OVER (PARTITION BY ok.task, ok.concurrency_key) >= ok.kslots,
                       false)
               AS last_place
      FROM (
        SELECT r.id, r.queue, r.task, r.concurrency_key, r.ord, r.priority, r.run_at,
               qr.slots AS qslots, tr.slots AS tslots, k.slots AS kslots
          FROM ranked AS r
          LEFT JOIN qroom AS qr ON qr.name = r.queue
          LEFT JOIN troom AS tr ON tr.task = r.task
          LEFT JOIN kroom AS kr ON kr.task = r.task AND kr.key = r.concurrency_key
          LEFT JOIN kbucket AS kb ON kb.task = r.task AND kb.key = r.concurrency_key
          LEFT JOIN breaker AS br ON br.task = r.task
         CROSS JOIN LATERAL (
               -- The key's free places (NULL: no limit per key; a task without a row: 1).
               SELECT CASE WHEN r.concurrency_key IS NULL THEN NULL
                           WHEN tr.task IS NULL THEN 1 - coalesce(kr.running, 0)
                           ELSE tr.key_limit - coalesce(kr.running, 0) END AS slots) AS k
         WHERE (qr.slots IS NULL OR r.rq <= qr.slots)
           AND (qr.tokens IS NULL OR r.rq <= qr.tokens)
           AND (tr.slots IS NULL OR r.rt <= tr.slots)
           AND (tr.tokens IS NULL OR r.rt <= tr.tokens)
           AND (k.slots IS NULL OR r.rk <= k.slots)
           AND (kb.tokens IS NULL OR r.rk <= kb.tokens)
           AND (br.task IS NULL OR (br.may_probe AND r.rt = 1))
         ORDER BY r.ord, r.priority, r.run_at, r.id
         LIMIT p_limit) AS ok) AS f;

    IF accepted IS NULL THEN
        RETURN;
    END IF;
    -- Spend tokens (the rows are locked above).
    UPDATE pgqueue.queues AS qs
       SET tokens = pgqueue.bucket_tokens(qs.tokens, qs.tokens_at, qs.rate_limit,
                                          qs.rate_burst, p_at) - n.taken,
           tokens_at = p_at
      FROM (SELECT c.queue, count(*) AS taken FROM unnest(p_cands) AS c
             WHERE c.id = ANY(accepted) GROUP BY c.queue) AS n
     WHERE qs.name = n.queue AND qs.rate_limit IS NOT NULL;
    UPDATE pgqueue.task_limits AS tl
       SET tokens = pgqueue.bucket_tokens(tl.tokens, tl.tokens_at, tl.rate_limit,
                                          tl.rate_burst, p_at) - n.taken,
           tokens_at = p_at
      FROM (SELECT c.task, count(*) AS taken FROM unnest(p_cands) AS c
             WHERE c.id = ANY(accepted) GROUP BY c.task) AS n
     WHERE tl.task = n.task AND tl.rate_limit IS NOT NULL;
    UPDATE pgqueue.key_buckets AS b
       SET tokens = pgqueue.bucket_tokens(b.tokens, b.tokens_at, tl.key_rate_limit,
                                          tl.key_rate_burst, p_at) - n.taken,
           tokens_at = p_at
      FROM (SELECT c.task, c.concurrency_key AS key, count(*) AS taken
              FROM unnest(p_cands) AS c
             WHERE c.id = ANY(accepted) AND c.concurrency_key IS NOT NULL
             GROUP BY c.task, c.concurrency_key) AS n,
           pgqueue.task_limits AS tl
     WHERE b.task = n.task AND b.key = n.key AND tl.task = b.task
       AND tl.key_rate_limit IS NOT NULL;
END
$$;
