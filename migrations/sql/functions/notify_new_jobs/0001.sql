-- Wake idle workers: one NOTIFY per queue per statement (PostgreSQL folds identical
-- notifications within a transaction), delivered at commit, never for a rolled-back job.
CREATE OR REPLACE FUNCTION pgqueue.notify_new_jobs() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('pgqueue_jobs', q.queue) FROM (SELECT DISTINCT queue FROM new_jobs) AS q;
    RETURN NULL;
END
$$;
