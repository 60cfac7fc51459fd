"""Workflows and results: waiting jobs, dependencies settled in the finishing transaction,
stored results, retention settings.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None


UPGRADE = r"""
-- A job whose parents have not all succeeded yet is 'waiting'. No index the claim or the reaper
-- read covers waiting rows, so they are never claimed and never reaped; a small partial index
-- lets the pruner's safety net find them.
ALTER TABLE pgqueue.jobs DROP CONSTRAINT jobs_state_check;
ALTER TABLE pgqueue.jobs ADD CONSTRAINT jobs_state_check
    CHECK (state IN ('waiting', 'scheduled', 'ready', 'running'));
CREATE INDEX jobs_waiting_idx ON pgqueue.jobs (id) WHERE state = 'waiting';

-- Set when the job's return value is to be kept (the task's or the call's result_ttl, and every
-- workflow member): the ack then records the job in job_history with its result. NULL: a
-- successful ack is a plain DELETE, as before.
ALTER TABLE pgqueue.jobs ADD COLUMN result_ttl interval
    CHECK (result_ttl IS NULL OR result_ttl > interval '0');

ALTER TABLE pgqueue.job_history ADD COLUMN result jsonb;
-- Rows of jobs that kept a result stay until keep_until (at least the history retention);
-- other rows go when the history retention says so.
ALTER TABLE pgqueue.job_history ADD COLUMN keep_until timestamptz;
CREATE INDEX job_history_keep_until_idx ON pgqueue.job_history (keep_until)
    WHERE keep_until IS NOT NULL;

-- Retention: one row, read by every worker's ack and pruner, so all workers agree. Change it
-- with `pgq retention set` or plain SQL.
CREATE TABLE pgqueue.retention (
    id                    boolean     PRIMARY KEY DEFAULT true CHECK (id),
    -- How long rows stay in job_history (cancelled jobs, and succeeded ones when recorded).
    history_retention     interval    NOT NULL DEFAULT interval '7 days'
                          CHECK (history_retention >= interval '0'),
    -- Record every succeeded job in job_history (a second row per ack). Off: only jobs that
    -- keep a result (and workflow members) are recorded.
    record_succeeded      boolean     NOT NULL DEFAULT false,
    -- Dead letters older than this are purged; NULL keeps them until replayed or purged by hand.
    dead_letter_retention interval    CHECK (dead_letter_retention > interval '0'),
    updated_at            timestamptz NOT NULL DEFAULT now()
);
INSERT INTO pgqueue.retention DEFAULT VALUES;

-- One row per workflow (chain, group, chord, DAG, or jobs linked with depends_on).
CREATE TABLE pgqueue.workflows (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name           text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    -- The step to enqueue when a member first ends dead or cancelled: {task, args, queue,
    -- priority, max_attempts, result_ttl, result_arg}; fired at most once (on_failure_job).
    on_failure     jsonb,
    on_failure_job bigint
);

-- The graph, beside the hot table: one row per member job, kept while the job is live, in
-- job_history or in dead_letters. Workers never touch it on the plain path.
CREATE TABLE pgqueue.workflow_nodes (
    job_id         bigint  PRIMARY KEY,
    workflow_id    bigint  NOT NULL REFERENCES pgqueue.workflows (id) ON DELETE CASCADE,
    role           text    NOT NULL DEFAULT 'step' CHECK (role IN ('step', 'on_failure')),
    name           text,
    parents        bigint[] NOT NULL DEFAULT '{}',
    dependents     bigint[] NOT NULL DEFAULT '{}',
    -- How this job receives its parents' results when it becomes ready: 'one' (a chain step:
    -- the previous result), 'list' (a chord callback: every result, in group order), or NULL.
    receive        text    CHECK (receive IN ('one', 'list')),
    -- The argument the results go into (the first parameter the signature left free).
    result_arg     text,
    -- Parents that succeeded so far: {"<parent id>": result}. The job is ready once every
    -- parent is a key. Written with the row locked, so concurrent parents never lose an update.
    parent_results jsonb   NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX workflow_nodes_workflow_idx ON pgqueue.workflow_nodes (workflow_id);

