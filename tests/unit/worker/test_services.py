"""The worker's services without PostgreSQL: each one driven against the recording store.

What each sends, in which order and with which values, and what it makes of the replies: the
integration suite proves the statements right against PostgreSQL; these prove the services'
decisions (batches, fences, lost leases, a claim that did not commit, outages) quickly and
one by one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from pgqueue import PgQueue
from pgqueue.handler.job_context import ClaimedJob
from pgqueue.worker import wiring
from pgqueue.worker.completer import Completer
from pgqueue.worker.counts import JobCounts
from pgqueue.worker.executor import Executor
from pgqueue.worker.fetcher import Fetcher
from pgqueue.worker.heartbeater import Heartbeater
from pgqueue.worker.holdings import Holdings
from pgqueue.worker.listener import Listener
from pgqueue.worker.observer import WorkerObserver, WorkerStats
from pgqueue.worker.outcome import Outcome
from pgqueue.worker.pruner import SETTLE_EVERY, Pruner
from pgqueue.worker.reaper import Reaper
from pgqueue.worker.releaser import Releaser
from pgqueue.worker.scheduler import Scheduler
from pgqueue.worker.service import Outage, Service, after_first_run
from pgqueue.worker.settings import WorkerSettings
from pgqueue.worker.supervisor import Supervisor
from tests.unit.worker.fake_store import FakeStore

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coroutine)


def ids(array: str) -> list[int]:
    """The ids of an ``int_array`` parameter (``{1,2,3}``)."""
    return [int(x) for x in array.strip("{}").split(",") if x]


def acked(params: Any) -> list[tuple[int, bool]]:
    """ack_jobs' reply when every lease held: (id, cancel requested) per job."""
    return [(job_id, False) for job_id in ids(params["ids"])]


def claim_row(job_id: int, task: str, token: int = 1, queue: str = "default") -> tuple[Any, ...]:
    """A row as claim_jobs returns it."""
    return (job_id, queue, task, {}, 1, 3, token, 0, NOW, NOW, False, None, None, None)


@pytest.fixture
def app() -> Iterator[PgQueue]:
    pgq = PgQueue("postgresql://nobody@localhost/none")  # the fake store stands in for it

    @pgq.task(name="quick")
    async def quick() -> None:
        return None

    @pgq.task(name="blocked")
    async def blocked() -> None:
        await asyncio.Event().wait()  # until stopped

    yield pgq
    pgq.close()


def parts(app: PgQueue, store: FakeStore, concurrency: int = 4) -> tuple[Executor, Completer]:
    completer = Completer(store)
    executor = Executor(app.tasks, concurrency, "worker-1", completer.submit)
    return executor, completer


def make_fetcher(
    app: PgQueue, store: FakeStore, executor: Executor, completer: Completer, lease: float = 30.0
) -> Fetcher:
    return Fetcher(
        store,
        executor,
        completer,
        worker_id="worker-1",
        queues=["default"],
        task_names=sorted(app.tasks),
        lease=lease,
        poll_interval=5.0,
        burst=False,
        on_burst_done=lambda: None,
    )


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


# -- reaper, pruner, scheduler -------------------------------------------------------------


def test_the_reaper_runs_batches_until_one_comes_back_short():
    store = FakeStore()
    store.once("reap", [(3,)], [(3,)], [(1,)])
    reaper = Reaper(store, every=5.0, batch=3)
    assert run(reaper.reap()) == 7
    assert store.sent("reap") == [{"max_jobs": 3}] * 3
    assert reaper.recovered == 7


