"""A child process's side of handlers' ``ctx.transaction()`` blocks (``--pool process``): one
connection of its own, and each change of a block's state reported to its worker, which must
know a job is being completed before a heartbeat finds its row gone. Apart from
:mod:`pgqueue.worker.transactions` (the worker's side) so that a worker without children never
imports the children's frames.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from pgqueue.handler.job_context import ClaimedJob, JobContext
from pgqueue.handler.job_transaction import TransactionHost
from pgqueue.worker import frames
from pgqueue.worker.transactions import connection_kwargs


class ChildTransactions(TransactionHost):
    """In a child process: one connection, opened on first use and again after it broke; each
    change of a block's state is sent to the worker (``send``) before the next statement."""

    #: A handler's JobParked goes to the worker in the ``done`` frame, which parks the job.
    parks_jobs = True

    def __init__(
        self,
        dsn: str,
        *,
        prepare: bool,
        application_name: str | None,
        max_result_bytes: int,
        send: Callable[[dict[str, Any]], None],
    ) -> None:
        super().__init__(
            dsn,
            application_name=application_name,
            max_result_bytes=max_result_bytes,
            prepare=prepare,
        )
        self.kwargs = connection_kwargs(application_name, prepare)
        self.send = send
        self._conn: psycopg.Connection[Any] | None = None
        #: (id, token) of the job whose completion notifies its queue (told with the job).
        self.waking: set[tuple[int, int]] = set()
        #: (id, token) of the job whose claim had not committed when it was sent here.
        self.unsettled: set[tuple[int, int]] = set()

    def wake(self, job: ClaimedJob) -> list[str] | None:
        return [job.queue] if (job.id, job.lease_token) in self.waking else None

    def claim_unsettled(self, job: ClaimedJob) -> bool:
        return (job.id, job.lease_token) in self.unsettled

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            conn = self._conn = psycopg.connect(self.dsn, **self.kwargs)
        try:
            yield conn
        finally:
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                # Left in a transaction (the block could not end it: a broken connection):
                # never reuse it.
                self._conn = None
                conn.close()

    def state_changed(self, ctx: JobContext) -> None:
        self.send(frames.tx((ctx.id, ctx.job.lease_token), ctx.transaction_state, ctx.completed_as))

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
