"""Settings shared by the library, the CLI and the tests: limits, and the DSN configured.

DSN resolution is the same everywhere: an explicit ``dsn`` argument (``--dsn`` on the CLI), else
``PGQUEUE_DSN``, else ``DATABASE_URL``, else the embedded PostgreSQL server that pgqueue starts on
demand in a per-user data directory (:func:`pgqueue.db.embedded.resolve_dsn`; this module only
reads and checks what is configured).
"""

from __future__ import annotations

import os
import re

from psycopg.conninfo import conninfo_to_dict

from pgqueue.errors import ConfigurationError

DSN_ENV_VARS = ("PGQUEUE_DSN", "DATABASE_URL")

#: Largest serialised args payload accepted by enqueue, in bytes (configurable per PgQueue).
DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
#: Longest queue or task name accepted; long enough for dotted module paths, short enough
#: to keep the claim index small.
MAX_NAME_LENGTH = 200
# A job's defaults (queue, priority, max_attempts, ...) are declared with its options, in
# pgqueue.rules.options (DEFAULTS); the worker's in pgqueue.worker.settings.


class GivenDsn(str):
    """A DSN that remembers where it was given (``--dsn`` on the command line), so that an
    error about it names that, where the same text from Python names the ``dsn`` argument."""

    source: str

    def __new__(cls, value: str, source: str) -> GivenDsn:
        given = super().__new__(cls, value)
        given.source = source
        return given


def configured_dsn(explicit: str | None = None) -> str | None:
    """The DSN given explicitly or through the environment, or ``None`` (meaning: embedded),
    in the form libpq takes (see :func:`normalize_dsn`). Errors name the explicit DSN as its
    caller wrote it: the ``dsn`` argument in Python, ``--dsn`` on the CLI (:class:`GivenDsn`)."""
    if explicit:
        return normalize_dsn(explicit, getattr(explicit, "source", "dsn"))
    for name in DSN_ENV_VARS:
        value = os.environ.get(name)
        if value:
            return normalize_dsn(value, f"${name}")
    return None


READ_DSN_ENV_VAR = "PGQUEUE_READ_DSN"


def configured_read_dsn(explicit: str | None = None) -> str | None:
    """The read-only DSN (a replica) operators' reads go to: ``--read-dsn`` or
    ``$PGQUEUE_READ_DSN``; ``None`` means the reads go where the writes go."""
    if explicit:
        return normalize_dsn(explicit, "--read-dsn")
    value = os.environ.get(READ_DSN_ENV_VAR)
    return normalize_dsn(value, f"${READ_DSN_ENV_VAR}") if value else None


# SQLAlchemy's URL form names a driver: postgresql+psycopg://, postgres+asyncpg://, ...
_DRIVER_URL = re.compile(r"^(postgres(?:ql)?)\+[A-Za-z0-9_]+://")
_URL_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
ACCEPTED_DSNS = (
    "postgresql://user:password@host:5432/dbname, postgres://..., SQLAlchemy's "
    "postgresql+psycopg://..., or keywords such as 'host=... dbname=...'"
)


def normalize_dsn(dsn: str, source: str = "DSN") -> str:
    """``dsn`` as libpq takes it: a SQLAlchemy URL (``postgresql+psycopg://``, common in app
    configs) loses its driver part; anything libpq cannot parse, or a URL of another database,
    raises :class:`ConfigurationError` naming ``source`` (where the DSN came from) and the forms
    accepted. Parsing is local: nothing connects."""
    dsn = dsn.strip()
    dsn = _DRIVER_URL.sub(r"\1://", dsn, count=1)
    scheme = _URL_SCHEME.match(dsn)
    if scheme is not None and scheme.group(1) not in ("postgres", "postgresql"):
        raise ConfigurationError(
            f"{source} is a {scheme.group(1)}:// URL; pgqueue needs PostgreSQL: {ACCEPTED_DSNS}"
        )
    try:
        conninfo_to_dict(dsn)
    except Exception as exc:  # psycopg.ProgrammingError, with libpq's reason
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigurationError(
            f"{source} is not a valid PostgreSQL DSN ({reason}); expected {ACCEPTED_DSNS}"
        ) from None
    return dsn