def test_the_pruner_prunes_in_batches_and_settles_waiting_jobs_every_tenth_pass():
    store = FakeStore(
        replies={
            "prune_history": [(0, None)],
            "prune_dead_letters": [(0, None)],
            "prune_key_buckets": [(0,)],
            "prune_job_steps": [(0,)],
            "prune_events": [(0,)],
            "settle_waiting": [(0,)],
        }
    )
    store.once("prune_history", [(2, [9])], [(1, None)])
    store.once("prune_workflows", [(9,)])
    pruner = Pruner(store, every=60.0, batch_size=2)
    run(pruner.run_once())
    assert store.names() == [
        "prune_history",
        "prune_workflows",
        "prune_history",
        "prune_dead_letters",
        "prune_job_steps",
        "prune_events",
        "prune_key_buckets",
        "settle_waiting",
    ]
    assert store.sent("prune_workflows") == [{"ids": [9]}]
    store.statements.clear()
    for _ in range(SETTLE_EVERY - 1):
        run(pruner.run_once())
    assert "settle_waiting" not in store.names()
    run(pruner.run_once())
    assert store.names().count("settle_waiting") == 1


def test_the_scheduler_enqueues_a_due_tick_and_sleeps_until_the_next():
    due = NOW - timedelta(seconds=1)
    store = FakeStore(
        replies={
            "due_schedules": [
                ("nightly", "*/5 * * * *", "UTC", due, "skip", timedelta(hours=1), 10, NOW)
            ],
            "enqueue_schedule_ticks": [(due, 41, True)],
            "next_schedule_in": [(3.5,)],
        }
    )
    scheduler = Scheduler(store, max_interval=2.0)
    run(scheduler.run_once())
    (sent,) = store.sent("enqueue_schedule_ticks")
    assert sent["name"] == "nightly" and sent["expected"] == due
    assert sent["next_tick"] > NOW  # moved past now by the compare-and-set
    assert scheduler.ticks_enqueued == 1
    assert scheduler.interval() == 2.0  # the next tick is 3.5 s away; it looks again at 2 s
    assert store.names().count("prune_idempotency_keys") == 1
    run(scheduler.run_once())  # a minute has not passed: no second prune
    assert store.names().count("prune_idempotency_keys") == 1


# -- fetcher -> executor -> completer ------------------------------------------------------


def test_claimed_jobs_run_and_their_outcomes_go_out_in_one_statement(app):
    async def scenario() -> FakeStore:
        store = FakeStore(replies={"ack_jobs": acked, "idle_handshake": [(True,)]})
        store.once("claim_jobs", [claim_row(1, "quick"), claim_row(2, "quick", token=5)])
        executor, completer = parts(app, store)
        fetcher = make_fetcher(app, store, executor, completer)
        await fetcher.run_once()  # idle: the claim's jobs start before its COMMIT returns
        await settle()
        assert len(completer.pending) == 2
        await completer.run_once()
        return store

    store = run(scenario())
    (claim,) = [s for s in store.statements if s.name == "claim_jobs"]
    assert claim.params["limit"] == 4 and claim.transaction is not None
    (ack,) = store.sent("ack_jobs")
    assert (ids(ack["ids"]), ids(ack["tokens"])) == ([1, 2], [1, 5])
    assert "confirm_claims" not in store.names(), "rows on time start as they come"


