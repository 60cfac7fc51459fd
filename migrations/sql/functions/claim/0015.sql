-- Claim up to max_jobs jobs for a worker, in one transaction. Workers call it (claim_flow) only
-- while flow control applies to their queues or tasks; without any, the claim_jobs query
-- claims in one plain statement and never calls this function.
--
-- Without limits (weights and fair queues at most): per queue, walk the ready index in
-- (priority, run_at) order, or a fair queue's ranks in (priority, fair_rank) order (see
-- pgqueue.fair_rank), and the scheduled index for due jobs, skipping rows others hold (SKIP
-- LOCKED); keep the best max_jobs, by weighted fair share when queues have weights: virtual
-- time (running + rank) / weight, with the worker's running jobs per queue, so each queue gets
-- its share of the worker's slots and idle shares flow to the others.
--
-- Fair queues: each key (a job's concurrency_key) gets one job per round, whatever its backlog.
-- A fair queue's candidates take the places FIFO order would have given that queue's candidates
-- (their run_at slots, in order), so its share against other queues is as before and only the
-- order within it changes. Jobs of a fair queue without a rank (written by a path that does not
-- rank: hand-written SQL, or before the queue became fair) are found among the first max_jobs
-- of its FIFO order and come first: never later than FIFO would serve them. Each claim moves
-- the queue's clock (pgqueue.fair_clocks, per priority) to the largest rank it took.
--
-- Flow-controlled path: the same walk, leaving out queues, tasks and (task, key) pairs that are
-- already at their limit; ordered by weighted fair share when queues have weights (virtual time
-- (running + rank) / weight, using the worker's running jobs per queue). Then, for the limits
-- the candidates touch: advisory locks per concurrency limit (queue, task, task+key) in one
-- global order, row locks on token buckets (queue, task, then (task, key) buckets, created on
-- demand) and breakers in name order; a new statement (so a fresh snapshot sees every claim
-- committed by the previous holders of those locks) counts running jobs and tokens, and keeps
-- candidates within every limit. Claims that touch no limit take no lock; claims touching a
-- limit serialise only with others touching the same limit.
--
-- Per-key limits (task_limits): key_limit is the running jobs per (task, key) (NULL: none; a
-- task without a row: 1); key_rate_limit/key_rate_burst a token bucket per (task, key), a row
-- of pgqueue.key_buckets made by the first claim that needs it (a missing row is a full
-- bucket; workers delete rows that are full again: pgqueue.prune_key_buckets).
--
-- Rows have throttled = NULL. When limits held work back and fewer than max_jobs were claimed,
-- one extra row with id NULL says so; its throttled column is the seconds until a rate-limit
-- token is due (counted after this claim spent its tokens; 0 when no token is missing: a
-- concurrency limit held the work back). When no flow control applies at all, the extra row
-- has throttled = -1 (the worker goes back to the plain claim_jobs statement).
--
-- wake_on_exit: the job took the last free place under a concurrency limit (its queue's, its
-- task's, or its concurrency key's), so work arriving after it is held back by that limit
-- until a job leaves: the worker notifies the job's queue when it has written this job's
-- outcome, and held-back claimers everywhere look again at once instead of after a backoff.
--
-- meta, tags: the job's metadata and tags (NULL when it has none); last_trace: the trace
-- context (W3C traceparent) of its latest failed attempt, when that attempt ran in a traced
-- worker (its error record says it), so the new attempt's span can link to it.
CREATE OR REPLACE FUNCTION pgqueue.claim(
    p_queues  text[],
    p_tasks   text[],
    p_limit   integer,
    p_lease   interval,
    p_worker  uuid,
    p_running integer[] DEFAULT NULL)
RETURNS TABLE (id bigint, queue text, task text, args jsonb, attempts integer,
               max_attempts integer, lease_token integer, priority smallint,
               created_at timestamptz, run_at timestamptz, wants_result boolean,
               meta jsonb, tags text[], last_trace text,
               throttled double precision, wake_on_exit boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_at         timestamptz := clock_timestamp();
    v_weighted     boolean;
    v_fair         boolean;
    v_limited      boolean;
    v_paused       text[];
    v_blocked_q    text[];
    v_blocked_t    text[];
    v_bk_tasks     text[];
    v_bk_keys      text[];
    v_cands        pgqueue.claim_candidate[];
    v_accepted     bigint[];
    v_wake         bigint[];
    v_held_back    boolean := false;
    v_wait_hint    double precision;
BEGIN
    SELECT coalesce(bool_or(qs.weight IS NOT NULL), false),
           coalesce(bool_or(qs.fair), false),
           coalesce(bool_or(qs.concurrency_limit IS NOT NULL OR qs.rate_limit IS NOT NULL), false)
      INTO v_weighted, v_fair, v_limited
      FROM pgqueue.queues AS qs
     WHERE qs.name = ANY(p_queues)
       AND (qs.weight IS NOT NULL OR qs.fair OR qs.concurrency_limit IS NOT NULL
            OR qs.rate_limit IS NOT NULL);
    v_limited := v_limited
        OR EXISTS (SELECT 1 FROM pgqueue.task_limits AS tl
                    WHERE tl.task = ANY(p_tasks)
                      AND (tl.concurrency_limit IS NOT NULL OR tl.rate_limit IS NOT NULL
                           OR tl.keyed))
        OR EXISTS (SELECT 1 FROM pgqueue.circuit_breakers AS b
                    WHERE b.task = ANY(p_tasks) AND b.state <> 'closed');
    IF NOT v_limited THEN
        -- No limits: one statement, ordered by weighted fair share when queues have weights.
        RETURN QUERY
        WITH mine AS (
            SELECT q.name, coalesce(p_running[q.pos::integer], 0) AS running,
                   coalesce(qs.weight, 1)::double precision AS weight,
                   coalesce(qs.fair, false) AS fair
              FROM unnest(p_queues) WITH ORDINALITY AS q(name, pos)
              LEFT JOIN pgqueue.queues AS qs ON qs.name = q.name
             WHERE NOT coalesce(qs.paused, false)
        ), walked AS (
            SELECT m.name AS queue, m.running, m.weight, c.*
              FROM mine AS m
             CROSS JOIN LATERAL (
                   SELECT r.* FROM (
                       SELECT j.id, j.priority, j.run_at, NULL::bigint AS fair_rank
                         FROM pgqueue.jobs AS j
                        WHERE NOT m.fair AND j.queue = m.name AND j.state = 'ready'
                          AND j.task = ANY(p_tasks)
                        ORDER BY j.priority, j.run_at, j.id
                        LIMIT p_limit
                          FOR UPDATE SKIP LOCKED) AS r
                   UNION ALL
                   SELECT f.* FROM (
                       SELECT j.id, j.priority, j.run_at, j.fair_rank
                         FROM pgqueue.jobs AS j
                        WHERE m.fair AND j.queue = m.name AND j.state = 'ready'
                          AND j.fair_rank IS NOT NULL AND j.task = ANY(p_tasks)
                        ORDER BY j.priority, j.fair_rank, j.id
                        LIMIT p_limit
                          FOR UPDATE SKIP LOCKED) AS f
                   UNION ALL
                   SELECT u.* FROM (
                       SELECT j.id, j.priority, j.run_at, j.fair_rank
                         FROM pgqueue.jobs AS j
                        WHERE m.fair AND j.state = 'ready' AND j.fair_rank IS NULL
                          AND j.id IN (
                              SELECT x.id FROM (
                                  SELECT h.id, h.fair_rank FROM pgqueue.jobs AS h
                                   WHERE h.queue = m.name AND h.state = 'ready'
                                     AND h.task = ANY(p_tasks)
                                   ORDER BY h.priority, h.run_at, h.id
                                   LIMIT p_limit) AS x
                               WHERE x.fair_rank IS NULL)
                          FOR UPDATE SKIP LOCKED) AS u
                   UNION ALL
                   SELECT s.* FROM (
                       SELECT j.id, j.priority, j.run_at,
                              CASE WHEN m.fair THEN j.fair_rank END AS fair_rank
                         FROM pgqueue.jobs AS j
                        WHERE j.queue = m.name AND j.state = 'scheduled' AND j.run_at <= now()
                          AND j.task = ANY(p_tasks)
                        ORDER BY j.run_at, j.id
                        LIMIT p_limit
                          FOR UPDATE SKIP LOCKED) AS s
             ) AS c
        ), placed AS (
            SELECT w.*,
                   row_number() OVER (PARTITION BY w.queue, w.priority
                                      ORDER BY w.fair_rank NULLS FIRST, w.run_at, w.id) AS fpos,
                   row_number() OVER (PARTITION BY w.queue, w.priority
                                      ORDER BY w.run_at, w.id) AS tpos
              FROM walked AS w
        ), zipped AS (
            -- A fair queue's candidates, in fair order, take its FIFO places (see above).
            SELECT a.queue, a.running, a.weight, a.id, a.priority, b.run_at AS at, b.id AS at_id
              FROM placed AS a
              JOIN placed AS b
                ON b.queue = a.queue AND b.priority = a.priority AND b.tpos = a.fpos
        ), candidates AS MATERIALIZED (
            SELECT z.id
              FROM zipped AS z
             ORDER BY CASE WHEN v_weighted
                           THEN (z.running + row_number() OVER (
                                    PARTITION BY z.queue ORDER BY z.priority, z.at, z.at_id))
                                / z.weight END,
                      z.priority, z.at, z.at_id
             LIMIT p_limit
        ), claimed AS (
            UPDATE pgqueue.jobs AS j
               SET state = 'running',
                   attempts = j.attempts + 1,
                   lease_token = j.lease_token + 1,
                   lease_expires_at = now() + p_lease,
                   worker_id = p_worker,
                   started_at = now()
              FROM candidates AS c
             WHERE j.id = c.id
            RETURNING j.id, j.queue, j.task, j.args, j.attempts, j.max_attempts,
                      j.lease_token, j.priority, j.created_at, j.run_at,
                      j.result_ttl IS NOT NULL AS wants_result, j.meta, j.tags,
                      j.errors -> -1 ->> 'trace' AS last_trace, j.fair_rank
        ), clocked AS (
            INSERT INTO pgqueue.fair_clocks AS fc (queue, priority, clock)
            SELECT cl.queue, cl.priority, max(cl.fair_rank)
              FROM claimed AS cl
             WHERE v_fair AND cl.fair_rank IS NOT NULL
               AND cl.queue IN (SELECT m.name FROM mine AS m WHERE m.fair)
             GROUP BY cl.queue, cl.priority
             ORDER BY cl.queue, cl.priority
            ON CONFLICT ON CONSTRAINT fair_clocks_pkey DO UPDATE SET clock = excluded.clock
             WHERE fc.clock < excluded.clock
        )
        SELECT cl.id, cl.queue, cl.task, cl.args, cl.attempts, cl.max_attempts,
               cl.lease_token, cl.priority, cl.created_at, cl.run_at, cl.wants_result,
               cl.meta, cl.tags, cl.last_trace,
               NULL::double precision, false
          FROM claimed AS cl;
        IF NOT v_weighted AND NOT v_fair THEN
            -- Nothing here needs this function any more: tell the worker (throttled = -1).
            RETURN QUERY SELECT NULL::bigint, NULL::text, NULL::text, NULL::jsonb,
                                NULL::integer, NULL::integer, NULL::integer, NULL::smallint,
                                NULL::timestamptz, NULL::timestamptz, NULL::boolean,
                                NULL::jsonb, NULL::text[], NULL::text,
                                -1::double precision, NULL::boolean;
        END IF;
        RETURN;
    END IF;

    -- 1. What is already at its limit (a snapshot read; exact checks come later under locks).
    SELECT coalesce(array_agg(qs.name) FILTER (WHERE qs.paused), '{}'),
           coalesce(array_agg(qs.name) FILTER (WHERE NOT qs.paused AND (
               (qs.concurrency_limit IS NOT NULL
                AND (SELECT count(*) FROM pgqueue.jobs AS j
                      WHERE j.state = 'running' AND j.queue = qs.name) >= qs.concurrency_limit)
               OR (qs.rate_limit IS NOT NULL
                   AND pgqueue.bucket_tokens(qs.tokens, qs.tokens_at, qs.rate_limit,
                                             qs.rate_burst, v_at) < 1))), '{}'),
           min((1 - pgqueue.bucket_tokens(qs.tokens, qs.tokens_at, qs.rate_limit, qs.rate_burst,
                                          v_at)) / qs.rate_limit)
               FILTER (WHERE NOT qs.paused AND qs.rate_limit IS NOT NULL
                       AND pgqueue.bucket_tokens(qs.tokens, qs.tokens_at, qs.rate_limit,
                                                 qs.rate_burst, v_at) < 1)
      INTO v_paused, v_blocked_q, v_wait_hint
      FROM pgqueue.queues AS qs
     WHERE qs.name = ANY(p_queues);

    SELECT coalesce(array_agg(tl.task), '{}'),
           least(v_wait_hint, min((1 - pgqueue.bucket_tokens(tl.tokens, tl.tokens_at,
                                     tl.rate_limit, tl.rate_burst, v_at)) / tl.rate_limit)
                            FILTER (WHERE tl.rate_limit IS NOT NULL
                                    AND pgqueue.bucket_tokens(tl.tokens, tl.tokens_at,
                                            tl.rate_limit, tl.rate_burst, v_at) < 1))
      INTO v_blocked_t, v_wait_hint
      FROM pgqueue.task_limits AS tl
     WHERE tl.task = ANY(p_tasks)
       AND ((tl.concurrency_limit IS NOT NULL
             AND (SELECT count(*) FROM pgqueue.jobs AS j
                   WHERE j.state = 'running' AND j.task = tl.task) >= tl.concurrency_limit)
            OR (tl.rate_limit IS NOT NULL
                AND pgqueue.bucket_tokens(tl.tokens, tl.tokens_at, tl.rate_limit,
                                          tl.rate_burst, v_at) < 1));

    -- Breakers: open and cooling down, or half-open with its probe still running.
    v_blocked_t := v_blocked_t || coalesce((
        SELECT array_agg(b.task) FROM pgqueue.circuit_breakers AS b
         WHERE b.task = ANY(p_tasks)
           AND ((b.state = 'open' AND b.open_until > now())
                OR (b.state = 'half_open' AND EXISTS (
                        SELECT 1 FROM pgqueue.jobs AS j
                         WHERE j.id = b.probe_job_id AND j.lease_token = b.probe_token
                           AND j.state = 'running')))), '{}');

    -- (task, key) pairs at their key limit, or whose key bucket is empty.
    SELECT coalesce(array_agg(k.task), '{}'), coalesce(array_agg(k.key), '{}'),
           least(v_wait_hint, min(k.wait))
      INTO v_bk_tasks, v_bk_keys, v_wait_hint
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
                                              tl.key_rate_burst, v_at)) / tl.key_rate_limit
              FROM pgqueue.key_buckets AS b
              JOIN pgqueue.task_limits AS tl ON tl.task = b.task
             WHERE b.task = ANY(p_tasks) AND tl.key_rate_limit IS NOT NULL
               AND pgqueue.bucket_tokens(b.tokens, b.tokens_at, tl.key_rate_limit,
                                         tl.key_rate_burst, v_at) < 1) AS k;

    v_held_back := cardinality(v_blocked_q) > 0 OR cardinality(v_blocked_t) > 0
                 OR cardinality(v_bk_tasks) > 0;

    -- 2. Candidates: the fast path's walk without what is blocked, in fair-share order.
    WITH mine AS (
        SELECT q.name, q.pos, coalesce(p_running[q.pos::integer], 0) AS running,
               coalesce(qs.weight, 1)::double precision AS weight,
               coalesce(qs.fair, false) AS fair
          FROM unnest(p_queues) WITH ORDINALITY AS q(name, pos)
          LEFT JOIN pgqueue.queues AS qs ON qs.name = q.name
         WHERE q.name <> ALL(v_paused) AND q.name <> ALL(v_blocked_q)
    ), walked AS (
        SELECT m.name AS queue, m.running, m.weight, c.*
          FROM mine AS m
         CROSS JOIN LATERAL (
               SELECT r.* FROM (
                   SELECT j.id, j.task, j.concurrency_key, j.priority, j.run_at,
                          NULL::bigint AS fair_rank
                     FROM pgqueue.jobs AS j
                    WHERE NOT m.fair AND j.queue = m.name AND j.state = 'ready'
                      AND j.task = ANY(p_tasks) AND j.task <> ALL(v_blocked_t)
                      AND (j.concurrency_key IS NULL OR NOT EXISTS (
                               SELECT 1 FROM unnest(v_bk_tasks, v_bk_keys) AS bk(task, key)
                                WHERE bk.task = j.task AND bk.key = j.concurrency_key))
                    ORDER BY j.priority, j.run_at, j.id
                    LIMIT p_limit
                      FOR UPDATE SKIP LOCKED) AS r
               UNION ALL
               SELECT f.* FROM (
                   SELECT j.id, j.task, j.concurrency_key, j.priority, j.run_at, j.fair_rank
                     FROM pgqueue.jobs AS j
                    WHERE m.fair AND j.queue = m.name AND j.state = 'ready'
                      AND j.fair_rank IS NOT NULL
                      AND j.task = ANY(p_tasks) AND j.task <> ALL(v_blocked_t)
                      AND (j.concurrency_key IS NULL OR NOT EXISTS (
                               SELECT 1 FROM unnest(v_bk_tasks, v_bk_keys) AS bk(task, key)
                                WHERE bk.task = j.task AND bk.key = j.concurrency_key))
                    ORDER BY j.priority, j.fair_rank, j.id
                    LIMIT p_limit
                      FOR UPDATE SKIP LOCKED) AS f
               UNION ALL
               SELECT u.* FROM (
                   SELECT j.id, j.task, j.concurrency_key, j.priority, j.run_at, j.fair_rank
                     FROM pgqueue.jobs AS j
                    WHERE m.fair AND j.state = 'ready' AND j.fair_rank IS NULL
                      AND j.id IN (
                          SELECT x.id FROM (
                              SELECT h.id, h.fair_rank FROM pgqueue.jobs AS h
                               WHERE h.queue = m.name AND h.state = 'ready'
                                 AND h.task = ANY(p_tasks)
                               ORDER BY h.priority, h.run_at, h.id
                               LIMIT p_limit) AS x
                           WHERE x.fair_rank IS NULL)
                      AND j.task <> ALL(v_blocked_t)
                      AND (j.concurrency_key IS NULL OR NOT EXISTS (
                               SELECT 1 FROM unnest(v_bk_tasks, v_bk_keys) AS bk(task, key)
                                WHERE bk.task = j.task AND bk.key = j.concurrency_key))
                      FOR UPDATE SKIP LOCKED) AS u
               UNION ALL
               SELECT s.* FROM (
                   SELECT j.id, j.task, j.concurrency_key, j.priority, j.run_at,
                          CASE WHEN m.fair THEN j.fair_rank END AS fair_rank
                     FROM pgqueue.jobs AS j
                    WHERE j.queue = m.name AND j.state = 'scheduled' AND j.run_at <= now()
                      AND j.task = ANY(p_tasks) AND j.task <> ALL(v_blocked_t)
                      AND (j.concurrency_key IS NULL OR NOT EXISTS (
                               SELECT 1 FROM unnest(v_bk_tasks, v_bk_keys) AS bk(task, key)
                                WHERE bk.task = j.task AND bk.key = j.concurrency_key))
                    ORDER BY j.run_at, j.id
                    LIMIT p_limit
                      FOR UPDATE SKIP LOCKED) AS s
         ) AS c
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
               CASE WHEN v_weighted
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

    IF v_cands IS NULL THEN
        IF v_held_back THEN
            RETURN QUERY SELECT NULL::bigint, NULL::text, NULL::text, NULL::jsonb, NULL::integer,
                                NULL::integer, NULL::integer, NULL::smallint,
                                NULL::timestamptz, NULL::timestamptz, NULL::boolean,
                                NULL::jsonb, NULL::text[], NULL::text,
                                greatest(coalesce(v_wait_hint, 0), 0), NULL::boolean;
        END IF;
        RETURN;
    END IF;

    -- 3. Lock the limits these candidates touch: concurrency limits as advisory locks in one
    --    global order, then buckets and breakers by name. A key bucket that does not exist
    --    yet is made here (a full bucket), so the lock is never on a missing row; ON CONFLICT
    --    DO UPDATE ... WHERE false locks an existing row without writing it.
    PERFORM pg_advisory_xact_lock(1885827441, l.k)
       FROM (SELECT DISTINCT hashtext(x.name) AS k FROM (
                 SELECT 'queue:' || c.queue AS name
                   FROM unnest(v_cands) AS c
                   JOIN pgqueue.queues AS qs ON qs.name = c.queue
                  WHERE qs.concurrency_limit IS NOT NULL
                 UNION ALL
                 SELECT 'task:' || c.task
                   FROM unnest(v_cands) AS c
                   JOIN pgqueue.task_limits AS tl ON tl.task = c.task
                  WHERE tl.concurrency_limit IS NOT NULL
                 UNION ALL
                 SELECT 'key:' || c.task || chr(31) || c.concurrency_key
                   FROM unnest(v_cands) AS c
                   LEFT JOIN pgqueue.task_limits AS tl ON tl.task = c.task
                  WHERE c.concurrency_key IS NOT NULL
                    AND (tl.task IS NULL OR tl.key_limit IS NOT NULL)) AS x
             ORDER BY 1) AS l;
    PERFORM 1 FROM pgqueue.queues AS qs
     WHERE qs.name IN (SELECT c.queue FROM unnest(v_cands) AS c) AND qs.rate_limit IS NOT NULL
     ORDER BY qs.name
       FOR NO KEY UPDATE;
    PERFORM 1 FROM pgqueue.task_limits AS tl
     WHERE tl.task IN (SELECT c.task FROM unnest(v_cands) AS c) AND tl.rate_limit IS NOT NULL
     ORDER BY tl.task
       FOR NO KEY UPDATE;
    INSERT INTO pgqueue.key_buckets AS b (task, key)
    SELECT DISTINCT c.task, c.concurrency_key
      FROM unnest(v_cands) AS c
      JOIN pgqueue.task_limits AS tl ON tl.task = c.task
     WHERE c.concurrency_key IS NOT NULL AND tl.key_rate_limit IS NOT NULL
     ORDER BY 1, 2
    ON CONFLICT ON CONSTRAINT key_buckets_pkey DO UPDATE SET tokens = b.tokens WHERE false;
    PERFORM 1 FROM pgqueue.circuit_breakers AS b
     WHERE b.task IN (SELECT c.task FROM unnest(v_cands) AS c) AND b.state <> 'closed'
     ORDER BY b.task
       FOR NO KEY UPDATE;

    -- 4. Under those locks, with a fresh snapshot: keep what fits every limit. A candidate's
    --    rank among all candidates sharing a limit must be within that limit's room (ranks
    --    count candidates another limit rejects, so this never exceeds a limit; what it
    --    leaves out is claimed next time).
    WITH c AS (
        SELECT * FROM unnest(v_cands)
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
                                           qs.rate_burst, v_at)) AS tokens
          FROM pgqueue.queues AS qs
         WHERE qs.name IN (SELECT c.queue FROM c)
    ), troom AS (
        SELECT tl.task, tl.key_limit,
               tl.concurrency_limit - (SELECT count(*) FROM pgqueue.jobs AS j
                                        WHERE j.state = 'running' AND j.task = tl.task)
                   AS slots,
               floor(pgqueue.bucket_tokens(tl.tokens, tl.tokens_at, tl.rate_limit,
                                           tl.rate_burst, v_at)) AS tokens
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
                                           tl.key_rate_burst, v_at)) AS tokens
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
    SELECT array_agg(f.id), array_agg(f.id) FILTER (WHERE f.last_place)
      INTO v_accepted, v_wake
      FROM (
    -- Accepted jobs that take the last free place under one of their concurrency limits.
    SELECT ok.id,
           coalesce(count(*) OVER (PARTITION BY ok.queue) >= ok.qslots, false)
           OR coalesce(count(*) OVER (PARTITION BY ok.task) >= ok.tslots, false)
           OR coalesce(count(*) OVER (PARTITION BY ok.task, ok.concurrency_key) >= ok.kslots,
                       false)
               AS last_place
      FROM (
        SELECT r.id, r.queue, r.task, r.concurrency_key, qr.slots AS qslots, tr.slots AS tslots,
               k.slots AS kslots
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

    IF coalesce(cardinality(v_accepted), 0) < cardinality(v_cands) THEN
        v_held_back := true;
    END IF;

    IF v_accepted IS NOT NULL THEN
        -- Spend tokens (the rows are locked above).
        UPDATE pgqueue.queues AS qs
           SET tokens = pgqueue.bucket_tokens(qs.tokens, qs.tokens_at, qs.rate_limit,
                                              qs.rate_burst, v_at) - n.taken,
               tokens_at = v_at
          FROM (SELECT c.queue, count(*) AS taken FROM unnest(v_cands) AS c
                 WHERE c.id = ANY(v_accepted) GROUP BY c.queue) AS n
         WHERE qs.name = n.queue AND qs.rate_limit IS NOT NULL;
        UPDATE pgqueue.task_limits AS tl
           SET tokens = pgqueue.bucket_tokens(tl.tokens, tl.tokens_at, tl.rate_limit,
                                              tl.rate_burst, v_at) - n.taken,
               tokens_at = v_at
          FROM (SELECT c.task, count(*) AS taken FROM unnest(v_cands) AS c
                 WHERE c.id = ANY(v_accepted) GROUP BY c.task) AS n
         WHERE tl.task = n.task AND tl.rate_limit IS NOT NULL;
        UPDATE pgqueue.key_buckets AS b
           SET tokens = pgqueue.bucket_tokens(b.tokens, b.tokens_at, tl.key_rate_limit,
                                              tl.key_rate_burst, v_at) - n.taken,
               tokens_at = v_at
          FROM (SELECT c.task, c.concurrency_key AS key, count(*) AS taken
                  FROM unnest(v_cands) AS c
                 WHERE c.id = ANY(v_accepted) AND c.concurrency_key IS NOT NULL
                 GROUP BY c.task, c.concurrency_key) AS n,
               pgqueue.task_limits AS tl
         WHERE b.task = n.task AND b.key = n.key AND tl.task = b.task
           AND tl.key_rate_limit IS NOT NULL;

        RETURN QUERY
        WITH claimed AS (
            UPDATE pgqueue.jobs AS j
               SET state = 'running',
                   attempts = j.attempts + 1,
                   lease_token = j.lease_token + 1,
                   lease_expires_at = now() + p_lease,
                   worker_id = p_worker,
                   started_at = now()
             WHERE j.id = ANY(v_accepted)
            RETURNING j.id, j.queue, j.task, j.args, j.attempts, j.max_attempts,
                      j.lease_token, j.priority, j.created_at, j.run_at,
                      j.result_ttl IS NOT NULL AS wants_result, j.meta, j.tags,
                      j.errors -> -1 ->> 'trace' AS last_trace, j.fair_rank
        ), probes AS (
            -- A claimed job of a task whose breaker is not closed is its probe.
            UPDATE pgqueue.circuit_breakers AS b
               SET state = 'half_open', probe_job_id = cl.id, probe_token = cl.lease_token,
                   updated_at = now()
              FROM claimed AS cl
             WHERE b.task = cl.task AND b.state <> 'closed'
            RETURNING b.task
        ), clocked AS (
            INSERT INTO pgqueue.fair_clocks AS fc (queue, priority, clock)
            SELECT cl.queue, cl.priority, max(cl.fair_rank)
              FROM claimed AS cl
             WHERE v_fair AND cl.fair_rank IS NOT NULL
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
               NULL::double precision, cl.id = ANY(v_wake)
          FROM claimed AS cl;
    END IF;

    IF v_held_back THEN
        -- When the next token is due in the buckets these candidates wait for, counted after
        -- this claim spent its tokens (the snapshot read above saw only buckets already empty).
        SELECT least(v_wait_hint,
                     min((1 - pgqueue.bucket_tokens(qs.tokens, qs.tokens_at, qs.rate_limit,
                                                    qs.rate_burst, v_at)) / qs.rate_limit))
          INTO v_wait_hint
          FROM pgqueue.queues AS qs
         WHERE qs.name IN (SELECT c.queue FROM unnest(v_cands) AS c)
           AND qs.rate_limit IS NOT NULL
           AND pgqueue.bucket_tokens(qs.tokens, qs.tokens_at, qs.rate_limit, qs.rate_burst,
                                     v_at) < 1;
        SELECT least(v_wait_hint,
                     min((1 - pgqueue.bucket_tokens(tl.tokens, tl.tokens_at, tl.rate_limit,
                                                    tl.rate_burst, v_at)) / tl.rate_limit))
          INTO v_wait_hint
          FROM pgqueue.task_limits AS tl
         WHERE tl.task IN (SELECT c.task FROM unnest(v_cands) AS c)
           AND tl.rate_limit IS NOT NULL
           AND pgqueue.bucket_tokens(tl.tokens, tl.tokens_at, tl.rate_limit, tl.rate_burst,
                                     v_at) < 1;
        SELECT least(v_wait_hint,
                     min((1 - pgqueue.bucket_tokens(b.tokens, b.tokens_at, tl.key_rate_limit,
                                                    tl.key_rate_burst, v_at))
                         / tl.key_rate_limit))
          INTO v_wait_hint
          FROM pgqueue.key_buckets AS b
          JOIN pgqueue.task_limits AS tl ON tl.task = b.task
         WHERE (b.task, b.key) IN (SELECT c.task, c.concurrency_key FROM unnest(v_cands) AS c
                                    WHERE c.concurrency_key IS NOT NULL)
           AND tl.key_rate_limit IS NOT NULL
           AND pgqueue.bucket_tokens(b.tokens, b.tokens_at, tl.key_rate_limit,
                                     tl.key_rate_burst, v_at) < 1;
    END IF;

    IF v_held_back AND coalesce(cardinality(v_accepted), 0) < p_limit THEN
        RETURN QUERY SELECT NULL::bigint, NULL::text, NULL::text, NULL::jsonb, NULL::integer,
                            NULL::integer, NULL::integer, NULL::smallint, NULL::timestamptz,
                            NULL::timestamptz, NULL::boolean, NULL::jsonb, NULL::text[],
                            NULL::text, greatest(coalesce(v_wait_hint, 0), 0), NULL::boolean;
    END IF;
END
$$;
