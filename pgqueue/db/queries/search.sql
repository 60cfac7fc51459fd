-- Inspection: jobs, search, results, the dashboard's and metrics' reads.
-- Loaded by pgqueue/db/queries.py; each statement starts with a "-- name: <name>" line.
-- Parameters are psycopg placeholders, always bound.

-- name: list_jobs
-- Live jobs, oldest first, optionally by queue, state, task, tags (the job has all of them)
-- and metadata (it contains this object).
SELECT j.id, j.queue, j.task, j.state, j.priority, j.attempts, j.max_attempts, j.run_at,
       j.created_at, j.worker_id, j.lease_expires_at - now() AS lease_left,
       j.errors -> -1 ->> 'message' AS last_error, j.tags
  FROM pgqueue.jobs AS j
 WHERE (%(queue)s::text IS NULL OR j.queue = %(queue)s)
   AND (%(state)s::text IS NULL OR j.state = %(state)s)
   AND (%(task)s::text IS NULL OR j.task = %(task)s)
   AND (%(tags)s::text[] IS NULL OR j.tags @> %(tags)s::text[])
   AND (%(meta)s::jsonb IS NULL OR j.meta @> %(meta)s::jsonb)
 ORDER BY j.id
 LIMIT %(limit)s

-- name: job_progress
-- What a running job last reported (ctx.progress), this attempt's only (see running_jobs).
SELECT progress FROM pgqueue.running_jobs WHERE id = %(job_id)s

-- name: find_job
-- One job wherever it is now: live (jobs), dead (dead_letters) or finished (job_history).
SELECT 'live' AS place, to_jsonb(j) AS job FROM pgqueue.jobs AS j WHERE j.id = %(id)s
UNION ALL
SELECT 'dead', to_jsonb(d) FROM pgqueue.dead_letters AS d WHERE d.id = %(id)s
UNION ALL
SELECT 'history', to_jsonb(h) FROM pgqueue.job_history AS h WHERE h.id = %(id)s

-- Job search (pgqueue.inspect.search_jobs): one query per place a job can be, each newest
-- first by its own key, after the cursor's position in that place. Every filter is a
-- parameter; NULL means "any" (each query is planned with its values, so the unused ones fold
-- away and the used ones reach the indexes of migration 0012). The error filter matches an
-- attempt's error class or message (case-insensitive substring).

-- name: set_search_timeout
SELECT pg_catalog.set_config('statement_timeout', %(timeout_ms)s, true)

-- fragment: search_filter
-- The filters every place shares, over the names each query gives its table's columns (`s`:
-- id, state, queue, task, args, tags, meta, created_at, finished_at, errors, and error_text,
-- the text besides the attempts' errors that the error filter also searches; '' when none).
-- The names are a subquery's that the planner flattens, so each condition reaches the
-- table's own column and its index. A time filter is a moment (NAME) or an age (NAME_age),
-- counted back from the database's clock, never the caller's.
   AND (%(id)s::bigint IS NULL OR s.id = %(id)s)
   AND (%(task)s::text IS NULL OR s.task = %(task)s)
   AND (%(queue)s::text IS NULL OR s.queue = %(queue)s)
   AND (%(states)s::text[] IS NULL OR s.state = ANY(%(states)s::text[]))
   AND (%(args)s::jsonb IS NULL OR s.args @> %(args)s::jsonb)
   AND (%(tags)s::text[] IS NULL OR s.tags @> %(tags)s::text[])
   AND (%(meta)s::jsonb IS NULL OR s.meta @> %(meta)s::jsonb)
   AND (%(since)s::timestamptz IS NULL OR s.created_at >= %(since)s)
   AND (%(since_age)s::interval IS NULL OR s.created_at >= now() - %(since_age)s::interval)
   AND (%(until)s::timestamptz IS NULL OR s.created_at < %(until)s)
   AND (%(until_age)s::interval IS NULL OR s.created_at < now() - %(until_age)s::interval)
   AND (%(finished_since)s::timestamptz IS NULL OR s.finished_at >= %(finished_since)s)
   AND (%(finished_since_age)s::interval IS NULL
        OR s.finished_at >= now() - %(finished_since_age)s::interval)
   AND (%(finished_until)s::timestamptz IS NULL OR s.finished_at < %(finished_until)s)
   AND (%(finished_until_age)s::interval IS NULL
        OR s.finished_at < now() - %(finished_until_age)s::interval)
   AND (%(error)s::text IS NULL
        OR strpos(lower(s.error_text), lower(%(error)s)) > 0
        OR (s.errors <> '[]'::jsonb AND EXISTS (
           SELECT FROM jsonb_array_elements(s.errors) AS e
            WHERE strpos(lower(concat_ws(': ', e ->> 'error', e ->> 'message')),
                         lower(%(error)s)) > 0)))

