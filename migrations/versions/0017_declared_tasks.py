"""Declared task names: what workers run, so that producers check the names they enqueue.

* ``declared_tasks``: one row per task name a worker's code registered, written by every
  worker at start-up (``declare_tasks``, with the other declarations) and by
  ``PgQueue.sync_declarations``. A producer that does not import the task code reads the names
  on a miss (a name neither registered in its process nor among the names it read before) and
  refuses a name no worker declared (``UnknownTaskError``, with the closest names). Rows are
  never deleted by workers: a worker of another deploy may still run a task this one dropped;
  ``declared_at`` says when a worker last declared it.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06
"""

from __future__ import annotations

from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | None = None
depends_on: str | None = None


UPGRADE = r"""
CREATE TABLE pgqueue.declared_tasks (
    task        text        NOT NULL,
    declared_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT declared_tasks_pkey PRIMARY KEY (task)
);
"""

DOWNGRADE = r"""
DROP TABLE pgqueue.declared_tasks;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
