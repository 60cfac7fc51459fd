"""The producer path: ``insert_jobs`` ranks a batch only when it has a job to rank.

``insert_jobs`` (version 0023) calls ``pgqueue.fair_ranks`` only when a job without a rank
is in a fair queue. Before, every call did, the single keyed enqueue (``enqueue_input``)
included: a ``SECURITY DEFINER`` SQL function call per job whose answer was NULL unless a
queue was fair. The ranks written are the same.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-06
"""

from __future__ import annotations

from alembic import op

from pgqueue.db.migrate import sql_script

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | None = None
depends_on: str | None = None


UPGRADE = r"""
\i functions/insert_jobs/0023.sql
"""

DOWNGRADE = r"""
\i functions/insert_jobs/0018.sql
"""


def upgrade() -> None:
    op.execute(sql_script(UPGRADE))


def downgrade() -> None:
    op.execute(sql_script(DOWNGRADE))
