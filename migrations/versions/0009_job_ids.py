"""Job ids: only ids the sequence handed out and no record holds; a reaper one row cannot stop.

A job's id names it for its whole life, in exactly one of ``jobs``, ``dead_letters`` or
``job_history``. pgqueue's own writers keep that (ids come from ``pgqueue.jobs_id_seq``), but a
producer writes ids itself (bulk enqueue reserves them with ``nextval`` and COPYs them, so the
producer role keeps ``INSERT (id)``), and so can anyone editing rows by hand. A job inserted
with an id a dead letter or a history row already holds can never be recorded when it
finishes: the insert into ``dead_letters``/``job_history`` violates the primary key, and the
whole batch statement with it.

* ``jobs_check_new_ids`` (AFTER INSERT, once per statement, over the statement's transition
  table, like the wake-up trigger): for a role that cannot write dead letters itself (the
  producer role), ``pgqueue.check_job_ids`` refuses the statement when a new id was never
  handed out by the sequence (it would collide with a later job) or is held by a dead letter
  or a history row. A one-row insert of this session's ``currval`` (a single enqueue) is fresh
  by construction; otherwise, since ids fresh from the sequence are above every id recorded so
  far, the new rows' min/max are compared with the sequence's last value and the two tables'
  largest ids (one index entry each), and only older ids are looked up. Roles that can write
  dead letters (owner, worker, admin) are not checked (the trigger's WHEN: a privilege lookup,
  no function call): they could write a colliding record directly, and checking them would
  cost every enqueue of the common deployment (one role owning the schema); their hand edits
  are survived by the worker and the reaper instead.
* ``reap()``: the dead letter or cancelled record of a job whose id is already taken there goes
  under a fresh id, saying so (the row that holds the id is never changed); and a job whose
  move fails with a data error (a constraint, a trigger, a hand-edited row) no longer fails the
  whole pass: the pass is redone job by job, and a job that fails alone is parked (scheduled an
  hour from now, the error in its ``errors``) so it neither blocks later passes nor looks held
  by a live worker. Errors that are not about the row (privileges, locks, resources) are raised
  as before.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | None = None
depends_on: str | None = None


UPGRADE = r"""
-- Whether these ids may go into pgqueue.jobs: handed out by the sequence, and held by no dead
-- letter and no history row. Raises if not. SECURITY DEFINER: the producer role may read
-- neither table nor the sequence. Executable by PUBLIC (an upgrade must not break enqueue until
-- `pgq roles` is rerun): it tells only whether an id is taken, which an INSERT tells as well.
CREATE FUNCTION pgqueue.check_job_ids(lowest bigint, highest bigint, ids bigint[])
RETURNS void
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    issued bigint;
    top_dead bigint;
    top_done bigint;
    taken bigint;
BEGIN
    SELECT CASE WHEN s.is_called THEN s.last_value ELSE s.last_value - 1 END,
           (SELECT max(d.id) FROM pgqueue.dead_letters AS d),
           (SELECT max(h.id) FROM pgqueue.job_history AS h)
      INTO issued, top_dead, top_done
      FROM pgqueue.jobs_id_seq AS s;
    IF highest > issued THEN
        RAISE EXCEPTION 'job id % was never handed out by pgqueue.jobs_id_seq (last value %)',
                        highest, issued
              USING ERRCODE = 'check_violation',
                    HINT = 'Job ids come from the sequence: leave id out, or take it from '
                           'nextval(''pgqueue.jobs_id_seq'').';
    END IF;
    -- Ids fresh from the sequence are above every id recorded so far: only older ones can
    -- be taken, and only they are looked up.
    IF lowest <= top_dead THEN
        SELECT i INTO taken
          FROM unnest(ids) AS i JOIN pgqueue.dead_letters AS d ON d.id = i
         ORDER BY i LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'job id % is already used by a dead letter', taken
                  USING ERRCODE = 'unique_violation',
                        HINT = 'Replay the dead letter instead, or enqueue without an id.';
        END IF;
    END IF;
    IF lowest <= top_done THEN
        SELECT i INTO taken
          FROM unnest(ids) AS i JOIN pgqueue.job_history AS h ON h.id = i
         ORDER BY i LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'job id % is already used by a finished job (pgqueue.job_history)',
                            taken
                  USING ERRCODE = 'unique_violation', HINT = 'Enqueue without an id.';
        END IF;
    END IF;
