-- Enqueue one job; the single source of truth for single-job enqueue (Python calls it too).
-- With an idempotency key, an existing job holding the key is returned (created = false): a
-- live one, or a finished one whose key is kept (unique_for). A queue at its max_depth raises
-- SQLSTATE PGQ01 (unless the key matched an existing job). In a fair queue the job gets its rank
-- (pgqueue.fair_rank: its concurrency key is its key). SECURITY DEFINER: a producer needs no
-- SELECT on jobs (keys, ranks, room).
CREATE OR REPLACE FUNCTION pgqueue.enqueue_job(
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
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    due   timestamptz := coalesce(enqueue_job.run_at, now());
    limit_depth integer;
    v_fair boolean;
    v_rank bigint;
BEGIN
    SELECT qs.max_depth, qs.fair INTO limit_depth, v_fair FROM pgqueue.queues AS qs
     WHERE qs.name = enqueue_job.queue;
    IF v_fair THEN
        v_rank := pgqueue.fair_rank(enqueue_job.queue, enqueue_job.priority,
                                    enqueue_job.concurrency_key);
    END IF;
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
             concurrency_key, unique_for, unique_states, fair_rank)
        VALUES (enqueue_job.queue, enqueue_job.task, coalesce(enqueue_job.args, '{}'::jsonb),
                enqueue_job.priority, due,
                CASE WHEN due > now() THEN 'scheduled' ELSE 'ready' END,
                enqueue_job.max_attempts, enqueue_job.idempotency_key,
                enqueue_job.concurrency_key, enqueue_job.unique_for, enqueue_job.unique_states,
                v_rank)
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
