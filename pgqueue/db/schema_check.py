"""Is the database's pgqueue schema the one this pgqueue needs? Checked once, before work starts.

Workers, ``pgq reaper``, the dashboard and the first pooled connection of a
:class:`~pgqueue.PgQueue` read the revision in pgqueue's alembic version table and
compare it with the package's newest migration (two statements, once). Missing, behind or ahead is a
:class:`~pgqueue.errors.SchemaVersionError` naming both revisions and what to run, instead of
``UndefinedTable`` on the first claim or ``UndefinedColumn`` on every enqueue.

The package's revision is read from the migration scripts' ``revision = "..."`` lines (the chain
alembic follows), without importing alembic: producers never load the migration tooling.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from pgqueue.db.plan import Plan, fetch_value
from pgqueue.errors import ConfigurationError, SchemaVersionError

_REVISION = re.compile(r'^revision(?:: str)? = "([^"]+)"$', re.MULTILINE)
_DOWN = re.compile(r'^down_revision(?:: str \| None)? = (?:"([^"]+)"|None)$', re.MULTILINE)


def migrations_dir() -> Path:
    """The migrations this pgqueue ships: ``pgqueue/_migrations`` in a wheel, ``migrations/``
    beside the package in a checkout (here, not in :mod:`pgqueue.db.migrate`: a worker reads
    the head revision without loading the migration runner)."""
    package_dir = Path(__file__).resolve().parent.parent
    for candidate in (package_dir / "_migrations", package_dir.parent / "migrations"):
        if (candidate / "env.py").exists():
            return candidate
    raise ConfigurationError(f"pgqueue's migrations directory was not found next to {package_dir}")


@cache
def package_revision() -> str:
    """The newest revision of the migrations this pgqueue ships (alembic's head)."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for script in sorted((migrations_dir() / "versions").glob("*.py")):
        text = script.read_text(encoding="utf-8")
        revision, down = _REVISION.search(text), _DOWN.search(text)
        if revision is None or down is None:
            continue
        revisions.add(revision.group(1))
        if down.group(1):
            parents.add(down.group(1))
    heads = revisions - parents
    if len(heads) != 1:  # pragma: no cover - the project ships one linear history
        raise ConfigurationError(f"pgqueue's migrations have {len(heads)} heads: {sorted(heads)}")
    return heads.pop()


#: What :func:`database_revision` returns where this role may not read the version table.
UNREADABLE = "unreadable"


def database_revision() -> Plan[str | None]:
    """The revision the database's pgqueue schema is at; None when it is not installed;
    :data:`UNREADABLE` when this role may not read pgqueue's version table."""
    # Two statements (once per client or worker): one reading the version table would not
    # parse where the table does not exist.
    readable = yield from fetch_value("schema_version_readable")
    if readable is None:
        return None
    if not readable:
        return UNREADABLE
    revision = yield from fetch_value("schema_version")
    return None if revision is None else str(revision)


def check(managed_by: str | None = None) -> Plan[str]:
    """Raise :class:`SchemaVersionError` unless the database is at :func:`package_revision`;
    the revision otherwise. ``managed_by`` names how the application migrates (``"django"``),
    when the caller knows; else the database is asked, on the failure path only. A role that
    may not read the version table (granted by an older ``pgq roles``) is not checked."""
    revision = yield from database_revision()
    wanted = package_revision()
    if revision in (wanted, UNREADABLE):
        return wanted
    if managed_by is None:
        managed_by = yield from fetch_value("schema_managed_by")
    raise mismatch(revision, wanted, managed_by)


def mismatch(database: str | None, package: str, managed_by: str | None) -> SchemaVersionError:
    """The one line that says where the schema is, where it should be, and what to run."""
    if database is not None and _newer(database, package):
        return SchemaVersionError(
            f"the database's pgqueue schema is at revision {database}, newer than this pgqueue "
            f"(which needs {package}): upgrade pgqueue to the release that migrated it",
            database=database,
            package=package,
        )
    where = "not installed" if database is None else f"at revision {database}"
    return SchemaVersionError(
        f"the database's pgqueue schema is {where}; this pgqueue needs revision {package}: "
        f"{_command(package, managed_by)}",
        database=database,
        package=package,
    )


def _newer(database: str, package: str) -> bool:
    # Revisions are zero-padded numbers ("0015"); one this package does not know is newer.
    if database.isdigit() and package.isdigit():
        return int(database) > int(package)
    return True


def _command(package: str, managed_by: str | None) -> str:
    if managed_by == "django":
        return (
            "run `python manage.py migrate` (with pgqueue.contrib.django installed), "
            "or `pgq migrate`"
        )
    if managed_by == "alembic":
        return (
            f'add an alembic revision calling pgqueue.alembic.upgrade(op, "{package}") and run '
            "`alembic upgrade head` (or run `pgq migrate`)"
        )
    return "run `pgq migrate`"
