"""One declaration of a job's input: the row type ``pgqueue.job_input``.

* ``pgqueue.job_input``: a composite type with one attribute per thing a job is enqueued with
  (the stored columns, the delay, the key modes), in the order of ``JOB_INPUT`` in
  ``pgqueue/db/job_rows.py`` (a test holds the two together). The enqueue functions take it
  whole instead of a parameter per option, so an option added later is an attribute added
  (``ALTER TYPE ... ADD ATTRIBUTE``), not a new signature of every function.
* ``pgqueue.insert_jobs(job_input[])``: writes jobs, in order, skipping those whose idempotency
  key is held; ranks the jobs of fair queues. The one statement that lists the stored columns.
  Replaces ``insert_keyed_jobs`` and the workflow path's own INSERT.
* ``pgqueue.enqueue_input(job_input)``: one job, with the idempotency and deduplication logic
  (the body of ``enqueue_job`` until now). It writes ``result_ttl`` with the job, so a job that
  keeps its result needs no second statement and a producer no UPDATE privilege.
* ``pgqueue.enqueue_job(...)`` keeps its signature and behaviour (SQL callers, and
  ``pgqueue.enqueue``, which calls it): it fills in a row and calls ``enqueue_input``.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06
"""

from __future__ import annotations

from alembic import op

from pgqueue.db.migrate import sql_script

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | None = None
depends_on: str | None = None

_KEYED_0015 = (
    "bigint[], text[], text[], text[], smallint[], timestamptz[], text[], integer[], text[], "
    "text[], interval[], text[], jsonb[], jsonb[]"
)

UPGRADE = rf"""
ALTER TABLE pgqueue.jobs ADD COLUMN caused_by bigint;
COMMENT ON COLUMN pgqueue.jobs.caused_by IS
    'The id of the job that led to this one (the caused_by option of enqueue)';

CREATE TYPE pgqueue.job_input AS (
    id              bigint,
    run_at          timestamptz,
    state           text,
    fair_rank       bigint,
    queue           text,
    task            text,
    args            jsonb,
    priority        smallint,
    max_attempts    integer,
    delay           interval,
    idempotency_key text,
    concurrency_key text,
    unique_for      interval,
    unique_states   text[],
    unique_among    text,
    on_conflict     text,
    throttle        interval,
    result_ttl      interval,
    meta            jsonb,
    tags            text[],
    caused_by       bigint
);
COMMENT ON TYPE pgqueue.job_input IS
    'A job as enqueued: what pgqueue.enqueue_input and pgqueue.insert_jobs take';

\i functions/insert_jobs/0018.sql
REVOKE EXECUTE ON FUNCTION pgqueue.insert_jobs(pgqueue.job_input[]) FROM PUBLIC;

\i functions/enqueue_input/0018.sql
REVOKE EXECUTE ON FUNCTION pgqueue.enqueue_input(pgqueue.job_input) FROM PUBLIC;

\i functions/enqueue_job/0018.sql

DROP FUNCTION pgqueue.insert_keyed_jobs({_KEYED_0015});
"""

DOWNGRADE = rf"""
\i functions/insert_keyed_jobs/0015.sql
REVOKE EXECUTE ON FUNCTION pgqueue.insert_keyed_jobs({_KEYED_0015}) FROM PUBLIC;

\i functions/enqueue_job/0015.sql

DROP FUNCTION pgqueue.enqueue_input(pgqueue.job_input);
DROP FUNCTION pgqueue.insert_jobs(pgqueue.job_input[]);
DROP TYPE pgqueue.job_input;
ALTER TABLE pgqueue.jobs DROP COLUMN caused_by;
"""


def upgrade() -> None:
    op.execute(sql_script(UPGRADE))


def downgrade() -> None:
    op.execute(sql_script(DOWNGRADE))
