-- After each INSERT statement on pgqueue.jobs (trigger jobs_after_insert), once: what
-- check_new_job_ids (0009) and notify_new_jobs (0008) did as two triggers, in their order.
-- One trigger costs one call and no WHEN: PostgreSQL reads back and plans a trigger's WHEN
-- once per statement, and it cost a single enqueue as much as the function it guarded.
--
-- 1. Ids, for the statements of roles that cannot write dead letters themselves (the owner,
--    the worker and admin roles gain nothing from being checked: their hand edits are survived
--    by the worker and the reaper). Both the current and the session role must be such a
--    role: enqueue_job and insert_keyed_jobs (SECURITY DEFINER) run as their owner, and SET
--    ROLE changes only the current role. A one-row insert whose id is the one the sequence
--    last handed this session (every single enqueue: the id comes from the column default) is
--    fresh by construction; anything else goes through check_job_ids. search_path is pinned
--    although the function runs as the inserting role: that role is the one it checks, so its
--    own objects must not stand in for pg_catalog's.
-- 2. The NOTIFY to idle workers. The lock (1885827442, 1) is pgqueue's "producers reading
--    idle_workers" lock (migration 0008): a worker going idle takes it exclusively.
CREATE OR REPLACE FUNCTION pgqueue.jobs_after_insert() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    lowest bigint;
    highest bigint;
    inserted bigint;
    fresh boolean := false;
BEGIN
    IF NOT (current_user = session_user
            AND has_table_privilege(current_user, 'pgqueue.dead_letters'::regclass, 'INSERT'))
    THEN
        SELECT min(n.id), max(n.id), count(*) INTO lowest, highest, inserted FROM new_jobs AS n;
        IF inserted = 1 THEN
            BEGIN
                fresh := highest = currval('pgqueue.jobs_id_seq');
            EXCEPTION WHEN object_not_in_prerequisite_state THEN
                fresh := false;  -- this session never took an id from the sequence
            END;
        END IF;
        IF inserted > 0 AND NOT fresh THEN
            PERFORM pgqueue.check_job_ids(lowest, highest, ARRAY(SELECT n.id FROM new_jobs AS n));
        END IF;
    END IF;
    PERFORM pg_advisory_xact_lock_shared(1885827442, 1);
    IF current_setting('transaction_isolation') <> 'read committed'
       OR EXISTS (SELECT 1 FROM pgqueue.idle_workers) THEN
        PERFORM pg_notify('pgqueue_jobs', q.queue) FROM (SELECT DISTINCT queue FROM new_jobs) AS q;
    END IF;
    RETURN NULL;
END
$$;
