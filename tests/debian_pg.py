"""Private PostgreSQL 15 clusters from Debian's packages (postgresql-15, postgresql-15-cron): one
with pg_cron and a PgBouncer (Debian's pgbouncer) in front of it, for the pg_cron and PgBouncer
tests; a primary with a streaming standby, for the failover and read-replica tests.

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


def _pg_ctl(cluster: Cluster, *args: str, check: bool = True) -> None:
    subprocess.run(
        [str(PG_BIN / "pg_ctl"), "-D", str(cluster.data), *args],
        capture_output=True,
        check=check,
        **_as_server_user(),
    )


def _configure(cluster: Cluster, settings: dict[str, str]) -> None:
    with open(cluster.data / "postgresql.conf", "a") as conf:
        conf.writelines(f"{key} = {value}\n" for key, value in settings.items())


def _start(cluster: Cluster) -> None:
    _pg_ctl(cluster, "-l", str(cluster.base / "server.log"), "-w", "start")


def _discard(cluster: Cluster) -> None:
    _pg_ctl(cluster, "-m", "immediate", "-w", "stop", check=False)
    shutil.rmtree(cluster.base, ignore_errors=True)


def _new_cluster(prefix: str) -> Cluster:
    for binary in (PG_BIN / "initdb", PG_BIN / "pg_ctl", PG_BIN / "pg_basebackup"):
        assert binary.exists(), f"{binary} missing: apt-get install postgresql-15"
    base = Path(tempfile.mkdtemp(prefix=prefix))
    _own(base)
    return Cluster(base, free_port())


def _server_settings(cluster: Cluster) -> dict[str, str]:
    return {
        "port": str(cluster.port),
        "listen_addresses": "'127.0.0.1'",
        "unix_socket_directories": f"'{cluster.base}'",
    }


def _initdb(cluster: Cluster) -> None:
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


@contextmanager
def pg15_cluster() -> Iterator[Cluster]:
    """initdb + start a PostgreSQL 15 with pg_cron preloaded (cron.database_name=postgres)."""
    assert Path("/usr/lib/postgresql/15/lib/pg_cron.so").exists(), (
        "pg_cron missing: apt-get install postgresql-15-cron"
    )
    cluster = _new_cluster("pgq-pg15-")
    try:
        _initdb(cluster)
        _configure(
            cluster,
            {
                **_server_settings(cluster),
                "shared_preload_libraries": "'pg_cron'",
                "cron.database_name": "'postgres'",
                "fsync": "off",
                "synchronous_commit": "off",
                "full_page_writes": "off",
                "max_connections": "100",
            },
        )
        _start(cluster)
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pg_cron")
        yield cluster
    finally:
        _discard(cluster)


@dataclass
class Pair:
    """A primary and a streaming standby of it (hot standby: it serves reads)."""

    primary: Cluster
    standby: Cluster
    synchronous: bool
    #: What the standby streams through, when asked for: a TCP proxy that can hold the stream
    #: back (``pause()``), so the standby lags behind like one across a congested link.
    replication: Any = None

    def dsn(self, dbname: str) -> str:
        """What HA setups give applications: both hosts, and "the one that takes writes"
        (libpq tries them in order and skips a standby)."""
        return (
            f"host=127.0.0.1,127.0.0.1 port={self.primary.port},{self.standby.port}"
            f" user=postgres dbname={dbname} target_session_attrs=read-write connect_timeout=5"
        )

    def kill_primary(self) -> None:
        """A crash: no shutdown checkpoint, every connection cut, nothing more replicated."""
        _pg_ctl(self.primary, "-m", "immediate", "-w", "stop")

    def promote(self) -> None:
        """What failover tooling (Patroni, a managed service) does once it declares the primary
        dead: the standby ends recovery and takes writes."""
        _pg_ctl(self.standby, "-w", "promote")

    def streaming(self) -> bool:
        with psycopg.connect(self.primary.dsn(), autocommit=True) as conn:
            row = conn.execute(
                "SELECT state, sync_state FROM pg_stat_replication LIMIT 1"
            ).fetchone()
        wanted = "sync" if self.synchronous else "async"
        return row is not None and row[0] == "streaming" and row[1] == wanted

    def unreplicated_bytes(self) -> int:
        """WAL the primary has written that the standby has not flushed yet (what a crash now
        would lose, with asynchronous replication)."""
        with psycopg.connect(self.primary.dsn(), autocommit=True, connect_timeout=2) as conn:
            row = conn.execute(
                "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), flush_lsn)::bigint"
                "  FROM pg_stat_replication LIMIT 1"
            ).fetchone()
        return int(row[0]) if row and row[0] is not None else 0


@contextmanager
def replicated_pair(synchronous: bool, lag_control: bool = False) -> Iterator[Pair]:
    """A PostgreSQL 15 primary and a hot standby streaming from it (pg_basebackup -R), with
    synchronous replication (``synchronous_standby_names``, ``synchronous_commit = on``: a
    commit returns once the standby has flushed it) or asynchronous. fsync stays off: the
    faults here kill processes, the machine and its page cache live on. ``lag_control``: the
    standby streams through :class:`tests.chaos.proxy.Proxy` (``pair.replication``)."""
    from tests.chaos.proxy import Proxy

    primary = _new_cluster("pgq-primary-")
    standby = _new_cluster("pgq-standby-")
    proxy: Proxy | None = None
    try:
        _initdb(primary)
        _configure(
            primary,
            {
                **_server_settings(primary),
                "fsync": "off",
                "full_page_writes": "off",
                "max_connections": "100",
                "wal_level": "replica",
                "wal_keep_size": "'256MB'",
                "synchronous_commit": "on",
                "synchronous_standby_names": "'*'" if synchronous else "''",
            },
        )
        _start(primary)
        _run(
            [
                str(PG_BIN / "pg_basebackup"),
                "-h",
                "127.0.0.1",
                "-p",
                str(primary.port),
                "-U",
                "postgres",
                "-D",
                str(standby.data),
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
            ]
        )
        # pg_basebackup copied the primary's settings, synchronous_standby_names with them:
        # promoted with no standby of its own, the standby would wait for one on every commit
        # forever. Failover tooling relaxes it on promotion (Patroni's synchronous_mode without
        # synchronous_mode_strict); here the promoted standby simply has none.
        _configure(
            standby,
            {**_server_settings(standby), "hot_standby": "on", "synchronous_standby_names": "''"},
        )
        if lag_control:
            proxy = Proxy(f"host={primary.base} port={primary.port} user=postgres").start()
            # After what pg_basebackup -R wrote: the last setting wins.
            with open(standby.data / "postgresql.auto.conf", "a") as auto:
                auto.write(f"primary_conninfo = 'host=127.0.0.1 port={proxy.port} user=postgres'\n")
        _start(standby)
        pair = Pair(primary, standby, synchronous, proxy)
        wait_for(pair.streaming, timeout=60, interval=0.2, message="the standby to stream")
        yield pair
    finally:
        for cluster in (standby, primary):
            _discard(cluster)
        if proxy is not None:
            proxy.close()


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
