"""Deduplication modes: keys held only until a job starts, debounce (replace), throttle.

* ``jobs.key_until_started`` (boolean, NULL for every job but those enqueued with
  ``unique_among => 'pending'``): such a job holds its idempotency key from enqueue until a
  worker first claims it. The unique index on ``idempotency_key`` now says which jobs hold
  their key: ``... WHERE idempotency_key IS NOT NULL AND (key_until_started IS NOT TRUE OR
  lease_token = 0)``. ``lease_token`` is bumped by every claim and by nothing else, so a job
  leaves the index at its first claim and never comes back into it: a retry, a release at
  shutdown or an expired lease puts it back in the queue without its key, so none of those
  writes can ever meet a newer job with the same key (a unique violation there would fail a
  worker's whole batch). Jobs without a key are not in the index, as before: the claim, the
  ack and the plain enqueue write what they wrote (the claim's UPDATE changes ``state``, a
  column of other indexes' predicates, so it was never HOT; ``lease_token`` joins the columns
  that make an update non-HOT, and only the claim changes it).
* ``enqueue_job`` (and the ``enqueue`` shorthand) take ``unique_among`` ('live' | 'pending'),
  ``on_conflict`` ('keep' | 'replace' | 'replace_args') and ``throttle`` (an interval), and
  return ``replaced`` besides ``id`` and ``created``. ``insert_keyed_jobs`` and
  ``job_ids_by_key`` name the new index predicate (the conflict target, the holders).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03
"""

from __future__ import annotations

from alembic import op

from pgqueue.db.migrate import sql_script

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | None = None
depends_on: str | None = None


_ENQUEUE_JOB_0013 = (
    "text, jsonb, text, integer, timestamptz, integer, text, text, interval, text[], jsonb, text[]"
)
_ENQUEUE_0013 = "text, jsonb, text, integer, timestamptz, integer, text, text, jsonb, text[]"
_MODES = "text, text, interval"

UPGRADE = rf"""
ALTER TABLE pgqueue.jobs ADD COLUMN key_until_started boolean;
COMMENT ON COLUMN pgqueue.jobs.key_until_started IS
    'true: the job holds its idempotency_key only until a worker first claims it '
    '(unique_among => ''pending''); NULL: until it finishes';

DROP INDEX pgqueue.jobs_idempotency_key_idx;
-- The jobs that hold their key: every keyed job while it is live, but a job enqueued with
-- unique_among => 'pending' only until its first claim (lease_token is bumped by every claim
-- and never goes back to 0).
CREATE UNIQUE INDEX jobs_idempotency_key_idx ON pgqueue.jobs (idempotency_key)
    WHERE idempotency_key IS NOT NULL AND (key_until_started IS NOT TRUE OR lease_token = 0);

DROP FUNCTION pgqueue.enqueue({_ENQUEUE_0013});
DROP FUNCTION pgqueue.enqueue_job({_ENQUEUE_JOB_0013});
\i functions/enqueue_job/0014.sql
REVOKE EXECUTE ON FUNCTION pgqueue.enqueue_job({_ENQUEUE_JOB_0013}, {_MODES}) FROM PUBLIC;
\i functions/enqueue/0014.sql
REVOKE EXECUTE ON FUNCTION pgqueue.enqueue({_ENQUEUE_0013}, {_MODES}) FROM PUBLIC;

\i functions/insert_keyed_jobs/0014.sql
\i functions/job_ids_by_key/0014.sql
"""

DOWNGRADE = r"""
-- Jobs that started and gave up their key may share it with a newer job: only the holder keeps
-- it, so the index of every live key can be built again.
UPDATE pgqueue.jobs SET idempotency_key = NULL WHERE key_until_started AND lease_token <> 0;
DROP INDEX pgqueue.jobs_idempotency_key_idx;
CREATE UNIQUE INDEX jobs_idempotency_key_idx ON pgqueue.jobs (idempotency_key)
    WHERE idempotency_key IS NOT NULL;

\i functions/job_ids_by_key/0007.sql
\i functions/insert_keyed_jobs/0013.sql

DROP FUNCTION pgqueue.enqueue(text, jsonb, text, integer, timestamptz, integer, text, text,
                              jsonb, text[], text, text, interval);
DROP FUNCTION pgqueue.enqueue_job(text, jsonb, text, integer, timestamptz, integer, text, text,
                                  interval, text[], jsonb, text[], text, text, interval);
\i functions/enqueue_job/0013.sql
REVOKE EXECUTE ON FUNCTION pgqueue.enqueue_job(text, jsonb, text, integer, timestamptz, integer,
    text, text, interval, text[], jsonb, text[]) FROM PUBLIC;
\i functions/enqueue/0013.sql
REVOKE EXECUTE ON FUNCTION pgqueue.enqueue(text, jsonb, text, integer, timestamptz, integer,
    text, text, jsonb, text[]) FROM PUBLIC;

ALTER TABLE pgqueue.jobs DROP COLUMN key_until_started;
"""


def upgrade() -> None:
    op.execute(sql_script(UPGRADE))


def downgrade() -> None:
    op.execute(sql_script(DOWNGRADE))
