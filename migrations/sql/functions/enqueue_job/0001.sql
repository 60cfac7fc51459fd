-- Enqueue one job; the single source of truth for single-job enqueue (Python calls it too),
-- usable from psql, triggers and other languages. With an idempotency key, a live job with the
-- same key is returned instead of a new one (created = false).
CREATE OR REPLACE FUNCTION pgqueue.enqueue_job(
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
        -- A live job holds the key. This statement takes a new snapshot, so it sees a
        -- concurrent enqueuer's job as soon as that one committed.
        SELECT j.id INTO id FROM pgqueue.jobs AS j
         WHERE j.idempotency_key = enqueue_job.idempotency_key;
        IF id IS NOT NULL THEN
            created := false;
            RETURN;
        END IF;
        -- The holder finished between the two statements: the key is free again, try again.
    END LOOP;
END
$$;