@pytest.mark.parametrize("idle", [True, False], ids=["idle claim", "busy claim"])
def test_claimed_rows_that_come_late_start_only_once_their_leases_are_confirmed(app, caplog, idle):
    lease = 0.05

    def late(rows: list[tuple[Any, ...]]) -> Any:
        def reply(params: Any) -> list[tuple[Any, ...]]:
            time.sleep(lease)  # the rows waited in the socket while the loop was blocked
            return rows

        return reply

    async def scenario() -> tuple[FakeStore, list[int]]:
        store = FakeStore(replies={"ack_jobs": acked})
        if not idle:  # a job running: the next claim is a busy worker's, committed at once
            store.once("claim_jobs", [claim_row(1, "blocked")])
        store.once("claim_jobs", late([claim_row(7, "blocked"), claim_row(8, "blocked", token=5)]))
        store.once("confirm_claims", [(7, 1)])  # (the busy claim's job 8 was taken back)
        executor, completer = parts(app, store)
        fetcher = make_fetcher(app, store, executor, completer, lease=lease)
        if not idle:
            await fetcher.run_once()
            await settle()
        await fetcher.run_once()
        await settle()
        return store, sorted(job_id for job_id, _ in executor.running)

    caplog.set_level(logging.INFO, logger="pgqueue.worker")
    store, running = run(scenario())
    (confirm,) = [s for s in store.statements if s.name == "confirm_claims"]
    assert (confirm.params["ids"], confirm.params["tokens"]) == ([7, 8], [1, 5])
    assert "claim came late: leases extended" in caplog.text
    if idle:
        # In the claim's own transaction, before it commits: the claim holds every row.
        (claim,) = [s for s in store.statements if s.name == "claim_jobs"]
        assert confirm.transaction == claim.transaction is not None
        assert running == [7, 8]
    else:  # after the claim committed: job 8 was taken back meanwhile
        assert confirm.transaction is None
        assert running == [1, 7]
        assert "claim came late: jobs taken back meanwhile, not started" in caplog.text


def test_a_claim_whose_commit_failed_stops_its_handlers_and_writes_nothing(app, caplog):
    async def scenario() -> tuple[FakeStore, Completer]:
        store = FakeStore(replies={"ack_jobs": acked})
        store.once("claim_jobs", [claim_row(7, "blocked")])
        store.commit_error = psycopg.OperationalError("server closed the connection")
        executor, completer = parts(app, store)
        fetcher = make_fetcher(app, store, executor, completer)
        await fetcher.run_once()
        await settle()
        assert executor.running, "did it commit? The handler runs on until the database says"
        await fetcher.run_once()  # settle_claims: the job is not running under this worker
        await settle()
        assert not executor.running, "the handler of a claim that did not commit was stopped"
        await completer.run_once()
        return store, completer

    caplog.set_level(logging.INFO, logger="pgqueue.worker")
    store, _ = run(scenario())
    assert "ack_jobs" not in store.names() and "fail_jobs" not in store.names()
    (asked,) = store.sent("settle_claims")
    assert (asked["ids"], asked["tokens"]) == ([7], [1])
    assert store.names().index("settle_claims") < store.names().index("claim_jobs", 1)
    assert "claim did not commit" in caplog.text


def test_a_claim_whose_commit_reply_was_lost_but_committed_runs_on_and_is_written(app, caplog):
    async def scenario() -> tuple[FakeStore, Executor]:
        store = FakeStore(replies={"ack_jobs": acked})
        store.once("claim_jobs", [claim_row(7, "quick")])
        store.once("settle_claims", [(7, 1, False), (9, 4, True)])
        store.commit_error = psycopg.OperationalError("server closed the connection")
        executor, completer = parts(app, store)
        fetcher = make_fetcher(app, store, executor, completer)
        await fetcher.run_once()
        await settle()
        await completer.run_once()
        assert "ack_jobs" not in store.names(), "held until the claim is known to have committed"
        await fetcher.run_once()  # settle_claims: it committed (and job 9 was given back)
        await settle()
        await completer.run_once()
        return store, executor

    caplog.set_level(logging.INFO, logger="pgqueue.worker")
    store, _ = run(scenario())
    (ack,) = store.sent("ack_jobs")
    assert (ids(ack["ids"]), ids(ack["tokens"])) == ([7], [1])
    assert "claim committed though its reply was lost" in caplog.text
    assert "claimed jobs handed back" in caplog.text
    assert "claim did not commit" not in caplog.text


# -- heartbeater ---------------------------------------------------------------------------


def beat_parts(app: PgQueue, store: FakeStore) -> tuple[Executor, Completer, Heartbeater]:
    executor, completer = parts(app, store)
    heartbeater = Heartbeater(
        store, Holdings(executor, completer), WorkerStats(), worker_id="worker-1", lease=30.0
    )
    return executor, completer, heartbeater


