-- Every DML statement pgqueue's runtime runs. Loaded by pgqueue/db/queries.py; each query starts
-- with a "-- name: <name>" line. Parameters are psycopg placeholders, always bound.

-- name: open_transaction
-- Starts the caller's transaction on an idle non-autocommit connection (psycopg sends BEGIN before
-- a connection's first statement), so that what pgqueue runs next is a savepoint inside it rather
-- than a transaction of its own (see pgqueue/db/connections.py).
SELECT 1

-- ---------------------------------------------------------------------------------------------
-- Enqueue
-- ---------------------------------------------------------------------------------------------

-- name: enqueue_job
-- One job; the SQL function owns the idempotency-key logic and the deduplication modes. delay
-- is an interval from the database clock, never the client's.
SELECT e.id, e.created, e.replaced
  FROM pgqueue.enqueue_job(
           %(task)s, %(args)s::jsonb, %(queue)s, %(priority)s,
           coalesce(%(run_at)s::timestamptz, now() + %(delay)s::interval),
           %(max_attempts)s, %(idempotency_key)s, %(concurrency_key)s,
           %(unique_for)s::interval, %(unique_states)s::text[], %(meta)s::jsonb,
           %(tags)s::text[], %(unique_among)s, %(on_conflict)s, %(throttle)s::interval) AS e

-- name: insert_job
-- The common single job (no idempotency or concurrency key): a plain INSERT, no function call,
-- with the same columns and rules as pgqueue.enqueue_job. It writes nothing when the queue is
-- bounded (max_depth) or fair: then the caller goes through enqueue_job, which checks for room
-- and ranks the job.
INSERT INTO pgqueue.jobs (queue, task, args, priority, run_at, state, max_attempts, result_ttl,
                          meta, tags)
SELECT %(queue)s, %(task)s, %(args)s::jsonb, %(priority)s::smallint, d.due,
       CASE WHEN d.due > now() THEN 'scheduled' ELSE 'ready' END, %(max_attempts)s::integer,
       %(result_ttl)s::interval, %(meta)s::jsonb, %(tags)s::text[]
  FROM (SELECT coalesce(%(run_at)s::timestamptz, now() + %(delay)s::interval, now()) AS due) AS d
 WHERE NOT EXISTS (SELECT FROM pgqueue.queues AS qs
                    WHERE qs.name = %(queue)s AND (qs.max_depth IS NOT NULL OR qs.fair))
RETURNING id

-- name: allocate_job_ids
-- Bulk enqueue reserves its ids up front (so COPY can write them) and reads the database clock
-- once for every run_at/delay in the batch.
SELECT now() AS now, array_agg(nextval('pgqueue.jobs_id_seq')) AS ids
  FROM generate_series(1, %(count)s)

-- name: prepare_bulk
-- Bulk enqueue's one round trip before writing: the database clock, the batch's ids, and the
-- bounded queues (max_depth) that cannot take this many more jobs (counting stops at
-- max_depth, so the check costs at most that many index entries per bounded queue), and the
-- batch's fair queues (their jobs need ranks: fair_ranks_of). Ids of a refused batch are simply
-- never used.
SELECT now(),
       (SELECT array_agg(nextval('pgqueue.jobs_id_seq')) FROM generate_series(1, %(count)s)),
       full_queues.names, full_queues.max_depths, full_queues.depths,
       (SELECT array_agg(qs.name) FROM pgqueue.queues AS qs
         WHERE qs.name = ANY(%(queues)s::text[]) AND qs.fair) AS fair_queues
  FROM (SELECT array_agg(qs.name) AS names, array_agg(qs.max_depth) AS max_depths,
               array_agg(d.depth) AS depths
          FROM unnest(%(queues)s::text[], %(counts)s::integer[]) AS b(queue, adding)
          JOIN pgqueue.queues AS qs ON qs.name = b.queue
         CROSS JOIN LATERAL (SELECT pgqueue.queue_depth_up_to(qs.name, qs.max_depth) AS depth)
               AS d
         WHERE qs.max_depth IS NOT NULL AND d.depth + b.adding > qs.max_depth) AS full_queues

-- name: copy_jobs
COPY pgqueue.jobs (id, queue, task, args, priority, run_at, state, max_attempts, idempotency_key,
                   concurrency_key, meta, tags)
FROM STDIN

-- name: copy_ready_jobs
-- Jobs that are ready now and have no keys, metadata or tags: run_at (now(), the transaction's
-- clock), state, the keys, meta and tags come from the column defaults.
COPY pgqueue.jobs (id, queue, task, args, priority, max_attempts)
FROM STDIN

-- name: fair_ranks_of
-- Bulk enqueue into fair queues: the first rank of each (queue, priority, key) of the batch;
-- the batch's jobs of one group take consecutive ranks from there.
SELECT pgqueue.fair_rank(g.queue, g.priority, g.key)
  FROM unnest(%(queues)s::text[], %(priorities)s::integer[], %(keys)s::text[])
       WITH ORDINALITY AS g(queue, priority, key, ord)
 ORDER BY g.ord

-- name: copy_fair_jobs
-- Jobs of fair queues, with their ranks (other jobs never write the column).
COPY pgqueue.jobs (id, queue, task, args, priority, run_at, state, max_attempts, idempotency_key,
                   concurrency_key, fair_rank, meta, tags)
FROM STDIN

-- name: insert_jobs
-- Tags travel as one JSON array per job (unnest would flatten an array of arrays).
INSERT INTO pgqueue.jobs (id, queue, task, args, priority, run_at, state, max_attempts,
                          idempotency_key, concurrency_key, meta, tags)
SELECT id, queue, task, args::jsonb, priority, run_at, state, max_attempts, key, ckey, meta,
       CASE WHEN tags IS NOT NULL THEN ARRAY(SELECT jsonb_array_elements_text(tags)) END
  FROM unnest(%(ids)s::bigint[], %(queues)s::text[], %(tasks)s::text[], %(args)s::text[],
              %(priorities)s::smallint[], %(run_ats)s::timestamptz[], %(states)s::text[],
              %(max_attempts)s::integer[], %(keys)s::text[], %(concurrency_keys)s::text[],
              %(metas)s::jsonb[], %(tag_lists)s::jsonb[])
       AS u(id, queue, task, args, priority, run_at, state, max_attempts, key, ckey, meta, tags)