-- Settle the dependents of jobs that just finished. ``finished``: a JSON array of
-- {id, task, outcome ('succeeded' | 'cancelled' | 'dead' | 'lost'), result, error}.
--   succeeded: its result is recorded on each dependent's node; a dependent whose parents have
--     all succeeded becomes ready (scheduled if its run_at is still ahead), with the results it
--     receives merged into its args, and its queue is notified;
--   otherwise: the workflow's on_failure step, if any, is enqueued (once per workflow), and
--     every waiting descendant is cancelled (recorded in job_history).
-- Called by the triggers below, so it runs in the transaction (and statement) that finished the
-- parents: the ack, fail_jobs, reap(), cancel(). Idempotent, so the pruner's safety net may
-- call it again.
CREATE FUNCTION pgqueue.settle_finished(finished jsonb)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    released integer;
BEGIN
    -- The workflow's on_failure step, enqueued by the first failure only (the UPDATE serialises
    -- concurrent failures on the workflow row). Before the cascade below: cancelling the
    -- descendants fires this trigger again, and the failure that started it must win.
    WITH failed AS (
        SELECT DISTINCT ON (n.workflow_id) n.workflow_id, f.id, f.task, f.outcome, f.error
          FROM jsonb_to_recordset(finished) AS f(id bigint, task text, outcome text, error text)
          JOIN pgqueue.workflow_nodes AS n ON n.job_id = f.id
         WHERE f.outcome <> 'succeeded'
         ORDER BY n.workflow_id, f.id
    ), fired AS (
        UPDATE pgqueue.workflows AS w
           SET on_failure_job = nextval('pgqueue.jobs_id_seq')
          FROM failed AS f
         WHERE w.id = f.workflow_id AND w.on_failure IS NOT NULL AND w.on_failure_job IS NULL
        RETURNING w.id, w.on_failure AS spec, w.on_failure_job AS job_id, f.id AS failed_id,
                  f.task AS failed_task, f.outcome, f.error
    ), node AS (
        INSERT INTO pgqueue.workflow_nodes (job_id, workflow_id, role, parents)
        SELECT job_id, id, 'on_failure', ARRAY[failed_id] FROM fired
    )
    INSERT INTO pgqueue.jobs (id, queue, task, args, priority, max_attempts, state, result_ttl)
    SELECT job_id, spec ->> 'queue', spec ->> 'task',
           coalesce(spec -> 'args', '{}'::jsonb)
           || CASE WHEN spec ? 'result_arg'
                   THEN jsonb_build_object(spec ->> 'result_arg', jsonb_build_object(
                            'workflow_id', id, 'job_id', failed_id, 'task', failed_task,
                            'state', outcome, 'error', error))
                   ELSE '{}'::jsonb END,
           (spec ->> 'priority')::smallint, (spec ->> 'max_attempts')::integer, 'ready',
           (spec ->> 'result_ttl')::interval
      FROM fired;

    -- Failures: nothing below a dead or cancelled job may ever become ready.
    WITH RECURSIVE failed AS (
        SELECT f.id, f.outcome
          FROM jsonb_to_recordset(finished) AS f(id bigint, outcome text)
         WHERE f.outcome <> 'succeeded'
    ), doomed(id, cause) AS (
        SELECT d.child, failed.id
          FROM failed
          JOIN pgqueue.workflow_nodes AS n ON n.job_id = failed.id
         CROSS JOIN LATERAL unnest(n.dependents) AS d(child)
        UNION
        SELECT d.child, doomed.cause
          FROM doomed
          JOIN pgqueue.workflow_nodes AS n ON n.job_id = doomed.id
         CROSS JOIN LATERAL unnest(n.dependents) AS d(child)
    ), victims AS (
        SELECT DISTINCT ON (doomed.id) doomed.id, doomed.cause, failed.outcome
          FROM doomed JOIN failed ON failed.id = doomed.cause
         ORDER BY doomed.id, doomed.cause
    ), gone AS (
        DELETE FROM pgqueue.jobs AS j
         USING victims AS v
         WHERE j.id = v.id AND j.state = 'waiting'
        RETURNING j.*, v.cause, v.outcome
    )
    INSERT INTO pgqueue.job_history (id, queue, task, args, state, priority, attempts,
                                     max_attempts, created_at, started_at, errors, worker_id,
                                     keep_until)
    SELECT g.id, g.queue, g.task, g.args, 'cancelled', g.priority, g.attempts, g.max_attempts,
           g.created_at, g.started_at,
           g.errors || jsonb_build_array(jsonb_build_object(
               'attempt', g.attempts, 'at', now(), 'error', 'UpstreamFailed',
               'message', format('cancelled: upstream job %s ended %s', g.cause, g.outcome))),
           g.worker_id,
           CASE WHEN g.result_ttl IS NOT NULL
                THEN now() + greatest(g.result_ttl, coalesce(r.history_retention, '0')) END
      FROM gone AS g
      LEFT JOIN pgqueue.retention AS r ON true;

    -- Successes. Child nodes are locked in id order so concurrent acks cannot deadlock; a
    -- concurrent ack of another parent of the same child waits for the lock and then sees this
    -- one's key (the UPDATE re-reads the locked row), so exactly one of them releases it.
    WITH done AS (
        SELECT f.id, f.result
          FROM jsonb_to_recordset(finished) AS f(id bigint, outcome text, result jsonb)
         WHERE f.outcome = 'succeeded'
    ), per_child AS (
        SELECT d.child, jsonb_object_agg(done.id::text, coalesce(done.result, 'null'::jsonb))
                   AS results
          FROM done
          JOIN pgqueue.workflow_nodes AS n ON n.job_id = done.id
         CROSS JOIN LATERAL unnest(n.dependents) AS d(child)
         GROUP BY d.child
    ), locked AS MATERIALIZED (
        SELECT c.job_id
          FROM pgqueue.workflow_nodes AS c
          JOIN per_child AS p ON p.child = c.job_id
         ORDER BY c.job_id
           FOR UPDATE OF c
    ), updated AS (
        UPDATE pgqueue.workflow_nodes AS c
           SET parent_results = c.parent_results
               || CASE WHEN c.receive IS NULL
                       -- Only the keys matter when the job receives nothing.
                       THEN (SELECT jsonb_object_agg(k, 'null'::jsonb)
                               FROM jsonb_object_keys(p.results) AS k)
                       ELSE p.results END
          FROM per_child AS p, locked AS l
         WHERE c.job_id = p.child AND l.job_id = c.job_id
        RETURNING c.job_id, c.parents, c.parent_results, c.receive, c.result_arg
    ), ready AS (
        UPDATE pgqueue.jobs AS j
           SET state = CASE WHEN j.run_at > now() THEN 'scheduled' ELSE 'ready' END,
               args = CASE WHEN u.receive IS NULL OR u.result_arg IS NULL THEN j.args
                           ELSE j.args || jsonb_build_object(u.result_arg, (
                               SELECT CASE WHEN u.receive = 'list'
                                           THEN coalesce(jsonb_agg(e.value ORDER BY e.key::bigint),
                                                         '[]'::jsonb)
                                           ELSE (array_agg(e.value ORDER BY e.key::bigint))[1]
                                      END
                                 FROM jsonb_each(u.parent_results) AS e))
                      END
          FROM updated AS u
         WHERE j.id = u.job_id AND j.state = 'waiting'
           AND u.parent_results ?& u.parents::text[]
        RETURNING j.queue
    )
    SELECT count(*) INTO released
      FROM (SELECT pg_notify('pgqueue_jobs', q.queue)
              FROM (SELECT DISTINCT queue FROM ready) AS q) AS n;