def test_a_heartbeat_that_finds_a_lease_lost_stops_its_handler_once(app, caplog):
    async def scenario() -> tuple[FakeStore, Completer]:
        store = FakeStore()
        store.once("heartbeat", [(2, 1, False, True)])  # job 1 is missing: lost
        executor, completer, heartbeater = beat_parts(app, store)
        executor.accept(
            [
                ClaimedJob.from_row(claim_row(1, "blocked")),
                ClaimedJob.from_row(claim_row(2, "blocked")),
            ]
        )
        await settle()
        await heartbeater.run_once()
        await settle()
        assert [key for key in executor.running] == [(2, 1)]
        await heartbeater.run_once()
        return store, completer

    caplog.set_level(logging.INFO, logger="pgqueue.worker")
    store, completer = run(scenario())
    first, second = store.sent("heartbeat")
    assert (ids(first["ids"]), ids(first["tokens"])) == ([1, 2], [1, 1])
    assert ids(second["ids"]) == [2]  # a lost lease is not sent again
    lost = [r for r in caplog.records if getattr(r, "action", "") == "lease.lost"]
    assert [r.getMessage() for r in lost if r.job_id == 1] == ["lease lost; stopping handler"]
    assert completer.pending == []  # the job is not ours any more: nothing to write about it


def test_a_heartbeat_stops_the_handler_of_a_job_whose_cancel_was_requested(app):
    async def scenario() -> Completer:
        store = FakeStore(replies={"heartbeat": [(3, 1, True, True)]})
        executor, completer, heartbeater = beat_parts(app, store)
        executor.accept([ClaimedJob.from_row(claim_row(3, "blocked"))])
        await settle()
        await heartbeater.run_once()
        await settle()
        assert not executor.running
        return completer

    completer = run(scenario())
    assert [(o.job.id, o.kind) for o in completer.pending] == [(3, "cancelled")]


def test_a_failed_heartbeat_keeps_its_counts_and_progress_for_the_next(app):
    async def scenario() -> FakeStore:
        store = FakeStore()
        store.once("heartbeat", psycopg.OperationalError("gone"))
        executor, _, heartbeater = beat_parts(app, store)
        executor.accept([ClaimedJob.from_row(claim_row(4, "blocked"))])
        await settle()
        (running,) = executor.running.values()
        running.ctx.report_progress("half way")
        heartbeater.counts.job_written(outcome(9), "succeeded")
        with pytest.raises(psycopg.OperationalError):
            await heartbeater.run_once()
        await heartbeater.run_once()
        executor.stop_all("shutdown")  # the test is over
        await settle()
        return store

    store = run(scenario())
    failed, retried = store.sent("heartbeat")
    assert retried["progress"] == ["half way"] and ids(retried["progress_ids"]) == [4]
    assert retried["count_succeeded"] == failed["count_succeeded"]


def test_a_job_whose_row_the_heartbeat_skipped_is_held_and_its_progress_goes_next_beat(app):
    async def scenario() -> tuple[FakeStore, bool]:
        # Held, its row locked by another transaction: not extended (each beat).
        store = FakeStore(replies={"heartbeat": [(5, 1, False, False)]})
        executor, _, heartbeater = beat_parts(app, store)
        executor.accept([ClaimedJob.from_row(claim_row(5, "blocked"))])
        await settle()
        (running,) = executor.running.values()
        running.ctx.report_progress("a third")
        await heartbeater.run_once()
        await heartbeater.run_once()
        still_running = heartbeater.lost == set() and (5, 1) in executor.running
        executor.stop_all("shutdown")  # the test is over
        await settle()
        return store, still_running

    store, still_running = run(scenario())
    assert still_running  # not taken for lost
    _, next_beat = store.sent("heartbeat")
    assert ids(next_beat["ids"]) == [5]
    assert next_beat["progress"] == ["a third"] and ids(next_beat["progress_ids"]) == [5]


