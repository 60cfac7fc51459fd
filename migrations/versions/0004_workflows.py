"""Workflows and results: waiting jobs, dependencies settled in the finishing transaction,
stored results, retention settings.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

from pgqueue.db.migrate import sql_script

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

\i functions/settle_finished/0004.sql

\i functions/history_inserted/0004.sql

\i functions/dead_letters_inserted/0004.sql

CREATE TRIGGER job_history_settle
    AFTER INSERT ON pgqueue.job_history
    REFERENCING NEW TABLE AS finished
    FOR EACH STATEMENT EXECUTE FUNCTION pgqueue.history_inserted();
CREATE TRIGGER dead_letters_settle
    AFTER INSERT ON pgqueue.dead_letters
    REFERENCING NEW TABLE AS finished
    FOR EACH STATEMENT EXECUTE FUNCTION pgqueue.dead_letters_inserted();

\i functions/settle_waiting/0004.sql

\i views/workflow_jobs/0004.sql

\i views/workflow_overview/0004.sql

\i views/queue_stats/0004.sql
"""

DOWNGRADE = r"""
DROP VIEW pgqueue.queue_stats;
\i views/queue_stats/0003.sql

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
    op.execute(sql_script(UPGRADE))


def downgrade() -> None:
    op.execute(sql_script(DOWNGRADE))
