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
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

revision: str = "0007"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None


UPGRADE = r"""
-- Every object the function touches is schema-qualified; the fixed search_path keeps a caller's
-- objects (pg_temp, a schema they own) from being picked up while running as the owner.
ALTER FUNCTION pgqueue.enqueue_job(text, jsonb, text, integer, timestamptz, integer, text)
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
REVOKE EXECUTE ON FUNCTION pgqueue.enqueue_job(text, jsonb, text, integer, timestamptz, integer,
                                               text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION pgqueue.enqueue(text, jsonb, text, integer, timestamptz, integer, text)
    FROM PUBLIC;

-- Bulk enqueue with idempotency keys: which live jobs hold these keys. Only the keys asked for
-- (the caller knows them already), only their ids.
CREATE FUNCTION pgqueue.job_ids_by_key(keys text[])
RETURNS TABLE (idempotency_key text, id bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT j.idempotency_key, j.id FROM pgqueue.jobs AS j WHERE j.idempotency_key = ANY(keys)
$$;
REVOKE EXECUTE ON FUNCTION pgqueue.job_ids_by_key(text[]) FROM PUBLIC;

-- Bulk enqueue of jobs with idempotency keys (ON CONFLICT needs SELECT on the key column, which
-- would let a producer list every key). Returns the ids it inserted; the others' keys are held.
CREATE FUNCTION pgqueue.insert_keyed_jobs(
    ids bigint[], queues text[], tasks text[], args text[], priorities smallint[],
    run_ats timestamptz[], states text[], max_attempts integer[], keys text[])
RETURNS TABLE (id bigint)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    INSERT INTO pgqueue.jobs AS j (id, queue, task, args, priority, run_at, state,
                                   max_attempts, idempotency_key)
    SELECT u.id, u.queue, u.task, u.args::jsonb, u.priority, u.run_at, u.state,
           u.max_attempts, u.key
      FROM unnest(ids, queues, tasks, args, priorities, run_ats, states, max_attempts, keys)
           AS u(id, queue, task, args, priority, run_at, state, max_attempts, key)
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING j.id
$$;
REVOKE EXECUTE ON FUNCTION pgqueue.insert_keyed_jobs(bigint[], text[], text[], text[],
    smallint[], timestamptz[], text[], integer[], text[]) FROM PUBLIC;

ALTER TABLE pgqueue.jobs ADD CONSTRAINT jobs_running_has_lease
    CHECK (state <> 'running' OR lease_expires_at IS NOT NULL);
"""

DOWNGRADE = r"""
ALTER TABLE pgqueue.jobs DROP CONSTRAINT jobs_running_has_lease;
DROP FUNCTION pgqueue.insert_keyed_jobs(bigint[], text[], text[], text[], smallint[],
                                        timestamptz[], text[], integer[], text[]);
DROP FUNCTION pgqueue.job_ids_by_key(text[]);
GRANT EXECUTE ON FUNCTION pgqueue.enqueue(text, jsonb, text, integer, timestamptz, integer, text)
    TO PUBLIC;
GRANT EXECUTE ON FUNCTION pgqueue.enqueue_job(text, jsonb, text, integer, timestamptz, integer,
                                              text) TO PUBLIC;
ALTER FUNCTION pgqueue.enqueue_job(text, jsonb, text, integer, timestamptz, integer, text)
    SECURITY INVOKER RESET search_path;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