def test_a_skipped_lease_is_tried_again_alone_a_second_later_and_the_full_beat_keeps_its_pace(
    app,
):
    async def scenario() -> tuple[FakeStore, list[float], Heartbeater, dict[int, float]]:
        store = FakeStore()
        # Job 6's row is locked by another transaction (an operator's) for two beats.
        store.once("heartbeat", [(5, 1, False, True), (6, 1, False, False)])
        store.once("heartbeat", [(6, 1, False, False)])
        store.once("heartbeat", [(6, 1, False, True)])
        executor, _, heartbeater = beat_parts(app, store)
        executor.accept([ClaimedJob.from_row(claim_row(n, "blocked")) for n in (5, 6)])
        await settle()
        intervals = [heartbeater.interval()]
        await heartbeater.run_once()  # the full beat: 6 skipped
        after_full = {n: heartbeater.leases._extended.get((n, 1), 0.0) for n in (5, 6)}
        intervals.append(heartbeater.interval())
        await heartbeater.run_once()  # 6 alone: skipped again
        intervals.append(heartbeater.interval())
        await heartbeater.run_once()  # 6 alone: extended
        intervals.append(heartbeater.interval())
        clock = {n: heartbeater.leases._extended.get((n, 1), 0.0) for n in (5, 6)}
        assert clock[5] == after_full[5] and after_full[6] == 0.0 < clock[6]
        executor.stop_all("shutdown")
        await settle()
        return store, intervals, heartbeater, clock

    store, intervals, heartbeater, _ = run(scenario())
    assert intervals == [10.0, 1.0, 1.0, 10.0]
    full, again, extended = store.sent("heartbeat")
    assert ids(full["ids"]) == [5, 6]
    assert ids(again["ids"]) == ids(extended["ids"]) == [6]
    assert again["count_queues"] == [] or again["count_queues"] is None
    assert heartbeater.lost == set() and heartbeater.skipped == set()


def test_a_beat_asked_for_by_the_listener_sends_every_lease_while_one_is_skipped(app):
    async def scenario() -> FakeStore:
        store = FakeStore()
        store.once("heartbeat", [(5, 1, False, True), (6, 1, False, False)])
        executor, _, heartbeater = beat_parts(app, store)
        executor.accept([ClaimedJob.from_row(claim_row(n, "blocked")) for n in (5, 6)])
        await settle()
        await heartbeater.run_once()  # 6 skipped
        heartbeater.beat_all_now()  # the LISTEN took again: every held job's cancel flag
        await heartbeater.run_once()
        executor.stop_all("shutdown")
        await settle()
        return store

    _, woken = run(scenario()).sent("heartbeat")
    assert ids(woken["ids"]) == [5, 6]


def test_progress_reported_while_the_claim_commits_is_written_once_it_committed(app):
    """An idle worker starts a job before its claim's COMMIT returns, and the handler may
    report progress at once; a beat meanwhile does not send that job (nothing is written under
    a claim not committed yet) and must keep its progress for a beat that does."""

    async def scenario() -> FakeStore:
        store = FakeStore(replies={"heartbeat": [(5, 1, False, True)]})
        executor, completer, heartbeater = beat_parts(app, store)
        completer.ledger.claim_pending([(5, 1)])
        executor.accept([ClaimedJob.from_row(claim_row(5, "blocked"))])
        await settle()
        (running,) = executor.running.values()
        running.ctx.report_progress("0.4")
        await heartbeater.run_once()  # the claim's COMMIT is still on its way
        completer.ledger.claim_committed([(5, 1)])
        await heartbeater.run_once()
        executor.stop_all("shutdown")
        await settle()
        return store

    during, after = run(scenario()).sent("heartbeat")
    assert ids(during["ids"]) == [] and during["progress"] is None
    assert ids(after["ids"]) == [5]
    assert after["progress"] == ["0.4"] and ids(after["progress_ids"]) == [5]


