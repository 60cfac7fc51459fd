"""The fetcher: claims as many jobs as there are free slots, in one statement.

It claims again at once while claims come back full (there is more work); otherwise it sleeps
until the earliest of: a NOTIFY for one of its queues (the listener wakes it), the next
scheduled job becoming due (a timer read from the database), or the poll interval (the fallback
for lost notifications).

Flow control: the plain claim skips its walk when weights, limits, keyed jobs or a breaker apply
to the worker's queues or tasks; ``next_due`` (run whenever a claim was not full) says so, and
the fetcher then claims with ``pgqueue.claim`` until that says flow control no longer applies.
When limits held ready work back, the claim says so. Having claimed nothing, the fetcher waits
until the next rate-limit token is due (the claim says when, exactly) or, for a concurrency
limit, until a job under it leaves: the job that took a limit's last free place notifies its
queue in the statement that writes its outcome (``ack_jobs_waking``, ``fail_jobs``), which
wakes the held-back fetcher of every worker process, this one's included (through the
listeners; without a listener, this worker's own outcomes wake it). A backoff (50 ms doubling
up to ``throttle_cap`` seconds) is only the fallback for a wake-up that never comes (a lease
that expired, say). Having claimed some jobs, it claims again at once: the claim's ranks can
leave room unused (fixed by the next claim).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from pgqueue.handler.job_context import ClaimedJob
from pgqueue.rules.log_actions import Action, fields
from pgqueue.worker.claim_cursor import ClaimCursor
from pgqueue.worker.claim_ledger import ClaimLedger
from pgqueue.worker.completer import Completer
from pgqueue.worker.executor import Executor
from pgqueue.worker.late_claims import Claimed, LateClaims, log_extended
from pgqueue.worker.linger import Linger
from pgqueue.worker.service import Service
from pgqueue.worker.store import FLOW_CLAIM_COLUMNS, TRANSIENT_ERRORS, Row, WorkerStore

# Positions in a claim's rows, which the store decodes by name into FLOW_CLAIM_COLUMNS' order
# (claim_jobs' rows stop after the job's columns).
_ID, _TOKEN = FLOW_CLAIM_COLUMNS.index("id"), FLOW_CLAIM_COLUMNS.index("lease_token")
#: Seconds until a limit may let a job through (0: unknown; < 0: flow control applies no more),
#: on the row of no job that claim_flow adds when limits held work back.
_THROTTLED = FLOW_CLAIM_COLUMNS.index("throttled")
#: The job took the last free place under a concurrency limit (see ack_jobs_waking).
_WAKE_ON_EXIT = FLOW_CLAIM_COLUMNS.index("wake_on_exit")
#: What leaves a claim unsettled on the way out (the database away, or too slow to answer).
_UNANSWERED: tuple[type[BaseException], ...] = (TimeoutError, *TRANSIENT_ERRORS)


class _Idle(enum.Enum):
    NO = "not registered"
    REGISTERED = "registered; producers that looked earlier may still be committing"
    VERIFIED = "registered; every job enqueued since is notified"


class Fetcher(Service):
    name = "fetcher"
    jitter = 0.0  # timers to the next due job must not be stretched

    def __init__(
        self,
        store: WorkerStore,
        executor: Executor,
        completer: Completer,
        *,
        ledger: ClaimLedger | None = None,
        worker_id: str,
        queues: list[str],
        task_names: list[str],
        lease: float,
        poll_interval: float,
        burst: bool,
        on_burst_done: Callable[[], None],
    ) -> None:
        super().__init__()
        self.store = store
        self.executor = executor
        self.completer = completer
        #: What the claims left to settle (a COMMIT on its way, a queue to wake on exit).
        self.ledger = ledger if ledger is not None else completer.ledger
        self.queues = queues
        self.params: dict[str, Any] = {
            "queues": queues,
            "tasks": task_names,
            "lease": timedelta(seconds=lease),
            "worker_id": worker_id,
            "limit": 0,
            "running": [0] * len(queues),
        }
        self.cursor = ClaimCursor(queues)
        #: Claims whose rows, or COMMIT reply, come late (pgqueue.worker.late_claims).
        self.late = LateClaims(store, lease=lease, worker_id=worker_id, log=self.log)
        self.poll_interval = poll_interval
        self.burst = burst
        self.on_burst_done = on_burst_done
        self._next_sleep = 0.0
        self._idle_empty_claims = 0
        #: The last claim filled every free slot (more work is probably waiting).
        self.saturated = False
        self.throttle_cap = 1.0
        #: Flow control applies to this worker's queues or tasks: claim with pgqueue.claim.
        self.flow = False
        self._throttle_backoff = 0.0
        #: The last claim was held back by a limit and claimed nothing: waiting for room.
        self.held_back = False
        #: Whether NOTIFYs reach this worker (its listener is connected); the worker sets it.
        self.listening: Callable[[], bool] = lambda: False
        #: Whether this worker is registered in idle_workers (see _go_idle).
        self._idle = _Idle.NO
        #: Whether to poll instead of registering while work arrives fast (see linger.py).
        self.linger = Linger()
        self._handshake_backoff = 0.0
        #: The main lane's claim while it is in flight (see run_once).
        self._main: asyncio.Future[Claimed] | None = None
        self._main_sent_at = 0.0
        #: The second claim lane's claim, while one is in flight (see _claim_ahead).
        self._ahead: asyncio.Task[None] | None = None
        self._ahead_sent = False
        #: COMMITs of idle claims still on their way (see _claim_early).
        self._commits: set[asyncio.Task[None]] = set()
        #: next_due's rows, read with the last idle claim.
        self._due: list[Row] | None = None
        #: Early claims whose COMMIT failed or got no reply (did it commit?), and why: their
        #: jobs run on, their outcomes held, until _settle asks the database.
        self._unsettled: list[tuple[int, int]] = []
        self._unsettled_error = ""
        #: A claim failed after it may have reached the server: its reply, and the jobs it
        #: took, may be lost (see _settle).
        self._lost = False

    def interval(self) -> float:
        return self._next_sleep

    async def run_once(self) -> None:
        if self._unsettled or self._lost:
            await self._settle()
        # With prefetch, wait until a good share of it is free again, so claims stay big while
        # the waiting jobs keep every slot busy; without, claim as soon as one slot frees.
        # No prefetch under flow control: a limit counts claimed jobs as running, so a job
        # claimed ahead would hold a place it is not using.
        prefetch = not self.flow
        room = self.executor.prefetch_limit() if prefetch else 0
        await self.executor.wait_for_capacity(max(1, room // 2), prefetch)
        if prefetch and room and self.saturated and self._ahead is None:
            # A backlog: let a second claim go out while this one is in flight (see _ahead).
            self._ahead = asyncio.create_task(self._claim_ahead(room), name="pgqueue-claim-ahead")
        free = self.executor.capacity(prefetch)
        self.params["limit"] = free
        self.params["running"] = self._running_per_queue()
        self.held_back = False
        # Nothing running or waiting here: the jobs of this claim start the moment its rows
        # arrive, while its COMMIT is on its way (see _claim_early).
        early = self.executor.idle() and not self.stopping.is_set()
        with self.executor.reserve(free):
            # Shielded: a shutdown that cancels this lane mid-claim must not cut the claim off
            # after the server committed it (its jobs would stay claimed until their leases
            # expired); run() lets it come back and hands its jobs back instead.
            self._main_sent_at = time.monotonic()
            self._main = asyncio.ensure_future(
                self._claim(self.params, self._main_sent_at, early=early)
            )
            # Cancelled here (even just after the claim came back), _main stays for run().
            rows, throttled, handed, leased_at = await asyncio.shield(self._main)
            self._main = None
        if not handed:
            self._hand_over(rows, leased_at)
        claimed = len(rows)
        self.saturated = claimed >= free
        if claimed >= free:
            self.linger.claimed(claimed, full=True)
            if self._idle is not _Idle.NO:
                # Busy: this worker claims as soon as a slot frees; producers need not notify.
                await self.store.fetch("unregister_idle", self.params)
                self._idle = _Idle.NO
            self._next_sleep = 0.0  # there may be more: claim again as soon as slots free up
            self._idle_empty_claims = 0
            self._throttle_backoff = 0.0
            return
        if throttled is not None:
            # Work is waiting behind a limit.
            self._idle_empty_claims = 0
            if throttled > 0:
                # A rate limit: the claim says when its next token is due.
                self._throttle_backoff = 0.0
                wait = throttled
            elif claimed:
                # Room was left unused (ranks count candidates another limit rejected), or
                # this claim took the last of it: the next claim says which, at once.
                self._throttle_backoff = 0.0
                self._next_sleep = 0.0
                return
            else:
                # A concurrency limit is full: a job under it leaving wakes this fetcher (see
                # outcomes_written and ack_jobs_waking); the backoff is only the fallback.
                self._throttle_backoff = min(
                    self.throttle_cap, max(0.05, self._throttle_backoff * 2)
                )
                wait = self._throttle_backoff
            self.held_back = not claimed
            self._next_sleep = min(self.poll_interval, self.throttle_cap, max(0.005, wait))
            return
        self._throttle_backoff = 0.0
        lingering = False
        if not self.burst:
            self.linger.claimed(claimed, full=False)
            lingering = self.linger.active
        due, self._due = self._due, None  # read with an idle worker's claim (_claim_early)
        if due is None and not (lingering and claimed):
            # (A claim that found jobs while lingering: the next poll comes before any timer
            # would, and claim_jobs skips its walk under flow control, so it would have found
            # none.)
            due = await self.store.fetch("next_due", self.params)
        if due and due[0][1] and not self.flow:
            # Flow control applies (claim_jobs skipped its walk): claim the other way, now.
            self.flow = True
            self._next_sleep = 0.0
            return
        if not rows and not lingering:
            # About to end (burst) or wait for a NOTIFY (idle): the claims that decide it look
            # from the top, not only past the cursor's key.
            self.cursor.look_from_top()
        if self.burst and self._burst_finished(bool(rows)):
            self.on_burst_done()
            self.stop()
            return
        seconds = due[0][0] if due and due[0][0] is not None else None
        if lingering:
            if self._idle is not _Idle.NO:
                # Producers need not notify for a worker that polls (linger.py).
                await self.store.fetch("unregister_idle", self.params)
                self._idle = _Idle.NO
            self._next_sleep = min(self.poll_interval, self.linger.interval)
            if seconds is not None:
                self._next_sleep = min(self._next_sleep, max(0.0, float(seconds)))
            return
        if not self.burst and self._idle is not _Idle.VERIFIED:
            await self._go_idle()
            return
        self._next_sleep = (
            self.poll_interval
            if seconds is None
            else min(self.poll_interval, max(0.0, float(seconds)))
        )
        if self.burst:
            # Burst mode does not wait for notifications; it polls briefly until done.
            self._next_sleep = min(self._next_sleep, 0.05)

    async def _go_idle(self) -> None:
        """Register as waiting for a NOTIFY, then make sure no job slipped past: producers
        notify only while some worker is registered (migration 0008), so a producer that looked
        before our row was there did not notify. Once none of those is still in its
        transaction (idle_handshake), one more claim sees all their jobs."""
        if self._idle is _Idle.NO:
            await self.store.fetch("register_idle", self.params)
            self._idle = _Idle.REGISTERED
        ready = await self.store.fetch("idle_handshake")
        if ready and ready[0][0]:
            self._idle = _Idle.VERIFIED
            self._handshake_backoff = 0.0
            self._next_sleep = 0.0  # that one more claim
            return
        # Such a producer is still in its transaction: poll until it is not.
        self._handshake_backoff = min(0.5, max(0.01, self._handshake_backoff * 2))
        self._next_sleep = self._handshake_backoff

    async def run(self) -> None:
        try:
            await super().run()
        finally:
            main, self._main = self._main, None
            if main is not None:
                # Cancelled while a claim was in flight: let it come back (as the other lane's
                # below) and hand its jobs over; stopping, they wait unstarted and the shutdown
                # hands them back.
                # (Waited for, not awaited: a claim that failed must not cut short what
                # follows, the settling of what it may have claimed.)
                await asyncio.wait({main}, timeout=5.0)
                if main.done() and not main.cancelled() and main.exception() is None:
                    rows, _, handed, leased_at = main.result()
                    if not handed:
                        self._hand_over(rows, leased_at)
                else:
                    main.cancel()
                    await asyncio.gather(main, return_exceptions=True)
            ahead = self._ahead
            if ahead is not None and not self._ahead_sent:
                ahead.cancel()  # still waiting for room: nothing claimed yet
            if ahead is not None:
                # A claim already sent is let come back rather than cut off (its jobs would
                # stay claimed until their leases expired): the jobs wait unstarted and the
                # shutdown hands them back.
                await asyncio.wait({ahead}, timeout=5.0)
                if not ahead.done():
                    ahead.cancel()
                await asyncio.gather(ahead, return_exceptions=True)
            if self._commits:
                # Their outcomes are written (or dropped) only once they are done.
                await asyncio.wait(set(self._commits), timeout=5.0)
                await asyncio.sleep(0)  # their done callbacks
            if (self._unsettled or self._lost) and not self._commits:
                await self._settle_at_exit()
            await self.late.stop()

    async def _settle_at_exit(self) -> None:
        """Settle failed claims once more on the way out; if the database cannot say, the
        early ones are taken for not committed (their jobs stay claimed until their leases
        expire only if they did)."""
        try:
            await asyncio.wait_for(self._settle(), timeout=5.0)
        except _UNANSWERED as exc:
            unsettled, self._unsettled = self._unsettled, []
            if unsettled:
                self._claim_failed(unsettled, f"{self._unsettled_error}; then {exc}".strip())

    async def _claim_ahead(self, room: int) -> None:
        """The second claim lane, while a backlog drains with prefetch. One claim in flight at a
        time left the executor idle at the end of every batch: a 256-job claim takes longer to
        come back (server time, then loading the rows on a busy event loop) than 256 short jobs
        take to run. This lane waits for room like the main one (claims in flight reserve
        theirs, so the two never claim more than the room), claims once and hands the jobs
        over; the main lane starts it again while claims keep coming back full."""
        try:
            await self.executor.wait_for_capacity(max(1, room // 2), True)
            free = self.executor.capacity(True)
            if free <= 0 or self.flow:
                return
            params = {**self.params, "limit": free}
            with self.executor.reserve(free):
                self._ahead_sent = True
                rows, _, _, leased_at = await self._claim(params, time.monotonic())
            self._hand_over(rows, leased_at)
        except TRANSIENT_ERRORS as exc:
            # The main lane meets the same outage and reports it.
            self.log.debug(
                "claim ahead failed",
                extra=fields(Action.CLAIM_AHEAD_FAILED, error=str(exc).strip()[:200]),
            )
        except Exception:
            self.log.exception("claim ahead failed", extra=fields(Action.CLAIM_AHEAD_FAILED))
        finally:
            self._ahead = None
            self._ahead_sent = False

    def notified(self, pid: int | None) -> None:
        """The listener passed on a notification for one of this worker's queues, sent by
        backend ``pid`` (None: the listener just connected, and anything may have arrived)."""
        if pid is not None:
            self.linger.notified(pid)
        self.wake()

    def outcomes_written(self, notified: bool) -> None:
        """The completer wrote outcomes of this worker's jobs, so their places under any limit
        are free. Held back by a limit, claim again now, unless the NOTIFY sent for them
        (``notified``) is on its way to this worker's listener."""
        if self.held_back and not (notified and self.listening()):
            self.wake()

    def _hand_over(self, rows: list[Row], sent_at: float) -> None:
        """``sent_at``: when the claim was sent (monotonic); its leases run at least that long."""
        jobs = [ClaimedJob.from_row(row, sent_at) for row in rows]
        # Hand the jobs over before anything else can raise (a log handler, an observer): a
        # claimed job the executor never saw would sit unrun until its lease expired.
        if self.stopping.is_set():
            self.executor.keep_unstarted(jobs)  # stopping: handed back, not started
        else:
            self.executor.accept(jobs)
        if jobs and self.log.isEnabledFor(logging.INFO):
            for job in jobs:
                self.log.info(
                    "job started",
                    extra=fields(
                        Action.JOB_STARTED,
                        job_id=job.id,
                        task=job.task,
                        queue=job.queue,
                        attempt=job.attempt,
                    ),
                )
        self.observer.jobs_started(jobs)

    async def _claim(
        self, params: dict[str, Any], sent_at: float, *, early: bool = False
    ) -> Claimed:
        """Claim with the plain statement, or with pgqueue.claim while flow control applies.
        Returns the jobs, when limits held work back the seconds until a retry may succeed (0:
        unknown), whether the jobs were handed over already (``early``, see _claim_early),
        and when their leases were set (``sent_at``, when the claim was sent, or when rows that
        came late were confirmed). A claim that fails may have committed all the same (a
        connection cut after the server got it): the jobs it took are settled before the next
        claim."""
        try:
            return await self._claim_once(params, sent_at, early=early)
        except Exception:
            self._lost = True
            raise

    async def _claim_once(self, params: dict[str, Any], sent_at: float, *, early: bool) -> Claimed:
        throttled: float | None = None
        if not self.flow:
            limit = params["limit"]
            params.update(self.cursor.params())
            if early:
                rows = await self._claim_early(params, sent_at)
            else:
                rows = await self.store.fetch("claim_jobs", params)
            self.cursor.claimed(rows, full=len(rows) >= limit)
            if early:
                return Claimed(rows, None, True, sent_at)
        else:
            rows, throttled = await self._claim_flow(params)
        rows, leased_at = await self.late.confirmed(rows, sent_at)  # (rows that came late)
        return Claimed(rows, throttled, False, leased_at)

    async def _claim_flow(self, params: dict[str, Any]) -> tuple[list[Row], float | None]:
        self.cursor.reset()
        rows = await self.store.fetch("claim_flow", params)
        jobs: list[Row] = []
        throttled: float | None = None
        for row in rows:
            if row[_ID] is not None:
                jobs.append(row)
                if row[_WAKE_ON_EXIT]:
                    # It took a limit's last free place: its exit wakes held-back claimers.
                    self.ledger.wake_on_exit(row[_ID], row[_TOKEN])
            elif row[_THROTTLED] < 0:
                self.flow = False  # no flow control applies any more
            elif throttled is None:
                throttled = float(row[_THROTTLED])
        if self.ledger.waking() > 2 * self.executor.concurrency + 100:
            # Jobs that never got an outcome (a lost lease, a hand-back) would stay listed.
            claimed = {(row[_ID], row[_TOKEN]) for row in jobs}  # not handed over yet
            held = claimed | set(self.executor.held()) | set(self.completer.held())
            self.ledger.keep_wakes(held)
        return jobs, throttled

    async def _claim_early(self, params: dict[str, Any], sent_at: float) -> list[Row]:
        """The claim of an idle worker, its jobs started before its COMMIT returns (the WAL
        flush of a second commit was a large part of the time from enqueue to start). The
        COMMIT is sent before the jobs are handed over, so the server commits whatever the
        handlers do; ``next_due`` comes back after its reply. Until then the claim holds the
        rows (an ack or a heartbeat sent meanwhile waits for it) and the completer holds the
        outcomes back (a server that crashes before the flush forgets the claim, and may hand
        out the same lease token again). A COMMIT that fails, or whose reply is lost, is
        settled by asking the database (_settle): a claim that committed runs on; one that
        did not is a lost lease (its handlers stopped, what they return dropped). Rows that
        came late have their leases extended before the commit (pgqueue.worker.late_claims)."""
        extend = self.late.extender(sent_at)
        rows, later, commit = await self.store.before_commit(
            "claim_jobs", "next_due", params, generic=True, before_sync=extend
        )
        keys = [(row[_ID], row[_TOKEN]) for row in rows]
        self.ledger.claim_pending(keys)
        self._commits.add(commit)
        commit.add_done_callback(lambda task: self._claim_committed(task, keys))
        if keys:  # their leases kept if the COMMIT's reply is late
            self.late.keep_while_committing(commit, keys, extend.leased_at)
        if extend.late is not None:
            log_extended(self.log, [key[0] for key in keys], extend.late)
        self._hand_over(rows, extend.leased_at)
        # Read after the COMMIT's reply: the claim costs this idle worker one connection and
        # no round trip more, and its jobs are running meanwhile.
        self._due = await later
        return rows

    def _claim_committed(self, commit: asyncio.Task[None], keys: list[tuple[int, int]]) -> None:
        self._commits.discard(commit)
        error = None if commit.cancelled() else commit.exception()
        if not commit.cancelled() and error is None:
            self.ledger.claim_committed(keys)
            return
        # Did it commit? A connection cut after the server got the COMMIT leaves no way to
        # tell but to ask: before the next claim (_settle). The handlers run on meanwhile.
        self._unsettled.extend(keys)
        self._unsettled_error = "cancelled" if error is None else self.outage.explain(error)
        self.wake()

    async def _settle(self) -> None:
        """Settle what failed claims may have left. A claim whose reply never came may have
        committed: taken for not committed, its jobs would sit claimed by this worker until
        their leases expired, and the reaper would count the attempt against them (one with no
        attempt left would be dead-lettered unrun). One statement (``settle_claims``) tells
        which early claims committed, and gives back the jobs of lost claims this worker never
        saw. No claim of this worker may be in flight meanwhile: its jobs would look lost."""
        ahead = self._ahead
        if ahead is not None:
            if not self._ahead_sent:
                ahead.cancel()  # still waiting for room: nothing claimed yet
            await asyncio.wait({ahead})
        if self._commits:
            await asyncio.wait(set(self._commits))
            await asyncio.sleep(0)  # their done callbacks
        unsettled = list(self._unsettled)
        executor = self.executor
        held = {
            *executor.running,  # (a job whose own transaction is completing it, too)
            *((job.id, job.lease_token) for job in (*executor.waiting, *executor.gathered())),
            *self.completer.held(),
            *unsettled,
        }
        ids, tokens = [list(column) for column in zip(*held, strict=True)] or ([], [])
        rows = await self.store.fetch(
            "settle_claims",
            {"worker_id": self.params["worker_id"], "ids": ids, "tokens": tokens},
        )
        self._unsettled, self._lost = [], False  # (no claim went out meanwhile)
        running = {(row[0], row[1]) for row in rows if not row[2]}
        # (One whose job its handler's own transaction completed under this lease committed.)
        committed = [key for key in unsettled if key in running or not self.ledger.pending(key)]
        if committed:
            self.ledger.claim_committed(committed)
            self.log.warning(
                "claim committed though its reply was lost; its jobs run on",
                extra=fields(
                    Action.CLAIM_REPLY_LOST_COMMITTED,
                    job_ids=",".join(str(job_id) for job_id, _ in committed),
                ),
            )
        failed = [key for key in unsettled if key not in committed]
        if failed:
            self._claim_failed(failed, self._unsettled_error)
        released = sorted(row[0] for row in rows if row[2])
        if released:
            # Ready again in their old places: the next walk starts from the top.
            self.cursor.look_from_top()
            self.log.warning(
                "claimed jobs handed back: their claim's reply was lost",
                extra=fields(Action.CLAIM_LOST_RELEASED, job_ids=",".join(map(str, released))),
            )

    def _claim_failed(self, keys: list[tuple[int, int]], error: str) -> None:
        for job_id, token in keys:
            self.executor.stop_job(job_id, "lease lost", token)
        running = {key for key in keys if key in self.executor.running}
        self.ledger.claim_failed(keys, running)
        self.wake()  # rolled back, its jobs are ready again: claim them
        self.log.warning(
            "claim did not commit; its jobs were stopped and run again later",
            extra=fields(
                Action.CLAIM_UNCOMMITTED,
                job_ids=",".join(str(job_id) for job_id, _ in keys) or "none",
                error=error[:300],
            ),
        )

    def _running_per_queue(self) -> list[int]:
        """This worker's running jobs per queue (the claim's fair share accounts for them)."""
        index = {queue: i for i, queue in enumerate(self.queues)}
        counts = [0] * len(self.queues)
        executor = self.executor
        for job in [
            *(r.job for r in executor.running.values()),
            *executor.waiting,
            *executor.gathered(),
        ]:
            position = index.get(job.queue)
            if position is not None:
                counts[position] += 1
        return counts

    def _burst_finished(self, claimed_any: bool) -> bool:
        """Nothing ready and nothing running or unwritten, twice in a row (a retry written in
        between could have made a job ready again)."""
        if (
            claimed_any
            or not self.executor.idle()
            or not self.completer.idle()
            or self._ahead is not None
        ):
            self._idle_empty_claims = 0
            return False
        self._idle_empty_claims += 1
        return self._idle_empty_claims >= 2