END
$$;

-- After rows land in job_history / dead_letters (whatever statement put them there): wake
-- pgq.result() waiters (one NOTIFY per 400 ids, never one per job) and settle the dependents of
-- workflow members. Statement-level, so an ack batch costs one call.
CREATE FUNCTION pgqueue.history_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    members jsonb;
BEGIN
    -- Most acks insert nothing here, or only history rows nobody waits for: leave at once. (Every
    -- workflow member keeps its result, so a member that finished is always let through.)
    IF NOT EXISTS (SELECT 1 FROM finished AS f
                    WHERE f.keep_until IS NOT NULL OR f.state = 'cancelled') THEN
        RETURN NULL;
    END IF;
    PERFORM pg_notify('pgqueue_results', string_agg(c.id::text, ','))
       FROM (SELECT f.id, (row_number() OVER () - 1) / 400 AS chunk
               FROM finished AS f
              WHERE f.keep_until IS NOT NULL OR f.state = 'cancelled') AS c
      GROUP BY c.chunk;
    SELECT jsonb_agg(jsonb_build_object(
               'id', f.id, 'task', f.task, 'outcome', f.state, 'result', f.result,
               'error', f.errors -> -1 ->> 'message'))
      INTO members
      FROM finished AS f
      JOIN pgqueue.workflow_nodes AS n ON n.job_id = f.id
     WHERE f.keep_until IS NOT NULL OR f.state = 'cancelled';
    IF members IS NOT NULL THEN
        PERFORM pgqueue.settle_finished(members);
    END IF;
    RETURN NULL;
