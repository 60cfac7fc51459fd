-- Safety net (the pruner runs it now and then): a waiting job with a parent that left the hot
-- table without settling it (removed by hand, say) is settled from what the parent left behind:
-- its job_history row, its dead letter, or nothing ('lost', which cancels the dependents).
-- One statement sees one snapshot, in which a parent's removal and its settling are either
-- both visible or neither, so a job is never settled twice by mistake (and settling is
-- idempotent anyway).
CREATE OR REPLACE FUNCTION pgqueue.settle_waiting(max_parents integer DEFAULT 1000)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    stuck jsonb;
BEGIN
    WITH parents AS (
        SELECT DISTINCT p.parent
          FROM pgqueue.jobs AS j
          JOIN pgqueue.workflow_nodes AS n ON n.job_id = j.id
         CROSS JOIN LATERAL unnest(n.parents) AS p(parent)
         WHERE j.state = 'waiting'
           AND NOT n.parent_results ? p.parent::text
           AND NOT EXISTS (SELECT 1 FROM pgqueue.jobs AS l WHERE l.id = p.parent)
         LIMIT max_parents
    )
    SELECT jsonb_agg(jsonb_build_object(
               'id', s.parent,
               'task', coalesce(h.task, d.task),
               'outcome', coalesce(h.state, CASE WHEN d.id IS NOT NULL THEN 'dead' END, 'lost'),
               'result', h.result,
               'error', coalesce(d.last_error, h.errors -> -1 ->> 'message',
                                 'the job left pgqueue.jobs without a record')))
      INTO stuck
      FROM parents AS s
      LEFT JOIN pgqueue.job_history AS h ON h.id = s.parent
      LEFT JOIN pgqueue.dead_letters AS d ON d.id = s.parent;
    IF stuck IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM pgqueue.settle_finished(stuck);
    RETURN jsonb_array_length(stuck);
END
$$;
