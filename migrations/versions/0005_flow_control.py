"""Flow control: per-queue and per-task limits, fair shares, concurrency keys, rate limits,
circuit breakers, kept idempotency keys, backpressure, cron schedules, the claim function.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None


UPGRADE = r"""
-- ---------------------------------------------------------------------------------------------
-- Per-queue settings (a queue still needs no row until someone configures it).
--   weight            share of a worker's slots when several queues have work (fair sharing);
--                     NULL: the queue takes part in plain priority order
--   max_depth         enqueue fails (or waits) while this many jobs wait in the queue
--   concurrency_limit jobs of this queue running at once, across every worker
--   rate_limit/burst  a token bucket (jobs started per second, bucket size); tokens/tokens_at
--                     are the bucket's state, changed only by claims
-- ---------------------------------------------------------------------------------------------
ALTER TABLE pgqueue.queues
    ADD COLUMN weight            integer CHECK (weight BETWEEN 1 AND 1000000),
    ADD COLUMN max_depth         integer CHECK (max_depth >= 1),
    ADD COLUMN concurrency_limit integer CHECK (concurrency_limit >= 1),
    ADD COLUMN rate_limit        double precision CHECK (rate_limit > 0),
    ADD COLUMN rate_burst        double precision CHECK (rate_burst >= 1),
    ADD COLUMN tokens            double precision,
    ADD COLUMN tokens_at         timestamptz;

-- Per-task limits. Rows come from task declarations (synced by workers at start-up,
-- from_code = true) or from operators (`pgq task set`, SQL).
CREATE TABLE pgqueue.task_limits (
    task              text        PRIMARY KEY CHECK (length(task) BETWEEN 1 AND 200),
    concurrency_limit integer     CHECK (concurrency_limit >= 1),
    -- at most this many running jobs of this task per concurrency_key
    key_limit         integer     NOT NULL DEFAULT 1 CHECK (key_limit >= 1),
    -- set by the first enqueue of a job of this task with a concurrency_key: from then on the
    -- claim checks keys for this task
    keyed             boolean     NOT NULL DEFAULT false,
    rate_limit        double precision CHECK (rate_limit > 0),
    rate_burst        double precision CHECK (rate_burst >= 1),
    tokens            double precision,
    tokens_at         timestamptz,
    from_code         boolean     NOT NULL DEFAULT false,
    updated_at        timestamptz NOT NULL DEFAULT now()
);

-- Circuit breakers, one per task that declares one. closed: jobs run; open: the claim skips the
-- task until open_until; then one probe job may run (half_open, probe_job_id/probe_token); its
-- success closes the breaker, its failure opens it again.
CREATE TABLE pgqueue.circuit_breakers (
    task              text        PRIMARY KEY,
    failure_threshold double precision NOT NULL CHECK (failure_threshold > 0 AND
                                                       failure_threshold <= 1),
    min_calls         integer     NOT NULL CHECK (min_calls >= 1),
    window_length     interval    NOT NULL CHECK (window_length > interval '0'),
    cooldown          interval    NOT NULL CHECK (cooldown > interval '0'),
    state             text        NOT NULL DEFAULT 'closed'
                      CHECK (state IN ('closed', 'open', 'half_open')),
    window_start      timestamptz NOT NULL DEFAULT now(),
    successes         integer     NOT NULL DEFAULT 0,
    failures          integer     NOT NULL DEFAULT 0,
    opened_at         timestamptz,
    open_until        timestamptz,
    probe_job_id      bigint,
    probe_token       integer,
    trips             bigint      NOT NULL DEFAULT 0,
    updated_at        timestamptz NOT NULL DEFAULT now()
);

-- ---------------------------------------------------------------------------------------------
-- Jobs: concurrency keys and uniqueness after completion.
-- ---------------------------------------------------------------------------------------------
ALTER TABLE pgqueue.jobs
    ADD COLUMN concurrency_key text CHECK (length(concurrency_key) BETWEEN 1 AND 1000),
    -- keep the idempotency key this long after the job finished in one of unique_states
    ADD COLUMN unique_for      interval CHECK (unique_for > interval '0'),
    ADD COLUMN unique_states   text[]
               CHECK (unique_states <@ ARRAY['succeeded', 'dead', 'cancelled']);

