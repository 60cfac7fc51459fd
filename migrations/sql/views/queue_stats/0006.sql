-- One row per queue: depth by state, oldest ready age, paused, and throughput: the average
-- per minute over the last five complete minutes (succeeded, and failed = retried + dead).
CREATE OR REPLACE VIEW pgqueue.queue_stats AS
WITH live AS (
    SELECT queue,
           count(*) FILTER (WHERE state = 'ready' OR (state = 'scheduled' AND run_at <= now()))
               AS ready,
           count(*) FILTER (WHERE state = 'scheduled' AND run_at > now()) AS scheduled,
           count(*) FILTER (WHERE state = 'running') AS running,
           min(run_at) FILTER (WHERE state = 'ready' OR (state = 'scheduled' AND run_at <= now()))
               AS oldest_ready_at,
           count(*) FILTER (WHERE state = 'waiting') AS waiting
      FROM pgqueue.jobs
     GROUP BY queue
), dead AS (
    SELECT queue, count(*) AS dead FROM pgqueue.dead_letters GROUP BY queue
), recent AS (
    SELECT queue, sum(succeeded) AS succeeded, sum(retried + dead) AS failed
      FROM pgqueue.job_counts
     WHERE minute >= date_trunc('minute', now()) - interval '5 minutes'
       AND minute < date_trunc('minute', now())
     GROUP BY queue
), names AS (
    SELECT queue FROM live UNION SELECT queue FROM dead UNION SELECT name FROM pgqueue.queues
    UNION SELECT queue FROM recent
)
SELECT n.queue,
       coalesce(live.ready, 0)                    AS ready,
       coalesce(live.scheduled, 0)                AS scheduled,
       coalesce(live.running, 0)                  AS running,
       coalesce(dead.dead, 0)                     AS dead,
       CASE WHEN live.oldest_ready_at IS NOT NULL
            THEN greatest(now() - live.oldest_ready_at, interval '0') END AS oldest_ready_age,
       coalesce(qs.paused, false)                 AS paused,
       coalesce(live.waiting, 0)                  AS waiting,
       round(coalesce(recent.succeeded, 0) / 5.0, 1)::double precision AS succeeded_per_min,
       round(coalesce(recent.failed, 0) / 5.0, 1)::double precision    AS failed_per_min
  FROM names AS n
  LEFT JOIN live ON live.queue = n.queue
  LEFT JOIN dead ON dead.queue = n.queue
  LEFT JOIN recent ON recent.queue = n.queue
  LEFT JOIN pgqueue.queues AS qs ON qs.name = n.queue;
