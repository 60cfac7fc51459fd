"""Statements per job, counted by ``pg_stat_statements`` on the server being measured.

The embedded server the harness starts preloads the module; on a server given with ``--dsn``
counting works only if it is in ``shared_preload_libraries`` there (otherwise it is skipped).
Counts are top-level statements (``pg_stat_statements.track = top``): what a client sends, so
roughly round trips, including BEGIN/COMMIT. The harness's own queries carry ``HARNESS`` and
are left out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import psycopg

HARNESS = "/* bench-harness */"
PRELOAD = {"shared_preload_libraries": "pg_stat_statements", "pg_stat_statements.max": "10000"}


def harness(statement: str) -> str:
    """Tag a harness query so statement counts leave it out (the comment is kept in the
    statement text pg_stat_statements stores, since it is inside the statement)."""
    verb, _, rest = statement.strip().partition(" ")
    return f"{verb} {HARNESS} {rest}"


@dataclass
class Count:
    total: int = 0
    by_statement: list[tuple[str, int]] = field(default_factory=list)
    #: Server execution time (ms) per statement text, as pg_stat_statements measures it.
    exec_ms: dict[str, float] = field(default_factory=dict)

    def per_thousand(self, jobs: int) -> float:
        return self.total * 1000 / jobs if jobs else 0.0


def available(admin_dsn: str) -> bool:
    try:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            conn.execute("SELECT count(*) FROM pg_stat_statements").fetchone()
    except psycopg.Error:
        return False
    return True


def reset(admin_dsn: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_statements_reset()")


def read(admin_dsn: str, database: str) -> Count:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        rows = conn.execute(
            """SELECT s.query, sum(s.calls)::bigint AS calls, sum(s.total_exec_time) AS ms
                 FROM pg_stat_statements AS s JOIN pg_database AS d ON d.oid = s.dbid
                WHERE d.datname = %s AND strpos(s.query, %s) = 0
                GROUP BY s.query ORDER BY calls DESC""",
            (database, HARNESS),
        ).fetchall()
    by_statement = [(" ".join(str(q).split()), int(c)) for q, c, _ in rows]
    exec_ms = {" ".join(str(q).split()): float(ms) for q, _, ms in rows}
    return Count(sum(c for _, c in by_statement), by_statement, exec_ms)
