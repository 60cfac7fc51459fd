-- Every workflow member with its current state, wherever the job is now.
CREATE OR REPLACE VIEW pgqueue.workflow_jobs AS
SELECT n.workflow_id,
       n.job_id,
       n.role,
       n.name,
       coalesce(j.task, h.task, d.task)                  AS task,
       coalesce(j.queue, h.queue, d.queue)               AS queue,
       CASE WHEN j.id IS NOT NULL THEN j.state
            WHEN h.id IS NOT NULL THEN h.state
            WHEN d.id IS NOT NULL THEN 'dead'
            ELSE 'unknown' END                           AS state,
       n.parents,
       n.dependents,
       coalesce(j.attempts, h.attempts, d.attempts)      AS attempts,
       h.result,
       coalesce(d.last_error, h.errors -> -1 ->> 'message', j.errors -> -1 ->> 'message')
                                                         AS last_error,
       coalesce(j.created_at, h.created_at, d.created_at) AS created_at,
       coalesce(h.finished_at, d.dead_at)                AS finished_at
  FROM pgqueue.workflow_nodes AS n
  LEFT JOIN pgqueue.jobs AS j ON j.id = n.job_id
  LEFT JOIN pgqueue.job_history AS h ON h.id = n.job_id
  LEFT JOIN pgqueue.dead_letters AS d ON d.id = n.job_id;
