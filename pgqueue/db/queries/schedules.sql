-- Cron schedules (pgqueue/rules/schedules.py, pgqueue/worker/scheduler.py).
-- Loaded by pgqueue/db/queries.py; each statement starts with a "-- name: <name>" line.
-- Parameters are psycopg placeholders, always bound.

-- name: save_schedule
-- Create or update a schedule; a changed expression or time zone restarts it at next_tick.
INSERT INTO pgqueue.schedules AS s (name, cron, timezone, task, args, queue, priority,
                                    max_attempts, missed, grace, max_catch_up, next_tick,
                                    from_code, meta, tags)
VALUES (%(name)s, %(cron)s, %(timezone)s, %(task)s, %(args)s::jsonb, %(queue)s, %(priority)s,
        %(max_attempts)s, %(missed)s, %(grace)s::interval, %(max_catch_up)s, %(next_tick)s,
        %(from_code)s, %(meta)s::jsonb, %(tags)s::text[])
ON CONFLICT (name) DO UPDATE
   SET cron = excluded.cron, timezone = excluded.timezone, task = excluded.task,
       args = excluded.args, queue = excluded.queue, priority = excluded.priority,
       max_attempts = excluded.max_attempts, missed = excluded.missed, grace = excluded.grace,
       max_catch_up = excluded.max_catch_up, from_code = excluded.from_code,
       meta = excluded.meta, tags = excluded.tags,
       next_tick = CASE WHEN (s.cron, s.timezone) IS DISTINCT FROM (excluded.cron,
                                                                     excluded.timezone)
                        THEN excluded.next_tick ELSE s.next_tick END,
       updated_at = now()
 WHERE (s.cron, s.timezone, s.task, s.args, s.queue, s.priority, s.max_attempts, s.missed,
        s.grace, s.max_catch_up, s.from_code, s.meta, s.tags)
       IS DISTINCT FROM (excluded.cron, excluded.timezone, excluded.task, excluded.args,
                         excluded.queue, excluded.priority, excluded.max_attempts,
                         excluded.missed, excluded.grace, excluded.max_catch_up,
                         excluded.from_code, excluded.meta, excluded.tags)

-- name: list_schedules
SELECT name, cron, timezone, task, queue, args, missed, paused, next_tick, last_tick,
       last_enqueued_at, ticks_enqueued, ticks_skipped, meta, tags
  FROM pgqueue.schedules
 ORDER BY name

-- name: schedule_definition
SELECT cron, timezone, now() AS now FROM pgqueue.schedules WHERE name = %(name)s

-- name: set_schedule_paused
UPDATE pgqueue.schedules
   SET paused = %(paused)s,
       next_tick = CASE WHEN %(paused)s THEN next_tick ELSE %(next_tick)s END,
       updated_at = now()
 WHERE name = %(name)s

-- name: delete_schedule
DELETE FROM pgqueue.schedules WHERE name = %(name)s RETURNING name

-- name: due_schedules
SELECT name, cron, timezone, next_tick, missed, grace, max_catch_up, now()
  FROM pgqueue.schedules
 WHERE NOT paused AND next_tick <= now()
 ORDER BY next_tick
 LIMIT 100

-- name: enqueue_schedule_ticks
-- Exactly once per tick: move next_tick forward only if it is still what this worker read
-- (compare-and-set), and enqueue the ticks' jobs in the same statement. A worker that lost
-- the race gets no rows and enqueued nothing.
WITH advanced AS (
    UPDATE pgqueue.schedules AS s
       SET next_tick = %(next_tick)s,
           last_tick = coalesce((SELECT max(t) FROM unnest(%(ticks)s::timestamptz[]) AS t),
                                s.last_tick),
           last_enqueued_at = CASE WHEN cardinality(%(ticks)s::timestamptz[]) > 0 THEN now()
                                   ELSE s.last_enqueued_at END,
           ticks_enqueued = s.ticks_enqueued + cardinality(%(ticks)s::timestamptz[]),
           ticks_skipped = s.ticks_skipped + %(skipped)s,
           updated_at = now()
     WHERE s.name = %(name)s AND s.next_tick = %(expected)s AND NOT s.paused
    RETURNING s.*
)
-- One row with a NULL tick when the compare-and-set won but every tick was skipped.
SELECT x.tick, x.id, x.created
  FROM advanced AS a
  LEFT JOIN LATERAL (
       SELECT t.tick, e.id, e.created
         FROM unnest(%(ticks)s::timestamptz[]) AS t(tick)
        CROSS JOIN LATERAL pgqueue.enqueue_job(
                  a.task, a.args, a.queue, a.priority, t.tick, a.max_attempts,
                  'pgqueue.cron:' || a.name || ':'
                      || to_char(t.tick AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                  meta => a.meta, tags => a.tags) AS e
       ) AS x ON true

-- name: next_schedule_in
SELECT extract(epoch FROM min(next_tick) - now()) FROM pgqueue.schedules WHERE NOT paused
