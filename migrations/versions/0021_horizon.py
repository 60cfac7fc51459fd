"""What holds back the xmin horizon, and how bloated pgqueue's tables are: for operators.

* ``horizon_holders()`` (``SECURITY DEFINER``, executable by the roles ``pgq roles`` grants
  functions to, not by PUBLIC): every backend, prepared transaction and replication slot of
  this database that holds an xmin, with its pid, application name, role, state and age;
* view ``horizon``: those rows, oldest first (``pgq status`` warns about the first, the
  dashboard and the metrics read it);
* view ``table_health``: dead tuples and sizes of pgqueue's tables.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-06
"""

from __future__ import annotations

from alembic import op

from pgqueue.db.migrate import sql_script

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | None = None
depends_on: str | None = None


UPGRADE = r"""
\i functions/horizon_holders/0021.sql
REVOKE EXECUTE ON FUNCTION pgqueue.horizon_holders() FROM PUBLIC;

\i views/horizon/0021.sql

\i views/table_health/0021.sql
"""

DOWNGRADE = r"""
DROP VIEW pgqueue.table_health;
DROP VIEW pgqueue.horizon;
DROP FUNCTION pgqueue.horizon_holders();
"""


def upgrade() -> None:
    op.execute(sql_script(UPGRADE))


def downgrade() -> None:
    op.execute(sql_script(DOWNGRADE))
