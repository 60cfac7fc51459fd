-- Enqueue one job; the single source of truth for single-job enqueue (Python calls it too).
-- With an idempotency key, an existing job holding the key is returned (created = false): a
-- live one, or a finished one whose key is kept (unique_for). A queue at its max_depth raises
-- SQLSTATE PGQ01 (unless the key matched an existing job). meta (a JSON object) and tags (short
-- non-empty strings) are stored with the job as given (NULL: none); the Python client checks
-- them further (size, duplicates) before calling.
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
    meta            jsonb       DEFAULT NULL,
    tags            text[]      DEFAULT NULL,
    OUT id bigint,
    OUT created boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    due   timestamptz := coalesce(enqueue_job.run_at, now());
    limit_depth integer;
BEGIN
    IF enqueue_job.meta IS NOT NULL AND jsonb_typeof(enqueue_job.meta) <> 'object' THEN
        RAISE EXCEPTION 'meta must be a JSON object, got a JSON %',
            jsonb_typeof(enqueue_job.meta) USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT FROM unnest(enqueue_job.tags) AS t(tag) WHERE coalesce(t.tag, '') = '') THEN
        RAISE EXCEPTION 'tags must be non-empty strings' USING ERRCODE = '22023';
    END IF;
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
             concurrency_key, unique_for, unique_states, meta, tags)
        VALUES (enqueue_job.queue, enqueue_job.task, coalesce(enqueue_job.args, '{}'::jsonb),
                enqueue_job.priority, due,
                CASE WHEN due > now() THEN 'scheduled' ELSE 'ready' END,
                enqueue_job.max_attempts, enqueue_job.idempotency_key,
                enqueue_job.concurrency_key, enqueue_job.unique_for, enqueue_job.unique_states,
                enqueue_job.meta, nullif(enqueue_job.tags, '{}'))
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