END
$$;

CREATE FUNCTION pgqueue.dead_letters_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    members jsonb;
BEGIN
    PERFORM pg_notify('pgqueue_results', string_agg(c.id::text, ','))
       FROM (SELECT f.id, (row_number() OVER () - 1) / 400 AS chunk FROM finished AS f) AS c
      GROUP BY c.chunk;
    SELECT jsonb_agg(jsonb_build_object(
               'id', f.id, 'task', f.task, 'outcome', 'dead', 'error', f.last_error))
      INTO members
      FROM finished AS f
      JOIN pgqueue.workflow_nodes AS n ON n.job_id = f.id;
    IF members IS NOT NULL THEN
        PERFORM pgqueue.settle_finished(members);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER job_history_settle
    AFTER INSERT ON pgqueue.job_history
    REFERENCING NEW TABLE AS finished
    FOR EACH STATEMENT EXECUTE FUNCTION pgqueue.history_inserted();
CREATE TRIGGER dead_letters_settle
    AFTER INSERT ON pgqueue.dead_letters
    REFERENCING NEW TABLE AS finished
    FOR EACH STATEMENT EXECUTE FUNCTION pgqueue.dead_letters_inserted();

-- Safety net (the pruner runs it now and then): a waiting job with a parent that left the hot
-- table without settling it (removed by hand, say) is settled from what the parent left behind:
-- its job_history row, its dead letter, or nothing ('lost', which cancels the dependents).
-- One statement sees one snapshot, in which a parent's removal and its settling are either
-- both visible or neither, so a job is never settled twice by mistake (and settling is
-- idempotent anyway).
CREATE FUNCTION pgqueue.settle_waiting(max_parents integer DEFAULT 1000)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    stuck jsonb;
BEGIN
    WITH parents AS (
        SELECT DISTINCT p.parent
          FROM pgqueue.jobs AS j
          JOIN pgqueue.workflow_nodes AS n ON n.job_id = j.id
         CROSS JOIN LATERAL unnest(n.parents) AS p(parent)
         WHERE j.state = 'waiting'
           AND NOT n.parent_results ? p.parent::text
           AND NOT EXISTS (SELECT 1 FROM pgqueue.jobs AS l WHERE l.id = p.parent)
         LIMIT max_parents
    )
    SELECT jsonb_agg(jsonb_build_object(
               'id', s.parent,
               'task', coalesce(h.task, d.task),
               'outcome', coalesce(h.state, CASE WHEN d.id IS NOT NULL THEN 'dead' END, 'lost'),
               'result', h.result,
               'error', coalesce(d.last_error, h.errors -> -1 ->> 'message',
                                 'the job left pgqueue.jobs without a record')))
      INTO stuck
      FROM parents AS s
      LEFT JOIN pgqueue.job_history AS h ON h.id = s.parent
      LEFT JOIN pgqueue.dead_letters AS d ON d.id = s.parent;
    IF stuck IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM pgqueue.settle_finished(stuck);
    RETURN jsonb_array_length(stuck);
END
$$;

-- Every workflow member with its current state, wherever the job is now.
CREATE VIEW pgqueue.workflow_jobs AS
SELECT n.workflow_id,
       n.job_id,
       n.role,
       n.name,
       coalesce(j.task, h.task, d.task)                  AS task,
       coalesce(j.queue, h.queue, d.queue)               AS queue,
       CASE WHEN j.id IS NOT NULL THEN j.state
            WHEN h.id IS NOT NULL THEN h.state
            WHEN d.id IS NOT NULL THEN 'dead'
            ELSE 'unknown' END                           AS state,
       n.parents,
       n.dependents,
       coalesce(j.attempts, h.attempts, d.attempts)      AS attempts,
       h.result,
       coalesce(d.last_error, h.errors -> -1 ->> 'message', j.errors -> -1 ->> 'message')
                                                         AS last_error,
       coalesce(j.created_at, h.created_at, d.created_at) AS created_at,
       coalesce(h.finished_at, d.dead_at)                AS finished_at
  FROM pgqueue.workflow_nodes AS n
  LEFT JOIN pgqueue.jobs AS j ON j.id = n.job_id
  LEFT JOIN pgqueue.job_history AS h ON h.id = n.job_id
  LEFT JOIN pgqueue.dead_letters AS d ON d.id = n.job_id;