END
$$;

-- For the statements of roles that cannot write dead letters themselves (the trigger's WHEN
-- below). A one-row insert whose id is the one the sequence last handed this session (every
-- single enqueue: the id comes from the column default) is fresh by construction; anything
-- else goes through check_job_ids. search_path is pinned although the function runs as the
-- inserting role: that role is the one it checks, so its own objects must not stand in for
-- pg_catalog's.
CREATE FUNCTION pgqueue.check_new_job_ids() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    lowest bigint;
    highest bigint;
    inserted bigint;
    fresh boolean := false;
BEGIN
    SELECT min(n.id), max(n.id), count(*) INTO lowest, highest, inserted FROM new_jobs AS n;
    IF inserted = 0 THEN
        RETURN NULL;
    END IF;
    IF inserted = 1 THEN
        BEGIN
            fresh := highest = currval('pgqueue.jobs_id_seq');
        EXCEPTION WHEN object_not_in_prerequisite_state THEN
            fresh := false;  -- this session never took an id from the sequence
        END;
    END IF;
    IF NOT fresh THEN
        PERFORM pgqueue.check_job_ids(lowest, highest, ARRAY(SELECT n.id FROM new_jobs AS n));
    END IF;
    RETURN NULL;
END
$$;

-- Roles that may write dead letters themselves (the owner, the worker and admin roles) gain
-- nothing from being checked, and pay only this WHEN (a privilege lookup, no function call):
-- their hand edits are survived by the worker and the reaper instead. Both the current and the
-- session role must be such a role: enqueue_job and insert_keyed_jobs (SECURITY DEFINER) run
-- as their owner, and SET ROLE changes only the current role. (The condition is resolved when
-- the trigger is created: no search_path applies to it.)
CREATE TRIGGER jobs_check_new_ids
    AFTER INSERT ON pgqueue.jobs
    REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT
    WHEN (NOT (current_user = session_user
               AND has_table_privilege(current_user, 'pgqueue.dead_letters'::regclass,
                                       'INSERT')))
    EXECUTE FUNCTION pgqueue.check_new_job_ids();

