"""The flow-controlled claim in parts: ``pgqueue.claim`` calls one function per step, each
versioned on its own, so that a change re-versions only the part it touches.

* ``pgqueue.claimed_job``: the type of the rows ``pgqueue.claim`` returns (the same columns as
  before, in the same order). A new column is a new attribute and a new version of
  ``claim_grant``; ``claim`` itself makes its extra row from the type, whatever its columns.
* ``claim_blocked`` (what is at its limit), ``claim_walk`` (one queue's SKIP LOCKED walk, per
  mode: FIFO, fair, due scheduled jobs), ``claim_candidates`` (the walks, a fair queue's places,
  the weighted fair share order), ``claim_admit`` (locks for the limits, what fits, tokens
  spent), ``claim_wait_hint``, ``claim_grant`` (leases, fair clocks, breaker probes, the rows).
* ``claim`` keeps its signature, result columns and behaviour; it decides the path and calls
  the parts, each once per claim (``claim_walk`` once per queue), never per row.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06
"""

from __future__ import annotations

from alembic import op

from pgqueue.db.migrate import sql_script

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | None = None
depends_on: str | None = None

_CLAIM = "text[], text[], integer, interval, uuid, integer[]"

UPGRADE = rf"""
CREATE TYPE pgqueue.claimed_job AS (
    id           bigint,
    queue        text,
    task         text,
    args         jsonb,
    attempts     integer,
    max_attempts integer,
    lease_token  integer,
    priority     smallint,
    created_at   timestamptz,
    run_at       timestamptz,
    wants_result boolean,
    meta         jsonb,
    tags         text[],
    last_trace   text,
    throttled    double precision,
    wake_on_exit boolean
);

\i functions/claim_blocked/0019.sql
\i functions/claim_walk/0019.sql
\i functions/claim_candidates/0019.sql
\i functions/claim_admit/0019.sql
\i functions/claim_wait_hint/0019.sql
\i functions/claim_grant/0019.sql

DROP FUNCTION pgqueue.claim({_CLAIM});
\i functions/claim/0019.sql
"""

DOWNGRADE = rf"""
DROP FUNCTION pgqueue.claim({_CLAIM});
\i functions/claim/0015.sql

DROP FUNCTION pgqueue.claim_grant(bigint[], interval, uuid, text[], boolean, boolean, bigint[]);
DROP FUNCTION pgqueue.claim_wait_hint(pgqueue.claim_candidate[], timestamptz, double precision);
DROP FUNCTION pgqueue.claim_admit(pgqueue.claim_candidate[], integer, timestamptz);
DROP FUNCTION pgqueue.claim_candidates(text[], text[], integer, integer[], boolean, text[], text[],
                                       text[], text[]);
DROP FUNCTION pgqueue.claim_walk(text, boolean, text[], integer, text[], text[], text[]);
DROP FUNCTION pgqueue.claim_blocked(text[], text[], timestamptz);
DROP TYPE pgqueue.claimed_job;
"""


def upgrade() -> None:
    op.execute(sql_script(UPGRADE))


def downgrade() -> None:
    op.execute(sql_script(DOWNGRADE))