-- One row per workflow: overall state, counts by state, and every job with its state.
CREATE VIEW pgqueue.workflow_overview AS
SELECT w.id,
       w.name,
       w.created_at,
       CASE WHEN count(*) FILTER (WHERE wj.state IN ('dead', 'cancelled', 'unknown')) > 0
            THEN CASE WHEN count(*) FILTER (
                               WHERE wj.state IN ('waiting', 'scheduled', 'ready', 'running')) > 0
                      THEN 'failing' ELSE 'failed' END
            WHEN count(*) FILTER (WHERE wj.state <> 'succeeded') > 0 THEN 'running'
            ELSE 'succeeded' END                                           AS state,
       count(wj.job_id)                                                    AS jobs,
       count(*) FILTER (WHERE wj.state = 'waiting')                        AS waiting,
       count(*) FILTER (WHERE wj.state IN ('ready', 'scheduled'))          AS ready,
       count(*) FILTER (WHERE wj.state = 'running')                        AS running,
       count(*) FILTER (WHERE wj.state = 'succeeded')                      AS succeeded,
       count(*) FILTER (WHERE wj.state = 'cancelled')                      AS cancelled,
       count(*) FILTER (WHERE wj.state = 'dead')                           AS dead,
       max(wj.finished_at)                                                 AS last_finished_at,
       coalesce(jsonb_agg(jsonb_build_object('id', wj.job_id, 'task', wj.task,
                                             'state', wj.state, 'parents', wj.parents)
                          ORDER BY wj.job_id) FILTER (WHERE wj.job_id IS NOT NULL),
                '[]'::jsonb)                                               AS job_states
  FROM pgqueue.workflows AS w
  LEFT JOIN pgqueue.workflow_jobs AS wj ON wj.workflow_id = w.id
 GROUP BY w.id;

-- queue_stats gains the number of waiting jobs (blocked on their parents).
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
       coalesce(qs.paused, false)                 AS paused,
       coalesce(live.waiting, 0)                  AS waiting
  FROM names AS n
  LEFT JOIN live ON live.queue = n.queue
  LEFT JOIN dead ON dead.queue = n.queue
  LEFT JOIN pgqueue.queues AS qs ON qs.name = n.queue;
"""

DOWNGRADE = r"""
DROP VIEW pgqueue.queue_stats;
CREATE VIEW pgqueue.queue_stats AS
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

DROP VIEW pgqueue.workflow_overview;
DROP VIEW pgqueue.workflow_jobs;
DROP FUNCTION pgqueue.settle_waiting(integer);
DROP TRIGGER dead_letters_settle ON pgqueue.dead_letters;
DROP TRIGGER job_history_settle ON pgqueue.job_history;
DROP FUNCTION pgqueue.dead_letters_inserted();
DROP FUNCTION pgqueue.history_inserted();
DROP FUNCTION pgqueue.settle_finished(jsonb);
DROP TABLE pgqueue.workflow_nodes;
DROP TABLE pgqueue.workflows;
DROP TABLE pgqueue.retention;

-- The older schema has no waiting state: such jobs are recorded as cancelled.
WITH gone AS (DELETE FROM pgqueue.jobs WHERE state = 'waiting' RETURNING *)
INSERT INTO pgqueue.job_history (id, queue, task, args, state, priority, attempts, max_attempts,
                                 created_at, started_at, errors, worker_id)
SELECT id, queue, task, args, 'cancelled', priority, attempts, max_attempts, created_at,
       started_at, errors, worker_id
  FROM gone;

DROP INDEX pgqueue.job_history_keep_until_idx;
ALTER TABLE pgqueue.job_history DROP COLUMN keep_until;
ALTER TABLE pgqueue.job_history DROP COLUMN result;
ALTER TABLE pgqueue.jobs DROP COLUMN result_ttl;
DROP INDEX pgqueue.jobs_waiting_idx;
ALTER TABLE pgqueue.jobs DROP CONSTRAINT jobs_state_check;
ALTER TABLE pgqueue.jobs ADD CONSTRAINT jobs_state_check
    CHECK (state IN ('scheduled', 'ready', 'running'));
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