-- The reaper's moves for some expired (and locked) jobs: cancelled ones to job_history, those
-- out of attempts to dead_letters, the rest back to the queue with backoff. A record whose id
-- is already taken goes under a fresh id, saying so.
CREATE FUNCTION pgqueue.reap_jobs(expired bigint[], backoff_base double precision,
                                  backoff_cap double precision)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE pgqueue.jobs AS j
       SET errors = j.errors || jsonb_build_array(jsonb_build_object(
               'attempt', j.attempts, 'at', now(), 'error', 'LeaseExpired',
               'message', 'lease expired: the worker stopped heartbeating (crashed, killed,'
                          ' hung, or lost the database)',
               'worker_id', j.worker_id))
     WHERE j.id = ANY(expired) AND j.state = 'running';

    WITH gone AS (
        DELETE FROM pgqueue.jobs AS j
         WHERE j.id = ANY(expired) AND j.state = 'running' AND j.cancel_requested
        RETURNING j.*
    ), placed AS (
        SELECT g.*, CASE WHEN EXISTS (SELECT 1 FROM pgqueue.job_history AS h WHERE h.id = g.id)
                         THEN nextval('pgqueue.jobs_id_seq') ELSE g.id END AS new_id
          FROM gone AS g
    )
    INSERT INTO pgqueue.job_history (id, queue, task, args, state, priority, attempts,
                                     max_attempts, created_at, started_at, errors, worker_id)
    SELECT new_id, queue, task, args, 'cancelled', priority, attempts, max_attempts, created_at,
           started_at,
           CASE WHEN new_id = id THEN errors
                ELSE errors || jsonb_build_array(jsonb_build_object(
                         'attempt', attempts, 'at', now(), 'error', 'IdTaken',
                         'message', 'id ' || id || ' is taken by another history row, so this '
                                    || 'job is recorded as id ' || new_id)) END,
           worker_id
      FROM placed;

    WITH gone AS (
        DELETE FROM pgqueue.jobs AS j
         WHERE j.id = ANY(expired) AND j.state = 'running' AND j.attempts >= j.max_attempts
        RETURNING j.*
    ), placed AS (
        SELECT g.*, CASE WHEN EXISTS (SELECT 1 FROM pgqueue.dead_letters AS d WHERE d.id = g.id)
                         THEN nextval('pgqueue.jobs_id_seq') ELSE g.id END AS new_id
          FROM gone AS g
    )
    INSERT INTO pgqueue.dead_letters (id, queue, task, args, priority, attempts, max_attempts,
                                      lease_token, idempotency_key, created_at, errors,
                                      last_error, reason, worker_id)
    SELECT new_id, queue, task, args, priority, attempts, max_attempts, lease_token,
           idempotency_key, created_at, errors, errors -> -1 ->> 'message',
           'lease expired with no attempts left'
           || CASE WHEN new_id = id THEN ''
                   ELSE '; id ' || id || ' is taken by another dead letter, so this job is '
                        || 'recorded as id ' || new_id END,
           worker_id
      FROM placed;

    UPDATE pgqueue.jobs AS j
       SET state = 'scheduled',
           run_at = now() + make_interval(secs => random() * least(
               backoff_cap, backoff_base * power(2.0, least(j.attempts, 60)))),
           lease_expires_at = NULL,
           worker_id = NULL
     WHERE j.id = ANY(expired) AND j.state = 'running';
END
$$;

CREATE OR REPLACE FUNCTION pgqueue.reap(max_jobs integer DEFAULT 1000,
                                        backoff_base double precision DEFAULT 1.0,
                                        backoff_cap double precision DEFAULT 300.0,
                                        worker_ttl interval DEFAULT interval '1 hour')
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    expired bigint[];
    one bigint;
    problem text;
BEGIN
    SELECT coalesce(array_agg(s.id), '{}') INTO expired FROM (
        SELECT j.id FROM pgqueue.jobs AS j
         WHERE j.state = 'running' AND j.lease_expires_at < now()
         ORDER BY j.lease_expires_at
         LIMIT max_jobs
           FOR UPDATE SKIP LOCKED) AS s;

    IF cardinality(expired) > 0 THEN
        -- The rows are locked by this transaction from here on (a failed block below rolls
        -- back its changes, not the locks taken before it).
        BEGIN
            PERFORM pgqueue.reap_jobs(expired, backoff_base, backoff_cap);
        EXCEPTION WHEN OTHERS THEN
            -- Only errors about a row are isolated: data exceptions (22), constraint
            -- violations (23), errors raised by triggers (P0). Anything else (privileges, a
            -- lock or statement timeout, resources) would fail every job alike: raise it.
            IF left(SQLSTATE, 2) NOT IN ('22', '23', 'P0') THEN
                RAISE;
            END IF;
            FOREACH one IN ARRAY expired LOOP
                BEGIN
                    PERFORM pgqueue.reap_jobs(ARRAY[one], backoff_base, backoff_cap);
                EXCEPTION WHEN OTHERS THEN
                    IF left(SQLSTATE, 2) NOT IN ('22', '23', 'P0') THEN
                        RAISE;
                    END IF;
                    problem := SQLSTATE || ' ' || SQLERRM;
                    -- Parked where nothing holds it and every operator view shows it; a worker
                    -- tries it again in an hour (the claim counts the attempt, the executor
                    -- dead-letters a job without attempts left).
                    UPDATE pgqueue.jobs AS j
                       SET state = 'scheduled', run_at = now() + interval '1 hour',
                           lease_expires_at = NULL, worker_id = NULL,
                           errors = j.errors || jsonb_build_array(jsonb_build_object(
                               'attempt', j.attempts, 'at', now(), 'error', 'NotReaped',
                               'message', 'the reaper could not move this job on ('
                                          || problem || '); it is tried again in an hour',
                               'worker_id', j.worker_id))
                     WHERE j.id = one;
                    RAISE WARNING 'pgqueue.reap: job % parked for an hour: %', one, problem;
                END;
            END LOOP;
        END;

        PERFORM pg_notify('pgqueue_jobs', q.queue)
           FROM (SELECT DISTINCT queue FROM pgqueue.jobs WHERE id = ANY(expired)) AS q;
    END IF;

    -- Forget workers that have not been seen for a long time (crashed without deregistering,
    -- or stopped cleanly a while ago).
    DELETE FROM pgqueue.workers AS w WHERE w.last_seen < now() - worker_ttl;

    RETURN cardinality(expired);
