"""Job metadata and tags: ``enqueue(..., meta={...}, tags=[...])``.

* ``meta jsonb`` (a JSON object) and ``tags text[]`` on ``jobs``, ``job_history``,
  ``dead_letters`` and ``schedules``: NULL when a job has none, so the rows of jobs without
  them are as small as before (a NULL costs a bit in the row's null bitmap, which every row of
  these tables already has). No constraint and no index on ``jobs``: the claim's UPDATE
  checks every CHECK constraint of the row and inserts into every index whose predicate the
  running row meets.
* Every statement that moves a job carries them: the ack's history rows, ``fail_jobs``'s dead
  letters and cancelled rows, ``cancel()``, the reaper (``reap_jobs``), replay, unwritable
  outcomes, workflow settling (cancelled descendants; the ``on_failure`` step gets the
  workflow's, from its spec), cron ticks (the schedule's).
* ``enqueue_job`` and ``enqueue`` take ``meta`` and ``tags`` as new trailing parameters with
  defaults (existing calls keep working); ``insert_keyed_jobs`` takes one more array each. The
  signatures change, so each is dropped and created again, with ``SECURITY DEFINER`` and
  ``EXECUTE`` revoked from ``PUBLIC`` as revision 0007 made them (the roles script grants it to
  the producer role again, by name).
* ``claim`` returns ``meta``, ``tags`` and ``last_trace`` (the trace context its latest failed
  attempt's error record carries, for tracing: see ``pgqueue.tracing``); the return type
  changes, so it is dropped and created again. ``settle_finished`` states ``SECURITY DEFINER``
  itself (``CREATE OR REPLACE`` would otherwise reset what 0007's ``ALTER`` set).
* ``running_jobs`` and ``dead_letter_errors`` gain ``meta`` and ``tags``.
* Job search by tag on the finished places: GIN indexes on ``job_history.tags`` and
  ``dead_letters.tags``, partial (``WHERE tags IS NOT NULL``), so the rows of untagged jobs
  (and the plain ack, which writes no history) maintain nothing more.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03
"""

from __future__ import annotations

from alembic import op

from pgqueue.db.migrate import sql_script

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | None = None
depends_on: str | None = None

_ENQUEUE_JOB_0005 = "text, jsonb, text, integer, timestamptz, integer, text, text, interval, text[]"
_ENQUEUE_0005 = "text, jsonb, text, integer, timestamptz, integer, text, text"
_KEYED_0007 = (
    "bigint[], text[], text[], text[], smallint[], timestamptz[], text[], integer[], text[], "
    "text[], interval[], text[]"
)
_CLAIM = "text[], text[], integer, interval, uuid, integer[]"

UPGRADE = rf"""
ALTER TABLE pgqueue.jobs ADD COLUMN meta jsonb, ADD COLUMN tags text[];
ALTER TABLE pgqueue.job_history ADD COLUMN meta jsonb, ADD COLUMN tags text[];
ALTER TABLE pgqueue.dead_letters ADD COLUMN meta jsonb, ADD COLUMN tags text[];
ALTER TABLE pgqueue.schedules ADD COLUMN meta jsonb, ADD COLUMN tags text[];
COMMENT ON COLUMN pgqueue.jobs.meta IS
    'The job''s metadata (a JSON object; NULL: none), carried to job_history and dead_letters';
COMMENT ON COLUMN pgqueue.jobs.tags IS
    'The job''s tags (NULL: none), carried to job_history and dead_letters';

CREATE INDEX job_history_tags_idx ON pgqueue.job_history USING gin (tags)
    WHERE tags IS NOT NULL;
CREATE INDEX dead_letters_tags_idx ON pgqueue.dead_letters USING gin (tags)
    WHERE tags IS NOT NULL;

DROP FUNCTION pgqueue.enqueue({_ENQUEUE_0005});
DROP FUNCTION pgqueue.enqueue_job({_ENQUEUE_JOB_0005});
\i functions/enqueue_job/0013.sql
REVOKE EXECUTE ON FUNCTION pgqueue.enqueue_job({_ENQUEUE_JOB_0005}, jsonb, text[]) FROM PUBLIC;
\i functions/enqueue/0013.sql
REVOKE EXECUTE ON FUNCTION pgqueue.enqueue({_ENQUEUE_0005}, jsonb, text[]) FROM PUBLIC;

DROP FUNCTION pgqueue.insert_keyed_jobs({_KEYED_0007});
\i functions/insert_keyed_jobs/0013.sql
REVOKE EXECUTE ON FUNCTION pgqueue.insert_keyed_jobs({_KEYED_0007}, jsonb[], jsonb[])
    FROM PUBLIC;

DROP FUNCTION pgqueue.claim({_CLAIM});
\i functions/claim/0013.sql

\i functions/reap_jobs/0013.sql
\i functions/cancel/0013.sql
\i functions/settle_finished/0013.sql

\i views/running_jobs/0013.sql
\i views/dead_letter_errors/0013.sql
"""

DOWNGRADE = rf"""
DROP VIEW pgqueue.dead_letter_errors;
\i views/dead_letter_errors/0006.sql
DROP VIEW pgqueue.running_jobs;
\i views/running_jobs/0011.sql

\i functions/settle_finished/0004.sql
ALTER FUNCTION pgqueue.settle_finished(jsonb)
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
\i functions/cancel/0002.sql
\i functions/reap_jobs/0009.sql

DROP FUNCTION pgqueue.claim({_CLAIM});
\i functions/claim/0010.sql

DROP FUNCTION pgqueue.insert_keyed_jobs({_KEYED_0007}, jsonb[], jsonb[]);
\i functions/insert_keyed_jobs/0007.sql
REVOKE EXECUTE ON FUNCTION pgqueue.insert_keyed_jobs({_KEYED_0007}) FROM PUBLIC;

DROP FUNCTION pgqueue.enqueue({_ENQUEUE_0005}, jsonb, text[]);
DROP FUNCTION pgqueue.enqueue_job({_ENQUEUE_JOB_0005}, jsonb, text[]);
\i functions/enqueue_job/0005.sql
ALTER FUNCTION pgqueue.enqueue_job({_ENQUEUE_JOB_0005})
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
REVOKE EXECUTE ON FUNCTION pgqueue.enqueue_job({_ENQUEUE_JOB_0005}) FROM PUBLIC;
\i functions/enqueue/0005.sql
REVOKE EXECUTE ON FUNCTION pgqueue.enqueue({_ENQUEUE_0005}) FROM PUBLIC;

DROP INDEX pgqueue.dead_letters_tags_idx;
DROP INDEX pgqueue.job_history_tags_idx;
ALTER TABLE pgqueue.schedules DROP COLUMN meta, DROP COLUMN tags;
ALTER TABLE pgqueue.dead_letters DROP COLUMN meta, DROP COLUMN tags;
ALTER TABLE pgqueue.job_history DROP COLUMN meta, DROP COLUMN tags;
ALTER TABLE pgqueue.jobs DROP COLUMN meta, DROP COLUMN tags;
"""


def upgrade() -> None:
    op.execute(sql_script(UPGRADE))


def downgrade() -> None:
    op.execute(sql_script(DOWNGRADE))