-- name: search_live_jobs
-- Live jobs by id (the enqueue order): jobs has no index on created_at, and one would be paid
-- by every claim.
SELECT s.id, s.state, s.queue, s.task, s.priority, s.attempts, s.max_attempts, s.created_at,
       s.run_at, s.finished_at, s.errors -> -1 ->> 'error' AS error_class,
       s.errors -> -1 ->> 'message' AS last_error, s.tags
  FROM (SELECT j.*, NULL::timestamptz AS finished_at, ''::text AS error_text
          FROM pgqueue.jobs AS j) AS s
 WHERE (%(after_id)s::bigint IS NULL OR s.id < %(after_id)s)
{{search_filter}}
 ORDER BY s.id DESC
 LIMIT %(limit)s

-- name: search_job_history
SELECT s.id, s.state, s.queue, s.task, s.priority, s.attempts, s.max_attempts, s.created_at,
       NULL::timestamptz AS run_at, s.finished_at, s.errors -> -1 ->> 'error' AS error_class,
       s.errors -> -1 ->> 'message' AS last_error, s.tags
  FROM (SELECT h.*, ''::text AS error_text FROM pgqueue.job_history AS h) AS s
 WHERE (%(after_at)s::timestamptz IS NULL
        OR (s.finished_at, s.id) < (%(after_at)s::timestamptz, %(after_id)s::bigint))
{{search_filter}}
 ORDER BY s.finished_at DESC, s.id DESC
 LIMIT %(limit)s

-- name: search_dead_letters
-- A dead letter's last error (or why it died) is searched besides its attempts' errors.
SELECT s.id, s.state, s.queue, s.task, s.priority, s.attempts, s.max_attempts, s.created_at,
       NULL::timestamptz AS run_at, s.finished_at, s.errors -> -1 ->> 'error' AS error_class,
       coalesce(s.last_error, s.reason) AS last_error, s.tags
  FROM (SELECT d.*, 'dead'::text AS state, d.dead_at AS finished_at,
               coalesce(d.last_error, '') AS error_text
          FROM pgqueue.dead_letters AS d) AS s
 WHERE (%(after_at)s::timestamptz IS NULL
        OR (s.finished_at, s.id) < (%(after_at)s::timestamptz, %(after_id)s::bigint))
{{search_filter}}
 ORDER BY s.finished_at DESC, s.id DESC
 LIMIT %(limit)s

-- name: workflow_of_job
-- The workflow a job belongs to (if any) and its neighbours there: the parents it waits for
-- and the dependents waiting for it, each with where it stands now.
SELECT n.workflow_id, w.name AS workflow_name, n.name AS node_name, n.role, m.job_id,
       CASE WHEN m.job_id = ANY(n.parents) THEN 'parent' ELSE 'dependent' END AS relation,
       m.name AS job_name, m.task, m.state
  FROM pgqueue.workflow_nodes AS n
  JOIN pgqueue.workflows AS w ON w.id = n.workflow_id
  LEFT JOIN pgqueue.workflow_jobs AS m
         ON m.workflow_id = n.workflow_id
        AND (m.job_id = ANY(n.parents) OR m.job_id = ANY(n.dependents))
 WHERE n.job_id = %(id)s
 ORDER BY m.job_id

