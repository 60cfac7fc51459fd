-- For the statements of roles that cannot write dead letters themselves (the trigger's WHEN
-- below). A one-row insert whose id is the one the sequence last handed this session (every
-- single enqueue: the id comes from the column default) is fresh by construction; anything
-- else goes through check_job_ids. search_path is pinned although the function runs as the
-- inserting role: that role is the one it checks, so its own objects must not stand in for
-- pg_catalog's.
CREATE OR REPLACE FUNCTION pgqueue.check_new_job_ids() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    lowest bigint;
    highest bigint;
    inserted bigint;
    fresh boolean := false;
BEGIN
    SELECT min(n.id), max(n.id), count(*) INTO lowest, highest, inserted FROM new_jobs AS n;
    IF inserted = 0 THEN
        RETURN NULL;
    END IF;
    IF inserted = 1 THEN
        BEGIN
            fresh := highest = currval('pgqueue.jobs_id_seq');
        EXCEPTION WHEN object_not_in_prerequisite_state THEN
            fresh := false;  -- this session never took an id from the sequence
        END;
    END IF;
    IF NOT fresh THEN
        PERFORM pgqueue.check_job_ids(lowest, highest, ARRAY(SELECT n.id FROM new_jobs AS n));
    END IF;
    RETURN NULL;
END
$$;
