"""What a named part of the client is (``pgq.flow``, ``pgq.cron``, ``pgq.admin``,
``pgq.retention``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pgqueue.client.core import PgQueue


class Part:
    """A named part of a :class:`~pgqueue.PgQueue`. It holds nothing but its client: each
    operation builds one plan (from a plan module: :mod:`pgqueue.db.flow_plans`,
    :mod:`pgqueue.db.admin`, ...) that the method drives with ``pgq.run`` and its ``_async``
    twin with ``pgq.run_async``, so the two forms share every query and every line of result
    handling.
    ``conn=``, where given, is the caller's connection (its transaction; nothing committed)."""

    __slots__ = ("_client",)

    def __init__(self, client: PgQueue) -> None:
        self._client = client
