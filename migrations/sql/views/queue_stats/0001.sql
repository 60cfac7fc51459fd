-- One row per queue, for operators: what waits, what runs, what died.
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
)
SELECT coalesce(live.queue, dead.queue)           AS queue,
       coalesce(live.ready, 0)                    AS ready,
       coalesce(live.scheduled, 0)                AS scheduled,
       coalesce(live.running, 0)                  AS running,
       coalesce(dead.dead, 0)                     AS dead,
       -- NULL when nothing is ready; never negative (a job enqueued in a later transaction)
       CASE WHEN live.oldest_ready_at IS NOT NULL
            THEN greatest(now() - live.oldest_ready_at, interval '0') END AS oldest_ready_age
  FROM live FULL JOIN dead ON dead.queue = live.queue;
