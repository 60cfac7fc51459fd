"""A job whose cancel was requested while it ran is not parked by a durable sleep or wait.

``park_for_event`` (version 0022) returns ``cancel_requested`` for such a job and writes
nothing, as the ``park_sleeps`` query does: the worker then writes it cancelled, where before
it was parked with the request forgotten, to wake later and run on.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-06
"""

from __future__ import annotations

from alembic import op

from pgqueue.db.migrate import sql_script

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | None = None
depends_on: str | None = None


UPGRADE = r"""
\i functions/park_for_event/0022.sql
"""

DOWNGRADE = r"""
\i functions/park_for_event/0020.sql
"""


def upgrade() -> None:
    op.execute(sql_script(UPGRADE))


def downgrade() -> None:
    op.execute(sql_script(DOWNGRADE))
