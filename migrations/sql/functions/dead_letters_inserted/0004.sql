-- After rows land in dead_letters: wake pgq.result() waiters and settle the dependents of the
-- workflow members that died (as history_inserted does for job_history).
CREATE OR REPLACE FUNCTION pgqueue.dead_letters_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    members jsonb;
BEGIN
    PERFORM pg_notify('pgqueue_results', string_agg(c.id::text, ','))
       FROM (SELECT f.id, (row_number() OVER () - 1) / 400 AS chunk FROM finished AS f) AS c
      GROUP BY c.chunk;
    SELECT jsonb_agg(jsonb_build_object(
               'id', f.id, 'task', f.task, 'outcome', 'dead', 'error', f.last_error))
      INTO members
      FROM finished AS f
      JOIN pgqueue.workflow_nodes AS n ON n.job_id = f.id;
    IF members IS NOT NULL THEN
        PERFORM pgqueue.settle_finished(members);
    END IF;
    RETURN NULL;
END
$$;
