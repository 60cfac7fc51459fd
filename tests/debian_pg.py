"""A private PostgreSQL 15 cluster from Debian's packages (postgresql-15, postgresql-15-cron),
and a PgBouncer (Debian's pgbouncer) in front of it, for the pg_cron and PgBouncer tests.

`.ci/run` installs the packages; a missing package is a test failure, never a skip. As root
(CI), the servers run as the `postgres` system user the packages create (PostgreSQL refuses
to run as root, PgBouncer too).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from pgqueue.db import migrate
from tests.helpers import LEDGER_DDL, wait_for

PG_BIN = Path("/usr/lib/postgresql/15/bin")
PGBOUNCER = Path("/usr/sbin/pgbouncer")
RUN_AS = "postgres"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_server_user() -> dict[str, Any]:
    """subprocess arguments to run a server binary as a non-root user when we are root."""
    return {"user": RUN_AS, "group": RUN_AS} if os.geteuid() == 0 else {}


def _own(path: Path) -> None:
    if os.geteuid() == 0:
        entry = pwd.getpwnam(RUN_AS)
        os.chown(path, entry.pw_uid, entry.pw_gid)


def _run(args: list[str], **kwargs: Any) -> None:
    subprocess.run(args, check=True, capture_output=True, **_as_server_user(), **kwargs)


@dataclass
class Cluster:
    base: Path
    port: int

    @property
    def data(self) -> Path:
        return self.base / "data"

    def dsn(self, dbname: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname}"

    def create_pgqueue_database(self, name: str) -> str:
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        dsn = self.dsn(name)
        migrate.upgrade(dsn)
        with psycopg.connect(dsn) as conn:
            conn.execute(LEDGER_DDL)
        return dsn


@contextmanager
def pg15_cluster() -> Iterator[Cluster]:
    """initdb + start a PostgreSQL 15 with pg_cron preloaded (cron.database_name=postgres)."""
    for binary in (PG_BIN / "initdb", PG_BIN / "pg_ctl"):
        assert binary.exists(), f"{binary} missing: apt-get install postgresql-15"
    assert Path("/usr/lib/postgresql/15/lib/pg_cron.so").exists(), (
        "pg_cron missing: apt-get install postgresql-15-cron"
    )
    base = Path(tempfile.mkdtemp(prefix="pgq-pg15-"))
    _own(base)
    cluster = Cluster(base, free_port())
    _run(
        [
            str(PG_BIN / "initdb"),
            "-D",
            str(cluster.data),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        ]
    )
    settings = {
        "port": str(cluster.port),
        "listen_addresses": "'127.0.0.1'",
        "unix_socket_directories": f"'{base}'",
        "shared_preload_libraries": "'pg_cron'",
        "cron.database_name": "'postgres'",
        "fsync": "off",
        "synchronous_commit": "off",
        "full_page_writes": "off",
        "max_connections": "100",
    }
    with open(cluster.data / "postgresql.conf", "a") as conf:
        conf.writelines(f"{key} = {value}\n" for key, value in settings.items())
    _run(
        [
            str(PG_BIN / "pg_ctl"),
            "-D",
            str(cluster.data),
            "-l",
            str(base / "server.log"),
            "-w",
            "start",
        ]
    )
    try:
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pg_cron")
        yield cluster
    finally:
        subprocess.run(
            [str(PG_BIN / "pg_ctl"), "-D", str(cluster.data), "-m", "immediate", "-w", "stop"],
            capture_output=True,
            check=False,
            **_as_server_user(),
        )
        shutil.rmtree(base, ignore_errors=True)


@contextmanager
def pgbouncer(cluster: Cluster, dbname: str, pool_mode: str = "transaction") -> Iterator[str]:
    """A PgBouncer in front of ``cluster``; yields the DSN to connect through it."""
    assert PGBOUNCER.exists(), "pgbouncer missing: apt-get install pgbouncer"
    base = Path(tempfile.mkdtemp(prefix="pgq-pgbouncer-"))
    _own(base)
    port = free_port()
    (base / "userlist.txt").write_text('"postgres" ""\n')
    (base / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"{dbname} = host=127.0.0.1 port={cluster.port} dbname={dbname}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\n"
        f"unix_socket_dir = {base}\n"
        "auth_type = trust\n"
        f"auth_file = {base}/userlist.txt\n"
        f"pool_mode = {pool_mode}\n"
        "default_pool_size = 5\nmax_client_conn = 200\n"
        "ignore_startup_parameters = extra_float_digits,options,statement_timeout\n"
        f"logfile = {base}/pgbouncer.log\npidfile = {base}/pgbouncer.pid\n"
    )
    for name in ("userlist.txt", "pgbouncer.ini"):
        _own(base / name)
    process = subprocess.Popen(
        [str(PGBOUNCER), str(base / "pgbouncer.ini")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        **_as_server_user(),
    )
    dsn = f"host=127.0.0.1 port={port} user=postgres dbname={dbname}"

    def accepting() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"pgbouncer exited: {(base / 'pgbouncer.log').read_text()}")
        try:
            psycopg.connect(dsn, connect_timeout=2).close()
            return True
        except psycopg.OperationalError:
            return False

    try:
        wait_for(accepting, timeout=30, interval=0.2, message="pgbouncer to accept connections")
        yield dsn
    finally:
        process.terminate()
        process.wait(10)
        shutil.rmtree(base, ignore_errors=True)
