"""A single enqueue's server time, continued: the columns of ``pgqueue.jobs`` are their domains.

Migration 0026 moved the nine one-column rules of ``pgqueue.jobs`` into domains and left one
table CHECK, ``jobs_columns_check``, that casts the columns to them. PostgreSQL still reads back
and plans that CHECK at every statement that writes the table (a single enqueue, a claim, a
heartbeat, a retry), where a domain-typed column's rules are planned once per session (the type
cache). So the columns now are their domains (``queue pgqueue.jobs_queue``, ...) and the CHECK is
gone: on the 2-core machine of docs/benchmarks.md, an UPDATE of one job's row costs the server
40 -> 26 us of CPU, a single enqueue 78 -> 68 us (the domains' checks are still set up per
statement, for every domain column an INSERT writes or leaves NULL). A bad value is refused
as before (``check_violation``, the same constraint name and message) by INSERT, UPDATE and COPY
(text or binary: the domains' input and receive functions check it). Clients see no change: a
result describes a domain column by its base type's OID. The two-column
``jobs_running_has_lease`` stays a table CHECK (a domain sees one value).

What reads those columns' types changes with them:

* the views over them (``queue_depth``, ``queue_stats``, ``recent_failures``, ``running_jobs``,
  ``worker_status``, ``workflow_jobs`` and ``workflow_overview``, which reads ``workflow_jobs``):
  a view's column cannot change its type in place, so they are dropped and made again from the
  same definitions; the rights granted on them (and their owners) are read before and given
  back after;
* the trigger ``jobs_keep_finished_key``, whose WHEN reads ``unique_for``: dropped and made
  again, the same;
* ``claim_walk`` and ``claim_grant``, whose ``RETURN QUERY`` must return exactly the types they
  declare: new versions cast the columns to their base types;
* the columns' statistics, which ALTER COLUMN TYPE drops: ``pgqueue.jobs`` is analysed again.

The upgrade rewrites ``pgqueue.jobs`` and its indexes holding its lock (each row's values go
through their domains): 2.5 s for 300,000 jobs on that machine, the ALTER TABLE 1.5 s of it. The
downgrade gives the columns their base types back (no rewrite; the partial indexes are built
again and the CHECK validated: 1.6 s).

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-06
"""

from __future__ import annotations

from alembic import op

from pgqueue.db.migrate import sql_script

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | None = None
depends_on: str | None = None

# column -> its base type; its domain is pgqueue.jobs_<column> (0026).
COLUMNS: dict[str, str] = {
    "queue": "text",
    "task": "text",
    "state": "text",
    "attempts": "integer",
    "max_attempts": "integer",
    "concurrency_key": "text",
    "result_ttl": "interval",
    "unique_for": "interval",
    "unique_states": "text[]",
}

# The views that read the columns (or read such a view), with the revision of their definition,
# in an order that makes each after what it reads.
VIEWS: dict[str, str] = {
    "queue_depth": "0005",
    "queue_stats": "0006",
    "recent_failures": "0006",
    "running_jobs": "0013",
    "worker_status": "0006",
    "workflow_jobs": "0004",
    "workflow_overview": "0004",
}

