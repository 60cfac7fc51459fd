"""Limits used to the full: the claim says which jobs took the last free place under a
concurrency limit, and exactly when a rate-limited claim may succeed again.

Until now a claim held back by a limit came back with "held back, retry in 0 s (unknown)" for
concurrency limits and keys, and the worker backed off (50 ms doubling to 1 s); a place freed by
an ack stayed free until some held-back claimer's backoff ran out. Measured from outside:
concurrency_limit=3, 2 processes x 8 slots, 40 jobs of 200 ms took ~11 s for 2.7 s of work
(a quarter of the limit used), and one process often ran none.

* ``pgqueue.claim`` returns one more column, ``wake_on_exit``: true for a claimed job that took
  the last free place under its queue's, its task's or its concurrency key's limit (anything
  claimed after it is held back until a job under that limit leaves). The worker notifies the
  job's queue (``pgqueue_jobs``) once the job's outcome is written, so held-back claimers in
  every worker process look again at once. Jobs under no limit, or claimed while room is left,
  never notify: the plain claim and the ack of unlimited jobs are unchanged.
* The hint for a claim held back by a rate limit is counted after the claim spent its tokens:
  a claim that took the last token used to report 0 ("unknown"; the worker backed off), now
  the seconds until the next token.

The return type changes, so the function is dropped and created again (it keeps the default
EXECUTE for PUBLIC, as before); the downgrade restores revision 0005's.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op

from pgqueue.db.migrate import sql_script

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | None = None
depends_on: str | None = None


UPGRADE = r"""
DROP FUNCTION pgqueue.claim(text[], text[], integer, interval, uuid, integer[]);

\i functions/claim/0010.sql
"""

DOWNGRADE = r"""
DROP FUNCTION pgqueue.claim(text[], text[], integer, interval, uuid, integer[]);

\i functions/claim/0005.sql
"""


def upgrade() -> None:
    op.execute(sql_script(UPGRADE))


def downgrade() -> None:
    op.execute(sql_script(DOWNGRADE))
