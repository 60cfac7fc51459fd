-- One row per workflow: overall state, counts by state, and every job with its state.
CREATE OR REPLACE VIEW pgqueue.workflow_overview AS
SELECT w.id,
       w.name,
       w.created_at,
       CASE WHEN count(*) FILTER (WHERE wj.state IN ('dead', 'cancelled', 'unknown')) > 0
            THEN CASE WHEN count(*) FILTER (
                               WHERE wj.state IN ('waiting', 'scheduled', 'ready', 'running')) > 0
                      THEN 'failing' ELSE 'failed' END
            WHEN count(*) FILTER (WHERE wj.state <> 'succeeded') > 0 THEN 'running'
            ELSE 'succeeded' END                                           AS state,
       count(wj.job_id)                                                    AS jobs,
       count(*) FILTER (WHERE wj.state = 'waiting')                        AS waiting,
       count(*) FILTER (WHERE wj.state IN ('ready', 'scheduled'))          AS ready,
       count(*) FILTER (WHERE wj.state = 'running')                        AS running,
       count(*) FILTER (WHERE wj.state = 'succeeded')                      AS succeeded,
       count(*) FILTER (WHERE wj.state = 'cancelled')                      AS cancelled,
       count(*) FILTER (WHERE wj.state = 'dead')                           AS dead,
       max(wj.finished_at)                                                 AS last_finished_at,
       coalesce(jsonb_agg(jsonb_build_object('id', wj.job_id, 'task', wj.task,
                                             'state', wj.state, 'parents', wj.parents)
                          ORDER BY wj.job_id) FILTER (WHERE wj.job_id IS NOT NULL),
                '[]'::jsonb)                                               AS job_states
  FROM pgqueue.workflows AS w
  LEFT JOIN pgqueue.workflow_jobs AS wj ON wj.workflow_id = w.id
 GROUP BY w.id;
