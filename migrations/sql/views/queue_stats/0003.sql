-- One row per queue: what waits, what runs, what died, and whether the queue is paused.
CREATE OR REPLACE VIEW pgqueue.queue_stats AS
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
), dead AS (
    SELECT queue, count(*) AS dead FROM pgqueue.dead_letters GROUP BY queue
), names AS (
    SELECT queue FROM live UNION SELECT queue FROM dead UNION SELECT name FROM pgqueue.queues
)
SELECT n.queue,
       coalesce(live.ready, 0)                    AS ready,
       coalesce(live.scheduled, 0)                AS scheduled,
       coalesce(live.running, 0)                  AS running,
       coalesce(dead.dead, 0)                     AS dead,
       CASE WHEN live.oldest_ready_at IS NOT NULL
            THEN greatest(now() - live.oldest_ready_at, interval '0') END AS oldest_ready_age,
       coalesce(qs.paused, false)                 AS paused
  FROM names AS n
  LEFT JOIN live ON live.queue = n.queue
  LEFT JOIN dead ON dead.queue = n.queue
  LEFT JOIN pgqueue.queues AS qs ON qs.name = n.queue;
