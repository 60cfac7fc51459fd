-- Settle the dependents of jobs that just finished. ``finished``: a JSON array of
-- {id, task, outcome ('succeeded' | 'cancelled' | 'dead' | 'lost'), result, error}.
--   succeeded: its result is recorded on each dependent's node; a dependent whose parents have
--     all succeeded becomes ready (scheduled if its run_at is still ahead), with the results it
--     receives merged into its args, and its queue is notified;
--   otherwise: the workflow's on_failure step, if any, is enqueued (once per workflow), and
--     every waiting descendant is cancelled (recorded in job_history).
-- Called by the triggers below, so it runs in the transaction (and statement) that finished the
-- parents: the ack, fail_jobs, reap(), cancel(). Idempotent, so the pruner's safety net may
-- call it again. Cancelled descendants keep their metadata and tags in job_history; the
-- on_failure step gets the workflow's (the spec's "meta" and "tags", written at enqueue).
CREATE OR REPLACE FUNCTION pgqueue.settle_finished(finished jsonb)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    released integer;
BEGIN
    -- The workflow's on_failure step, enqueued by the first failure only (the UPDATE serialises
    -- concurrent failures on the workflow row). Before the cascade below: cancelling the
    -- descendants fires this trigger again, and the failure that started it must win.
    WITH failed AS (
        SELECT DISTINCT ON (n.workflow_id) n.workflow_id, f.id, f.task, f.outcome, f.error
          FROM jsonb_to_recordset(finished) AS f(id bigint, task text, outcome text, error text)
          JOIN pgqueue.workflow_nodes AS n ON n.job_id = f.id
         WHERE f.outcome <> 'succeeded'
         ORDER BY n.workflow_id, f.id
    ), fired AS (
        UPDATE pgqueue.workflows AS w
           SET on_failure_job = nextval('pgqueue.jobs_id_seq')
          FROM failed AS f
         WHERE w.id = f.workflow_id AND w.on_failure IS NOT NULL AND w.on_failure_job IS NULL
        RETURNING w.id, w.on_failure AS spec, w.on_failure_job AS job_id, f.id AS failed_id,
                  f.task AS failed_task, f.outcome, f.error
    ), node AS (
        INSERT INTO pgqueue.workflow_nodes (job_id, workflow_id, role, parents)
        SELECT job_id, id, 'on_failure', ARRAY[failed_id] FROM fired
    )
    INSERT INTO pgqueue.jobs (id, queue, task, args, priority, max_attempts, state, result_ttl,
                              meta, tags)
    SELECT job_id, spec ->> 'queue', spec ->> 'task',
           coalesce(spec -> 'args', '{}'::jsonb)
           || CASE WHEN spec ? 'result_arg'
                   THEN jsonb_build_object(spec ->> 'result_arg', jsonb_build_object(
                            'workflow_id', id, 'job_id', failed_id, 'task', failed_task,
                            'state', outcome, 'error', error))
                   ELSE '{}'::jsonb END,
           (spec ->> 'priority')::smallint, (spec ->> 'max_attempts')::integer, 'ready',
           (spec ->> 'result_ttl')::interval, spec -> 'meta',
           CASE WHEN spec ? 'tags' THEN ARRAY(SELECT jsonb_array_elements_text(spec -> 'tags')) END
      FROM fired;

    -- Failures: nothing below a dead or cancelled job may ever become ready.
    WITH RECURSIVE failed AS (
        SELECT f.id, f.outcome
          FROM jsonb_to_recordset(finished) AS f(id bigint, outcome text)
         WHERE f.outcome <> 'succeeded'
    ), doomed(id, cause) AS (
        SELECT d.child, failed.id
          FROM failed
          JOIN pgqueue.workflow_nodes AS n ON n.job_id = failed.id
         CROSS JOIN LATERAL unnest(n.dependents) AS d(child)
        UNION
        SELECT d.child, doomed.cause
          FROM doomed
          JOIN pgqueue.workflow_nodes AS n ON n.job_id = doomed.id
         CROSS JOIN LATERAL unnest(n.dependents) AS d(child)
    ), victims AS (
        SELECT DISTINCT ON (doomed.id) doomed.id, doomed.cause, failed.outcome
          FROM doomed JOIN failed ON failed.id = doomed.cause
         ORDER BY doomed.id, doomed.cause
    ), gone AS (
        DELETE FROM pgqueue.jobs AS j
         USING victims AS v
         WHERE j.id = v.id AND j.state = 'waiting'
        RETURNING j.*, v.cause, v.outcome
    )
    INSERT INTO pgqueue.job_history (id, queue, task, args, state, priority, attempts,
                                     max_attempts, created_at, started_at, errors, worker_id,
                                     keep_until, meta, tags)
    SELECT g.id, g.queue, g.task, g.args, 'cancelled', g.priority, g.attempts, g.max_attempts,
           g.created_at, g.started_at,
           g.errors || jsonb_build_array(jsonb_build_object(
               'attempt', g.attempts, 'at', now(), 'error', 'UpstreamFailed',
               'message', format('cancelled: upstream job %s ended %s', g.cause, g.outcome))),
           g.worker_id,
           CASE WHEN g.result_ttl IS NOT NULL
                THEN now() + greatest(g.result_ttl, coalesce(r.history_retention, '0')) END,
           g.meta, g.tags
      FROM gone AS g
      LEFT JOIN pgqueue.retention AS r ON true;

    -- Successes. Child nodes are locked in id order so concurrent acks cannot deadlock; a
    -- concurrent ack of another parent of the same child waits for the lock and then sees this
    -- one's key (the UPDATE re-reads the locked row), so exactly one of them releases it.
    WITH done AS (
        SELECT f.id, f.result
          FROM jsonb_to_recordset(finished) AS f(id bigint, outcome text, result jsonb)
         WHERE f.outcome = 'succeeded'
    ), per_child AS (
        SELECT d.child, jsonb_object_agg(done.id::text, coalesce(done.result, 'null'::jsonb))
                   AS results
          FROM done
          JOIN pgqueue.workflow_nodes AS n ON n.job_id = done.id
         CROSS JOIN LATERAL unnest(n.dependents) AS d(child)
         GROUP BY d.child
    ), locked AS MATERIALIZED (
        SELECT c.job_id
          FROM pgqueue.workflow_nodes AS c
          JOIN per_child AS p ON p.child = c.job_id
         ORDER BY c.job_id
           FOR UPDATE OF c
    ), updated AS (
        UPDATE pgqueue.workflow_nodes AS c
           SET parent_results = c.parent_results
               || CASE WHEN c.receive IS NULL
                       -- Only the keys matter when the job receives nothing.
                       THEN (SELECT jsonb_object_agg(k, 'null'::jsonb)
                               FROM jsonb_object_keys(p.results) AS k)
                       ELSE p.results END
          FROM per_child AS p, locked AS l
         WHERE c.job_id = p.child AND l.job_id = c.job_id
        RETURNING c.job_id, c.parents, c.parent_results, c.receive, c.result_arg
    ), ready AS (
        UPDATE pgqueue.jobs AS j
           SET state = CASE WHEN j.run_at > now() THEN 'scheduled' ELSE 'ready' END,
               args = CASE WHEN u.receive IS NULL OR u.result_arg IS NULL THEN j.args
                           ELSE j.args || jsonb_build_object(u.result_arg, (
                               SELECT CASE WHEN u.receive = 'list'
                                           THEN coalesce(jsonb_agg(e.value ORDER BY e.key::bigint),
                                                         '[]'::jsonb)
                                           ELSE (array_agg(e.value ORDER BY e.key::bigint))[1]
                                      END
                                 FROM jsonb_each(u.parent_results) AS e))
                      END
          FROM updated AS u
         WHERE j.id = u.job_id AND j.state = 'waiting'
           AND u.parent_results ?& u.parents::text[]
        RETURNING j.queue
    )
    SELECT count(*) INTO released
      FROM (SELECT pg_notify('pgqueue_jobs', q.queue)
              FROM (SELECT DISTINCT queue FROM ready) AS q) AS n;
END
$$;
