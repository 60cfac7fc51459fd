"""What a named part of the client is (``pgq.flow``, ``pgq.cron``, ``pgq.admin``,
``pgq.retention``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from pgqueue.db.plan import Runner

if TYPE_CHECKING:
    from pgqueue.rules.job_specs import JobSpec
    from pgqueue.rules.tasks import Task


class Client(Runner, Protocol):
    """What a part uses of its client (a :class:`~pgqueue.PgQueue`): plans driven on its
    connections, and a call validated into a job spec (a schedule's job)."""

    def spec(
        self, task: str | Task[..., Any], args: Mapping[str, Any] | None, options: Mapping[str, Any]
    ) -> JobSpec: ...


class Part:
    """A named part of a :class:`~pgqueue.PgQueue`. It holds nothing but its client: each
    operation builds one plan (from a plan module: :mod:`pgqueue.db.flow_plans`,
    :mod:`pgqueue.db.admin`, ...) that the method drives with ``pgq.run`` and its ``_async``
    twin with ``pgq.run_async``, so the two forms share every query and every line of result
    handling.
    ``conn=``, where given, is the caller's connection (its transaction; nothing committed)."""

    __slots__ = ("_client",)

    def __init__(self, client: Client) -> None:
        self._client = client
