"""What :mod:`pgqueue.alembic` (the public path, in an application's alembic ``env.py`` and
revisions) provides: the filters that keep autogenerate away from pgqueue's schema, and
pgqueue's migrations run inside an application's revision."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

from sqlalchemy.schema import Table

from pgqueue.db import migrate
from pgqueue.errors import ConfigurationError

if TYPE_CHECKING:
    from alembic.runtime.environment import (
        IncludeNameFn,
        IncludeObjectFn,
        NameFilterParentNames,
        NameFilterType,
    )
    from alembic.runtime.migration import MigrationContext
    from sqlalchemy.engine import Connection
    from sqlalchemy.schema import SchemaItem

SCHEMA = migrate.SCHEMA
"""The schema pgqueue owns (``pgqueue``): autogenerate must leave it alone."""
VERSION_TABLE = migrate.VERSION_TABLE
"""pgqueue's own alembic version table, in :data:`SCHEMA` (beside your ``alembic_version``)."""


class Operations(Protocol):
    """What the helpers need of alembic's ``op`` (the module or an ``Operations`` object)."""

    def get_context(self) -> MigrationContext: ...

    def get_bind(self) -> Connection: ...


class AutogenerateFilters(TypedDict):
    """The keyword arguments :func:`autogenerate_filters` returns for ``context.configure``."""

    include_name: IncludeNameFn
    include_object: IncludeObjectFn


def include_name(
    name: str | None, type_: NameFilterType, parent_names: NameFilterParentNames
) -> bool:
    """alembic's ``include_name`` hook: do not reflect schema ``pgqueue`` (its tables, pgqueue's
    version table among them)."""
    if type_ == "schema":
        return name != SCHEMA
    return parent_names.get("schema_name") != SCHEMA


def include_object(
    obj: SchemaItem,
    name: str | None,
    type_: NameFilterType,
    reflected: bool,
    compare_to: SchemaItem | None,
) -> bool:
    """alembic's ``include_object`` hook: leave out objects of schema ``pgqueue``, the
    application's metadata's too (a table mapped onto ``pgqueue.jobs`` for a report must not get
    DDL: pgqueue's migrations own that schema)."""
    table = obj if isinstance(obj, Table) else getattr(obj, "table", None)
    return not (isinstance(table, Table) and table.schema == SCHEMA)


_pgqueue_include_name = include_name
_pgqueue_include_object = include_object


def autogenerate_filters(
    *,
    include_name: IncludeNameFn | None = None,
    include_object: IncludeObjectFn | None = None,
) -> AutogenerateFilters:
    """``include_name`` and ``include_object`` for ``context.configure(**...)``: pgqueue's, and
    the application's own filters given here (an object is included when every filter agrees)."""
    return {
        "include_name": _every(_pgqueue_include_name, include_name),
        "include_object": _every(_pgqueue_include_object, include_object),
    }


def _every(*hooks: Callable[..., bool] | None) -> Callable[..., bool]:
    """A filter hook that includes an object when every given hook does (alembic calls its hooks
    with positional arguments)."""
    given = [hook for hook in hooks if hook is not None]

    def hook(*arguments: Any) -> bool:
        return all(each(*arguments) for each in given)

    return hook


def upgrade(op: Operations, revision: str = "head", *, from_revision: str | None = None) -> None:
    """Upgrade pgqueue's schema to ``revision`` inside the running alembic revision.

    Online, pgqueue's migrations run on the revision's connection (``op.get_bind()``) in its
    transaction, under pgqueue's migration lock until that transaction ends; nothing is committed
    here, so a later failure in the same migration rolls pgqueue's schema back too. Offline
    (``alembic upgrade --sql``) pgqueue's SQL goes into the application's script without a
    BEGIN/COMMIT of its own; ``from_revision`` is where pgqueue is in the database the script is
    for (None: not installed). Online, pgqueue's version table says where it is.

    Pin ``revision`` (the newest, as ``pgq db status`` prints it): a revision is history,
    and ``"head"`` would mean whatever pgqueue is installed when it runs. When pgqueue ships a
    new migration, add a revision upgrading to it, whose downgrade goes back to the one before.
    """
    context = _postgresql_context(op)
    if context.as_sql:
        context.output_buffer.write(migrate.upgrade_sql(revision, from_revision, transaction=False))
    else:
        migrate.upgrade_on(op.get_bind(), revision)


def downgrade(op: Operations, revision: str = "base", *, from_revision: str | None = None) -> None:
    """Downgrade pgqueue's schema to ``revision`` inside the running alembic revision (see
    :func:`upgrade`). ``"base"`` removes pgqueue's objects; its empty schema and version table
    stay, as alembic's own version table does. Offline, ``from_revision`` is required."""
    context = _postgresql_context(op)
    if context.as_sql:
        if from_revision is None:
            raise ConfigurationError(
                "an offline (--sql) downgrade of pgqueue needs from_revision=: the pgqueue "
                "revision the database is at (what the matching upgrade installed)"
            )
        context.output_buffer.write(
            migrate.downgrade_sql(revision, from_revision, transaction=False)
        )
    else:
        migrate.downgrade_on(op.get_bind(), revision)


def _postgresql_context(op: Operations) -> MigrationContext:
    context = op.get_context()
    if context.dialect.name != "postgresql":
        raise ConfigurationError(
            f"pgqueue needs PostgreSQL; this alembic migration runs on {context.dialect.name}"
        )
    return context