END
$$;
"""

DOWNGRADE = r"""
CREATE OR REPLACE FUNCTION pgqueue.reap(max_jobs integer DEFAULT 1000,
                                        backoff_base double precision DEFAULT 1.0,
                                        backoff_cap double precision DEFAULT 300.0,
                                        worker_ttl interval DEFAULT interval '1 hour')
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    expired bigint[];
BEGIN
    SELECT coalesce(array_agg(s.id), '{}') INTO expired FROM (
        SELECT j.id FROM pgqueue.jobs AS j
         WHERE j.state = 'running' AND j.lease_expires_at < now()
         ORDER BY j.lease_expires_at
         LIMIT max_jobs
           FOR UPDATE SKIP LOCKED) AS s;

    IF cardinality(expired) > 0 THEN
        UPDATE pgqueue.jobs AS j
           SET errors = j.errors || jsonb_build_array(jsonb_build_object(
                   'attempt', j.attempts, 'at', now(), 'error', 'LeaseExpired',
                   'message', 'lease expired: the worker stopped heartbeating (crashed, killed,'
                              ' hung, or lost the database)',
                   'worker_id', j.worker_id))
         WHERE j.id = ANY(expired);

        WITH gone AS (
            DELETE FROM pgqueue.jobs AS j
             WHERE j.id = ANY(expired) AND j.cancel_requested
            RETURNING j.*)
        INSERT INTO pgqueue.job_history (id, queue, task, args, state, priority, attempts,
                                         max_attempts, created_at, started_at, errors, worker_id)
        SELECT id, queue, task, args, 'cancelled', priority, attempts, max_attempts, created_at,
               started_at, errors, worker_id
          FROM gone;

        WITH gone AS (
            DELETE FROM pgqueue.jobs AS j
             WHERE j.id = ANY(expired) AND j.attempts >= j.max_attempts
            RETURNING j.*)
        INSERT INTO pgqueue.dead_letters (id, queue, task, args, priority, attempts, max_attempts,
                                          lease_token, idempotency_key, created_at, errors,
                                          last_error, reason, worker_id)
        SELECT id, queue, task, args, priority, attempts, max_attempts, lease_token,
               idempotency_key, created_at, errors, errors -> -1 ->> 'message',
               'lease expired with no attempts left', worker_id
          FROM gone;

        UPDATE pgqueue.jobs AS j
           SET state = 'scheduled',
               run_at = now() + make_interval(secs => random() * least(
                   backoff_cap, backoff_base * power(2.0, least(j.attempts, 60)))),
               lease_expires_at = NULL,
               worker_id = NULL
         WHERE j.id = ANY(expired);

        PERFORM pg_notify('pgqueue_jobs', q.queue)
           FROM (SELECT DISTINCT queue FROM pgqueue.jobs WHERE id = ANY(expired)) AS q;
    END IF;

    DELETE FROM pgqueue.workers AS w WHERE w.last_seen < now() - worker_ttl;

    RETURN cardinality(expired);
END
$$;
DROP FUNCTION pgqueue.reap_jobs(bigint[], double precision, double precision);
DROP TRIGGER jobs_check_new_ids ON pgqueue.jobs;
DROP FUNCTION pgqueue.check_new_job_ids();
DROP FUNCTION pgqueue.check_job_ids(bigint, bigint, bigint[]);
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
