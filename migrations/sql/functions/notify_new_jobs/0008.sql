-- The lock (1885827442, 1) is pgqueue's "producers reading idle_workers" lock: see above.
CREATE OR REPLACE FUNCTION pgqueue.notify_new_jobs() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(1885827442, 1);
    IF current_setting('transaction_isolation') <> 'read committed'
       OR EXISTS (SELECT 1 FROM pgqueue.idle_workers) THEN
        PERFORM pg_notify('pgqueue_jobs', q.queue) FROM (SELECT DISTINCT queue FROM new_jobs) AS q;
    END IF;
    RETURN NULL;
END
$$;
