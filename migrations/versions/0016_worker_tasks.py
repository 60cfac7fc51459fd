"""The tasks each worker runs: ``workers.tasks``.

A worker claims only the tasks its app registers, so a job of a task that no running worker
registers (a second app whose tasks module the worker never imported, a renamed task, a
module missing from the deploy) waits for ever in a queue that looks served. Workers record
their tasks at registration; ``pgq status`` and each worker's start-up list the tasks whose
jobs wait with no running worker for them. NULL: a worker from before this revision (it counts
as running every task of its queues).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06
"""

from __future__ import annotations

from alembic import op

from pgqueue.db.migrate import sql_script

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | None = None
depends_on: str | None = None


UPGRADE = r"""
ALTER TABLE pgqueue.workers ADD COLUMN tasks text[];
COMMENT ON COLUMN pgqueue.workers.tasks IS
    'The tasks the worker runs (NULL: a worker from before 0016, counted as running every task '
    'of its queues)';
"""

DOWNGRADE = r"""
ALTER TABLE pgqueue.workers DROP COLUMN tasks;
"""


def upgrade() -> None:
    op.execute(sql_script(UPGRADE))


def downgrade() -> None:
    op.execute(sql_script(DOWNGRADE))
