"""Group commit: single ``enqueue`` calls without ``conn=`` that arrive while the client's
previous commit is in flight are written together, in one statement per kind of job (one
transaction, one round trip, one WAL flush), and each caller returns its own job's id once the
statement that wrote it committed.

Leader and followers, the classic group commit, with no fixed wait: a call that finds nothing in
flight commits at once, alone, by the ordinary single-job plan (a lone producer waits for
nothing and sends what it always sent); calls that arrive meanwhile queue up, and when the
commit in flight ends, the queue is written as one batch (up to ``MOST_JOBS`` jobs and
``MOST_BYTES`` of arguments: :mod:`pgqueue.client.commit_group`, where the calls and their
groups are) while newer calls queue behind it. One commit is in flight per group: a client's
threads are one group, its tasks on one event loop another (a pool serves one loop). Threads:
the thread of the batch's first call writes it while the others wait. Tasks: a task of the
client writes one batch after another while calls queue, so a cancelled caller never cancels the
others' write (a caller cancelled before its batch was taken is simply not written).

What each caller gets is what its single enqueue would have given it
(:mod:`pgqueue.db.group_plans`). A statement the database refuses wrote nothing: each of its
jobs is then written alone, so a bad job fails alone with its own error; a connection lost while
a statement was in flight leaves that statement's outcome unknown, so its callers get that
error, as a single enqueue's caller would. Only the client's own transactions are grouped: a
call with ``conn=`` runs in the caller's transaction, untouched.

The write of a batch (:meth:`GroupCommit._flush_async`) and a call's part
(:meth:`GroupCommit._attempt_async`, :meth:`GroupCommit.enqueue_async`) are written once, async;
their sync twins are generated (``make sync-twins``). What differs is how a call waits and who
writes the next batch: ``_join``, ``_outcome`` and ``_after``, one small method per side.
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from typing import TYPE_CHECKING, TypeVar

from pgqueue.client import forks
from pgqueue.client.commit_group import Call, Group, Outcome, TaskCall, ThreadCall
from pgqueue.client.room import Room
from pgqueue.db import plan as plans
from pgqueue.db.enqueue_plans import enqueue_one
from pgqueue.db.group_plans import group_writes, groupable
from pgqueue.errors import PgQueueError
from pgqueue.rules.job_specs import JobId, JobSpec

if TYPE_CHECKING:
    # (its client's connections: plans driven on them, a pooled connection)
    from pgqueue.client.pools import Pools

T = TypeVar("T")

#: The longest a leader waits for the callers that came with it last time (when the previous
#: commit wrote several calls; never for a lone producer): they come back together.
GATHER_WINDOW = 0.001


class GroupCommit:
    """The group commit of one client (see the module docstring). ``enabled=False``: every
    call writes alone, as without it."""

    def __init__(self, pools: Pools, *, enabled: bool) -> None:
        #: The client's pools, which the group writes through (pgqueue.testing.bind points
        #: the client and this at a test's database and back).
        self.pools = pools
        self.enabled = enabled
        self._writers: set[asyncio.Task[None]] = set()
        self.forget_after_fork()
        forks.track(self)

    def forget_after_fork(self) -> None:
        """Fresh groups: at the start, and in a child just forked, whose parent's groups hold
        calls of threads and loops the child does not have (:mod:`pgqueue.client.forks`)."""
        forks.inherited(self._writers)
        self._threads = Group(threading.Lock(), threading.Event())
        # One group per event loop (its pool serves that loop only); its tasks need no lock.
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Group] = (
            weakref.WeakKeyDictionary()
        )
        self._writers = set()

    def takes(self, spec: JobSpec) -> bool:
        """Whether a call without ``conn=`` for ``spec`` goes through the group."""
        return self.enabled and groupable(spec)

    # sync-twin: async source
    async def enqueue_async(self, spec: JobSpec) -> JobId:
        """Write ``spec`` with the calls that arrive meanwhile; its id once committed. A full
        queue is waited for as a single enqueue waits (``wait_if_full``: each attempt joins
        the group again)."""
        if spec.wait_if_full is None:  # the common call: a full queue's refusal is its error
            return await self._attempt_async(spec)
        room = Room(spec.wait_if_full)
        while True:
            with room.attempt():
                return await self._attempt_async(spec)
            await asyncio.sleep(room.pause())

    async def _attempt_async(self, spec: JobSpec) -> JobId:
        if True:  # ASYNC  # noqa: SIM108
            group = self._loop_group()
        else:
            group = self._threads
        if group.alone():
            # Nothing in flight, and the last commit wrote one call (a lone producer): commit
            # at once, as a single enqueue does, with no call of the group's made.
            try:
                return await self.pools.run_async(enqueue_one(spec))
            finally:
                self._after_async(group)
        call, leads = self._join_async(group, spec)
        if not leads:
            return await self._outcome_async(group, call)
        # Nothing in flight: this call leads (after waiting for those that came with it last
        # time, if several did).
        batch = await self._gather_async(group, call) if group.gather() else group.gathered(call)
        if len(batch) > 1:
            return await self._lead_async(group, batch)
        try:  # alone: commit at once, as a single enqueue does
            return await self.pools.run_async(enqueue_one(spec))
        finally:
            self._after_async(group)

    async def _flush_async(self, batch: list[Call]) -> None:
        """Write a batch and settle each of its calls; a call whose statement was refused (or
        whose queue is bounded or fair) is written alone."""
        batch = [call for call in batch if not call.abandoned]  # cancelled before it was sent
        try:
            alone = await self._together_async(batch) if len(batch) > 1 else batch
            for call in alone:
                call.settle(await self._alone_async(call.spec))
        except BaseException as exc:
            # Interrupted (a cancelled writer): no caller is left waiting.
            error = exc if isinstance(exc, Exception) else _interrupted()
            for call in batch:
                if call.outcome is None:
                    call.settle(error)
            raise

    async def _together_async(self, batch: list[Call]) -> list[Call]:
        """Write the batch's jobs together, one statement per kind; the calls left to write
        alone."""
        alone: list[Call] = []
        try:
            async with self.pools.connection_async() as conn:
                for places, plan in group_writes([call.spec for call in batch]):
                    try:
                        if conn.autocommit:
                            ids = await plans.run_async(plan, conn)
                        else:  # an application's pool: its connections commit when told to
                            async with conn.transaction():
                                ids = await plans.run_async(plan, conn)
                    except Exception:
                        if conn.broken:
                            raise  # in flight when the connection went: its outcome is unknown
                        alone.extend(batch[n] for n in places)  # refused: nothing written
                        continue
                    for n, job_id in zip(places, ids, strict=True):
                        if job_id is None:
                            alone.append(batch[n])
                        else:
                            batch[n].settle(job_id)
        except Exception as exc:
            # No connection, or it went: each caller gets that error, as it would alone.
            for call in batch:
                if call.outcome is None and call not in alone:
                    call.settle(exc)
        return alone

    async def _alone_async(self, spec: JobSpec) -> Outcome:
        try:
            return await self.pools.run_async(enqueue_one(spec))
        except Exception as exc:
            return exc

    # sync-twin: generated from the async source above by `make sync-twins`; do not edit

    def enqueue(self, spec: JobSpec) -> JobId:
        """Write ``spec`` with the calls that arrive meanwhile; its id once committed. A full
        queue is waited for as a single enqueue waits (``wait_if_full``: each attempt joins
        the group again)."""
        if spec.wait_if_full is None:  # the common call: a full queue's refusal is its error
            return self._attempt(spec)
        room = Room(spec.wait_if_full)
        while True:
            with room.attempt():
                return self._attempt(spec)
            time.sleep(room.pause())

    def _attempt(self, spec: JobSpec) -> JobId:
        group = self._threads
        if group.alone():
            # Nothing in flight, and the last commit wrote one call (a lone producer): commit
            # at once, as a single enqueue does, with no call of the group's made.
            try:
                return self.pools.run(enqueue_one(spec))
            finally:
                self._after(group)
        call, leads = self._join(group, spec)
        if not leads:
            return self._outcome(group, call)
        # Nothing in flight: this call leads (after waiting for those that came with it last
        # time, if several did).
        batch = self._gather(group, call) if group.gather() else group.gathered(call)
        if len(batch) > 1:
            return self._lead(group, batch)
        try:  # alone: commit at once, as a single enqueue does
            return self.pools.run(enqueue_one(spec))
        finally:
            self._after(group)

    def _flush(self, batch: list[Call]) -> None:
        """Write a batch and settle each of its calls; a call whose statement was refused (or
        whose queue is bounded or fair) is written alone."""
        batch = [call for call in batch if not call.abandoned]  # cancelled before it was sent
        try:
            alone = self._together(batch) if len(batch) > 1 else batch
            for call in alone:
                call.settle(self._alone(call.spec))
        except BaseException as exc:
            # Interrupted (a cancelled writer): no caller is left waiting.
            error = exc if isinstance(exc, Exception) else _interrupted()
            for call in batch:
                if call.outcome is None:
                    call.settle(error)
            raise

    def _together(self, batch: list[Call]) -> list[Call]:
        """Write the batch's jobs together, one statement per kind; the calls left to write
        alone."""
        alone: list[Call] = []
        try:
            with self.pools.connection() as conn:
                for places, plan in group_writes([call.spec for call in batch]):
                    try:
                        if conn.autocommit:
                            ids = plans.run(plan, conn)
                        else:  # an application's pool: its connections commit when told to
                            with conn.transaction():
                                ids = plans.run(plan, conn)
                    except Exception:
                        if conn.broken:
                            raise  # in flight when the connection went: its outcome is unknown
                        alone.extend(batch[n] for n in places)  # refused: nothing written
                        continue
                    for n, job_id in zip(places, ids, strict=True):
                        if job_id is None:
                            alone.append(batch[n])
                        else:
                            batch[n].settle(job_id)
        except Exception as exc:
            # No connection, or it went: each caller gets that error, as it would alone.
            for call in batch:
                if call.outcome is None and call not in alone:
                    call.settle(exc)
        return alone

    def _alone(self, spec: JobSpec) -> Outcome:
        try:
            return self.pools.run(enqueue_one(spec))
        except Exception as exc:
            return exc

    # sync-twin: end

    # -- how a call waits and who writes the next batch, per side -------------------------

    def _join(self, group: Group, spec: JobSpec) -> tuple[ThreadCall, bool]:
        call = ThreadCall(spec)
        return call, group.join(call)

    def _gather(self, group: Group, call: ThreadCall) -> list[Call]:
        """Wait for the callers that came with the last batch (``group.gather()`` said so)."""
        assert isinstance(group.signal, threading.Event)
        try:
            group.signal.wait(GATHER_WINDOW)
        except BaseException:  # interrupted while gathering: the queue goes on
            group.ungather()
            self._after(group)
            raise
        return group.gathered(call)

    def _lead(self, group: Group, batch: list[Call]) -> JobId:
        try:
            self._flush(batch)
        finally:
            self._after(group)
        return batch[0].result()

    def _outcome(self, group: Group, call: ThreadCall) -> JobId:
        try:
            call.wait()
            if call.outcome is None:  # woken to write the next batch, this call first
                try:
                    self._flush(group.take())
                finally:
                    self._after(group)
        except BaseException:
            if group.withdraw(call):
                self._after(group)
            raise
        return call.result()

    def _after(self, group: Group) -> None:
        following = group.next()
        if isinstance(following, ThreadCall):
            following.wake()  # (marked to lead by next())

    def _loop_group(self) -> Group:
        """The running loop's group, made on first use."""
        loop = asyncio.get_running_loop()
        group = self._loops.get(loop)
        if group is None:
            # (A loop's tasks never wait for its lock: nothing awaits while holding it. A
            # thread lock, whose enter and exit are C, costs less than nullcontext's.)
            group = self._loops[loop] = Group(threading.Lock(), asyncio.Event())
        return group

    def _join_async(self, group: Group, spec: JobSpec) -> tuple[TaskCall, bool]:
        call = TaskCall(spec, asyncio.get_running_loop())
        return call, group.join(call)

    async def _gather_async(self, group: Group, call: TaskCall) -> list[Call]:
        """Wait for the callers that came with the last batch (``group.gather()`` said so)."""
        assert isinstance(group.signal, asyncio.Event)
        try:
            await asyncio.wait_for(group.signal.wait(), GATHER_WINDOW)
        except TimeoutError:
            pass
        except BaseException:  # cancelled while gathering: the queue goes on
            group.ungather()
            self._after_async(group)
            raise
        return group.gathered(call)

    async def _lead_async(self, group: Group, batch: list[Call]) -> JobId:
        # A task of the client's writes the batch, so a cancelled leader cancels nobody
        # else's write.
        leader = batch[0]
        assert isinstance(leader, TaskCall)
        settled = leader.waits()
        self._start_writer(group, batch)
        return await settled

    async def _outcome_async(self, group: Group, call: TaskCall) -> JobId:
        return await call.waits()

    def _after_async(self, group: Group) -> None:
        if group.next() is not None:
            self._start_writer(group, [])

    def _start_writer(self, group: Group, batch: list[Call]) -> None:
        writer = asyncio.get_running_loop().create_task(
            self._write_queued_async(group, batch), name="pgqueue-group-commit"
        )
        self._writers.add(writer)
        writer.add_done_callback(self._writers.discard)

    async def _write_queued_async(self, group: Group, batch: list[Call]) -> None:
        """``batch``, then one batch after another while calls queue (a task of the
        client's)."""
        try:
            while True:
                if batch:
                    await self._flush_async(batch)
                if group.next() is None:
                    return
                batch = group.take()
        except BaseException:
            for call in group.abort():
                call.settle(_interrupted())
            raise


def _interrupted() -> PgQueueError:
    return PgQueueError(
        "enqueue interrupted while the jobs written with it were being committed: "
        "it may or may not have been written"
    )
