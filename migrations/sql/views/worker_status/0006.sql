-- Worker processes (rows are pruned by pgqueue.reap() an hour after they were last seen).
-- status: 'stopped' (exited cleanly), 'running' (heartbeat within two minutes), else 'lost'.
CREATE OR REPLACE VIEW pgqueue.worker_status AS
SELECT w.id, w.host, w.pid, w.queues, w.concurrency, w.version, w.started_at, w.last_seen,
       w.stopped_at,
       CASE WHEN w.stopped_at IS NOT NULL THEN 'stopped'
            WHEN w.last_seen >= now() - interval '2 minutes' THEN 'running'
            ELSE 'lost' END        AS status,
       coalesce(held.jobs, 0)      AS jobs_held,
       w.jobs_succeeded, w.jobs_retried, w.jobs_dead, w.jobs_cancelled, w.leases_lost
  FROM pgqueue.workers AS w
  LEFT JOIN LATERAL (
        SELECT count(*) AS jobs FROM pgqueue.jobs AS j
         WHERE j.worker_id = w.id AND j.state = 'running') AS held ON true;
