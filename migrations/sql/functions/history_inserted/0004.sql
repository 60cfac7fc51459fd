-- After rows land in job_history / dead_letters (whatever statement put them there): wake
-- pgq.result() waiters (one NOTIFY per 400 ids, never one per job) and settle the dependents of
-- workflow members. Statement-level, so an ack batch costs one call.
CREATE OR REPLACE FUNCTION pgqueue.history_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    members jsonb;
BEGIN
    -- Most acks insert nothing here, or only history rows nobody waits for: leave at once. (Every
    -- workflow member keeps its result, so a member that finished is always let through.)
    IF NOT EXISTS (SELECT 1 FROM finished AS f
                    WHERE f.keep_until IS NOT NULL OR f.state = 'cancelled') THEN
        RETURN NULL;
    END IF;
    PERFORM pg_notify('pgqueue_results', string_agg(c.id::text, ','))
       FROM (SELECT f.id, (row_number() OVER () - 1) / 400 AS chunk
               FROM finished AS f
              WHERE f.keep_until IS NOT NULL OR f.state = 'cancelled') AS c
      GROUP BY c.chunk;
    SELECT jsonb_agg(jsonb_build_object(
               'id', f.id, 'task', f.task, 'outcome', f.state, 'result', f.result,
               'error', f.errors -> -1 ->> 'message'))
      INTO members
      FROM finished AS f
      JOIN pgqueue.workflow_nodes AS n ON n.job_id = f.id
     WHERE f.keep_until IS NOT NULL OR f.state = 'cancelled';
    IF members IS NOT NULL THEN
        PERFORM pgqueue.settle_finished(members);
    END IF;
    RETURN NULL;
END
$$;
