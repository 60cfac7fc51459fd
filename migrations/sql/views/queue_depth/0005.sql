-- Queue depth from the hot table only (cheap enough to poll every few seconds): what KEDA, an
-- HPA external metric or a Prometheus exporter should read.
CREATE OR REPLACE VIEW pgqueue.queue_depth AS
WITH live AS (
    SELECT queue,
           count(*) FILTER (WHERE state = 'ready' OR (state = 'scheduled' AND run_at <= now()))
               AS ready,
           count(*) FILTER (WHERE state = 'scheduled' AND run_at > now()) AS scheduled,
           count(*) FILTER (WHERE state = 'running') AS running,
           min(run_at) FILTER (WHERE state = 'ready' OR (state = 'scheduled' AND run_at <= now()))
               AS oldest_ready_at
      FROM pgqueue.jobs
     GROUP BY queue
), names AS (
    SELECT queue FROM live UNION SELECT name FROM pgqueue.queues
)
SELECT n.queue,
       coalesce(live.ready, 0)     AS ready,
       coalesce(live.scheduled, 0) AS scheduled,
       coalesce(live.running, 0)   AS running,
       coalesce(extract(epoch FROM greatest(now() - live.oldest_ready_at, interval '0')), 0)
           AS oldest_ready_seconds,
       coalesce(qs.paused, false)  AS paused,
       qs.weight,
       qs.max_depth,
       qs.concurrency_limit,
       qs.rate_limit
  FROM names AS n
  LEFT JOIN live ON live.queue = n.queue
  LEFT JOIN pgqueue.queues AS qs ON qs.name = n.queue;