-- Keys of finished jobs, kept until expires_at: an enqueue with such a key returns the finished
-- job's id instead of creating a new one. Expired rows are ignored and pruned by workers.
CREATE TABLE pgqueue.idempotency_keys (
    key         text        PRIMARY KEY,
    job_id      bigint      NOT NULL,
    queue       text        NOT NULL,
    task        text        NOT NULL,
    state       text        NOT NULL CHECK (state IN ('succeeded', 'dead', 'cancelled')),
    finished_at timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);
CREATE INDEX idempotency_keys_expires_at_idx ON pgqueue.idempotency_keys (expires_at);

-- A job that keeps its key leaves pgqueue.jobs by a statement that also wrote where it went
-- (dead_letters, job_history, or nowhere: succeeded). AFTER ROW triggers run at the end of that
-- statement, so they see its other effects. Jobs without unique_for never fire this.
CREATE FUNCTION pgqueue.keep_finished_key() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    final_state text;
BEGIN
    -- Succeeded jobs are deleted while running (ack); a waiting job deleted without a trace
    -- (an enqueue taking back its duplicate, an operator's DELETE) keeps nothing.
    final_state := CASE
        WHEN EXISTS (SELECT 1 FROM pgqueue.dead_letters AS d WHERE d.id = OLD.id) THEN 'dead'
        WHEN EXISTS (SELECT 1 FROM pgqueue.job_history AS h
                      WHERE h.id = OLD.id AND h.state = 'cancelled') THEN 'cancelled'
        WHEN OLD.state = 'running' THEN 'succeeded' END;
    IF final_state = ANY(coalesce(OLD.unique_states, ARRAY['succeeded'])) THEN
        INSERT INTO pgqueue.idempotency_keys AS k
            (key, job_id, queue, task, state, expires_at)
        VALUES (OLD.idempotency_key, OLD.id, OLD.queue, OLD.task, final_state,
                now() + OLD.unique_for)
        ON CONFLICT (key) DO UPDATE
           SET job_id = excluded.job_id, queue = excluded.queue, task = excluded.task,
               state = excluded.state, finished_at = excluded.finished_at,
               expires_at = excluded.expires_at;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER jobs_keep_finished_key
    AFTER DELETE ON pgqueue.jobs
    FOR EACH ROW
    WHEN (OLD.unique_for IS NOT NULL AND OLD.idempotency_key IS NOT NULL)
    EXECUTE FUNCTION pgqueue.keep_finished_key();

-- ---------------------------------------------------------------------------------------------
-- Enqueue: one function, now with concurrency keys, kept keys and backpressure.
-- ---------------------------------------------------------------------------------------------
DROP FUNCTION pgqueue.enqueue(text, jsonb, text, integer, timestamptz, integer, text);
DROP FUNCTION pgqueue.enqueue_job(text, jsonb, text, integer, timestamptz, integer, text);

-- Jobs waiting in a queue, counted no further than `up_to` (so a bounded queue's check costs at
-- most max_depth index entries, whatever the backlog).
CREATE FUNCTION pgqueue.queue_depth_up_to(queue_name text, up_to integer)
RETURNS integer
LANGUAGE sql STABLE AS $$
    SELECT count(*)::integer FROM (
        SELECT 1 FROM pgqueue.jobs AS j
         WHERE j.queue = queue_name AND j.state IN ('ready', 'scheduled')
         LIMIT up_to) AS waiting
$$;

-- Backpressure for single-job enqueue: may one more job go into this bounded queue?
-- Counting costs up to max_depth index entries, so a connection that found room keeps a small
-- allowance (a tenth of the room, for at most a second, in a session setting) and counts
-- again when it is spent: max_depth is a soft bound that concurrent producers may overshoot
-- by at most a tenth of the room each, never a runaway.
CREATE FUNCTION pgqueue.take_queue_room(queue_name text, max_depth integer)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    setting text := 'pgqueue.room_' || md5(queue_name);
    cached  text := current_setting(setting, true);
    now_s   double precision := extract(epoch FROM clock_timestamp());
    since   double precision;
    allowed integer;
    waiting integer;
BEGIN
    IF coalesce(cached, '') <> '' THEN
        since := split_part(cached, ':', 1)::double precision;
        allowed := split_part(cached, ':', 2)::integer;
        IF since > now_s - 1 AND allowed > 0 THEN
            PERFORM set_config(setting, since || ':' || (allowed - 1), false);
            RETURN true;
        END IF;
    END IF;
    waiting := pgqueue.queue_depth_up_to(queue_name, max_depth);
    IF waiting >= max_depth THEN
        PERFORM set_config(setting, '', false);
        RETURN false;
    END IF;
    PERFORM set_config(setting, now_s || ':' || ((max_depth - waiting) / 10 - 1), false);
    RETURN true;
END
$$;

-- Mark a task as having keyed jobs (the claim then checks its keys). Writes only once per task.
CREATE FUNCTION pgqueue.mark_keyed(task_names text[])
RETURNS void
LANGUAGE sql AS $$
    INSERT INTO pgqueue.task_limits (task, keyed)
    SELECT DISTINCT t, true FROM unnest(task_names) AS t
     WHERE NOT EXISTS (SELECT 1 FROM pgqueue.task_limits AS l WHERE l.task = t)
    ON CONFLICT (task) DO NOTHING;
    UPDATE pgqueue.task_limits AS l SET keyed = true, updated_at = now()
     WHERE l.task = ANY(task_names) AND NOT l.keyed;
$$;

-- Enqueue one job; the single source of truth for single-job enqueue (Python calls it too).
-- With an idempotency key, an existing job holding the key is returned (created = false): a
-- live one, or a finished one whose key is kept (unique_for). A queue at its max_depth raises
-- SQLSTATE PGQ01 (unless the key matched an existing job).
CREATE FUNCTION pgqueue.enqueue_job(
    task            text,
    args            jsonb       DEFAULT '{}'::jsonb,
    queue           text        DEFAULT 'default',
    priority        integer     DEFAULT 0,
    run_at          timestamptz DEFAULT NULL,
    max_attempts    integer     DEFAULT 5,
    idempotency_key text        DEFAULT NULL,
    concurrency_key text        DEFAULT NULL,
    unique_for      interval    DEFAULT NULL,
    unique_states   text[]      DEFAULT NULL,
    OUT id bigint,
    OUT created boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    due   timestamptz := coalesce(enqueue_job.run_at, now());
    limit_depth integer;
BEGIN
    SELECT qs.max_depth INTO limit_depth FROM pgqueue.queues AS qs
     WHERE qs.name = enqueue_job.queue;
    IF enqueue_job.concurrency_key IS NOT NULL THEN
        PERFORM pgqueue.mark_keyed(ARRAY[enqueue_job.task]);
    END IF;
    LOOP
        IF enqueue_job.idempotency_key IS NOT NULL THEN
            SELECT k.job_id INTO id FROM pgqueue.idempotency_keys AS k
             WHERE k.key = enqueue_job.idempotency_key AND k.expires_at > now();
            IF id IS NOT NULL THEN
                created := false;
                RETURN;
            END IF;
        END IF;
        IF limit_depth IS NOT NULL AND NOT pgqueue.take_queue_room(enqueue_job.queue,
                                                                    limit_depth) THEN
            SELECT j.id INTO id FROM pgqueue.jobs AS j
             WHERE j.idempotency_key = enqueue_job.idempotency_key;
            IF id IS NOT NULL THEN
                created := false;
                RETURN;
            END IF;
            RAISE EXCEPTION 'queue % is full (max_depth %)',
                quote_literal(enqueue_job.queue), limit_depth
                USING ERRCODE = 'PGQ01',
                      HINT = 'wait for workers to catch up, or raise the queue''s max_depth';
        END IF;
        INSERT INTO pgqueue.jobs AS j
            (queue, task, args, priority, run_at, state, max_attempts, idempotency_key,
             concurrency_key, unique_for, unique_states)
        VALUES (enqueue_job.queue, enqueue_job.task, coalesce(enqueue_job.args, '{}'::jsonb),
                enqueue_job.priority, due,
                CASE WHEN due > now() THEN 'scheduled' ELSE 'ready' END,
                enqueue_job.max_attempts, enqueue_job.idempotency_key,
                enqueue_job.concurrency_key, enqueue_job.unique_for, enqueue_job.unique_states)
        ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING j.id INTO id;
        IF id IS NOT NULL THEN
            created := true;
            IF enqueue_job.idempotency_key IS NOT NULL THEN
                -- The previous holder may have finished (and kept its key) between the check
                -- above and our insert; this statement's newer snapshot sees it. Take ours back.
                DECLARE
                    kept bigint;
                BEGIN
                    SELECT k.job_id INTO kept FROM pgqueue.idempotency_keys AS k
                     WHERE k.key = enqueue_job.idempotency_key AND k.expires_at > now();
                    IF kept IS NOT NULL THEN
                        DELETE FROM pgqueue.jobs AS j WHERE j.id = enqueue_job.id;
                        id := kept;
                        created := false;
                    END IF;
                END;
            END IF;
            RETURN;
        END IF;
        -- A live job holds the key. This statement takes a new snapshot, so it sees a
        -- concurrent enqueuer's job as soon as that one committed.
        SELECT j.id INTO id FROM pgqueue.jobs AS j
         WHERE j.idempotency_key = enqueue_job.idempotency_key;
        IF id IS NOT NULL THEN
            created := false;
            RETURN;
        END IF;
        -- The holder finished between the two statements: look again.
    END LOOP;
END
$$;

-- Shorthand for psql: SELECT pgqueue.enqueue('reports.build', '{"month": "2026-11"}');
CREATE FUNCTION pgqueue.enqueue(
    task            text,
    args            jsonb       DEFAULT '{}'::jsonb,
    queue           text        DEFAULT 'default',
    priority        integer     DEFAULT 0,
    run_at          timestamptz DEFAULT NULL,
    max_attempts    integer     DEFAULT 5,
    idempotency_key text        DEFAULT NULL,
    concurrency_key text        DEFAULT NULL)
RETURNS bigint
LANGUAGE sql AS $$
    SELECT e.id FROM pgqueue.enqueue_job(task, args, queue, priority, run_at, max_attempts,
                                         idempotency_key, concurrency_key) AS e
$$;

-- ---------------------------------------------------------------------------------------------
-- The claim.
-- ---------------------------------------------------------------------------------------------

-- A token bucket's content at time `at` (full when never used).
CREATE FUNCTION pgqueue.bucket_tokens(tokens double precision, tokens_at timestamptz,
                                      rate double precision, burst double precision,
                                      at timestamptz)
RETURNS double precision
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN tokens IS NULL OR tokens_at IS NULL THEN coalesce(burst, rate)
                ELSE least(coalesce(burst, rate),
                           tokens + rate * greatest(0, extract(epoch FROM at - tokens_at)))
           END
$$;

-- Does flow control apply to a claim from these queues for these tasks? (plpgsql so that its
-- plan is cached: the claim_jobs query calls it on every claim.)
-- A SQL function (not plpgsql) so the planner inlines it into the claim as three cheap
-- one-time checks, instead of a function call per claim.
CREATE FUNCTION pgqueue.flow_controlled(queues text[], tasks text[])
RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM pgqueue.queues AS qs
                    WHERE qs.name = ANY(queues)
                      AND (qs.weight IS NOT NULL OR qs.concurrency_limit IS NOT NULL
                           OR qs.rate_limit IS NOT NULL))
        OR EXISTS (SELECT 1 FROM pgqueue.task_limits AS tl
                    WHERE tl.task = ANY(tasks)
                      AND (tl.concurrency_limit IS NOT NULL OR tl.rate_limit IS NOT NULL
                           OR tl.keyed))
        OR EXISTS (SELECT 1 FROM pgqueue.circuit_breakers AS b
                    WHERE b.task = ANY(tasks) AND b.state <> 'closed')
$$;

CREATE TYPE pgqueue.claim_candidate AS (
    id              bigint,
    queue           text,
    task            text,
    concurrency_key text,
    priority        smallint,
    run_at          timestamptz,
    ord             double precision
);

-- Claim up to max_jobs jobs for a worker, in one transaction. Workers call it (claim_flow) only
-- while flow control applies to their queues or tasks; without any, the claim_jobs query
-- claims in one plain statement and never calls this function.
--
-- Without limits (weights at most): per queue, walk the ready index in (priority, run_at)
-- order and the scheduled index for due jobs, skipping rows others hold (SKIP LOCKED); keep the
-- best max_jobs, by weighted fair share when queues have weights: virtual time
-- (running + rank) / weight, with the worker's running jobs per queue, so each queue gets its
-- share of the worker's slots and idle shares flow to the others.
--
-- Flow-controlled path: the same walk, leaving out queues, tasks and (task, key) pairs that are
-- already at their limit; ordered by weighted fair share when queues have weights (virtual time
-- (running + rank) / weight, using the worker's running jobs per queue). Then, for the limits
-- the candidates touch: advisory locks per concurrency limit (queue, task, task+key) in one
-- global order, row locks on token buckets and breakers in name order; a new statement (so a
-- fresh snapshot sees every claim committed by the previous holders of those locks) counts
-- running jobs and tokens, and keeps candidates within every limit. Claims that touch no limit
-- take no lock; claims touching a limit serialise only with others touching the same limit.
--
-- Rows have throttled = NULL. When limits held work back and fewer than max_jobs were claimed,
-- one extra row with id NULL says so; its throttled column is the seconds until a rate-limit
-- token is due (0 when unknown). When no flow control applies at all, the extra row has
-- throttled = -1 (the worker goes back to the plain claim_jobs statement).
CREATE FUNCTION pgqueue.claim(
    p_queues  text[],
    p_tasks   text[],
    p_limit   integer,
    p_lease   interval,
    p_worker  uuid,
    p_running integer[] DEFAULT NULL)
RETURNS TABLE (id bigint, queue text, task text, args jsonb, attempts integer,
               max_attempts integer, lease_token integer, priority smallint,
               created_at timestamptz, run_at timestamptz, wants_result boolean,
               throttled double precision)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_at         timestamptz := clock_timestamp();
    v_weighted     boolean;
    v_limited      boolean;
    v_paused       text[];
    v_blocked_q    text[];
    v_blocked_t    text[];
    v_bk_tasks     text[];
    v_bk_keys      text[];
    v_cands        pgqueue.claim_candidate[];
    v_accepted     bigint[];
    v_held_back    boolean := false;
    v_wait_hint    double precision;
BEGIN
    SELECT coalesce(bool_or(qs.weight IS NOT NULL), false),
           coalesce(bool_or(qs.concurrency_limit IS NOT NULL OR qs.rate_limit IS NOT NULL), false)
      INTO v_weighted, v_limited
      FROM pgqueue.queues AS qs
     WHERE qs.name = ANY(p_queues)
       AND (qs.weight IS NOT NULL OR qs.concurrency_limit IS NOT NULL
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
                   coalesce(qs.weight, 1)::double precision AS weight
              FROM unnest(p_queues) WITH ORDINALITY AS q(name, pos)
              LEFT JOIN pgqueue.queues AS qs ON qs.name = q.name
             WHERE NOT coalesce(qs.paused, false)
        ), walked AS (
            SELECT m.name AS queue, m.running, m.weight, c.*
              FROM mine AS m
             CROSS JOIN LATERAL (
                   SELECT r.* FROM (
                       SELECT j.id, j.priority, j.run_at
                         FROM pgqueue.jobs AS j
                        WHERE j.queue = m.name AND j.state = 'ready' AND j.task = ANY(p_tasks)
                        ORDER BY j.priority, j.run_at, j.id
                        LIMIT p_limit
                          FOR UPDATE SKIP LOCKED) AS r
                   UNION ALL
                   SELECT s.* FROM (
                       SELECT j.id, j.priority, j.run_at
                         FROM pgqueue.jobs AS j
                        WHERE j.queue = m.name AND j.state = 'scheduled' AND j.run_at <= now()
                          AND j.task = ANY(p_tasks)
                        ORDER BY j.run_at, j.id
                        LIMIT p_limit
                          FOR UPDATE SKIP LOCKED) AS s
             ) AS c
        ), candidates AS MATERIALIZED (
            SELECT w.id
              FROM walked AS w
             ORDER BY CASE WHEN v_weighted
                           THEN (w.running + row_number() OVER (
                                    PARTITION BY w.queue ORDER BY w.priority, w.run_at, w.id))
                                / w.weight END,
                      w.priority, w.run_at, w.id
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
                      j.result_ttl IS NOT NULL
        )
        SELECT cl.*, NULL::double precision FROM claimed AS cl;
        IF NOT v_weighted THEN
            -- Nothing here needs this function any more: tell the worker (throttled = -1).
            RETURN QUERY SELECT NULL::bigint, NULL::text, NULL::text, NULL::jsonb,
                                NULL::integer, NULL::integer, NULL::integer, NULL::smallint,
                                NULL::timestamptz, NULL::timestamptz, NULL::boolean,
                                -1::double precision;
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

    -- (task, key) pairs at their key limit.
    SELECT coalesce(array_agg(k.task), '{}'), coalesce(array_agg(k.key), '{}')
      INTO v_bk_tasks, v_bk_keys
      FROM (SELECT j.task, j.concurrency_key AS key, count(*) AS n
              FROM pgqueue.jobs AS j
             WHERE j.state = 'running' AND j.concurrency_key IS NOT NULL
               AND j.task = ANY(p_tasks)
             GROUP BY j.task, j.concurrency_key) AS k
      LEFT JOIN pgqueue.task_limits AS tl ON tl.task = k.task
     WHERE k.n >= coalesce(tl.key_limit, 1);

    v_held_back := cardinality(v_blocked_q) > 0 OR cardinality(v_blocked_t) > 0
                 OR cardinality(v_bk_tasks) > 0;

    -- 2. Candidates: the fast path's walk without what is blocked, in fair-share order.
    WITH mine AS (
        SELECT q.name, q.pos, coalesce(p_running[q.pos::integer], 0) AS running,
               coalesce(qs.weight, 1)::double precision AS weight
          FROM unnest(p_queues) WITH ORDINALITY AS q(name, pos)
          LEFT JOIN pgqueue.queues AS qs ON qs.name = q.name
         WHERE q.name <> ALL(v_paused) AND q.name <> ALL(v_blocked_q)
    ), walked AS (
        SELECT m.name AS queue, m.running, m.weight, c.*
          FROM mine AS m
         CROSS JOIN LATERAL (
               SELECT r.* FROM (
                   SELECT j.id, j.task, j.concurrency_key, j.priority, j.run_at
                     FROM pgqueue.jobs AS j
                    WHERE j.queue = m.name AND j.state = 'ready'
                      AND j.task = ANY(p_tasks) AND j.task <> ALL(v_blocked_t)
                      AND (j.concurrency_key IS NULL OR NOT EXISTS (
                               SELECT 1 FROM unnest(v_bk_tasks, v_bk_keys) AS bk(task, key)
                                WHERE bk.task = j.task AND bk.key = j.concurrency_key))
                    ORDER BY j.priority, j.run_at, j.id
                    LIMIT p_limit
                      FOR UPDATE SKIP LOCKED) AS r
               UNION ALL
               SELECT s.* FROM (
                   SELECT j.id, j.task, j.concurrency_key, j.priority, j.run_at
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
    ), ranked AS (
        SELECT w.*,
               CASE WHEN v_weighted
                    THEN (w.running + row_number() OVER (
                              PARTITION BY w.queue ORDER BY w.priority, w.run_at, w.id))
                         / w.weight
                    ELSE row_number() OVER (ORDER BY w.priority, w.run_at, w.id)
               END AS ord
          FROM walked AS w
    )
    SELECT array_agg(ROW(r.id, r.queue, r.task, r.concurrency_key, r.priority, r.run_at,
                         r.ord)::pgqueue.claim_candidate
                     ORDER BY r.ord, r.priority, r.run_at, r.id)
      INTO v_cands
      FROM ranked AS r;

    IF v_cands IS NULL THEN
        IF v_held_back THEN
            RETURN QUERY SELECT NULL::bigint, NULL::text, NULL::text, NULL::jsonb, NULL::integer,
                                NULL::integer, NULL::integer, NULL::smallint,
                                NULL::timestamptz, NULL::timestamptz, NULL::boolean,
                                greatest(coalesce(v_wait_hint, 0), 0);
        END IF;
        RETURN;
    END IF;

    -- 3. Lock the limits these candidates touch: concurrency limits as advisory locks in one
    --    global order, then buckets and breakers by name.
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
                  WHERE c.concurrency_key IS NOT NULL) AS x
             ORDER BY 1) AS l;
    PERFORM 1 FROM pgqueue.queues AS qs
     WHERE qs.name IN (SELECT c.queue FROM unnest(v_cands) AS c) AND qs.rate_limit IS NOT NULL
     ORDER BY qs.name
       FOR NO KEY UPDATE;
    PERFORM 1 FROM pgqueue.task_limits AS tl
     WHERE tl.task IN (SELECT c.task FROM unnest(v_cands) AS c) AND tl.rate_limit IS NOT NULL
     ORDER BY tl.task
       FOR NO KEY UPDATE;
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
    SELECT array_agg(ok.id) INTO v_accepted FROM (
        SELECT r.id
          FROM ranked AS r
          LEFT JOIN qroom AS qr ON qr.name = r.queue
          LEFT JOIN troom AS tr ON tr.task = r.task
          LEFT JOIN kroom AS kr ON kr.task = r.task AND kr.key = r.concurrency_key
          LEFT JOIN breaker AS br ON br.task = r.task
         WHERE (qr.slots IS NULL OR r.rq <= qr.slots)
           AND (qr.tokens IS NULL OR r.rq <= qr.tokens)
           AND (tr.slots IS NULL OR r.rt <= tr.slots)
           AND (tr.tokens IS NULL OR r.rt <= tr.tokens)
           AND (r.concurrency_key IS NULL
                OR r.rk <= coalesce(tr.key_limit, 1) - coalesce(kr.running, 0))
           AND (br.task IS NULL OR (br.may_probe AND r.rt = 1))
         ORDER BY r.ord, r.priority, r.run_at, r.id
         LIMIT p_limit) AS ok;

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
                      j.result_ttl IS NOT NULL
        ), probes AS (
            -- A claimed job of a task whose breaker is not closed is its probe.
            UPDATE pgqueue.circuit_breakers AS b
               SET state = 'half_open', probe_job_id = cl.id, probe_token = cl.lease_token,
                   updated_at = now()
              FROM claimed AS cl
             WHERE b.task = cl.task AND b.state <> 'closed'
            RETURNING b.task
        )
        SELECT cl.*, NULL::double precision FROM claimed AS cl;
    END IF;

    IF v_held_back AND coalesce(cardinality(v_accepted), 0) < p_limit THEN
        RETURN QUERY SELECT NULL::bigint, NULL::text, NULL::text, NULL::jsonb, NULL::integer,
                            NULL::integer, NULL::integer, NULL::smallint, NULL::timestamptz,
                            NULL::timestamptz, NULL::boolean,
                            greatest(coalesce(v_wait_hint, 0), 0);
    END IF;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Cron schedules: one row per schedule. Workers enqueue a tick by moving next_tick forward with
-- a compare-and-set in the same statement that enqueues the tick's job, so each tick is
-- enqueued exactly once however many workers race for it.
-- ---------------------------------------------------------------------------------------------
CREATE TABLE pgqueue.schedules (
    name             text        PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 200),
    cron             text        NOT NULL,
    timezone         text        NOT NULL DEFAULT 'UTC',
    task             text        NOT NULL CHECK (length(task) BETWEEN 1 AND 200),
    args             jsonb       NOT NULL DEFAULT '{}'::jsonb,
    queue            text        NOT NULL DEFAULT 'default',
    priority         smallint    NOT NULL DEFAULT 0,
    max_attempts     integer     NOT NULL DEFAULT 5 CHECK (max_attempts >= 1),
    -- missed ticks (no worker ran, or the schedule was late by more than `grace`):
    -- 'skip' drops them, 'catch_up' enqueues each (at most max_catch_up, the latest ones)
    missed           text        NOT NULL DEFAULT 'skip' CHECK (missed IN ('skip', 'catch_up')),
    grace            interval    NOT NULL DEFAULT interval '1 minute',
    max_catch_up     integer     NOT NULL DEFAULT 100 CHECK (max_catch_up >= 1),
    paused           boolean     NOT NULL DEFAULT false,
    next_tick        timestamptz NOT NULL,
    last_tick        timestamptz,
    last_enqueued_at timestamptz,
    ticks_enqueued   bigint      NOT NULL DEFAULT 0,
    ticks_skipped    bigint      NOT NULL DEFAULT 0,
    from_code        boolean     NOT NULL DEFAULT false,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX schedules_due_idx ON pgqueue.schedules (next_tick) WHERE NOT paused;

-- ---------------------------------------------------------------------------------------------
-- Views for operators and autoscalers.
-- ---------------------------------------------------------------------------------------------

-- Queue depth from the hot table only (cheap enough to poll every few seconds): what KEDA, an
-- HPA external metric or a Prometheus exporter should read.
CREATE VIEW pgqueue.queue_depth AS
WITH live AS (
    SELECT queue,
           count(*) FILTER (WHERE state = 'ready' OR (state = 'scheduled' AND run_at <= now()))
               AS ready,
           count(*) FILTER (WHERE state = 'scheduled' AND run_at > now()) AS scheduled,
           count(*) FILTER (WHERE state = 'running') AS running,
           min(run_at) FILTER (WHERE state = 'ready' OR (state = 'scheduled' AND run_at <= now()))
               AS oldest_ready_at
      FROM pgqueue.jobs
     GROUP BY queue
), names AS (
    SELECT queue FROM live UNION SELECT name FROM pgqueue.queues
)
SELECT n.queue,
       coalesce(live.ready, 0)     AS ready,
       coalesce(live.scheduled, 0) AS scheduled,
       coalesce(live.running, 0)   AS running,
       coalesce(extract(epoch FROM greatest(now() - live.oldest_ready_at, interval '0')), 0)
           AS oldest_ready_seconds,
       coalesce(qs.paused, false)  AS paused,
       qs.weight,
       qs.max_depth,
       qs.concurrency_limit,
       qs.rate_limit
  FROM names AS n
  LEFT JOIN live ON live.queue = n.queue
  LEFT JOIN pgqueue.queues AS qs ON qs.name = n.queue;

-- Breakers as operators read them: 'open' past its cooldown shows as 'half_open' (the next
-- claim of that task runs the probe).
CREATE VIEW pgqueue.circuit_breaker_status AS
SELECT b.task,
       CASE WHEN b.state = 'open' AND b.open_until <= now() THEN 'half_open' ELSE b.state END
           AS state,
       b.failures, b.successes,
       CASE WHEN b.failures + b.successes > 0
            THEN b.failures::double precision / (b.failures + b.successes) END AS failure_rate,
       b.failure_threshold, b.min_calls, b.window_length, b.cooldown, b.window_start,
       b.opened_at, b.open_until, b.probe_job_id, b.trips
  FROM pgqueue.circuit_breakers AS b;
"""

DOWNGRADE = r"""
DROP VIEW pgqueue.circuit_breaker_status;
DROP VIEW pgqueue.queue_depth;
DROP TABLE pgqueue.schedules;
DROP FUNCTION pgqueue.claim(text[], text[], integer, interval, uuid, integer[]);
DROP TYPE pgqueue.claim_candidate;
DROP FUNCTION pgqueue.flow_controlled(text[], text[]);
DROP FUNCTION pgqueue.bucket_tokens(double precision, timestamptz, double precision,
                                    double precision, timestamptz);
DROP FUNCTION pgqueue.enqueue(text, jsonb, text, integer, timestamptz, integer, text, text);
DROP FUNCTION pgqueue.enqueue_job(text, jsonb, text, integer, timestamptz, integer, text, text,
                                  interval, text[]);
DROP FUNCTION pgqueue.mark_keyed(text[]);
DROP FUNCTION pgqueue.take_queue_room(text, integer);
DROP FUNCTION pgqueue.queue_depth_up_to(text, integer);
DROP TRIGGER jobs_keep_finished_key ON pgqueue.jobs;
DROP FUNCTION pgqueue.keep_finished_key();
DROP TABLE pgqueue.idempotency_keys;
ALTER TABLE pgqueue.jobs
    DROP COLUMN concurrency_key,
    DROP COLUMN unique_for,
    DROP COLUMN unique_states;
DROP TABLE pgqueue.circuit_breakers;
DROP TABLE pgqueue.task_limits;
ALTER TABLE pgqueue.queues
    DROP COLUMN weight,
    DROP COLUMN max_depth,
    DROP COLUMN concurrency_limit,
    DROP COLUMN rate_limit,
    DROP COLUMN rate_burst,
    DROP COLUMN tokens,
    DROP COLUMN tokens_at;

-- The enqueue functions as revision 0001 made them.
CREATE FUNCTION pgqueue.enqueue_job(
    task            text,
    args            jsonb       DEFAULT '{}'::jsonb,
    queue           text        DEFAULT 'default',
    priority        integer     DEFAULT 0,
    run_at          timestamptz DEFAULT NULL,
    max_attempts    integer     DEFAULT 5,
    idempotency_key text        DEFAULT NULL,
    OUT id bigint,
    OUT created boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    due timestamptz := coalesce(enqueue_job.run_at, now());
BEGIN
    LOOP
        INSERT INTO pgqueue.jobs AS j
            (queue, task, args, priority, run_at, state, max_attempts, idempotency_key)
        VALUES (enqueue_job.queue, enqueue_job.task, coalesce(enqueue_job.args, '{}'::jsonb),
                enqueue_job.priority, due,
                CASE WHEN due > now() THEN 'scheduled' ELSE 'ready' END,
                enqueue_job.max_attempts, enqueue_job.idempotency_key)
        ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING j.id INTO id;
        IF id IS NOT NULL THEN
            created := true;
            RETURN;
        END IF;
        SELECT j.id INTO id FROM pgqueue.jobs AS j
         WHERE j.idempotency_key = enqueue_job.idempotency_key;
        IF id IS NOT NULL THEN
            created := false;
            RETURN;
        END IF;
    END LOOP;
END
$$;

CREATE FUNCTION pgqueue.enqueue(
    task            text,
    args            jsonb       DEFAULT '{}'::jsonb,
    queue           text        DEFAULT 'default',
    priority        integer     DEFAULT 0,
    run_at          timestamptz DEFAULT NULL,
    max_attempts    integer     DEFAULT 5,
    idempotency_key text        DEFAULT NULL)
RETURNS bigint
LANGUAGE sql AS $$
    SELECT e.id FROM pgqueue.enqueue_job(task, args, queue, priority, run_at, max_attempts,
                                         idempotency_key) AS e
$$;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
