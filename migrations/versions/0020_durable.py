"""Durable jobs: step checkpoints, events, and what parking a job will need.

* ``job_steps``: one row per step of a job (``ctx.step``; later the sleeps and waits of
  durable jobs), keyed by ``(job_id, seq)``, ``seq`` the step's place in the run (1, 2, ...).
  A completed step's ``result`` (its JSON) is returned on every later run of the job instead of
  calling the step again. Written by the handler's checkpoint, one statement fenced by the
  job's lease token (``write_step``). No foreign key: a job moves between ``jobs``,
  ``job_history`` and ``dead_letters``, and its steps stay with it until it is pruned
  (``prune_job_steps``). ``state``: succeeded, failed (the step raised; it runs again on the
  next attempt), waiting (a parked sleep or wait), timed_out (a wait that timed out). ``kind``:
  step, sleep, wait; ``wake_at`` and ``event`` say what a sleep or wait waits for.
* ``events``: one row per event name, the first emit's payload (first emit wins), kept until
  ``keep_until`` (pruned after: ``prune_events``).
* ``pgqueue.emit_event(name, payload, keep)``: emits in the caller's transaction and completes
  the waits of the jobs parked on the name (``SECURITY DEFINER``: a producer may emit without
  any right on jobs).
* ``pgqueue.park_for_event(...)``: a running job waits for an event: settled at once when it
  was emitted (or timed out), else the job is parked (``scheduled`` until the timeout, the
  attempt given back). Not yet called by the worker.
* Views ``job_step_status`` (a job's steps) and ``event_status`` (events, and names waited on).

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-06
"""

from __future__ import annotations

from alembic import op

from pgqueue.db.migrate import sql_script

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | None = None
depends_on: str | None = None


UPGRADE = r"""
CREATE TABLE pgqueue.job_steps (
    job_id      bigint      NOT NULL,
    seq         integer     NOT NULL,
    name        text        NOT NULL,
    kind        text        NOT NULL DEFAULT 'step',
    state       text        NOT NULL,
    attempts    integer     NOT NULL DEFAULT 1,
    started_at  timestamptz,
    finished_at timestamptz,
    result      jsonb,
    error       jsonb,
    size        integer,
    wake_at     timestamptz,
    event       text,
    CONSTRAINT job_steps_pkey PRIMARY KEY (job_id, seq),
    CONSTRAINT job_steps_seq_check CHECK (seq >= 1),
    CONSTRAINT job_steps_kind_check CHECK (kind IN ('step', 'sleep', 'wait')),
    CONSTRAINT job_steps_state_check
        CHECK (state IN ('succeeded', 'failed', 'waiting', 'timed_out'))
);
COMMENT ON TABLE pgqueue.job_steps IS
    'Checkpoints of durable jobs: a row per step (ctx.step), sleep or wait, by its place in a run';
-- emit_event finds the jobs waiting for a name; only parked waits are in it.
CREATE INDEX job_steps_waiting_idx ON pgqueue.job_steps (event)
    WHERE state = 'waiting' AND event IS NOT NULL;

CREATE TABLE pgqueue.events (
    name       text        NOT NULL,
    payload    jsonb,
    emitted_at timestamptz NOT NULL DEFAULT now(),
    keep_until timestamptz NOT NULL,
    CONSTRAINT events_pkey PRIMARY KEY (name)
);
COMMENT ON TABLE pgqueue.events IS
    'Events emitted (pgqueue.emit_event): the first emit of a name wins, kept until keep_until';
CREATE INDEX events_keep_until_idx ON pgqueue.events (keep_until);

\i functions/emit_event/0020.sql
ALTER FUNCTION pgqueue.emit_event(text, jsonb, interval)
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
REVOKE EXECUTE ON FUNCTION pgqueue.emit_event(text, jsonb, interval) FROM PUBLIC;
\i functions/park_for_event/0020.sql
REVOKE EXECUTE ON FUNCTION pgqueue.park_for_event(bigint, integer, integer, text, text, interval)
    FROM PUBLIC;

\i views/job_step_status/0020.sql
\i views/event_status/0020.sql
"""

DOWNGRADE = r"""
DROP VIEW pgqueue.event_status;
DROP VIEW pgqueue.job_step_status;
DROP FUNCTION pgqueue.park_for_event(bigint, integer, integer, text, text, interval);
DROP FUNCTION pgqueue.emit_event(text, jsonb, interval);
DROP TABLE pgqueue.events;
DROP TABLE pgqueue.job_steps;
"""


def upgrade() -> None:
    op.execute(sql_script(UPGRADE))


def downgrade() -> None:
    op.execute(sql_script(DOWNGRADE))
