"""The pruner service: retention in the worker's maintenance loop.

Every ``every`` seconds (jittered) it runs one pruning pass (:func:`pgqueue.db.retention.prune`:
expired job history and results, dead letters past their retention, emptied workflows) in small
batches, each statement its own transaction, with SKIP LOCKED so every worker may run it, and
deletes the per-key token buckets that are full again
(:func:`pgqueue.db.flow_plans.prune_key_buckets`).
Now and then it also runs the waiting-job safety net (``pgqueue.settle_waiting()``). What to
keep is read from ``pgqueue.retention`` by the statements themselves, so all workers agree.
"""

from __future__ import annotations

from pgqueue.db import flow_plans
from pgqueue.rules.log_actions import Action, fields
from pgqueue.worker.service import Service
from pgqueue.worker.store import WorkerStore

#: Run the waiting-job safety net every this many passes (it reads every waiting job).
SETTLE_EVERY = 10


class Pruner(Service):
    name = "pruner"

    def __init__(self, store: WorkerStore, *, every: float, batch_size: int | None = None) -> None:
        super().__init__()
        self.store = store
        self.every = every
        #: None: :data:`pgqueue.db.retention.PRUNE_BATCH`.
        self.batch_size = batch_size
        self.passes = 0

    def interval(self) -> float:
        return self.every

    async def run_once(self) -> None:
        # The retention queries load with the first pass, once the worker's first claim is done.
        from pgqueue.db import retention

        batch = retention.PRUNE_BATCH if self.batch_size is None else self.batch_size
        report = await self.store.drive(retention.prune(batch))
        if report.history or report.dead_letters or report.workflows:
            self.log.info(
                "pruned",
                extra=fields(
                    Action.PRUNER_PRUNED,
                    history=report.history,
                    dead_letters=report.dead_letters,
                    workflows=report.workflows,
                ),
            )
        buckets = await self.store.drive(flow_plans.prune_key_buckets(batch))
        if buckets:
            self.log.debug("pruned full key", extra=fields(Action.PRUNER_BUCKETS, buckets=buckets))
        self.passes += 1
        if self.passes % SETTLE_EVERY == 1:
            settled = await self.store.drive(retention.settle_waiting())
            if settled:
                self.log.warning(
                    "settled waiting jobs whose parents left unnoticed",
                    extra=fields(Action.PRUNER_SETTLED, parents=settled),
                )
