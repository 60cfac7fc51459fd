"""A single enqueue's server time: the jobs table's rules as domains, one AFTER INSERT trigger.

PostgreSQL reads back and plans every CHECK constraint of a table once per statement that
writes it (a single enqueue, a claim, a heartbeat each pay for all of them): the nine
one-column CHECKs of ``pgqueue.jobs`` cost ~45 us of server time per one-row INSERT on the
2-core machine of docs/benchmarks.md, against ~15 us for the whole raw INSERT. A domain's
CHECKs are planned once per session (the type cache) and only initialised per statement; what
is left per statement is the one CHECK that casts to them (~20 us on that machine).

Each rule moves, word for word and under the same constraint name, into a domain named after
its column (``pgqueue.jobs_queue`` holds ``jobs_queue_check``, ...). The columns keep their
types, so the views, composite types and functions that return them are unchanged; one table
CHECK, ``jobs_columns_check``, casts the nine columns to their domains, so a bad value is
refused as before (``check_violation``, the same constraint name; the message now reads
``value for domain pgqueue.jobs_queue violates check constraint "jobs_queue_check"``). The
two-column ``jobs_running_has_lease`` stays a table CHECK. The upgrade reads ``pgqueue.jobs``
once, holding its lock, to validate the new CHECK (0.4 s for 500,000 jobs on that machine).

The two statement-level AFTER INSERT triggers become one, ``jobs_after_insert``
(``pgqueue.jobs_after_insert``): the id check of ``jobs_check_new_ids`` (0009), then the NOTIFY
of ``jobs_notify_insert`` (0008), unchanged. The id check's WHEN moves into the function: a
trigger's WHEN is read back and planned once per statement like a CHECK, and it cost a single
enqueue by the owner as much as the NOTIFY trigger (~10 us each), for a function it never
called.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-06
"""

from __future__ import annotations

from alembic import op

from pgqueue.db.migrate import sql_script

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | None = None
depends_on: str | None = None

# column -> (its type, its rule with the column as VALUE); the constraint is jobs_<column>_check.
RULES: dict[str, tuple[str, str]] = {
    "queue": ("text", "length(VALUE) >= 1 AND length(VALUE) <= 200"),
    "task": ("text", "length(VALUE) >= 1 AND length(VALUE) <= 200"),
    "state": ("text", "VALUE = ANY (ARRAY['waiting', 'scheduled', 'ready', 'running'])"),
    "attempts": ("integer", "VALUE >= 0"),
    "max_attempts": ("integer", "VALUE >= 1"),
    "concurrency_key": ("text", "length(VALUE) >= 1 AND length(VALUE) <= 1000"),
    "result_ttl": ("interval", "VALUE IS NULL OR VALUE > interval '0'"),
    "unique_for": ("interval", "VALUE > interval '0'"),
    "unique_states": ("text[]", "VALUE <@ ARRAY['succeeded', 'dead', 'cancelled']"),
}


def _casts() -> str:
    return ", ".join(f"{column}::pgqueue.jobs_{column}" for column in RULES)


TRIGGERS_UP = r"""
\i functions/jobs_after_insert/0026.sql
DROP TRIGGER jobs_check_new_ids ON pgqueue.jobs;
DROP TRIGGER jobs_notify_insert ON pgqueue.jobs;
CREATE TRIGGER jobs_after_insert
    AFTER INSERT ON pgqueue.jobs
    REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION pgqueue.jobs_after_insert();
DROP FUNCTION pgqueue.check_new_job_ids();
DROP FUNCTION pgqueue.notify_new_jobs();
"""

TRIGGERS_DOWN = r"""
\i functions/notify_new_jobs/0008.sql
\i functions/check_new_job_ids/0009.sql
DROP TRIGGER jobs_after_insert ON pgqueue.jobs;
DROP FUNCTION pgqueue.jobs_after_insert();
CREATE TRIGGER jobs_notify_insert
    AFTER INSERT ON pgqueue.jobs
    REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION pgqueue.notify_new_jobs();
CREATE TRIGGER jobs_check_new_ids
    AFTER INSERT ON pgqueue.jobs
    REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT
    WHEN (NOT (current_user = session_user
               AND has_table_privilege(current_user, 'pgqueue.dead_letters'::regclass,
                                       'INSERT')))
    EXECUTE FUNCTION pgqueue.check_new_job_ids();
"""

RULES_UP = "\n".join(
    [
        *(
            f"CREATE DOMAIN pgqueue.jobs_{column} AS {kind}\n"
            f"    CONSTRAINT jobs_{column}_check CHECK ({rule});"
            for column, (kind, rule) in RULES.items()
        ),
        # Every value cast to its domain, the answer always true: num_nulls of the casts is
        # never negative, and no cast is folded away (the arguments are columns).
        "ALTER TABLE pgqueue.jobs\n"
        + "".join(f"    DROP CONSTRAINT jobs_{column}_check,\n" for column in RULES)
        + f"    ADD CONSTRAINT jobs_columns_check CHECK (pg_catalog.num_nulls({_casts()}) >= 0);",
    ]
)

RULES_DOWN = "\n".join(
    [
        "ALTER TABLE pgqueue.jobs\n    DROP CONSTRAINT jobs_columns_check,\n"
        + ",\n".join(
            f"    ADD CONSTRAINT jobs_{column}_check CHECK ({rule.replace('VALUE', column)})"
            for column, (_, rule) in RULES.items()
        )
        + ";",
        *(f"DROP DOMAIN pgqueue.jobs_{column};" for column in RULES),
    ]
)


def upgrade() -> None:
    op.execute(RULES_UP)
    op.execute(sql_script(TRIGGERS_UP))


def downgrade() -> None:
    op.execute(sql_script(TRIGGERS_DOWN))
    op.execute(RULES_DOWN)
