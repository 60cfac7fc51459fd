-- Shorthand for psql: SELECT pgqueue.enqueue('reports.build', '{"month": "2026-11"}');
-- With metadata and tags: SELECT pgqueue.enqueue('reports.build', '{}',
--     meta => '{"tenant": "acme"}', tags => ARRAY['monthly']);
-- The deduplication modes (unique_among, on_conflict, throttle) as in pgqueue.enqueue_job.
CREATE OR REPLACE FUNCTION pgqueue.enqueue(
    task            text,
    args            jsonb       DEFAULT '{}'::jsonb,
    queue           text        DEFAULT 'default',
    priority        integer     DEFAULT 0,
    run_at          timestamptz DEFAULT NULL,
    max_attempts    integer     DEFAULT 5,
    idempotency_key text        DEFAULT NULL,
    concurrency_key text        DEFAULT NULL,
    meta            jsonb       DEFAULT NULL,
    tags            text[]      DEFAULT NULL,
    unique_among    text        DEFAULT 'live',
    on_conflict     text        DEFAULT 'keep',
    throttle        interval    DEFAULT NULL)
RETURNS bigint
LANGUAGE sql AS $$
    SELECT e.id FROM pgqueue.enqueue_job(task, args, queue, priority, run_at, max_attempts,
                                         idempotency_key, concurrency_key,
                                         meta => meta, tags => tags,
                                         unique_among => unique_among,
                                         on_conflict => on_conflict,
                                         throttle => throttle) AS e
$$;