-- name: list_running_jobs
SELECT id, queue, task, attempt, max_attempts, worker_id, host, pid, started_at, running_for,
       lease_left, cancel_requested, progress, progress_at, meta, tags
  FROM pgqueue.running_jobs
 ORDER BY started_at, id
 LIMIT %(limit)s

-- name: list_workers
-- Stopped workers: all of them, or those stopped within an interval (by the database's clock).
SELECT id, host, pid, queues, concurrency, version, started_at, last_seen, stopped_at, status,
       jobs_held, jobs_succeeded, jobs_retried, jobs_dead, jobs_cancelled, leases_lost
  FROM pgqueue.worker_status
 WHERE %(all)s OR status <> 'stopped' OR stopped_at >= now() - %(stopped_within)s::interval
 ORDER BY started_at, id

-- name: list_recent_failures
-- A row counted but whose jobs no longer keep an error (they succeeded on a later attempt, or
-- were cancelled or purged: their errors went with them) has no error or time in the view; its
-- time is then the last minute its failures were counted in, so no row reads blank.
SELECT f.queue, f.task, f.retried, f.dead, f.error_class, f.last_error,
       coalesce(f.failed_at,
                (SELECT max(c.minute) FROM pgqueue.job_counts AS c
                  WHERE c.queue = f.queue AND c.task = f.task AND c.retried + c.dead > 0
                    AND c.minute >= now() - interval '1 hour')) AS failed_at
  FROM pgqueue.recent_failures AS f
 ORDER BY 7 DESC NULLS LAST, f.queue, f.task

-- name: list_throughput
SELECT minute, queue, succeeded, retried, dead, cancelled
  FROM pgqueue.throughput
 ORDER BY minute, queue

-- name: queue_depths
-- The metrics exporter's one query per scrape: live jobs by queue and state, and the age of
-- the oldest ready job per queue. Reads only the (small) hot table.
SELECT queue,
       count(*) FILTER (WHERE state = 'ready' OR (state = 'scheduled' AND run_at <= now())),
       count(*) FILTER (WHERE state = 'scheduled' AND run_at > now()),
       count(*) FILTER (WHERE state = 'running'),
       coalesce(extract(epoch FROM now() - min(run_at) FILTER (
           WHERE state = 'ready' OR (state = 'scheduled' AND run_at <= now()))), 0)
  FROM pgqueue.jobs
 GROUP BY queue

-- name: listen_results
LISTEN pgqueue_results

-- name: job_outcome
-- Where a job is now, for pgq.result() (its task: whose return annotation types the result):
-- live, recorded in job_history, or dead; else 'gone'
-- when the id sequence has handed it out (a job that finished and left no record: it kept no
-- result, or its record was pruned; or an enqueue that rolled back), and no row for an id never
-- handed out. pg_sequence_last_value is NULL before the first nextval and needs only USAGE; the
-- sequence starts at 1, so an id under it was never handed out either.
SELECT 'live' AS place, j.state, j.result_ttl IS NOT NULL AS keeps, NULL::jsonb AS result,
       j.errors -> -1 ->> 'message' AS error, false AS expired, 1 AS rank, j.task
  FROM pgqueue.jobs AS j
 WHERE j.id = %(job_id)s
UNION ALL
SELECT 'history', h.state, h.keep_until IS NOT NULL, h.result, h.errors -> -1 ->> 'message',
       coalesce(h.keep_until < now(), false), 1, h.task
  FROM pgqueue.job_history AS h
 WHERE h.id = %(job_id)s
UNION ALL
SELECT 'dead', 'dead', true, NULL, d.last_error, false, 1, d.task
  FROM pgqueue.dead_letters AS d
 WHERE d.id = %(job_id)s
UNION ALL
SELECT 'gone', NULL, false, NULL, NULL, false, 2, NULL
 WHERE %(job_id)s BETWEEN 1 AND pg_catalog.pg_sequence_last_value('pgqueue.jobs_id_seq'::regclass)
 ORDER BY rank
 LIMIT 1