def test_a_skipped_lease_written_meanwhile_is_not_tried_again(app):
    async def scenario() -> tuple[FakeStore, Heartbeater, list[tuple[int, int]]]:
        store = FakeStore(replies={"ack_jobs": acked})
        store.once("heartbeat", [(6, 1, False, False)])  # its own ack holds the row
        executor, completer, heartbeater = beat_parts(app, store)
        executor.accept([ClaimedJob.from_row(claim_row(6, "quick"))])
        await heartbeater.run_once()
        await settle()  # the job ends...
        await completer.run_once()  # ...and is written
        held = heartbeater.holdings.leases()
        await heartbeater.run_once()  # nothing left to try again: no statement
        return store, heartbeater, held

    store, heartbeater, held = run(scenario())
    assert held == []
    assert store.names() == ["heartbeat", "ack_jobs"]
    assert heartbeater.skipped == set()


# -- completer -----------------------------------------------------------------------------


def outcome(job_id: int, kind: str = "ack", token: int = 1) -> Outcome:
    return Outcome(ClaimedJob.from_row(claim_row(job_id, "quick", token)), kind)  # type: ignore[arg-type]


def test_outcomes_kept_through_an_outage_are_written_once_it_ends():
    store = FakeStore(replies={"ack_jobs": acked})
    store.once("ack_jobs", psycopg.OperationalError("server closed the connection"))
    completer = Completer(store)
    for job_id in (3, 1, 2):
        completer.submit(outcome(job_id))
    with pytest.raises(psycopg.OperationalError):
        run(completer.run_once())
    assert sorted(o.job.id for o in completer.pending) == [1, 2, 3]
    run(completer.run_once())
    first, second = store.sent("ack_jobs")
    assert ids(first["ids"]) == ids(second["ids"]) == [1, 2, 3]  # sorted: one lock order
    assert completer.pending == []


def test_failures_and_acks_of_one_batch_go_out_in_two_statements():
    store = FakeStore(
        replies={
            "ack_jobs": acked,
            "fail_jobs": lambda p: [(job_id, "retry") for job_id in p["ids"]],
        }
    )
    completer = Completer(store)
    completer.submit(outcome(1))
    completer.submit(outcome(2, "error"))
    completer.submit(outcome(3))
    run(completer.run_once())
    assert store.names() == ["ack_jobs", "fail_jobs"]
    assert store.sent("fail_jobs")[0]["ids"] == [2]


# -- releaser ------------------------------------------------------------------------------


def test_a_breaker_that_opens_hands_back_its_tasks_prefetched_jobs(app):
    async def scenario() -> Executor:
        store = FakeStore(replies={"release_jobs": lambda p: [(i,) for i in p["ids"]]})
        executor, completer = parts(app, store, concurrency=1)
        releaser = Releaser(store, executor, completer)
        completer.on_breaker_open = releaser.breaker_opened
        executor.accept([ClaimedJob.from_row(claim_row(n, "blocked", token=n)) for n in (1, 2, 3)])
        await settle()
        completer.on_breaker_open("blocked")
        await settle()
        assert store.sent("release_jobs") == [{"ids": [2, 3], "tokens": [2, 3]}]
        executor.stop_all("shutdown")  # the test is over
        await settle()
        return executor

    executor = run(scenario())
    assert not executor.waiting


def test_a_shutdown_hands_back_what_did_not_finish_in_the_grace_period(app):
    async def scenario() -> FakeStore:
        store = FakeStore(
            replies={"release_jobs": lambda p: [(i,) for i in p["ids"]], "ack_jobs": acked}
        )
        executor, completer = parts(app, store, concurrency=2)
        releaser = Releaser(store, executor, completer)
        executor.accept(
            [
                ClaimedJob.from_row(claim_row(1, "blocked")),
                ClaimedJob.from_row(claim_row(2, "blocked")),
                ClaimedJob.from_row(claim_row(3, "quick")),  # prefetched: never starts
            ]
        )
        await settle()
        await releaser.drain(grace=0.05)
        assert not executor.running
        return store

    store = run(scenario())
    assert "ack_jobs" not in store.names()  # the prefetched job never ran
    assert store.sent("release_jobs") == [{"ids": [3, 1, 2], "tokens": [1, 1, 1]}]


