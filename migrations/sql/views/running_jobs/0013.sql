-- Jobs running now, with the worker holding each, how long its lease has left, and what the
-- attempt last reported (NULL until this attempt reports), and the job's metadata and tags.
CREATE OR REPLACE VIEW pgqueue.running_jobs AS
SELECT j.id, j.queue, j.task, j.attempts AS attempt, j.max_attempts, j.worker_id,
       w.host, w.pid, j.started_at,
       now() - j.started_at         AS running_for,
       j.lease_expires_at - now()   AS lease_left,
       j.cancel_requested,
       CASE WHEN j.progress_at >= j.started_at THEN j.progress END    AS progress,
       CASE WHEN j.progress_at >= j.started_at THEN j.progress_at END AS progress_at,
       j.meta, j.tags
  FROM pgqueue.jobs AS j
  LEFT JOIN pgqueue.workers AS w ON w.id = j.worker_id
 WHERE j.state = 'running';
