-- Whether these ids may go into pgqueue.jobs: handed out by the sequence, and held by no dead
-- letter and no history row. Raises if not. SECURITY DEFINER: the producer role may read
-- neither table nor the sequence. Executable by PUBLIC (an upgrade must not break enqueue until
-- `pgq roles` is rerun): it tells only whether an id is taken, which an INSERT tells as well.
CREATE OR REPLACE FUNCTION pgqueue.check_job_ids(lowest bigint, highest bigint, ids bigint[])
RETURNS void
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    issued bigint;
    top_dead bigint;
    top_done bigint;
    taken bigint;
BEGIN
    SELECT CASE WHEN s.is_called THEN s.last_value ELSE s.last_value - 1 END,
           (SELECT max(d.id) FROM pgqueue.dead_letters AS d),
           (SELECT max(h.id) FROM pgqueue.job_history AS h)
      INTO issued, top_dead, top_done
      FROM pgqueue.jobs_id_seq AS s;
    IF highest > issued THEN
        RAISE EXCEPTION 'job id % was never handed out by pgqueue.jobs_id_seq (last value %)',
                        highest, issued
              USING ERRCODE = 'check_violation',
                    HINT = 'Job ids come from the sequence: leave id out, or take it from '
                           'nextval(''pgqueue.jobs_id_seq'').';
    END IF;
    -- Ids fresh from the sequence are above every id recorded so far: only older ones can
    -- be taken, and only they are looked up.
    IF lowest <= top_dead THEN
        SELECT i INTO taken
          FROM unnest(ids) AS i JOIN pgqueue.dead_letters AS d ON d.id = i
         ORDER BY i LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'job id % is already used by a dead letter', taken
                  USING ERRCODE = 'unique_violation',
                        HINT = 'Replay the dead letter instead, or enqueue without an id.';
        END IF;
    END IF;
    IF lowest <= top_done THEN
        SELECT i INTO taken
          FROM unnest(ids) AS i JOIN pgqueue.job_history AS h ON h.id = i
         ORDER BY i LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'job id % is already used by a finished job (pgqueue.job_history)',
                            taken
                  USING ERRCODE = 'unique_violation', HINT = 'Enqueue without an id.';
        END IF;
    END IF;
END
$$;
