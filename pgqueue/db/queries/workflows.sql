-- Workflows: members, parents, dependents.
-- Loaded by pgqueue/db/queries.py; each statement starts with a "-- name: <name>" line.
-- Parameters are psycopg placeholders, always bound.

-- name: lock_parent_jobs
-- depends_on: live parents are locked FOR KEY SHARE until the enqueue commits, so a parent
-- cannot finish (its ack would wait) before its new dependents are linked; heartbeats and
-- other updates of the parent are not blocked by this lock mode.
SELECT j.id, n.workflow_id
  FROM pgqueue.jobs AS j
  LEFT JOIN pgqueue.workflow_nodes AS n ON n.job_id = j.id
 WHERE j.id = ANY(%(ids)s::bigint[])
 ORDER BY j.id
   FOR KEY SHARE OF j

-- name: finished_parents
-- depends_on on jobs that already left the hot table: what became of them.
SELECT h.id, h.state, h.result, n.workflow_id
  FROM pgqueue.job_history AS h
  LEFT JOIN pgqueue.workflow_nodes AS n ON n.job_id = h.id
 WHERE h.id = ANY(%(ids)s::bigint[])
UNION ALL
SELECT d.id, 'dead', NULL, NULL
  FROM pgqueue.dead_letters AS d
 WHERE d.id = ANY(%(ids)s::bigint[])

-- name: insert_workflow
INSERT INTO pgqueue.workflows (name, on_failure)
VALUES (%(name)s, %(on_failure)s::jsonb)
RETURNING id

-- name: insert_workflow_nodes
INSERT INTO pgqueue.workflow_nodes (job_id, workflow_id, name, parents, dependents, receive,
                                    result_arg, parent_results)
SELECT n.job_id, %(workflow_id)s, n.name, n.parents, n.dependents, n.receive, n.result_arg,
       coalesce(n.parent_results, '{}'::jsonb)
  FROM jsonb_to_recordset(%(nodes)s::jsonb)
       AS n(job_id bigint, name text, parents bigint[], dependents bigint[], receive text,
            result_arg text, parent_results jsonb)

-- name: link_parents
-- New dependents of live jobs that existed before this enqueue: appended to the parent's node
-- (a parent outside any workflow joins this one), and the parent keeps its result from now on
-- so that its ack records it and settles the dependents in the same statement.
WITH edges AS (
    SELECT parent, array_agg(child ORDER BY child) AS children
      FROM unnest(%(parents)s::bigint[], %(children)s::bigint[]) AS e(parent, child)
     GROUP BY parent
), kept AS (
    UPDATE pgqueue.jobs AS j
       SET result_ttl = %(result_ttl)s::interval
      FROM edges AS e
     WHERE j.id = e.parent AND j.result_ttl IS NULL
)
INSERT INTO pgqueue.workflow_nodes AS n (job_id, workflow_id, dependents)
SELECT parent, %(workflow_id)s, children FROM edges
ON CONFLICT (job_id) DO UPDATE SET dependents = n.dependents || excluded.dependents

-- name: list_workflows
SELECT id, name, state, jobs, waiting, ready, running, succeeded, cancelled, dead, created_at,
       last_finished_at
  FROM pgqueue.workflow_overview
 WHERE (%(state)s::text IS NULL OR state = %(state)s)
 ORDER BY id DESC
 LIMIT %(limit)s

-- name: get_workflow
SELECT o.id, o.name, o.state, o.created_at, o.last_finished_at,
       w.on_failure ->> 'task' AS on_failure_task, w.on_failure_job
  FROM pgqueue.workflow_overview AS o
  JOIN pgqueue.workflows AS w ON w.id = o.id
 WHERE o.id = %(workflow_id)s

-- name: workflow_members
SELECT job_id AS id, role, name, task, queue, state, parents, dependents, attempts, result,
       last_error, created_at, finished_at
  FROM pgqueue.workflow_jobs
 WHERE workflow_id = %(workflow_id)s
 ORDER BY job_id
