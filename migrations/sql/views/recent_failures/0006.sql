-- Failures over the last hour by queue and task: retried and dead-lettered attempts (from the
-- per-minute counts) and the latest recorded error (from live jobs and dead letters).
CREATE OR REPLACE VIEW pgqueue.recent_failures AS
WITH counts AS (
    SELECT queue, task, sum(retried)::bigint AS retried, sum(dead)::bigint AS dead
      FROM pgqueue.job_counts
     WHERE minute >= now() - interval '1 hour'
     GROUP BY queue, task
    HAVING sum(retried) + sum(dead) > 0
), errors AS (
    SELECT DISTINCT ON (e.queue, e.task) e.queue, e.task, e.error ->> 'error' AS error_class,
           e.error ->> 'message' AS last_error, (e.error ->> 'at')::timestamptz AS failed_at
      FROM (SELECT queue, task, errors -> -1 AS error FROM pgqueue.jobs
             WHERE jsonb_array_length(errors) > 0
            UNION ALL
            SELECT queue, task, errors -> -1 FROM pgqueue.dead_letters
             WHERE dead_at >= now() - interval '1 hour') AS e
     WHERE (e.error ->> 'at')::timestamptz >= now() - interval '1 hour'
     ORDER BY e.queue, e.task, (e.error ->> 'at')::timestamptz DESC
)
SELECT coalesce(c.queue, e.queue) AS queue, coalesce(c.task, e.task) AS task,
       coalesce(c.retried, 0) AS retried, coalesce(c.dead, 0) AS dead,
       e.error_class, e.last_error, e.failed_at
  FROM counts AS c
  FULL JOIN errors AS e ON e.queue = c.queue AND e.task = c.task;
