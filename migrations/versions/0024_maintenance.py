"""Bloat left by a held snapshot, for the maintenance service and operators.

* view ``bloat``: each of pgqueue's tables and B-tree indexes, its size and an estimate of the
  size it would take rebuilt (the maintenance service, pgqueue/worker/maintainer.py, runs
  ``VACUUM (INDEX_CLEANUP ON)`` and ``REINDEX INDEX CONCURRENTLY`` from it once the horizon
  has moved on).

Revision ID: 0024
Revises: 0022
Create Date: 2026-12-06
"""

from __future__ import annotations

from alembic import op

from pgqueue.db.migrate import sql_script

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | None = None
depends_on: str | None = None


UPGRADE = r"""
\i views/bloat/0024.sql
"""

DOWNGRADE = r"""
DROP VIEW pgqueue.bloat;
"""


def upgrade() -> None:
    op.execute(sql_script(UPGRADE))


def downgrade() -> None:
    op.execute(sql_script(DOWNGRADE))
