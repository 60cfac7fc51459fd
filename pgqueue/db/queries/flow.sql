-- Flow control: queue settings, task limits, circuit breakers.
-- Loaded by pgqueue/db/queries.py; each statement starts with a "-- name: <name>" line.
-- Parameters are psycopg placeholders, always bound.

-- Flow control: queue settings, task limits, circuit breakers (pgqueue/flow.py)

-- name: configure_queue
-- Change the settings flagged set_*; a changed rate limit starts with a full bucket. Workers
-- are woken (a looser limit may free work at once). A queue made fair ranks the jobs waiting in
-- it that have no rank yet (per key and priority, in FIFO order, from the queue's clock), so
-- fairness applies to its backlog at once.
WITH upserted AS (
    INSERT INTO pgqueue.queues AS qs (name, weight, max_depth, concurrency_limit, rate_limit,
                                      rate_burst, fair)
    VALUES (%(queue)s, %(weight)s, %(max_depth)s, %(concurrency_limit)s, %(rate_limit)s,
            %(rate_burst)s, coalesce(%(fair)s, false))
    ON CONFLICT (name) DO UPDATE
       SET weight = CASE WHEN %(set_weight)s THEN excluded.weight ELSE qs.weight END,
           fair = CASE WHEN %(set_fair)s THEN excluded.fair ELSE qs.fair END,
           max_depth = CASE WHEN %(set_max_depth)s THEN excluded.max_depth ELSE qs.max_depth END,
           concurrency_limit = CASE WHEN %(set_concurrency_limit)s
                                    THEN excluded.concurrency_limit
                                    ELSE qs.concurrency_limit END,
           rate_limit = CASE WHEN %(set_rate)s THEN excluded.rate_limit ELSE qs.rate_limit END,
           rate_burst = CASE WHEN %(set_rate)s THEN excluded.rate_burst ELSE qs.rate_burst END,
           tokens = CASE WHEN %(set_rate)s THEN NULL ELSE qs.tokens END,
           tokens_at = CASE WHEN %(set_rate)s THEN NULL ELSE qs.tokens_at END,
           updated_at = now()
    RETURNING qs.name AS queue, qs.paused, qs.weight, qs.max_depth, qs.concurrency_limit,
              qs.rate_limit, qs.rate_burst, qs.fair
), backlog AS (
    SELECT j.id,
           coalesce(c.clock, 0)
           + row_number() OVER (PARTITION BY j.priority, j.concurrency_key
                                ORDER BY j.run_at, j.id) - 1 AS rank
      FROM pgqueue.jobs AS j
      LEFT JOIN pgqueue.fair_clocks AS c ON c.queue = j.queue AND c.priority = j.priority
     WHERE j.queue = %(queue)s AND j.state IN ('ready', 'scheduled') AND j.fair_rank IS NULL
       AND %(set_fair)s AND (SELECT u.fair FROM upserted AS u)
), ranked AS (
    UPDATE pgqueue.jobs AS j
       SET fair_rank = b.rank
      FROM backlog AS b
     WHERE j.id = b.id AND j.fair_rank IS NULL AND j.state IN ('ready', 'scheduled')
)
SELECT u.*
  FROM upserted AS u, LATERAL pg_notify('pgqueue_jobs', u.queue) AS notified

-- name: configure_task
-- A new row's key_limit: the one given, else 1 (the default) unless clearing it was asked
-- for. A changed key rate limit starts every key with a full bucket.
WITH upserted AS (
    INSERT INTO pgqueue.task_limits AS tl (task, concurrency_limit, key_limit, rate_limit,
                                           rate_burst, key_rate_limit, key_rate_burst)
    VALUES (%(task)s, %(concurrency_limit)s,
            CASE WHEN %(set_key_limit)s THEN %(key_limit)s ELSE 1 END, %(rate_limit)s,
            %(rate_burst)s, %(key_rate_limit)s, %(key_rate_burst)s)
    ON CONFLICT (task) DO UPDATE
       SET concurrency_limit = CASE WHEN %(set_concurrency_limit)s
                                    THEN excluded.concurrency_limit
                                    ELSE tl.concurrency_limit END,
           key_limit = CASE WHEN %(set_key_limit)s THEN excluded.key_limit ELSE tl.key_limit END,
           rate_limit = CASE WHEN %(set_rate)s THEN excluded.rate_limit ELSE tl.rate_limit END,
           rate_burst = CASE WHEN %(set_rate)s THEN excluded.rate_burst ELSE tl.rate_burst END,
           tokens = CASE WHEN %(set_rate)s THEN NULL ELSE tl.tokens END,
           tokens_at = CASE WHEN %(set_rate)s THEN NULL ELSE tl.tokens_at END,
           key_rate_limit = CASE WHEN %(set_key_rate)s THEN excluded.key_rate_limit
                                 ELSE tl.key_rate_limit END,
           key_rate_burst = CASE WHEN %(set_key_rate)s THEN excluded.key_rate_burst
                                 ELSE tl.key_rate_burst END,
           from_code = false,
           updated_at = now()
    RETURNING tl.task, tl.concurrency_limit, tl.key_limit, tl.keyed, tl.rate_limit,
              tl.rate_burst, tl.key_rate_limit, tl.key_rate_burst, tl.from_code
), refilled AS (
    DELETE FROM pgqueue.key_buckets AS b WHERE b.task = %(task)s AND %(set_key_rate)s
)
SELECT * FROM upserted

-- name: list_queue_settings
SELECT name AS queue, paused, weight, max_depth, concurrency_limit, rate_limit, rate_burst, fair
  FROM pgqueue.queues
 ORDER BY name

-- name: list_task_limits
SELECT task, concurrency_limit, key_limit, keyed, rate_limit, rate_burst, key_rate_limit,
       key_rate_burst, from_code
  FROM pgqueue.task_limits
 ORDER BY task

-- name: list_circuit_breakers
SELECT task, state, failures, successes, failure_rate, failure_threshold, min_calls,
       window_length, cooldown, opened_at, open_until, probe_job_id, trips
  FROM pgqueue.circuit_breaker_status
 ORDER BY task

-- name: set_circuit_breaker
UPDATE pgqueue.circuit_breakers AS b
   SET state = %(state)s,
       successes = 0, failures = 0, window_start = now(),
       opened_at = CASE WHEN %(state)s = 'open' THEN now() END,
       open_until = CASE WHEN %(state)s = 'open'
                         THEN now() + coalesce(%(open_for)s::interval, b.cooldown) END,
       probe_job_id = NULL, probe_token = NULL,
       trips = b.trips + (%(state)s = 'open')::integer,
       updated_at = now()
 WHERE b.task = %(task)s
RETURNING b.task

-- name: sync_task_limits
-- A worker's start-up: write the limits its code declares (from_code), clear limits an earlier
-- deploy declared for tasks that no longer declare any. Rows are written in name order.
WITH declared AS (
    SELECT *
      FROM unnest(%(tasks)s::text[], %(concurrency)s::integer[], %(key_limits)s::integer[],
                  %(rates)s::double precision[], %(bursts)s::double precision[],
                  %(key_rates)s::double precision[], %(key_bursts)s::double precision[])
           AS d(task, concurrency_limit, key_limit, rate_limit, rate_burst, key_rate_limit,
                key_rate_burst)
), upserted AS (
    INSERT INTO pgqueue.task_limits AS tl (task, concurrency_limit, key_limit, rate_limit,
                                           rate_burst, key_rate_limit, key_rate_burst,
                                           from_code)
    SELECT d.task, d.concurrency_limit, d.key_limit, d.rate_limit, d.rate_burst,
           d.key_rate_limit, d.key_rate_burst, true
      FROM declared AS d
     ORDER BY d.task
    ON CONFLICT (task) DO UPDATE
       SET concurrency_limit = excluded.concurrency_limit,
           key_limit = excluded.key_limit,
           rate_limit = excluded.rate_limit,
           rate_burst = excluded.rate_burst,
           key_rate_limit = excluded.key_rate_limit,
           key_rate_burst = excluded.key_rate_burst,
           tokens = CASE WHEN (tl.rate_limit, tl.rate_burst)
                              IS DISTINCT FROM (excluded.rate_limit, excluded.rate_burst)
                         THEN NULL ELSE tl.tokens END,
           tokens_at = CASE WHEN (tl.rate_limit, tl.rate_burst)
                                 IS DISTINCT FROM (excluded.rate_limit, excluded.rate_burst)
                            THEN NULL ELSE tl.tokens_at END,
           from_code = true,
           updated_at = now()
     WHERE (tl.concurrency_limit, tl.key_limit, tl.rate_limit, tl.rate_burst,
            tl.key_rate_limit, tl.key_rate_burst, tl.from_code)
           IS DISTINCT FROM (excluded.concurrency_limit, excluded.key_limit,
                             excluded.rate_limit, excluded.rate_burst,
                             excluded.key_rate_limit, excluded.key_rate_burst, true)
    RETURNING tl.task
), released AS (
    UPDATE pgqueue.task_limits AS tl
       SET concurrency_limit = NULL, key_limit = 1, rate_limit = NULL, rate_burst = NULL,
           tokens = NULL, tokens_at = NULL, key_rate_limit = NULL, key_rate_burst = NULL,
           from_code = false, updated_at = now()
     WHERE tl.task = ANY(%(known)s::text[]) AND tl.from_code
       AND tl.task <> ALL(%(tasks)s::text[])
    RETURNING tl.task
)
SELECT (SELECT count(*) FROM upserted), (SELECT count(*) FROM released)

-- name: sync_circuit_breakers
-- A worker's start-up: the breakers its code declares (state kept when only settings change);
-- breakers of its tasks that no longer declare one are removed.
WITH declared AS (
    SELECT *
      FROM unnest(%(tasks)s::text[], %(thresholds)s::double precision[],
                  %(min_calls)s::integer[], %(windows)s::double precision[],
                  %(cooldowns)s::double precision[])
           AS d(task, threshold, min_calls, window_secs, cooldown_secs)
), upserted AS (
    INSERT INTO pgqueue.circuit_breakers AS b (task, failure_threshold, min_calls,
                                               window_length, cooldown)
    SELECT d.task, d.threshold, d.min_calls, make_interval(secs => d.window_secs),
           make_interval(secs => d.cooldown_secs)
      FROM declared AS d
     ORDER BY d.task
    ON CONFLICT (task) DO UPDATE
       SET failure_threshold = excluded.failure_threshold, min_calls = excluded.min_calls,
           window_length = excluded.window_length, cooldown = excluded.cooldown,
           updated_at = now()
     WHERE (b.failure_threshold, b.min_calls, b.window_length, b.cooldown)
           IS DISTINCT FROM (excluded.failure_threshold, excluded.min_calls,
                             excluded.window_length, excluded.cooldown)
    RETURNING b.task
), removed AS (
    DELETE FROM pgqueue.circuit_breakers AS b
     WHERE b.task = ANY(%(known)s::text[]) AND b.task <> ALL(%(tasks)s::text[])
    RETURNING b.task
)
SELECT (SELECT count(*) FROM upserted), (SELECT count(*) FROM removed)

-- name: record_breaker_outcomes
-- The completer, once per batch that has outcomes of tasks with a breaker: count successes and
-- failures in the current window, open the breaker when the failure rate reaches its
-- threshold, and settle a half-open breaker by its probe's outcome. Rows locked in name order.
WITH input AS (
    SELECT *
      FROM unnest(%(tasks)s::text[], %(ids)s::bigint[], %(tokens)s::integer[],
                  %(failed)s::boolean[]) AS i(task, id, token, failed)
), per_task AS (
    SELECT i.task, count(*) FILTER (WHERE NOT i.failed) AS ok,
           count(*) FILTER (WHERE i.failed) AS bad
      FROM input AS i GROUP BY i.task
), locked AS MATERIALIZED (
    SELECT b.task FROM pgqueue.circuit_breakers AS b
     WHERE b.task IN (SELECT p.task FROM per_task AS p)
     ORDER BY b.task
       FOR NO KEY UPDATE
), probe AS (
    SELECT b.task, bool_or(i.failed) AS failed
      FROM pgqueue.circuit_breakers AS b
      JOIN locked AS l ON l.task = b.task
      JOIN input AS i ON i.id = b.probe_job_id AND i.token = b.probe_token
     WHERE b.state = 'half_open'
     GROUP BY b.task
), counted AS (
    SELECT b.task, pr.failed AS probe_failed,
           CASE WHEN now() - b.window_start > b.window_length THEN p.ok
                ELSE b.successes + p.ok END AS s,
           CASE WHEN now() - b.window_start > b.window_length THEN p.bad
                ELSE b.failures + p.bad END AS f,
           CASE WHEN now() - b.window_start > b.window_length THEN now()
                ELSE b.window_start END AS started
      FROM pgqueue.circuit_breakers AS b
      JOIN locked AS l ON l.task = b.task
      JOIN per_task AS p ON p.task = b.task
      LEFT JOIN probe AS pr ON pr.task = b.task
), decided AS (
    SELECT c.*,
           CASE WHEN c.probe_failed IS NOT NULL
                THEN CASE WHEN c.probe_failed THEN 'open' ELSE 'closed' END
                WHEN b.state = 'closed' AND c.s + c.f >= b.min_calls
                     AND c.f::double precision / (c.s + c.f) >= b.failure_threshold
                THEN 'open'
                ELSE b.state
           END AS new_state,
           b.state AS old_state
      FROM counted AS c
      JOIN pgqueue.circuit_breakers AS b ON b.task = c.task
)
UPDATE pgqueue.circuit_breakers AS b
   SET state = d.new_state,
       successes = CASE WHEN d.new_state <> d.old_state THEN 0
                        WHEN d.old_state = 'closed' THEN d.s ELSE b.successes END,
       failures = CASE WHEN d.new_state <> d.old_state THEN 0
                       WHEN d.old_state = 'closed' THEN d.f ELSE b.failures END,
       window_start = CASE WHEN d.new_state <> d.old_state THEN now()
                           WHEN d.old_state = 'closed' THEN d.started ELSE b.window_start END,
       opened_at = CASE WHEN d.new_state = 'open' AND d.new_state <> d.old_state THEN now()
                        ELSE b.opened_at END,
       open_until = CASE WHEN d.new_state = 'open' AND d.new_state <> d.old_state
                         THEN now() + b.cooldown ELSE b.open_until END,
       probe_job_id = CASE WHEN d.new_state <> d.old_state THEN NULL ELSE b.probe_job_id END,
       probe_token = CASE WHEN d.new_state <> d.old_state THEN NULL ELSE b.probe_token END,
       trips = b.trips + (d.new_state = 'open' AND d.new_state <> d.old_state)::integer,
       updated_at = now()
  FROM decided AS d
 WHERE b.task = d.task
RETURNING b.task, d.old_state, b.state
