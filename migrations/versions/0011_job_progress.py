"""Job progress: what a running handler last reported (``ctx.progress(...)``).

* ``jobs.progress`` (jsonb: a fraction from 0 to 1, or a JSON object) and ``jobs.progress_at``
  (when the heartbeat wrote it). Written by the worker's heartbeat, the statement that extends
  the lease anyway, so reporting costs no statement; both columns are unindexed, so the update
  stays HOT. Nothing clears them when an attempt ends: a value belongs to the attempt that
  started before it was written (``progress_at >= started_at``), which is how the view and
  ``pgq.progress()`` tell the current attempt's from an earlier one's without touching the
  claim, the retry or the reaper.
* ``running_jobs`` gains ``progress`` and ``progress_at`` (NULL until this attempt reports).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op

from pgqueue.db.migrate import sql_script

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | None = None
depends_on: str | None = None

UPGRADE = r"""
ALTER TABLE pgqueue.jobs ADD COLUMN progress jsonb, ADD COLUMN progress_at timestamptz;
COMMENT ON COLUMN pgqueue.jobs.progress IS
    'What the running attempt last reported (ctx.progress): a fraction or a JSON object; '
    'it belongs to the attempt that started before progress_at';
\i views/running_jobs/0011.sql
"""

DOWNGRADE = r"""
DROP VIEW pgqueue.running_jobs;
\i views/running_jobs/0006.sql
ALTER TABLE pgqueue.jobs DROP COLUMN progress, DROP COLUMN progress_at;
"""


def upgrade() -> None:
    op.execute(sql_script(UPGRADE))


def downgrade() -> None:
    op.execute(sql_script(DOWNGRADE))