# The rights granted on those views (and their owners), as the statements that give them back,
# kept while the views are dropped and made again: in a setting of the session, an array's text
# (a temporary table would need the TEMP right, and an offline script run without a transaction
# would drop it at once).
_VIEW_NAMES = "'{" + ",".join(VIEWS) + "}'::name[]"
SAVE_RIGHTS = f"""
DO $pgqueue$
BEGIN
    PERFORM pg_catalog.set_config('pgqueue.migration_view_rights', coalesce(pg_catalog.array_agg(
        s.statement ORDER BY s.step, s.statement), '{{}}')::text, false)
      FROM (
        SELECT 0 AS step, pg_catalog.format('ALTER VIEW pgqueue.%I OWNER TO %I', c.relname,
                                            pg_catalog.pg_get_userbyid(c.relowner)) AS statement
          FROM pg_catalog.pg_class AS c
         WHERE c.relnamespace = 'pgqueue'::regnamespace AND c.relname = ANY ({_VIEW_NAMES})
           AND pg_catalog.pg_get_userbyid(c.relowner) <> current_user
        UNION ALL
        SELECT 1, pg_catalog.format(
                   'GRANT %s ON pgqueue.%I TO %s%s', a.privilege_type, c.relname,
                   CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                        ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END,
                   CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END)
          FROM pg_catalog.pg_class AS c, pg_catalog.aclexplode(c.relacl) AS a
         WHERE c.relnamespace = 'pgqueue'::regnamespace AND c.relname = ANY ({_VIEW_NAMES})
           AND a.grantee <> c.relowner) AS s;
END
$pgqueue$;
"""  # noqa: S608 (fixed names)

RESTORE_RIGHTS = """
DO $pgqueue$
DECLARE
    statement text;
BEGIN
    FOREACH statement IN ARRAY
            pg_catalog.current_setting('pgqueue.migration_view_rights')::text[]
    LOOP
        EXECUTE statement;
    END LOOP;
    PERFORM pg_catalog.set_config('pgqueue.migration_view_rights', '', false);
END
$pgqueue$;
"""

DROP_VIEWS = "\n".join(f"DROP VIEW pgqueue.{view};" for view in reversed(VIEWS))
MAKE_VIEWS = "\n".join(f"\\i views/{view}/{rev}.sql" for view, rev in VIEWS.items())

DROP_TRIGGER = "DROP TRIGGER jobs_keep_finished_key ON pgqueue.jobs;"
# As 0005 made it.
MAKE_TRIGGER = """
CREATE TRIGGER jobs_keep_finished_key
    AFTER DELETE ON pgqueue.jobs
    FOR EACH ROW
    WHEN (OLD.unique_for IS NOT NULL AND OLD.idempotency_key IS NOT NULL)
    EXECUTE FUNCTION pgqueue.keep_finished_key();
"""

# 0026's CHECK, word for word.
_CASTS = ", ".join(f"{column}::pgqueue.jobs_{column}" for column in COLUMNS)
COLUMNS_CHECK = f"CHECK (pg_catalog.num_nulls({_CASTS}) >= 0)"

TO_DOMAINS = (
    "ALTER TABLE pgqueue.jobs\n    DROP CONSTRAINT jobs_columns_check,\n"
    + ",\n".join(f"    ALTER COLUMN {c} TYPE pgqueue.jobs_{c}" for c in COLUMNS)
    + ";"
)
TO_BASE_TYPES = (
    "ALTER TABLE pgqueue.jobs\n"
    + "".join(f"    ALTER COLUMN {c} TYPE {kind},\n" for c, kind in COLUMNS.items())
    + f"    ADD CONSTRAINT jobs_columns_check {COLUMNS_CHECK};"
)

UPGRADE = rf"""
{SAVE_RIGHTS}
{DROP_VIEWS}
{DROP_TRIGGER}
{TO_DOMAINS}
{MAKE_TRIGGER}
{MAKE_VIEWS}
{RESTORE_RIGHTS}
\i functions/claim_walk/0027.sql
\i functions/claim_grant/0027.sql
ANALYZE pgqueue.jobs;
"""

DOWNGRADE = rf"""
{SAVE_RIGHTS}
{DROP_VIEWS}
{DROP_TRIGGER}
{TO_BASE_TYPES}
{MAKE_TRIGGER}
{MAKE_VIEWS}
{RESTORE_RIGHTS}
\i functions/claim_walk/0019.sql
\i functions/claim_grant/0019.sql
ANALYZE pgqueue.jobs;
"""


def upgrade() -> None:
    op.execute(sql_script(UPGRADE))


def downgrade() -> None:
    op.execute(sql_script(DOWNGRADE))
