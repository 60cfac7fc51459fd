"""Security and robustness: enqueue through SECURITY DEFINER entry points, no stuck rows.

* ``enqueue_job`` becomes ``SECURITY DEFINER`` with a fixed ``search_path``, and a new
  ``job_ids_by_key`` does the same for bulk enqueue's idempotency-key lookup, so a producer role
  needs no ``SELECT`` on ``pgqueue.jobs`` (it cannot read other jobs' args). ``EXECUTE`` on them
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

ALTER TABLE pgqueue.jobs ADD CONSTRAINT jobs_running_has_lease
    CHECK (state <> 'running' OR lease_expires_at IS NOT NULL);
"""

DOWNGRADE = r"""
ALTER TABLE pgqueue.jobs DROP CONSTRAINT jobs_running_has_lease;
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
