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
--
-- The parts, each a function versioned on its own (migrations/sql/functions/<name>/), so that a
-- change re-versions only the part it touches: pgqueue.claim_blocked (step 1 below),
-- pgqueue.claim_candidates and pgqueue.claim_walk (the walk per queue and mode, and the order),
-- pgqueue.claim_admit (steps 3 and 4, and spending tokens), pgqueue.claim_wait_hint,
-- pgqueue.claim_grant (the leases, fair clocks, breaker probes and the rows returned, whose
-- columns are the type pgqueue.claimed_job). Each is called once per claim (claim_walk once per
-- queue), never per row.
CREATE OR REPLACE FUNCTION pgqueue.claim(
    p_queues  text[],
    p_tasks   text[],
    p_limit   integer,
    p_lease   interval,
    p_worker  uuid,
    p_running integer[] DEFAULT NULL)
RETURNS SETOF pgqueue.claimed_job
LANGUAGE plpgsql AS $$
DECLARE
    v_at        timestamptz := clock_timestamp();
    v_weighted  boolean;
    v_fair      boolean;
    v_limited   boolean;
    v_paused    text[];
    v_blocked_q text[];
    v_blocked_t text[];
    v_bk_tasks  text[];
    v_bk_keys   text[];
    v_cands     pgqueue.claim_candidate[];
    v_accepted  bigint[];
    v_wake      bigint[];
    v_held_back boolean := false;
    v_wait_hint double precision;
    v_marker    pgqueue.claimed_job;  -- the extra row (id NULL): only throttled is set
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
        -- No limits: the best p_limit candidates, by weighted fair share when queues have
        -- weights.
        v_cands := pgqueue.claim_candidates(p_queues, p_tasks, p_limit, p_running, v_weighted,
                                            '{}', '{}', '{}', '{}');
        RETURN QUERY
        SELECT * FROM pgqueue.claim_grant(
            ARRAY(SELECT c.id FROM unnest(v_cands) WITH ORDINALITY AS c
                   ORDER BY c.ordinality LIMIT p_limit),
            p_lease, p_worker, p_queues, v_fair, false, '{}');
        IF NOT v_weighted AND NOT v_fair THEN
            -- Nothing here needs this function any more: tell the worker (throttled = -1).
            v_marker.throttled := -1;
            RETURN NEXT v_marker;
        END IF;
        RETURN;
    END IF;

    -- 1. What is already at its limit (a snapshot read; exact checks come later under locks).
    SELECT * INTO v_paused, v_blocked_q, v_blocked_t, v_bk_tasks, v_bk_keys, v_wait_hint
      FROM pgqueue.claim_blocked(p_queues, p_tasks, v_at);
    v_held_back := cardinality(v_blocked_q) > 0 OR cardinality(v_blocked_t) > 0
                 OR cardinality(v_bk_tasks) > 0;

    -- 2. Candidates: the same walk without what is blocked, in fair-share order.
    v_cands := pgqueue.claim_candidates(p_queues, p_tasks, p_limit, p_running, v_weighted,
                                        v_paused || v_blocked_q, v_blocked_t, v_bk_tasks,
                                        v_bk_keys);
    IF v_cands IS NULL THEN
        IF v_held_back THEN
            v_marker.throttled := greatest(coalesce(v_wait_hint, 0), 0);
            RETURN NEXT v_marker;
        END IF;
        RETURN;
    END IF;

    -- 3 and 4. Under locks for the limits they touch, keep what fits and spend its tokens.
    SELECT * INTO v_accepted, v_wake FROM pgqueue.claim_admit(v_cands, p_limit, v_at);
    IF coalesce(cardinality(v_accepted), 0) < cardinality(v_cands) THEN
        v_held_back := true;
    END IF;
    IF v_accepted IS NOT NULL THEN
        RETURN QUERY
        SELECT * FROM pgqueue.claim_grant(v_accepted, p_lease, p_worker, p_queues, v_fair, true,
                                          v_wake);
    END IF;
    IF v_held_back THEN
        v_wait_hint := pgqueue.claim_wait_hint(v_cands, v_at, v_wait_hint);
    END IF;
    IF v_held_back AND coalesce(cardinality(v_accepted), 0) < p_limit THEN
        v_marker.throttled := greatest(coalesce(v_wait_hint, 0), 0);
        RETURN NEXT v_marker;
    END IF;
END
$$;
