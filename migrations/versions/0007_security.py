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
    run_ats timestamptz[], states text[], max_attempts integer[], keys text[],
    concurrency_keys text[], unique_fors interval[], unique_states text[])
RETURNS TABLE (id bigint)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    -- unique_states arrive as comma-separated text (unnest would flatten an array of arrays).
    INSERT INTO pgqueue.jobs AS j (id, queue, task, args, priority, run_at, state,
                                   max_attempts, idempotency_key, concurrency_key, unique_for,
                                   unique_states)
    SELECT u.id, u.queue, u.task, u.args::jsonb, u.priority, u.run_at, u.state,
           u.max_attempts, u.key, u.ckey, u.ufor, string_to_array(u.ustates, ',')
      FROM unnest(ids, queues, tasks, args, priorities, run_ats, states, max_attempts, keys,
                  concurrency_keys, unique_fors, unique_states)
           AS u(id, queue, task, args, priority, run_at, state, max_attempts, key, ckey, ufor,
                ustates)
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING j.id
$$;
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

CREATE FUNCTION pgqueue.kept_keys(keys text[])
RETURNS TABLE (key text, job_id bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT k.key, k.job_id FROM pgqueue.idempotency_keys AS k
     WHERE k.key = ANY(keys) AND k.expires_at > now()
$$;
REVOKE EXECUTE ON FUNCTION pgqueue.kept_keys(text[]) FROM PUBLIC;

CREATE FUNCTION pgqueue.drop_raced_keyed_jobs(ids bigint[])
RETURNS TABLE (id bigint, idempotency_key text, holder bigint)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    DELETE FROM pgqueue.jobs AS j
     USING pgqueue.idempotency_keys AS k
     WHERE j.id = ANY(ids) AND k.key = j.idempotency_key AND k.expires_at > now()
       AND k.job_id <> j.id
    RETURNING j.id, j.idempotency_key, k.job_id
$$;
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
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
