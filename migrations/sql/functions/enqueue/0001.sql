-- Shorthand for psql: SELECT pgqueue.enqueue('reports.build', '{"month": "2026-11"}');
CREATE OR REPLACE FUNCTION pgqueue.enqueue(
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
