"""Job search: keyset indexes on the finished jobs' tables, none on the hot table.

``pgqueue.inspect.search_jobs`` pages through each place a job can be newest first, by a key
of its own: live jobs (``jobs``) by ``id``, ``job_history`` by ``(finished_at, id)``,
``dead_letters`` by ``(dead_at, id)``. A page is one index range per place, whatever the depth,
when an index leads with the filter's column and ends with that key. These are those indexes:

* ``job_history``: ``(finished_at, id)`` (replaces ``(finished_at)``, which the pruner used:
  it still does, so the ack that records history maintains no more indexes for it),
  ``(task, finished_at, id)``, ``(queue, finished_at, id)``, and two partial ones that hold
  only the rows they select: cancelled jobs, and jobs with at least one failed attempt (where
  an error-text search looks; most history rows succeeded at the first try).
* ``dead_letters``: ``(dead_at, id)`` (replaces ``(dead_at)``), ``(task, dead_at, id)``,
  ``(queue, dead_at, id)``.

Nothing on ``jobs``: the claim's UPDATE changes ``state`` (a column of the partial indexes'
predicates), so it is never a HOT update and adds an entry to every index whose predicate the
running row meets; a search index there would be paid by every claim, retry and release. Live
jobs are searched through the primary key (newest first) with the filters applied on the way.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | None = None
depends_on: str | None = None


UPGRADE = r"""
DROP INDEX pgqueue.job_history_finished_at_idx;
CREATE INDEX job_history_finished_idx ON pgqueue.job_history (finished_at, id);
CREATE INDEX job_history_task_finished_idx ON pgqueue.job_history (task, finished_at, id);
CREATE INDEX job_history_queue_finished_idx ON pgqueue.job_history (queue, finished_at, id);
CREATE INDEX job_history_cancelled_idx ON pgqueue.job_history (finished_at, id)
    WHERE state = 'cancelled';
CREATE INDEX job_history_failed_idx ON pgqueue.job_history (finished_at, id)
    WHERE errors <> '[]'::jsonb;

DROP INDEX pgqueue.dead_letters_dead_at_idx;
CREATE INDEX dead_letters_dead_idx ON pgqueue.dead_letters (dead_at, id);
CREATE INDEX dead_letters_task_dead_idx ON pgqueue.dead_letters (task, dead_at, id);
CREATE INDEX dead_letters_queue_dead_idx ON pgqueue.dead_letters (queue, dead_at, id);
"""

DOWNGRADE = r"""
DROP INDEX pgqueue.dead_letters_queue_dead_idx;
DROP INDEX pgqueue.dead_letters_task_dead_idx;
DROP INDEX pgqueue.dead_letters_dead_idx;
CREATE INDEX dead_letters_dead_at_idx ON pgqueue.dead_letters (dead_at);

DROP INDEX pgqueue.job_history_failed_idx;
DROP INDEX pgqueue.job_history_cancelled_idx;
DROP INDEX pgqueue.job_history_queue_finished_idx;
DROP INDEX pgqueue.job_history_task_finished_idx;
DROP INDEX pgqueue.job_history_finished_idx;
CREATE INDEX job_history_finished_at_idx ON pgqueue.job_history (finished_at);
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