-- name: insert_jobs_keyed
-- ON CONFLICT needs SELECT on the key column, which a producer role does not have (it would
-- reveal other jobs' keys), so the insert runs in a SECURITY DEFINER function. unique_states
-- travel as comma-separated text (unnest would flatten an array of arrays).
SELECT k.id
  FROM pgqueue.insert_keyed_jobs(
           %(ids)s::bigint[], %(queues)s::text[], %(tasks)s::text[], %(args)s::text[],
           %(priorities)s::smallint[], %(run_ats)s::timestamptz[], %(states)s::text[],
           %(max_attempts)s::integer[], %(keys)s::text[], %(concurrency_keys)s::text[],
           %(unique_fors)s::interval[], %(unique_states)s::text[], %(metas)s::jsonb[],
           %(tag_lists)s::jsonb[]) AS k

-- name: kept_idempotency_keys
-- Keys finished jobs still hold (unique_for not yet over). Through SECURITY DEFINER functions
-- here and below, so a producer role needs no access to other jobs' keys.
SELECT k.key, k.job_id FROM pgqueue.kept_keys(%(keys)s::text[]) AS k

-- name: drop_raced_keyed_jobs
-- Bulk enqueue, after inserting keyed jobs: a holder that finished and kept its key while we
-- inserted wins; our job is taken back (this statement's snapshot sees the holder's commit).
SELECT d.id, d.idempotency_key, d.holder FROM pgqueue.drop_raced_keyed_jobs(%(ids)s::bigint[]) AS d

-- name: enqueue_jobs_in_order
-- Bulk enqueue of the jobs with a deduplication mode (unique_among 'pending', on_conflict
-- 'replace'/'replace_args', throttle): pgqueue.enqueue_job for each, in input order, in one
-- statement. Each call's statements see the earlier calls' jobs, so a key repeated in the batch
-- behaves as consecutive single enqueues would (a replace updates the batch's own earlier job).
-- unique_states travel as comma-separated text, tags as JSON arrays (unnest would flatten an
-- array of arrays).
SELECT e.id, e.created, e.replaced
  FROM unnest(%(tasks)s::text[], %(args)s::text[], %(queues)s::text[], %(priorities)s::integer[],
              %(run_ats)s::timestamptz[], %(max_attempts)s::integer[], %(keys)s::text[],
              %(concurrency_keys)s::text[], %(unique_fors)s::interval[],
              %(unique_states)s::text[], %(metas)s::jsonb[], %(tag_lists)s::jsonb[],
              %(unique_among)s::text[], %(on_conflict)s::text[], %(throttles)s::interval[])
       WITH ORDINALITY AS u(task, args, queue, priority, run_at, max_attempts, key, ckey, ufor,
                            ustates, meta, tags, among, on_conflict, throttle, n)
 CROSS JOIN LATERAL pgqueue.enqueue_job(
           u.task, u.args::jsonb, u.queue, u.priority, u.run_at, u.max_attempts, u.key, u.ckey,
           u.ufor, string_to_array(u.ustates, ','), u.meta,
           CASE WHEN u.tags IS NOT NULL THEN ARRAY(SELECT jsonb_array_elements_text(u.tags)) END,
           u.among, u.on_conflict, u.throttle) AS e
 ORDER BY u.n

-- name: mark_keyed_tasks
SELECT pgqueue.mark_keyed(%(tasks)s::text[])

-- name: jobs_by_idempotency_keys
-- Through a SECURITY DEFINER function, so a producer role needs no SELECT on pgqueue.jobs.
SELECT k.idempotency_key, k.id FROM pgqueue.job_ids_by_key(%(keys)s::text[]) AS k

-- ---------------------------------------------------------------------------------------------
-- Inspection
-- ---------------------------------------------------------------------------------------------

-- name: schema_version
SELECT version_num FROM pgqueue.pgqueue_alembic_version

-- name: schema_installed
SELECT to_regclass('pgqueue.pgqueue_alembic_version') IS NOT NULL

-- name: schema_version_readable
-- The start-up check: NULL where pgqueue's version table does not exist, else whether this role
-- may read it (a producer role granted before the check existed may not).
SELECT CASE WHEN to_regclass('pgqueue.pgqueue_alembic_version') IS NOT NULL
            THEN has_table_privilege('pgqueue.pgqueue_alembic_version', 'SELECT')
       END

-- name: schema_managed_by
-- How the application migrates, for the command a schema mismatch suggests (failure path only).
SELECT CASE WHEN to_regclass('django_migrations') IS NOT NULL THEN 'django'
            WHEN to_regclass('alembic_version') IS NOT NULL THEN 'alembic'
       END

-- name: queue_stats
SELECT queue, ready, scheduled, running, dead, oldest_ready_age, paused, waiting,
       succeeded_per_min, failed_per_min
  FROM pgqueue.queue_stats
 ORDER BY queue

-- name: set_queue_paused
-- Pausing stops claims from the queue at once (enqueue still works); resuming wakes workers.
WITH upserted AS (
    INSERT INTO pgqueue.queues AS qs (name, paused) VALUES (%(queue)s, %(paused)s)
    ON CONFLICT (name) DO UPDATE SET paused = excluded.paused, updated_at = now()
    RETURNING qs.name, qs.paused
)
SELECT u.name, u.paused, pg_notify('pgqueue_jobs', u.name) AS notified
  FROM upserted AS u

-- ---------------------------------------------------------------------------------------------
-- Worker: claim, heartbeat, complete (all fenced by lease_token), release
-- ---------------------------------------------------------------------------------------------

-- name: claim_jobs
-- Claim up to %(limit)s jobs for this worker in one statement: per queue, walk the ready index
-- in (priority, run_at) order and the scheduled index for due jobs, skipping rows other workers
-- hold (SKIP LOCKED). The MATERIALIZED fence makes the row locks happen exactly once, before
-- the UPDATE. Each claim bumps lease_token: the fencing token every later write must present.
-- When flow control applies to these queues or tasks (weights, limits, keyed jobs, a breaker
-- not closed), a one-time filter skips the walk: the worker learns it from next_due and claims
-- with claim_flow instead.
-- %(after_*)s hold, per queue, the key of the last job this worker's previous full claim took
-- (NULL: from the top). While a long backlog drains, the walk starts after that key instead of
-- stepping again over the index entries of every job claimed since the last VACUUM (B-tree keeps
-- them until then). Jobs that sort before the key (a higher priority enqueued since, a row a
-- concurrent statement had locked) are found by the next walk from the top: the worker walks
-- from the top at least every CLAIM_RESCAN seconds and after every claim that came back short.
WITH candidates AS MATERIALIZED (
    SELECT c.id
      FROM unnest(%(queues)s::text[], %(after_priority)s::smallint[],
                  %(after_run_at)s::timestamptz[], %(after_id)s::bigint[])
           AS q(name, priority, run_at, id)
      -- paused queues are not claimed from
     CROSS JOIN LATERAL (SELECT NOT EXISTS (
               SELECT 1 FROM pgqueue.queues AS qs WHERE qs.name = q.name AND qs.paused)
           AS active) AS qa
     CROSS JOIN LATERAL (
           -- (FOR UPDATE is not allowed directly in a UNION branch, only in a subquery.)
           SELECT r.* FROM (
               SELECT j.id, j.priority, j.run_at
                 FROM pgqueue.jobs AS j
                WHERE qa.active AND j.queue = q.name AND j.state = 'ready'
                  AND (j.priority, j.run_at, j.id)
                      > (coalesce(q.priority, -32768), coalesce(q.run_at, '-infinity'),
                         coalesce(q.id, -9223372036854775808))
                  AND j.task = ANY(%(tasks)s::text[])
                ORDER BY j.priority, j.run_at, j.id
                LIMIT %(limit)s
                  FOR UPDATE SKIP LOCKED) AS r
           UNION ALL
           SELECT s.* FROM (
               SELECT j.id, j.priority, j.run_at
                 FROM pgqueue.jobs AS j
                WHERE qa.active AND j.queue = q.name AND j.state = 'scheduled'
                  AND j.run_at <= now()
                  AND j.task = ANY(%(tasks)s::text[])
                ORDER BY j.run_at, j.id
                LIMIT %(limit)s
                  FOR UPDATE SKIP LOCKED) AS s
     ) AS c
     WHERE NOT pgqueue.flow_controlled(%(queues)s::text[], %(tasks)s::text[])
     ORDER BY c.priority, c.run_at, c.id
     LIMIT %(limit)s
)
UPDATE pgqueue.jobs AS j
   SET state = 'running',
       -- Neither can overflow, whatever a hand-edited row holds: one bad row must not make
       -- every claim of its queue fail. Tokens are only compared for equality, so wrapping
       -- around after 2^32 claims of one job is safe.
       attempts = least(j.attempts, 2147483646) + 1,
       lease_token = CASE WHEN j.lease_token = 2147483647 THEN -2147483648
                          ELSE j.lease_token + 1 END,
       lease_expires_at = now() + %(lease)s::interval,
       worker_id = %(worker_id)s,
       started_at = now()
  FROM candidates AS c
 WHERE j.id = c.id
RETURNING j.id, j.queue, j.task, j.args, j.attempts AS attempt, j.max_attempts, j.lease_token,
          j.priority, j.created_at, j.run_at, j.result_ttl IS NOT NULL AS wants_result, j.meta,
          j.tags, j.errors -> -1 ->> 'trace' AS last_trace

-- name: claim_flow
-- The claim when flow control applies (see pgqueue.claim). A row with a NULL id says limits
-- held work back (throttled: seconds until the next token, or 0), or, with throttled = -1,
-- that flow control no longer applies (claim with claim_jobs again). wake_on_exit: the job took
-- the last free place under a concurrency limit (see ack_jobs_waking).
SELECT c.id, c.queue, c.task, c.args, c.attempts AS attempt, c.max_attempts, c.lease_token,
       c.priority, c.created_at, c.run_at, c.wants_result, c.meta, c.tags, c.last_trace,
       c.throttled, c.wake_on_exit
  FROM pgqueue.claim(%(queues)s::text[], %(tasks)s::text[], %(limit)s, %(lease)s::interval,
                     %(worker_id)s::uuid, %(running)s::integer[]) AS c

-- name: next_due
-- When the worker is idle: seconds until the earliest scheduled job in its queues is due (by the
-- database clock), so it can sleep exactly that long; and whether flow control applies to its
-- queues and tasks (then claim_jobs claims nothing: use claim_flow).
SELECT extract(epoch FROM min(n.run_at) - now()),
       pgqueue.flow_controlled(%(queues)s::text[], %(tasks)s::text[])
  FROM unnest(%(queues)s::text[]) AS q(name)
 CROSS JOIN LATERAL (
       SELECT j.run_at FROM pgqueue.jobs AS j
        WHERE j.queue = q.name AND j.state = 'scheduled'
        ORDER BY j.run_at LIMIT 1) AS n

-- name: heartbeat
-- Extend the leases of every job this worker still holds, in one statement, and refresh the
-- worker's own row. Jobs missing from the result were lost (reaped, or the token moved on);
-- cancel_requested tells the worker to stop a handler. Only unindexed columns change: HOT.
-- The same statement adds the attempts finished since the last heartbeat to the per-minute
-- counts (sorted, so concurrent workers lock the rows in one order), drops day-old counts and
-- the idle_workers rows of workers that stopped or vanished. The held rows are locked in id order first (the worker sends every batch sorted by id too), so
-- a heartbeat and an ack or fail of overlapping jobs never lock rows in opposite orders.
-- Progress handlers reported since the last beat is written with the leases (progress_at
-- tells a value of this attempt from one of an earlier: see the running_jobs view).
WITH me AS (
    UPDATE pgqueue.workers
       SET last_seen = now(), concurrency = %(concurrency)s,
           jobs_succeeded = %(succeeded)s, jobs_retried = %(retried)s,
           jobs_dead = %(dead)s, jobs_cancelled = %(cancelled)s, leases_lost = %(lost)s
     WHERE id = %(worker_id)s
    RETURNING id
), counted AS (
    INSERT INTO pgqueue.job_counts AS c (minute, queue, task, succeeded, retried, dead,
                                         cancelled)
    SELECT date_trunc('minute', now()), u.queue, u.task, u.succeeded, u.retried, u.dead,
           u.cancelled
      FROM unnest(%(count_queues)s::text[], %(count_tasks)s::text[],
                  %(count_succeeded)s::bigint[], %(count_retried)s::bigint[],
                  %(count_dead)s::bigint[], %(count_cancelled)s::bigint[])
           AS u(queue, task, succeeded, retried, dead, cancelled)
     ORDER BY u.queue, u.task
    ON CONFLICT (minute, queue, task) DO UPDATE
       SET succeeded = c.succeeded + excluded.succeeded, retried = c.retried + excluded.retried,
           dead = c.dead + excluded.dead, cancelled = c.cancelled + excluded.cancelled
), expired_counts AS (
    DELETE FROM pgqueue.job_counts WHERE minute < now() - interval '1 day'
), stale_idle AS (
    -- Workers that died while idle: producers would notify for them forever. SKIP LOCKED:
    -- every worker's heartbeat sweeps, and two deleting the same rows in different orders
    -- would deadlock.
    DELETE FROM pgqueue.idle_workers AS i
     WHERE i.worker_id IN (
           SELECT s.worker_id FROM pgqueue.idle_workers AS s
            WHERE NOT EXISTS (SELECT 1 FROM pgqueue.workers AS w
                               WHERE w.id = s.worker_id AND w.stopped_at IS NULL
                                 AND w.last_seen > now() - interval '5 minutes')
              FOR UPDATE SKIP LOCKED)
), held AS MATERIALIZED (
    SELECT j.id
      FROM pgqueue.jobs AS j
      JOIN unnest(%(ids)s::bigint[], %(tokens)s::integer[]) AS h(id, token)
        ON j.id = h.id AND j.lease_token = h.token
     WHERE j.state = 'running'
     ORDER BY j.id
       FOR NO KEY UPDATE OF j
)
UPDATE pgqueue.jobs AS j
   SET lease_expires_at = now() + %(lease)s::interval,
       progress = coalesce(p.value, j.progress),
       progress_at = CASE WHEN p.value IS NULL THEN j.progress_at ELSE now() END
  FROM held AS h
  LEFT JOIN unnest(%(progress_ids)s::bigint[], %(progress)s::jsonb[]) AS p(id, value)
    ON p.id = h.id
 WHERE j.id = h.id
RETURNING j.id, j.lease_token, j.cancel_requested

-- name: extend_leases
-- The loop watchdog's beat while the worker's event loop is stalled by a handler (see
-- pgqueue/worker/watchdog.py): every job this worker holds, by worker id rather than by the
-- (id, token) list the loop keeps, so that jobs claimed while the loop could not look at the
-- claim's reply are covered too. Only leases not yet expired (an expired one may be the
-- reaper's already); rows locked in id order, as the heartbeat does.
WITH me AS (
    UPDATE pgqueue.workers SET last_seen = now() WHERE id = %(worker_id)s
), held AS MATERIALIZED (
    SELECT j.id
      FROM pgqueue.jobs AS j
     WHERE j.worker_id = %(worker_id)s AND j.state = 'running' AND j.lease_expires_at > now()
     ORDER BY j.id
       FOR NO KEY UPDATE OF j
)
UPDATE pgqueue.jobs AS j
   SET lease_expires_at = now() + %(lease)s::interval
  FROM held AS h
 WHERE j.id = h.id

-- fragment: ack_done
-- Success: the job leaves the hot table, but only if this worker still holds it (token match).
-- Stale acks change nothing and are reported by their absence from the result. Most acks end
-- there (one DELETE for the batch). A row goes to job_history only when it is wanted: the job
-- was cancelled while its handler ran, it keeps its result (result_ttl: the task's or the
-- call's, and every workflow member, whose dependents are settled by the history trigger in
-- this same statement), or the operator records every succeeded job (pgqueue.retention).
WITH done AS (
    DELETE FROM pgqueue.jobs AS j
     USING unnest(%(ids)s::bigint[], %(tokens)s::integer[], %(results)s::text[])
           AS a(id, token, result)
     WHERE j.id = a.id AND j.lease_token = a.token AND j.state = 'running'
    RETURNING j.*, a.result AS result_json
), recorded AS (
    INSERT INTO pgqueue.job_history (id, queue, task, args, state, priority, attempts,
                                     max_attempts, created_at, started_at, errors, worker_id,
                                     result, keep_until, meta, tags)
    SELECT d.id, d.queue, d.task, d.args,
           CASE WHEN d.cancel_requested THEN 'cancelled' ELSE 'succeeded' END, d.priority,
           d.attempts, d.max_attempts, d.created_at, d.started_at, d.errors, d.worker_id,
           CASE WHEN NOT d.cancel_requested THEN d.result_json::jsonb END,
           CASE WHEN d.result_ttl IS NOT NULL
                THEN now() + greatest(d.result_ttl, (SELECT r.history_retention
                                                       FROM pgqueue.retention AS r)) END,
           d.meta, d.tags
      FROM done AS d
      -- (The settings subqueries run once per statement, not per row.)
     WHERE d.cancel_requested OR d.result_ttl IS NOT NULL
        OR coalesce((SELECT r.record_succeeded FROM pgqueue.retention AS r), false)
)

-- name: ack_jobs
-- A batch of successes (ack_done), the ids that were still held, and whether each was
-- cancelled meanwhile.
{{ack_done}}
SELECT id, cancel_requested FROM done

-- name: ack_jobs_waking
-- ack_jobs for a batch holding jobs that took the last free place under a concurrency limit
-- (claim_flow's wake_on_exit): the same statement, and it notifies those jobs' queues, so
-- workers whose claims that limit held back look again the moment the places are free (the
-- notifications are delivered at this commit). Other batches use ack_jobs, unchanged.
{{ack_done}}, woken AS (
    SELECT pg_notify('pgqueue_jobs', w.queue) FROM unnest(%(wake)s::text[]) AS w(queue)
)
SELECT id, cancel_requested FROM done
 WHERE (SELECT count(*) FROM woken) >= 0

-- name: complete_job
-- A handler's ctx.transaction(): the job's fenced completion, run in the handler's own
-- transaction as its last statement, so the job completes if and only if the handler's writes
-- commit (pgqueue/job_transaction.py). The same success as ack_jobs (history, result,
-- workflow settling) for one job; its row lock is taken here, just before the COMMIT, so the
-- heartbeat never waits long on a handler's open transaction. No row: the lease was lost and
-- the handler rolls back. The transaction id and the backend's pid tell what became of a
-- commit whose reply was lost (transaction_status, end_transaction). wake: the job took a
-- limit's last free place (see ack_jobs_waking).
{{ack_done}}, woken AS (
    SELECT pg_notify('pgqueue_jobs', w.queue) FROM unnest(%(wake)s::text[]) AS w(queue)
)
SELECT d.id, d.cancel_requested, pg_current_xact_id()::text AS xid, pg_backend_pid() AS pid
  FROM done AS d
 WHERE (SELECT count(*) FROM woken) >= 0

-- name: lock_claimed_job
-- Before a handler's completion, when the claim that gave it the job may not have committed
-- yet (an idle worker starts jobs while its claim's COMMIT is on its way): waits for that
-- claim's transaction and locks the row for the handler's (complete_job's snapshot, a new
-- statement's, then sees the claim). The handler completes only if the row is running under
-- its lease and its worker: a claim the server lost (a crash before its WAL flush) can hand
-- the same token to another worker.
SELECT lease_token, state, worker_id::text AS worker_id
  FROM pgqueue.jobs
 WHERE id = %(id)s
   FOR NO KEY UPDATE

-- name: transaction_status
-- Did a transaction whose COMMIT got no reply commit? 'committed', 'aborted', or
-- 'in progress' (the server has not received the COMMIT yet).
SELECT pg_xact_status(%(xid)s::xid8)

-- name: end_transaction
-- A transaction still in progress after its client lost the connection (the COMMIT was never
-- received, or the server has not noticed the client is gone): end its backend, waiting up to
-- five seconds, so that transaction_status then says for good whether it committed. The pid
-- alone could name another session by now; the transaction id cannot.
SELECT pg_terminate_backend(a.pid, 5000)
  FROM pg_stat_activity AS a
 WHERE a.pid = %(pid)s AND a.backend_xid = xid(%(xid)s::xid8)

-- name: fail_jobs
-- Every unsuccessful outcome, decided in one place with the row locked:
--   cancelled (cancel requested, or the handler was cancelled) -> job_history as cancelled;
--   'fail' (handler raised Fail), 'no_retry' (an error the retry policy excludes) or an error
--   with no attempts left -> dead_letters;
--   'retry' (handler raised Retry: the attempt is not burned, no error recorded) or an error
--   with attempts left -> back to the queue at now() + delay (delay from the task's backoff).
WITH input AS (
    SELECT *
      FROM unnest(%(ids)s::bigint[], %(tokens)s::integer[], %(kinds)s::text[],
                  %(delays)s::double precision[], %(errors)s::text[])
           AS i(id, token, kind, delay, error)
), locked AS MATERIALIZED (
    SELECT j.id, j.queue, i.kind, i.delay,
           -- when the attempt started, beside when it failed: dead letters keep no started_at
           i.error::jsonb || jsonb_build_object('at', now(), 'started_at', j.started_at) AS error,
           CASE WHEN j.cancel_requested OR i.kind = 'cancelled' THEN 'cancelled'
                WHEN i.kind IN ('fail', 'no_retry')
                     OR (i.kind = 'error' AND j.attempts >= j.max_attempts)
                    THEN 'dead'
                ELSE 'retry'
           END AS outcome
      FROM pgqueue.jobs AS j
      JOIN input AS i ON i.id = j.id AND i.token = j.lease_token
     WHERE j.state = 'running'
     ORDER BY j.id
       FOR UPDATE OF j
), retried AS (
    UPDATE pgqueue.jobs AS j
       SET state = CASE WHEN l.delay > 0 THEN 'scheduled' ELSE 'ready' END,
           run_at = now() + make_interval(secs => l.delay),
           attempts = CASE WHEN l.kind = 'retry' THEN j.attempts - 1 ELSE j.attempts END,
           errors = CASE WHEN l.kind = 'retry' THEN j.errors
                         ELSE j.errors || jsonb_build_array(l.error) END,
           lease_expires_at = NULL,
           worker_id = NULL
      FROM locked AS l
     WHERE j.id = l.id AND l.outcome = 'retry'
    RETURNING j.id, j.queue
), dead AS (
    DELETE FROM pgqueue.jobs AS j
     USING locked AS l
     WHERE j.id = l.id AND l.outcome = 'dead'
    RETURNING j.*, l.error AS final_error, l.kind
), buried AS (
    INSERT INTO pgqueue.dead_letters (id, queue, task, args, priority, attempts, max_attempts,
                                      lease_token, idempotency_key, created_at, errors,
                                      last_error, reason, worker_id, meta, tags)
    SELECT id, queue, task, args, priority, attempts, max_attempts, lease_token,
           idempotency_key, created_at, errors || jsonb_build_array(final_error),
           final_error ->> 'message',
           CASE WHEN kind = 'fail' THEN 'failed permanently (Fail raised)'
                WHEN kind = 'no_retry' THEN 'not retried: the task''s retry policy excludes '
                                            || (final_error ->> 'error')
                ELSE 'max attempts reached' END,
           worker_id, meta, tags
      FROM dead
), cancelled AS (
    DELETE FROM pgqueue.jobs AS j
     USING locked AS l
     WHERE j.id = l.id AND l.outcome = 'cancelled'
    RETURNING j.*, l.error AS final_error, l.kind
), archived AS (
    INSERT INTO pgqueue.job_history (id, queue, task, args, state, priority, attempts,
                                     max_attempts, created_at, started_at, errors, worker_id,
                                     meta, tags)
    SELECT id, queue, task, args, 'cancelled', priority, attempts, max_attempts, created_at,
           started_at, CASE WHEN kind = 'cancelled' THEN errors
                            ELSE errors || jsonb_build_array(final_error) END, worker_id,
           meta, tags
      FROM cancelled
), woken AS (
    -- Wake idle workers so they (re)arm their timers for retried jobs; and, for jobs that took
    -- the last free place under a concurrency limit (the wake parameter: their queues, NULL
    -- for most batches), the workers that limit holds back (see ack_jobs_waking).
    SELECT pg_notify('pgqueue_jobs', r.queue)
      FROM (SELECT queue FROM retried UNION SELECT unnest(%(wake)s::text[])) AS r
)
SELECT l.id, l.outcome FROM locked AS l
 WHERE (SELECT count(*) FROM woken) >= 0

-- name: release_jobs
-- Graceful shutdown: give unfinished jobs back without burning their attempt.
UPDATE pgqueue.jobs AS j
   SET state = 'ready', attempts = greatest(j.attempts - 1, 0), lease_expires_at = NULL,
       worker_id = NULL, run_at = now()
  FROM unnest(%(ids)s::bigint[], %(tokens)s::integer[]) AS r(id, token)
 WHERE j.id = r.id AND j.lease_token = r.token AND j.state = 'running'
RETURNING j.id

-- name: locate_jobs
-- Where jobs stand now, for writes retried after a lost reply (the rare path: see
-- pgqueue/worker/leases.py). A job gone, or moved past this worker's token, or released under
-- it, is what its committed first try left; a smaller token means the database lost the claim.
SELECT id, lease_token, state FROM pgqueue.jobs WHERE id = ANY(%(ids)s::bigint[])

-- name: dead_letter_unwritable
-- The completer, for one job whose outcome could not be written even on its own (a constraint,
-- a hand-edited row, its id already taken in job_history or dead_letters): the job goes to the
-- dead letters with what was meant to happen and why it could not. If a dead letter already
-- holds its id, under a fresh id from the sequence, saying so: the existing row is never
-- touched (it is another job's record). Fenced like every other write.
WITH gone AS (
    DELETE FROM pgqueue.jobs AS j
     WHERE j.id = %(id)s AND j.lease_token = %(token)s AND j.state = 'running'
    RETURNING j.*
), placed AS (
    SELECT g.*,
           CASE WHEN EXISTS (SELECT 1 FROM pgqueue.dead_letters AS d WHERE d.id = g.id)
                THEN nextval('pgqueue.jobs_id_seq') ELSE g.id END AS new_id,
           -- What fail_jobs / ack_jobs would have made of it.
           CASE WHEN g.cancel_requested OR %(kind)s = 'cancelled' THEN 'cancelled'
                WHEN %(kind)s = 'ack' THEN 'succeeded'
                WHEN %(kind)s = 'fail' THEN 'failed permanently (Fail raised)'
                WHEN %(kind)s = 'no_retry' THEN 'not retried: the task''s retry policy excludes '
                                                || (%(error)s::jsonb ->> 'error')
                WHEN %(kind)s = 'error' AND g.attempts >= g.max_attempts
                    THEN 'max attempts reached'
                ELSE 'to be retried' END AS meant
      FROM gone AS g
)
INSERT INTO pgqueue.dead_letters (id, queue, task, args, priority, attempts, max_attempts,
                                  lease_token, idempotency_key, created_at, errors, last_error,
                                  reason, worker_id, meta, tags)
SELECT p.new_id, p.queue, p.task, p.args, p.priority, p.attempts, p.max_attempts, p.lease_token,
       p.idempotency_key, p.created_at,
       p.errors
       || CASE WHEN %(error)s::text IS NULL THEN '[]'::jsonb
               ELSE jsonb_build_array(%(error)s::jsonb || jsonb_build_object('at', now())) END
       || jsonb_build_array(jsonb_build_object(
              'attempt', p.attempts, 'at', now(), 'error', 'OutcomeNotWritten',
              'message', %(problem)s::text, 'worker_id', p.worker_id)),
       %(problem)s::text,
       p.meant || ', but that outcome could not be written: ' || %(problem)s::text
       || CASE WHEN p.new_id <> p.id
               THEN '; id ' || p.id || ' is taken by another dead letter, so this job is '
                    || 'recorded as id ' || p.new_id
               ELSE '' END,
       p.worker_id, p.meta, p.tags
  FROM placed AS p
RETURNING id

-- name: expire_unwritable
-- The completer, when not even dead_letter_unwritable could record the job: end its lease now
-- (with the reason in its errors) so the reaper takes it at once instead of it sitting
-- running; the reaper retries it while attempts remain, else dead-letters or parks it.
UPDATE pgqueue.jobs AS j
   SET lease_expires_at = now(),
       errors = j.errors || jsonb_build_array(jsonb_build_object(
                    'attempt', j.attempts, 'at', now(), 'error', 'OutcomeNotWritten',
                    'message', %(problem)s::text, 'worker_id', j.worker_id))
 WHERE j.id = %(id)s AND j.lease_token = %(token)s AND j.state = 'running'
RETURNING j.id

-- name: register_worker
INSERT INTO pgqueue.workers (id, host, pid, queues, concurrency, version, tasks)
VALUES (%(worker_id)s, %(host)s, %(pid)s, %(queues)s, %(concurrency)s, %(version)s, %(tasks)s)

-- name: unserved_tasks
-- Tasks whose jobs wait (ready or scheduled) with no running worker for them: none that
-- serves their queue runs the task (a worker that recorded no tasks, from before migration
-- 0016, counts as running every task of its queues). Such jobs would wait for ever without a
-- word. Running: not stopped and seen within the last two minutes, as worker_status says.
SELECT j.queue, j.task, count(*) AS jobs, min(j.created_at) AS oldest
  FROM pgqueue.jobs AS j
 WHERE j.state IN ('ready', 'scheduled')
   AND NOT EXISTS (
       SELECT 1
         FROM pgqueue.workers AS w
        WHERE w.stopped_at IS NULL
          AND w.last_seen >= now() - interval '2 minutes'
          AND j.queue = ANY (w.queues)
          AND (w.tasks IS NULL OR j.task = ANY (w.tasks)))
 GROUP BY j.queue, j.task
 ORDER BY count(*) DESC, j.queue, j.task
 LIMIT %(limit)s

-- name: register_idle
-- The worker waits for a NOTIFY from now on: producers notify while any such row exists
-- (migration 0008 explains the handshake that follows).
INSERT INTO pgqueue.idle_workers (worker_id) VALUES (%(worker_id)s)
ON CONFLICT (worker_id) DO NOTHING

-- name: idle_handshake
-- True once no producer that may have read idle_workers before this worker's row was there is
-- still in its transaction (they hold the lock shared until they end). Never waits.
SELECT CASE WHEN pg_try_advisory_lock(1885827442, 1)
            THEN pg_advisory_unlock(1885827442, 1) ELSE false END

-- name: unregister_idle
-- Claims come back full again: this worker claims as soon as a slot frees, no NOTIFY needed.
DELETE FROM pgqueue.idle_workers WHERE worker_id = %(worker_id)s

-- name: deregister_worker
WITH idle AS (
    DELETE FROM pgqueue.idle_workers WHERE worker_id = %(worker_id)s
)
UPDATE pgqueue.workers
   SET stopped_at = now(), last_seen = now(), jobs_succeeded = %(succeeded)s,
       jobs_retried = %(retried)s, jobs_dead = %(dead)s, jobs_cancelled = %(cancelled)s,
       leases_lost = %(lost)s
 WHERE id = %(worker_id)s

-- name: reap
SELECT pgqueue.reap(%(max_jobs)s)

-- ---------------------------------------------------------------------------------------------
-- Operator actions: cancel, dead letters
-- ---------------------------------------------------------------------------------------------

-- name: cancel_job
SELECT pgqueue.cancel(%(job_id)s)

-- fragment: matching_dead_letters
-- The dead letters a filter (pgqueue.admin.DeadLetterFilter) selects.
  FROM pgqueue.dead_letters
 WHERE (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s::bigint[]))
   AND (%(task)s::text IS NULL OR task = %(task)s)
   AND (%(queue)s::text IS NULL OR queue = %(queue)s)
   AND (%(error)s::text IS NULL OR strpos(lower(coalesce(last_error, '')), lower(%(error)s)) > 0)
   AND (%(since)s::timestamptz IS NULL OR dead_at >= %(since)s)
   AND (%(until)s::timestamptz IS NULL OR dead_at < %(until)s)

-- name: list_dead_letters
SELECT id, queue, task, args, attempts, max_attempts, reason, last_error, errors, created_at,
       dead_at, meta, tags
{{matching_dead_letters}}
 ORDER BY dead_at DESC, id DESC
 LIMIT %(limit)s

-- name: count_dead_letters
SELECT count(*)
{{matching_dead_letters}}

-- name: replay_dead_letters
-- Move one batch of matching dead letters back to the queue with fresh attempts (same id, errors
-- kept for the record, the last one marked replayed_at, lease_token carried on so no stale
-- worker can touch the new attempt).
-- A dead letter whose idempotency key is held by a live job is left where it is (the holder, as
-- the unique index says: a unique_among 'pending' job that started no longer holds its key). In
-- a fair queue the job gets a rank again (as a job without a key: dead letters keep no
-- concurrency key).
WITH batch AS (
    SELECT d.id
      FROM pgqueue.dead_letters AS d
     WHERE (%(ids)s::bigint[] IS NULL OR d.id = ANY(%(ids)s::bigint[]))
       AND (%(task)s::text IS NULL OR d.task = %(task)s)
       AND (%(queue)s::text IS NULL OR d.queue = %(queue)s)
       AND (%(error)s::text IS NULL
            OR strpos(lower(coalesce(d.last_error, '')), lower(%(error)s)) > 0)
       AND (%(since)s::timestamptz IS NULL OR d.dead_at >= %(since)s)
       AND (%(until)s::timestamptz IS NULL OR d.dead_at < %(until)s)
       AND NOT EXISTS (SELECT 1 FROM pgqueue.jobs AS j
                        WHERE j.idempotency_key = d.idempotency_key
                          AND (j.key_until_started IS NOT TRUE OR j.lease_token = 0))
     ORDER BY d.id
     LIMIT %(batch_size)s
       FOR UPDATE SKIP LOCKED
), moved AS (
    DELETE FROM pgqueue.dead_letters AS d USING batch AS b WHERE d.id = b.id RETURNING d.*
), listed AS (
    SELECT array_agg(m.id ORDER BY m.id) AS ids, array_agg(m.queue ORDER BY m.id) AS queues,
           array_agg(m.priority ORDER BY m.id) AS priorities
      FROM moved AS m
)
INSERT INTO pgqueue.jobs (id, queue, task, args, state, priority, run_at, attempts, max_attempts,
                          lease_token, idempotency_key, created_at, errors, meta, tags,
                          fair_rank)
SELECT m.id, m.queue, m.task, m.args, 'ready', m.priority, now(), 0, m.max_attempts,
       m.lease_token, m.idempotency_key, m.created_at,
       -- The replay is marked on the last error, so the attempt history reads 1, 2, replayed,
       -- 1, 2 (pgqueue.inspect.job_detail), not 1, 2, 1, 2.
       CASE WHEN jsonb_array_length(m.errors) > 0
            THEN jsonb_set(m.errors, '{-1,replayed_at}', to_jsonb(now()))
            ELSE m.errors END,
       m.meta, m.tags, r.rank
  FROM moved AS m
  LEFT JOIN (SELECT u.id, u.rank
               FROM listed AS l,
                    unnest(l.ids, pgqueue.fair_ranks(l.queues, l.priorities,
                                                     array_fill(NULL::text,
                                                                ARRAY[coalesce(cardinality(l.ids),
                                                                               0)])))
                    AS u(id, rank)) AS r ON r.id = m.id
RETURNING id

-- ---------------------------------------------------------------------------------------------
-- Listener
-- ---------------------------------------------------------------------------------------------

-- name: listen_jobs
LISTEN pgqueue_jobs

-- name: listen_cancel
LISTEN pgqueue_cancel

-- name: listen_probe
-- At start-up the listener checks that notifications reach it (they do not through a
-- transaction-pooling PgBouncer): it listens here and has another connection notify it.
LISTEN pgqueue_probe

-- name: unlisten_probe
UNLISTEN pgqueue_probe

-- name: notify_probe
SELECT pg_notify('pgqueue_probe', %(token)s)

-- name: ping
SELECT 1

-- name: begin
-- An idle worker's claim is a transaction of its own, so that its COMMIT can be sent after its
-- rows came back (see WorkerDB.before_commit).
BEGIN

-- name: commit
COMMIT

-- name: rollback
ROLLBACK

-- name: generic_plans
-- For the rest of this transaction, prepared statements run their generic plan. The claim's
-- custom plan is no better, but PostgreSQL keeps choosing it (the generic one's estimate, made
-- without the limit and the queue arrays, looks dearer) and plans the claim again on every
-- call: 0.4-0.7 ms of planning an idle worker's claim then waits for.
SELECT set_config('plan_cache_mode', 'force_generic_plan', true)

-- ---------------------------------------------------------------------------------------------
-- Operations: inspection (CLI, dashboard, metrics) and operator actions on jobs
-- ---------------------------------------------------------------------------------------------

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

-- name: search_live_jobs
-- Live jobs by id (the enqueue order): jobs has no index on created_at, and one would be paid
-- by every claim.
SELECT j.id, j.state, j.queue, j.task, j.priority, j.attempts, j.max_attempts, j.created_at,
       j.run_at, NULL::timestamptz AS finished_at, j.errors -> -1 ->> 'error' AS error_class,
       j.errors -> -1 ->> 'message' AS last_error, j.tags
  FROM pgqueue.jobs AS j
 WHERE (%(after_id)s::bigint IS NULL OR j.id < %(after_id)s)
   AND (%(id)s::bigint IS NULL OR j.id = %(id)s)
   AND (%(task)s::text IS NULL OR j.task = %(task)s)
   AND (%(queue)s::text IS NULL OR j.queue = %(queue)s)
   AND (%(states)s::text[] IS NULL OR j.state = ANY(%(states)s::text[]))
   AND (%(args)s::jsonb IS NULL OR j.args @> %(args)s::jsonb)
   AND (%(tags)s::text[] IS NULL OR j.tags @> %(tags)s::text[])
   AND (%(meta)s::jsonb IS NULL OR j.meta @> %(meta)s::jsonb)
   AND (%(since)s::timestamptz IS NULL OR j.created_at >= %(since)s)
   AND (%(until)s::timestamptz IS NULL OR j.created_at < %(until)s)
   AND (%(error)s::text IS NULL OR (j.errors <> '[]'::jsonb AND EXISTS (
           SELECT FROM jsonb_array_elements(j.errors) AS e
            WHERE strpos(lower(concat_ws(': ', e ->> 'error', e ->> 'message')),
                         lower(%(error)s)) > 0)))
 ORDER BY j.id DESC
 LIMIT %(limit)s

-- name: search_job_history
SELECT h.id, h.state, h.queue, h.task, h.priority, h.attempts, h.max_attempts, h.created_at,
       NULL::timestamptz AS run_at, h.finished_at, h.errors -> -1 ->> 'error' AS error_class,
       h.errors -> -1 ->> 'message' AS last_error, h.tags
  FROM pgqueue.job_history AS h
 WHERE (%(after_at)s::timestamptz IS NULL
        OR (h.finished_at, h.id) < (%(after_at)s::timestamptz, %(after_id)s::bigint))
   AND (%(id)s::bigint IS NULL OR h.id = %(id)s)
   AND (%(task)s::text IS NULL OR h.task = %(task)s)
   AND (%(queue)s::text IS NULL OR h.queue = %(queue)s)
   AND (%(states)s::text[] IS NULL OR h.state = ANY(%(states)s::text[]))
   AND (%(args)s::jsonb IS NULL OR h.args @> %(args)s::jsonb)
   AND (%(tags)s::text[] IS NULL OR h.tags @> %(tags)s::text[])
   AND (%(meta)s::jsonb IS NULL OR h.meta @> %(meta)s::jsonb)
   AND (%(since)s::timestamptz IS NULL OR h.created_at >= %(since)s)
   AND (%(until)s::timestamptz IS NULL OR h.created_at < %(until)s)
   AND (%(finished_since)s::timestamptz IS NULL OR h.finished_at >= %(finished_since)s)
   AND (%(finished_until)s::timestamptz IS NULL OR h.finished_at < %(finished_until)s)
   AND (%(error)s::text IS NULL OR (h.errors <> '[]'::jsonb AND EXISTS (
           SELECT FROM jsonb_array_elements(h.errors) AS e
            WHERE strpos(lower(concat_ws(': ', e ->> 'error', e ->> 'message')),
                         lower(%(error)s)) > 0)))
 ORDER BY h.finished_at DESC, h.id DESC
 LIMIT %(limit)s

-- name: search_dead_letters
SELECT d.id, 'dead' AS state, d.queue, d.task, d.priority, d.attempts, d.max_attempts,
       d.created_at, NULL::timestamptz AS run_at, d.dead_at AS finished_at,
       d.errors -> -1 ->> 'error' AS error_class, coalesce(d.last_error, d.reason) AS last_error,
       d.tags
  FROM pgqueue.dead_letters AS d
 WHERE (%(after_at)s::timestamptz IS NULL
        OR (d.dead_at, d.id) < (%(after_at)s::timestamptz, %(after_id)s::bigint))
   AND (%(id)s::bigint IS NULL OR d.id = %(id)s)
   AND (%(task)s::text IS NULL OR d.task = %(task)s)
   AND (%(queue)s::text IS NULL OR d.queue = %(queue)s)
   AND (%(args)s::jsonb IS NULL OR d.args @> %(args)s::jsonb)
   AND (%(tags)s::text[] IS NULL OR d.tags @> %(tags)s::text[])
   AND (%(meta)s::jsonb IS NULL OR d.meta @> %(meta)s::jsonb)
   AND (%(since)s::timestamptz IS NULL OR d.created_at >= %(since)s)
   AND (%(until)s::timestamptz IS NULL OR d.created_at < %(until)s)
   AND (%(finished_since)s::timestamptz IS NULL OR d.dead_at >= %(finished_since)s)
   AND (%(finished_until)s::timestamptz IS NULL OR d.dead_at < %(finished_until)s)
   AND (%(error)s::text IS NULL
        OR strpos(lower(coalesce(d.last_error, '')), lower(%(error)s)) > 0
        OR EXISTS (
           SELECT FROM jsonb_array_elements(d.errors) AS e
            WHERE strpos(lower(concat_ws(': ', e ->> 'error', e ->> 'message')),
                         lower(%(error)s)) > 0))
 ORDER BY d.dead_at DESC, d.id DESC
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

-- name: retry_waiting_jobs
-- `pgq retry`: waiting jobs (a retry's backoff, or scheduled for later) become ready now.
UPDATE pgqueue.jobs AS j
   SET state = 'ready', run_at = now()
 WHERE j.id = ANY(%(ids)s::bigint[]) AND j.state IN ('scheduled', 'ready')
RETURNING j.id

-- name: make_scheduled_due
-- pgqueue.testing's drain, once nothing is ready: the scheduled jobs of its queues and tasks (a
-- retry's backoff, a run_at later) become ready now, as if their time had come. The claim then
-- takes them like any other.
UPDATE pgqueue.jobs AS j
   SET state = 'ready', run_at = now()
 WHERE j.state = 'scheduled' AND j.queue = ANY(%(queues)s::text[])
   AND j.task = ANY(%(tasks)s::text[])
RETURNING j.id

-- name: enqueued_jobs
-- pgqueue.testing's enqueued(): live jobs, oldest first, by task, queue and state, whose
-- arguments contain %(args)s (jsonb containment: a subset of the arguments).
SELECT j.id, j.queue, j.task, j.args, j.state, j.priority, j.run_at, j.attempts,
       j.max_attempts, j.idempotency_key, j.meta, j.tags
  FROM pgqueue.jobs AS j
 WHERE (%(task)s::text IS NULL OR j.task = %(task)s)
   AND (%(queue)s::text IS NULL OR j.queue = %(queue)s)
   AND (%(states)s::text[] IS NULL OR j.state = ANY(%(states)s::text[]))
   AND (%(args)s::jsonb IS NULL OR j.args @> %(args)s::jsonb)
 ORDER BY j.id

-- name: count_purgeable_jobs
SELECT count(*)
  FROM pgqueue.jobs AS j
 WHERE j.state IN ('ready', 'scheduled')
   AND (%(queue)s::text IS NULL OR j.queue = %(queue)s)
   AND (%(task)s::text IS NULL OR j.task = %(task)s)

-- name: purge_jobs
-- `pgq purge`: delete waiting jobs (never running ones: cancel those).
WITH gone AS (
    DELETE FROM pgqueue.jobs AS j
     WHERE j.state IN ('ready', 'scheduled')
       AND (%(queue)s::text IS NULL OR j.queue = %(queue)s)
       AND (%(task)s::text IS NULL OR j.task = %(task)s)
    RETURNING 1)
SELECT count(*) FROM gone

-- name: count_purgeable_dead_letters
SELECT count(*)
  FROM pgqueue.dead_letters AS d
 WHERE (%(queue)s::text IS NULL OR d.queue = %(queue)s)
   AND (%(task)s::text IS NULL OR d.task = %(task)s)

-- name: purge_dead_letters
WITH gone AS (
    DELETE FROM pgqueue.dead_letters AS d
     WHERE (%(queue)s::text IS NULL OR d.queue = %(queue)s)
       AND (%(task)s::text IS NULL OR d.task = %(task)s)
    RETURNING 1)
SELECT count(*) FROM gone

-- ---------------------------------------------------------------------------------------------
-- pg_cron: schedule pgqueue.reap() inside the database (`pgq cron install-reaper`)
-- ---------------------------------------------------------------------------------------------

-- name: pg_cron_setup
-- Which database pg_cron runs its jobs from (NULL when pg_cron is not preloaded), and its
-- version when the extension exists in the current database.
SELECT current_database() AS database,
       current_setting('cron.database_name', true) AS cron_database,
       (SELECT extversion FROM pg_extension WHERE extname = 'pg_cron') AS version

-- name: pg_cron_schedule
-- Creates the job, or updates the one with this name (pg_cron upserts named jobs).
SELECT cron.schedule_in_database(%(name)s, %(schedule)s, %(command)s, %(database)s)

-- name: pg_cron_unschedule
SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname = %(name)s

-- name: pg_cron_jobs
SELECT jobid AS id, jobname AS name, schedule, command, database, active
  FROM cron.job
 WHERE jobname = %(name)s
-- Results, workflows and retention
-- ---------------------------------------------------------------------------------------------

-- name: set_result_ttl
-- Jobs that keep their result: set in the enqueue's own transaction, before any worker can see
-- the job.
UPDATE pgqueue.jobs AS j
   SET result_ttl = u.ttl
  FROM unnest(%(ids)s::bigint[], %(ttls)s::interval[]) AS u(id, ttl)
 WHERE j.id = u.id

-- name: lock_parent_jobs
-- depends_on: live parents are locked FOR KEY SHARE until the enqueue commits, so a parent
-- cannot finish (its ack would wait) before its new dependents are linked; heartbeats and
-- other updates of the parent are not blocked by this lock mode.
SELECT j.id, n.workflow_id
  FROM pgqueue.jobs AS j
  LEFT JOIN pgqueue.workflow_nodes AS n ON n.job_id = j.id
 WHERE j.id = ANY(%(ids)s::bigint[])
 ORDER BY j.id
   FOR KEY SHARE OF j

-- name: finished_parents
-- depends_on on jobs that already left the hot table: what became of them.
SELECT h.id, h.state, h.result, n.workflow_id
  FROM pgqueue.job_history AS h
  LEFT JOIN pgqueue.workflow_nodes AS n ON n.job_id = h.id
 WHERE h.id = ANY(%(ids)s::bigint[])
UNION ALL
SELECT d.id, 'dead', NULL, NULL
  FROM pgqueue.dead_letters AS d
 WHERE d.id = ANY(%(ids)s::bigint[])

-- name: insert_workflow
INSERT INTO pgqueue.workflows (name, on_failure)
VALUES (%(name)s, %(on_failure)s::jsonb)
RETURNING id

-- name: insert_workflow_jobs
-- Jobs of fair queues get their ranks (pgqueue.fair_ranks: NULL when no queue is fair).
INSERT INTO pgqueue.jobs (id, queue, task, args, priority, run_at, state, max_attempts,
                          result_ttl, concurrency_key, meta, tags, fair_rank)
SELECT id, queue, task, args::jsonb, priority, run_at, state, max_attempts, result_ttl, ckey,
       meta, CASE WHEN tags IS NOT NULL THEN ARRAY(SELECT jsonb_array_elements_text(tags)) END,
       rank
  FROM unnest(%(ids)s::bigint[], %(queues)s::text[], %(tasks)s::text[], %(args)s::text[],
              %(priorities)s::smallint[], %(run_ats)s::timestamptz[], %(states)s::text[],
              %(max_attempts)s::integer[], %(result_ttls)s::interval[],
              %(concurrency_keys)s::text[], %(metas)s::jsonb[], %(tag_lists)s::jsonb[],
              pgqueue.fair_ranks(%(queues)s::text[], %(priorities)s::smallint[],
                                 %(concurrency_keys)s::text[]))
       AS u(id, queue, task, args, priority, run_at, state, max_attempts, result_ttl, ckey,
            meta, tags, rank)

-- name: insert_workflow_nodes
INSERT INTO pgqueue.workflow_nodes (job_id, workflow_id, name, parents, dependents, receive,
                                    result_arg, parent_results)
SELECT n.job_id, %(workflow_id)s, n.name, n.parents, n.dependents, n.receive, n.result_arg,
       coalesce(n.parent_results, '{}'::jsonb)
  FROM jsonb_to_recordset(%(nodes)s::jsonb)
       AS n(job_id bigint, name text, parents bigint[], dependents bigint[], receive text,
            result_arg text, parent_results jsonb)

-- name: link_parents
-- New dependents of live jobs that existed before this enqueue: appended to the parent's node
-- (a parent outside any workflow joins this one), and the parent keeps its result from now on
-- so that its ack records it and settles the dependents in the same statement.
WITH edges AS (
    SELECT parent, array_agg(child ORDER BY child) AS children
      FROM unnest(%(parents)s::bigint[], %(children)s::bigint[]) AS e(parent, child)
     GROUP BY parent
), kept AS (
    UPDATE pgqueue.jobs AS j
       SET result_ttl = %(result_ttl)s::interval
      FROM edges AS e
     WHERE j.id = e.parent AND j.result_ttl IS NULL
)
INSERT INTO pgqueue.workflow_nodes AS n (job_id, workflow_id, dependents)
SELECT parent, %(workflow_id)s, children FROM edges
ON CONFLICT (job_id) DO UPDATE SET dependents = n.dependents || excluded.dependents

-- name: listen_results
LISTEN pgqueue_results

-- name: job_outcome
-- Where a job is now, for pgq.result() (its task: whose return annotation types the result):
-- live, recorded in job_history, or dead; else 'gone'
-- when the id sequence has handed it out (a job that finished and left no record: it kept no
-- result, or its record was pruned; or an enqueue that rolled back), and no row for an id never
-- handed out. pg_sequence_last_value is NULL before the first nextval and needs only USAGE.
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
 WHERE %(job_id)s <= pg_catalog.pg_sequence_last_value('pgqueue.jobs_id_seq'::regclass)
 ORDER BY rank
 LIMIT 1

-- name: list_workflows
SELECT id, name, state, jobs, waiting, ready, running, succeeded, cancelled, dead, created_at,
       last_finished_at
  FROM pgqueue.workflow_overview
 WHERE (%(state)s::text IS NULL OR state = %(state)s)
 ORDER BY id DESC
 LIMIT %(limit)s

-- name: get_workflow
SELECT o.id, o.name, o.state, o.created_at, o.last_finished_at,
       w.on_failure ->> 'task' AS on_failure_task, w.on_failure_job
  FROM pgqueue.workflow_overview AS o
  JOIN pgqueue.workflows AS w ON w.id = o.id
 WHERE o.id = %(workflow_id)s

-- name: workflow_members
SELECT job_id AS id, role, name, task, queue, state, parents, dependents, attempts, result,
       last_error, created_at, finished_at
  FROM pgqueue.workflow_jobs
 WHERE workflow_id = %(workflow_id)s
 ORDER BY job_id

-- name: get_retention
SELECT history_retention, record_succeeded, dead_letter_retention, updated_at
  FROM pgqueue.retention

-- name: ensure_retention
INSERT INTO pgqueue.retention DEFAULT VALUES ON CONFLICT (id) DO NOTHING

-- name: set_retention
-- NULL parameters leave a setting as it is; dead_letter_retention is set (to a value, or NULL:
-- keep forever) only when set_dead_letters is true.
UPDATE pgqueue.retention AS r
   SET history_retention = coalesce(%(history)s::interval, r.history_retention),
       record_succeeded = coalesce(%(record_succeeded)s::boolean, r.record_succeeded),
       dead_letter_retention = CASE WHEN %(set_dead_letters)s::boolean
                                    THEN %(dead_letters)s::interval
                                    ELSE r.dead_letter_retention END,
       updated_at = now()
RETURNING history_retention, record_succeeded, dead_letter_retention, updated_at

-- name: prune_history
-- One small batch of job_history past its retention: rows without a kept result once the
-- history retention has passed, rows with one once keep_until has. SKIP LOCKED lets every
-- worker's pruner run at once. Workflow nodes of pruned jobs go with them; the ids of their
-- workflows come back so that emptied workflows can be removed.
WITH doomed AS MATERIALIZED (
    SELECT o.id FROM (
        SELECT h.id
          FROM pgqueue.job_history AS h
         WHERE h.keep_until IS NULL
           AND h.finished_at < now() - (SELECT r.history_retention FROM pgqueue.retention AS r)
         ORDER BY h.finished_at
         LIMIT %(batch_size)s
           FOR UPDATE SKIP LOCKED) AS o
    UNION ALL
    SELECT k.id FROM (
        SELECT h.id
          FROM pgqueue.job_history AS h
         WHERE h.keep_until < now()
         ORDER BY h.keep_until
         LIMIT %(batch_size)s
           FOR UPDATE SKIP LOCKED) AS k
), gone AS (
    DELETE FROM pgqueue.job_history AS h USING doomed AS d WHERE h.id = d.id RETURNING h.id
), nodes AS (
    DELETE FROM pgqueue.workflow_nodes AS n USING gone AS g WHERE n.job_id = g.id
    RETURNING n.workflow_id
)
SELECT (SELECT count(*) FROM gone) AS deleted,
       (SELECT array_agg(DISTINCT workflow_id) FROM nodes) AS workflow_ids

-- name: prune_dead_letters
-- One small batch of dead letters older than dead_letter_retention (none when it is NULL).
WITH doomed AS MATERIALIZED (
    SELECT d.id
      FROM pgqueue.dead_letters AS d
     WHERE d.dead_at < now() - (SELECT r.dead_letter_retention FROM pgqueue.retention AS r)
     ORDER BY d.dead_at
     LIMIT %(batch_size)s
       FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM pgqueue.dead_letters AS d USING doomed AS x WHERE d.id = x.id RETURNING d.id
), nodes AS (
    DELETE FROM pgqueue.workflow_nodes AS n USING gone AS g WHERE n.job_id = g.id
    RETURNING n.workflow_id
)
SELECT (SELECT count(*) FROM gone) AS deleted,
       (SELECT array_agg(DISTINCT workflow_id) FROM nodes) AS workflow_ids

-- name: prune_workflows
-- Workflows whose every member has been pruned.
DELETE FROM pgqueue.workflows AS w
 WHERE w.id = ANY(%(ids)s::bigint[])
   AND NOT EXISTS (SELECT 1 FROM pgqueue.workflow_nodes AS n WHERE n.workflow_id = w.id)
RETURNING w.id

-- name: prune_key_buckets
-- One small batch of per-key token buckets that are full again, or whose task no longer has a
-- key rate limit. A missing row is a full bucket, so deleting one changes nothing, and keys
-- that never come back leave no row. SKIP LOCKED: a bucket a claim holds is left for the next
-- pass, so the pruner never waits for a claim (nor deadlocks with one); the row it locks is
-- checked again as it is now.
WITH doomed AS MATERIALIZED (
    SELECT b.task, b.key
      FROM pgqueue.key_buckets AS b
      LEFT JOIN pgqueue.task_limits AS tl ON tl.task = b.task
     WHERE tl.key_rate_limit IS NULL
        OR pgqueue.bucket_tokens(b.tokens, b.tokens_at, tl.key_rate_limit, tl.key_rate_burst,
                                 now()) >= coalesce(tl.key_rate_burst, tl.key_rate_limit)
     LIMIT %(batch_size)s
       FOR UPDATE OF b SKIP LOCKED
), gone AS (
    DELETE FROM pgqueue.key_buckets AS b USING doomed AS x
     WHERE b.task = x.task AND b.key = x.key
    RETURNING b.task
)
SELECT count(*) FROM gone

-- name: settle_waiting
SELECT pgqueue.settle_waiting(%(max_parents)s)
-- Flow control: queue settings, task limits, circuit breakers (pgqueue/flow.py)
-- ---------------------------------------------------------------------------------------------

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

-- name: declare_tasks
-- A worker's start-up: the task names its code registered (producers check names against
-- them). A row declared in the last minute is left alone: a fleet starting at once writes each
-- name about once.
INSERT INTO pgqueue.declared_tasks AS d (task)
SELECT t.task FROM unnest(%(tasks)s::text[]) AS t(task) ORDER BY t.task
ON CONFLICT (task) DO UPDATE SET declared_at = now()
 WHERE d.declared_at < now() - interval '1 minute'

-- name: declared_task_names
-- A producer's miss: the task names workers declared (a few hundred rows at most).
SELECT task FROM pgqueue.declared_tasks

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

-- ---------------------------------------------------------------------------------------------
-- Cron schedules (pgqueue/schedules.py, pgqueue/worker/scheduler.py)
-- ---------------------------------------------------------------------------------------------

-- name: db_now
SELECT now()

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

-- name: prune_idempotency_keys
DELETE FROM pgqueue.idempotency_keys
 WHERE key IN (SELECT key FROM pgqueue.idempotency_keys WHERE expires_at <= now() LIMIT 10000)
