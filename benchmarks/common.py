"""Shared benchmark plumbing: a PostgreSQL of our own, fresh databases, medians, the machine."""

from __future__ import annotations

import os
import platform
import statistics
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pgqueue.db import embedded, migrate


@contextmanager
def server(
    dsn: str | None = None, settings: Mapping[str, str | Sequence[str]] | None = None
) -> Iterator[str]:
    """The admin DSN of the server to measure: ``dsn`` if given, else a new embedded server
    (stock settings apart from max_connections and ``settings``) deleted afterwards. A list
    value is a list setting (``shared_preload_libraries``)."""
    if dsn:
        yield dsn
        return
    with tempfile.TemporaryDirectory(prefix="pgqueue-bench-") as tmp:
        data = Path(tmp) / "pgdata"
        url = str(embedded.start(data).get_uri())
        with psycopg.connect(url, autocommit=True) as conn:
            for name, value in {"max_connections": "200", **(settings or {})}.items():
                values = [value] if isinstance(value, str) else list(value)
                conn.execute(
                    sql.SQL("ALTER SYSTEM SET {} = {}").format(
                        sql.Identifier(name), sql.SQL(", ").join(map(sql.Literal, values))
                    )
                )
        embedded.pg_ctl(["-w", "-m", "fast", "restart"], data)
        try:
            yield url
        finally:
            embedded.stop(data)


def fresh_database(admin_dsn: str, name: str, *, migrated: bool = True) -> str:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = make_conninfo(admin_dsn, dbname=name)
    if migrated:
        migrate.upgrade(dsn)
    return dsn


def median_of(runs: int, measure: Callable[[], float]) -> tuple[float, float, float]:
    """(median, min, max) of ``runs`` measurements."""
    values = [measure() for _ in range(runs)]
    return statistics.median(values), min(values), max(values)


def fmt(stats: tuple[float, float, float], unit: str = "jobs/s") -> str:
    median, low, high = stats
    return f"{median:,.0f} {unit} (min {low:,.0f}, max {high:,.0f})"


def machine(dsn: str) -> str:
    with psycopg.connect(dsn) as conn:
        version = conn.execute("SHOW server_version").fetchone()
    cpu = "unknown cpu"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, "
        f"PostgreSQL {version[0] if version else '?'} on the same machine"
    )