# -- outage and supervisor -----------------------------------------------------------------


class Flaky(Service):
    def __init__(self, name: str, store: FakeStore) -> None:
        self.name = name
        super().__init__()
        self.store = store

    def interval(self) -> float:
        return 0.01

    async def run_once(self) -> None:
        await self.store.fetch("ping")


def test_services_on_one_database_warn_once_per_outage_and_recover_together(caplog):
    caplog.set_level(logging.DEBUG, logger="pgqueue.worker")
    outage = Outage()
    store = FakeStore(replies={"ping": psycopg.OperationalError("connection refused")})
    services = [Flaky(name, store) for name in ("first", "second", "third")]

    async def outage_then_recovery() -> None:
        supervisor = Supervisor(WorkerObserver())
        for service in services:
            supervisor.add(service, outage)
        supervisor.start()
        await asyncio.sleep(0.3)
        assert outage.down
        store.replies["ping"] = []
        for _ in range(100):
            if not outage.down:
                break
            await asyncio.sleep(0.02)
        assert not outage.down, "every service got through"
        await supervisor.stop()

    run(outage_then_recovery())
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "database unavailable" in warnings[0].getMessage()
    recovered = [r for r in caplog.records if "reachable again" in r.getMessage()]
    assert len(recovered) == 1
    assert all(s.db_errors >= 1 for s in services)


def test_the_first_service_through_ends_the_outage_for_all():
    woken: list[str] = []

    class Sleeper(Service):
        def __init__(self, name: str) -> None:
            self.name = name
            super().__init__()

        def wake(self) -> None:
            woken.append(self.name)

    outage = Outage()
    first, second, third = Sleeper("first"), Sleeper("second"), Sleeper("third")
    down = psycopg.OperationalError("connection refused")
    for _ in range(4):
        for service in (first, second, third):
            outage.failed(service, down)
    # The backoff grew as one service's would (four failures), not twelve services'.
    assert outage.delay.failures == 4
    assert outage.down
    outage.succeeded(second)
    assert woken == ["first", "third"]  # they try again now, not after their backoff
    assert outage.delay.failures == 0
    outage.succeeded(first)
    outage.succeeded(third)
    assert not outage.down


def test_each_problem_is_warned_about_once_per_outage_whichever_service_meets_it(caplog):
    caplog.set_level(logging.DEBUG, logger="pgqueue.worker")
    outage = Outage()
    listener, fetcher = Flaky("listener", FakeStore()), Flaky("fetcher", FakeStore())
    refused = psycopg.OperationalError("connection refused")
    cut = psycopg.OperationalError("server closed the connection unexpectedly")
    for _ in range(5):  # each meets the outage its own way, over and over
        outage.failed(listener, refused)
        outage.failed(fetcher, cut)
        outage.failed(listener, cut)
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [(r.action, r.service) for r in warned] == [
        ("service.db_unavailable", "listener"),
        ("service.db_unavailable", "fetcher"),
    ]
    assert warned[0].error == "connection refused"
    assert warned[1].error.startswith("server closed")
    outage.succeeded(listener)
    outage.failed(fetcher, cut)  # a new outage: warned again
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 3


