-- Enqueue one job, the options as parameters (for SQL callers; migration 0018): the row
-- pgqueue.enqueue_input takes, filled in by name, so the signature stays as it was while the
-- row gains attributes. SECURITY DEFINER as before: a role allowed to call this one needs no
-- grant on enqueue_input. See pgqueue.enqueue_input for what each option does.
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
    unique_among    text        DEFAULT 'live',
    on_conflict     text        DEFAULT 'keep',
    throttle        interval    DEFAULT NULL,
    OUT id bigint,
    OUT created boolean,
    OUT replaced boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    job pgqueue.job_input;
BEGIN
    job.task := enqueue_job.task;
    job.args := enqueue_job.args;
    job.queue := enqueue_job.queue;
    job.priority := enqueue_job.priority;
    job.run_at := enqueue_job.run_at;
    job.max_attempts := enqueue_job.max_attempts;
    job.idempotency_key := enqueue_job.idempotency_key;
    job.concurrency_key := enqueue_job.concurrency_key;
    job.unique_for := enqueue_job.unique_for;
    job.unique_states := enqueue_job.unique_states;
    job.meta := enqueue_job.meta;
    job.tags := enqueue_job.tags;
    job.unique_among := enqueue_job.unique_among;
    job.on_conflict := enqueue_job.on_conflict;
    job.throttle := enqueue_job.throttle;
    SELECT e.id, e.created, e.replaced INTO id, created, replaced
      FROM pgqueue.enqueue_input(job) AS e;
END
$$;
