"""Settings shared by the library, the CLI and the tests.

DSN resolution is the same everywhere: an explicit ``dsn`` argument (``--dsn`` on the CLI), else
``PGQUEUE_DSN``, else ``DATABASE_URL``, else the embedded PostgreSQL server that pgqueue starts on
demand in a per-user data directory (see :mod:`pgqueue.db.embedded`).
"""

from __future__ import annotations

import os

DSN_ENV_VARS = ("PGQUEUE_DSN", "DATABASE_URL")

#: Largest serialised args payload accepted by enqueue, in bytes (configurable per PgQueue).
DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
#: Longest queue or task name accepted; long enough for dotted module paths, short enough
#: to keep the claim index small.
MAX_NAME_LENGTH = 200
DEFAULT_QUEUE = "default"
DEFAULT_MAX_ATTEMPTS = 5
DEFAULT_PRIORITY = 0


def configured_dsn(explicit: str | None = None) -> str | None:
    """The DSN given explicitly or through the environment, or ``None`` (meaning: embedded)."""
    if explicit:
        return explicit
    for name in DSN_ENV_VARS:
        value = os.environ.get(name)
        if value:
            return value
    return None


def resolve_dsn(explicit: str | None = None) -> str:
    """The DSN to connect to, starting the embedded server when nothing is configured."""
    dsn = configured_dsn(explicit)
    if dsn is not None:
        return dsn
    from pgqueue.db import embedded

    return embedded.ensure_running()
