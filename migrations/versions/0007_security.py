"""Security and robustness: enqueue through SECURITY DEFINER entry points, no stuck rows.

* ``enqueue_job`` becomes ``SECURITY DEFINER`` with a fixed ``search_path``, and a new
  ``job_ids_by_key`` and ``insert_keyed_jobs`` do the same for bulk enqueue with idempotency
  keys, so a producer role needs no ``SELECT`` on ``pgqueue.jobs`` beyond ``id`` (it cannot
  read other jobs' args, or even their keys). ``EXECUTE`` on them
  is revoked from ``PUBLIC``; ``pgq roles`` grants it to the producer role.
* A running job must have a lease: a row written as ``running`` with no ``lease_expires_at``
  would never be reaped and never run (nothing pgqueue writes looks like that).

The roles and their grants are not here: roles are cluster-wide and named by the operator, so
``pgq roles`` prints (or applies) that SQL; it is idempotent and is rerun after upgrades.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

from pgqueue.db.migrate import sql_script

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | None = None
depends_on: str | None = None


UPGRADE = r"""
-- Every object the function touches is schema-qualified; the fixed search_path keeps a caller's
-- objects (pg_temp, a schema they own) from being picked up while running as the owner.
ALTER FUNCTION pgqueue.enqueue_job(text, jsonb, text, integer, timestamptz, integer, text, text,
                                   interval, text[])
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
REVOKE EXECUTE ON FUNCTION pgqueue.enqueue_job(text, jsonb, text, integer, timestamptz, integer,
                                               text, text, interval, text[]) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pgqueue.enqueue(text, jsonb, text, integer, timestamptz, integer, text,
                                           text) FROM PUBLIC;

\i functions/job_ids_by_key/0007.sql
REVOKE EXECUTE ON FUNCTION pgqueue.job_ids_by_key(text[]) FROM PUBLIC;

\i functions/insert_keyed_jobs/0007.sql
REVOKE EXECUTE ON FUNCTION pgqueue.insert_keyed_jobs(bigint[], text[], text[], text[],
    smallint[], timestamptz[], text[], integer[], text[], text[], interval[], text[])
    FROM PUBLIC;

-- Flow control's bulk paths, for the same reason: bounded-queue room (it counts jobs), marking
-- tasks keyed, keys kept by finished jobs (unique_for), and taking back a job that raced a
-- holder which finished and kept its key. drop_raced_keyed_jobs deletes only jobs whose key a
-- different, finished job still holds: duplicates that must not exist, whoever asks.
ALTER FUNCTION pgqueue.queue_depth_up_to(text, integer)
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION pgqueue.mark_keyed(text[])
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
REVOKE EXECUTE ON FUNCTION pgqueue.queue_depth_up_to(text, integer) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pgqueue.mark_keyed(text[]) FROM PUBLIC;

\i functions/kept_keys/0007.sql
REVOKE EXECUTE ON FUNCTION pgqueue.kept_keys(text[]) FROM PUBLIC;

\i functions/drop_raced_keyed_jobs/0007.sql
REVOKE EXECUTE ON FUNCTION pgqueue.drop_raced_keyed_jobs(bigint[]) FROM PUBLIC;

-- Workflow settling runs inside whatever statement finished the parent (a worker's ack, the
-- reaper, an operator's cancel): as the owner, so none of those roles needs the privileges the
-- cascade uses (creating an on_failure job, updating workflow nodes).
ALTER FUNCTION pgqueue.settle_finished(jsonb)
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
REVOKE EXECUTE ON FUNCTION pgqueue.settle_finished(jsonb) FROM PUBLIC;

ALTER TABLE pgqueue.jobs ADD CONSTRAINT jobs_running_has_lease
    CHECK (state <> 'running' OR lease_expires_at IS NOT NULL);
"""

DOWNGRADE = r"""
ALTER TABLE pgqueue.jobs DROP CONSTRAINT jobs_running_has_lease;
GRANT EXECUTE ON FUNCTION pgqueue.settle_finished(jsonb) TO PUBLIC;
ALTER FUNCTION pgqueue.settle_finished(jsonb) SECURITY INVOKER RESET search_path;
DROP FUNCTION pgqueue.drop_raced_keyed_jobs(bigint[]);
DROP FUNCTION pgqueue.kept_keys(text[]);
GRANT EXECUTE ON FUNCTION pgqueue.mark_keyed(text[]) TO PUBLIC;
GRANT EXECUTE ON FUNCTION pgqueue.queue_depth_up_to(text, integer) TO PUBLIC;
ALTER FUNCTION pgqueue.mark_keyed(text[]) SECURITY INVOKER RESET search_path;
ALTER FUNCTION pgqueue.queue_depth_up_to(text, integer) SECURITY INVOKER RESET search_path;
DROP FUNCTION pgqueue.insert_keyed_jobs(bigint[], text[], text[], text[], smallint[],
                                        timestamptz[], text[], integer[], text[], text[],
                                        interval[], text[]);
DROP FUNCTION pgqueue.job_ids_by_key(text[]);
GRANT EXECUTE ON FUNCTION pgqueue.enqueue(text, jsonb, text, integer, timestamptz, integer, text,
                                          text) TO PUBLIC;
GRANT EXECUTE ON FUNCTION pgqueue.enqueue_job(text, jsonb, text, integer, timestamptz, integer,
                                              text, text, interval, text[]) TO PUBLIC;
ALTER FUNCTION pgqueue.enqueue_job(text, jsonb, text, integer, timestamptz, integer, text, text,
                                   interval, text[])
    SECURITY INVOKER RESET search_path;
"""


def upgrade() -> None:
    op.execute(sql_script(UPGRADE))


def downgrade() -> None:
    op.execute(DOWNGRADE)
