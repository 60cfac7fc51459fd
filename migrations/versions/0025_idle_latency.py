"""The claim's flow-control check inlined into its plan.

* function ``flow_controls``: the rules of ``flow_controlled`` as a set-returning SQL function,
  which the planner inlines where a query lists it in FROM (``claim_jobs`` and ``next_due`` do):
  a scalar SQL function whose body holds sub-selects is never inlined, so every claim called it
  through the function manager.
* function ``flow_controlled``: now reads ``flow_controls`` (workers of earlier versions call it).

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-06
"""

from __future__ import annotations

from alembic import op

from pgqueue.db.migrate import sql_script

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | None = None
depends_on: str | None = None


UPGRADE = r"""
\i functions/flow_controls/0025.sql

\i functions/flow_controlled/0025.sql
"""

DOWNGRADE = r"""
\i functions/flow_controlled/0015.sql

DROP FUNCTION pgqueue.flow_controls(text[], text[]);
"""


def upgrade() -> None:
    op.execute(sql_script(UPGRADE))


def downgrade() -> None:
    op.execute(sql_script(DOWNGRADE))