def test_the_supervisor_starts_in_order_and_stops_in_reverse():
    events: list[str] = []

    class Part(Service):
        def __init__(self, name: str) -> None:
            self.name = name
            super().__init__()

        async def run(self) -> None:
            events.append(f"start {self.name}")
            try:
                await asyncio.Event().wait()
            finally:
                events.append(f"end {self.name}")

        def stop(self) -> None:
            events.append(f"stop {self.name}")
            super().stop()

    async def scenario() -> None:
        supervisor = Supervisor(WorkerObserver())
        outage = Outage()
        *_, last = (supervisor.add(Part(n), outage) for n in "abc")
        supervisor.start()
        await settle()
        await supervisor.stop(last)
        await supervisor.stop()

    run(scenario())
    assert events == [
        "start a", "start b", "start c",
        "stop c", "end c",
        "stop b", "stop a", "end b", "end a",
    ]  # fmt: skip


def test_the_first_claim_goes_out_before_any_housekeeping_statement(app, monkeypatch):
    """At start-up the heartbeater, reaper, pruner and scheduler wait for the fetcher's first
    claim: none of their statements queues for the pool's connection ahead of it."""
    store = FakeStore()
    monkeypatch.setattr(wiring, "WorkerDB", lambda *args, **kwargs: store)
    settings = WorkerSettings(listen=False, reaper_interval=5.0, prune_interval=5.0)

    async def scenario() -> None:
        stats = WorkerStats()
        parts = wiring.assemble(
            app,
            settings,
            dsn="postgresql://nobody@localhost/none",
            worker_id="worker-1",
            stats=stats,
            counts=JobCounts(),
            observer=stats,
            on_burst_done=lambda: None,
        )
        parts.supervisor.start()
        for _ in range(5):
            await settle()
            await asyncio.sleep(0.01)
        await parts.supervisor.stop()
        parts.executor.shutdown_threads()

    run(scenario())
    names = store.names()
    assert names[0] == "claim_jobs", names
    # ... and they did run, after it.
    assert {"heartbeat", "reap", "prune_history", "due_schedules"} <= set(names), names


def test_the_listener_starts_at_once_and_wakes_the_heartbeater_once_listening(app, monkeypatch):
    """The listener takes nothing from the pool, and a cancel sent once a job is claimed must
    find its LISTEN there: it is not held back behind the first claim as housekeeping is (a
    cancel sent in between was seen only by the next heartbeat, a third of a lease later)."""
    monkeypatch.setattr(wiring, "WorkerDB", lambda *args, **kwargs: FakeStore())
    parts = wiring.assemble(
        app,
        WorkerSettings(listen=True),
        dsn="postgresql://nobody@localhost/none",
        worker_id="worker-1",
        stats=WorkerStats(),
        counts=JobCounts(),
        observer=WorkerStats(),
        on_burst_done=lambda: None,
    )
    try:
        deferred = {type(part).__name__ for part in parts.supervisor.deferred()}
        assert "Listener" not in deferred and "Heartbeater" in deferred, deferred
        # Once listening it wakes the heartbeater: a beat at once reads the cancels sent before
        # its LISTEN took (at start, or during a reconnect).
        [listener] = [p for p in parts.supervisor.services if isinstance(p, Listener)]
        [heartbeater] = [p for p in parts.supervisor.services if isinstance(p, Heartbeater)]
        listener.on_listening()
        assert heartbeater.wakeup.is_set()
    finally:
        parts.executor.shutdown_threads()


def test_a_service_started_after_another_waits_for_its_first_run_at_most_the_cap():
    class Stuck(Service):
        async def run_once(self) -> None:
            await asyncio.Event().wait()  # its first run never ends

    class Quick(Service):
        async def run_once(self) -> None:
            return None

    async def scenario() -> tuple[bool, bool]:
        stuck, quick = Stuck(), Quick()
        task = asyncio.create_task(quick.run())
        await asyncio.wait_for(after_first_run(quick), 1.0)  # returns once quick ran
        quick.stop()
        await task
        waited = asyncio.create_task(after_first_run(stuck, cap=0.05))
        await asyncio.sleep(0.01)
        early = waited.done()
        await asyncio.wait_for(waited, 1.0)  # ... and a first run that hangs for no longer
        return quick.ran_once.is_set(), early

    ran, early = run(scenario())
    assert ran and not early
