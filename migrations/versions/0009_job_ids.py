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

from pgqueue.db.migrate import sql_script

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | None = None
depends_on: str | None = None


UPGRADE = r"""
\i functions/check_job_ids/0009.sql

\i functions/check_new_job_ids/0009.sql

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

\i functions/reap_jobs/0009.sql

\i functions/reap/0009.sql
"""

DOWNGRADE = r"""
\i functions/reap/0002.sql
DROP FUNCTION pgqueue.reap_jobs(bigint[], double precision, double precision);
DROP TRIGGER jobs_check_new_ids ON pgqueue.jobs;
DROP FUNCTION pgqueue.check_new_job_ids();
DROP FUNCTION pgqueue.check_job_ids(bigint, bigint, bigint[]);
"""


def upgrade() -> None:
    op.execute(sql_script(UPGRADE))


def downgrade() -> None:
    op.execute(sql_script(DOWNGRADE))
