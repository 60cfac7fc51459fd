"""pgqueue in an application's own alembic environment.

In the application's ``env.py``, keep autogenerate away from pgqueue's schema (with
``include_schemas=True`` it would otherwise propose dropping every pgqueue table)::

    import pgqueue.alembic

    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        include_schemas=True,
        **pgqueue.alembic.autogenerate_filters(include_object=my_include_object),
    )

In a revision, install or upgrade pgqueue's schema inside that revision's transaction::

    import pgqueue.alembic

    def upgrade():
        pgqueue.alembic.upgrade(op, "0027")

    def downgrade():
        pgqueue.alembic.downgrade(op, "base")

Either way pgqueue's own version table (``pgqueue.pgqueue_alembic_version``) stays current, so
``pgq migrate`` and ``PgQueue.migrate()`` later know where the schema is.
"""

from pgqueue.db.alembic_env import (
    SCHEMA,
    VERSION_TABLE,
    AutogenerateFilters,
    autogenerate_filters,
    downgrade,
    include_name,
    include_object,
    upgrade,
)

__all__ = [
    "SCHEMA",
    "VERSION_TABLE",
    "AutogenerateFilters",
    "autogenerate_filters",
    "downgrade",
    "include_name",
    "include_object",
    "upgrade",
]
