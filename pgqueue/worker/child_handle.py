"""The worker's end of one child process (``--pool process``): its pipes, the messages it
sends and is sent, the job it runs, and stopping it.

Each child has two pipes carrying JSON frames (:mod:`pgqueue.worker.frames`): the worker reads
its end without blocking (``add_reader``), the child reads and writes its ends with blocking
calls. Stopping a child's job: a message sets ``ctx.cancelled`` in the child; terminating is
SIGTERM (announced first: the child raises an exception in the handler, so ``finally`` blocks
run) and SIGKILL ``kill_grace`` later. A job's reply resolves only once its child has answered
or is dead, so a retry can never overlap the attempt it replaces.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from typing import Any, Protocol

from pgqueue.handler.job_context import ClaimedJob, JobContext
from pgqueue.handler.job_transaction import TransactionHost
from pgqueue.rules.log_actions import Action, fields
from pgqueue.rules.vocabulary import CancelReason
from pgqueue.worker import frames
from pgqueue.worker.child_process import (
    ChildGone,
    ChildProcessDied,
    ChildSettings,
    ChildStartFailed,
    Process,
    describe_exit,
)
from pgqueue.worker.frames import ChildReply, JobKey

log = logging.getLogger("pgqueue.worker.pool")

#: How long an idle child told to exit may take before it is terminated.
_EXIT_GRACE = 5.0


def _emit(data: dict[str, Any]) -> None:
    """A child's log record, handled here by the worker's own logging set-up."""
    record = logging.makeLogRecord(data)
    logger = logging.getLogger(record.name)
    if logger.isEnabledFor(record.levelno):
        logger.handle(record)


class Owner(Protocol):
    """The pool a child belongs to, as the child sees it."""

    settings: ChildSettings
    #: Where the children's ctx.transaction() blocks connect (their own connection each).
    transactions: TransactionHost | None
    closing: bool

    def child_ready(self, child: Child) -> None: ...

    def child_gone(self, child: Child) -> None: ...


class Child:
    """One child process and the worker's end of its pipes, on the event loop."""

    def __init__(self, pool: Owner, loop: asyncio.AbstractEventLoop) -> None:
        self.pool = pool
        self.loop = loop
        self.process: Process | None = None
        self.pid = 0
        #: Resolves when the child has imported the app (None) or could not (ChildGone).
        self.ready: asyncio.Future[ChildGone | None] = loop.create_future()
        self.owner: JobKey | None = None  # the job waiting for this child to start
        self.job: JobKey | None = None
        self.ctx: JobContext | None = None
        #: The jobs of the batch it runs (0: one job), and their contexts by key.
        self.batch_size = 0
        self.batch: dict[JobKey, JobContext] = {}
        self.reply: asyncio.Future[ChildReply | ChildGone] | None = None
        self.jobs = 0
        self.rss: int | None = None
        self.tasks: frozenset[str] = frozenset()
        self.retiring = False  # never given another job: told to exit, or being killed
        self.terminating = False
        self.gone = False
        self.exitcode: int | None = None
        self._fatal: str | None = None
        self._exit_fd: int | None = None
        self._read_fd: int | None = None
        self._write_fd: int | None = None
        self._out = bytearray()
        self._frames = frames.FrameReader()
        self._stop_timer: asyncio.TimerHandle | None = None
        self._kill_timer: asyncio.TimerHandle | None = None
        self._kill_at: float | None = None
        self._start_timer: asyncio.TimerHandle | None = None

    def __repr__(self) -> str:
        return f"<Child pid={self.pid} job={self.job}>"

    # -- starting ----------------------------------------------------------------------------

    def connect(self, process: Process) -> None:
        """Once started: watch the pipe and the process."""
        self.process = process
        self.pid = process.pid
        write_fd, read_fd = process.write_fd, process.read_fd
        os.set_blocking(write_fd, False)
        os.set_blocking(read_fd, False)
        self._write_fd, self._read_fd = write_fd, read_fd
        self.loop.add_reader(read_fd, self._read, False)
        self._exit_fd = process.exit_fd
        self.loop.add_reader(self._exit_fd, self._exited)
        self._start_timer = self.loop.call_later(
            self.pool.settings.start_timeout, self._start_timed_out
        )

    def launch_failed(self, error: BaseException) -> None:
        self._resolve_ready(ChildGone(ChildStartFailed(f"could not start a child: {error}")))
        self.gone = True
        self.pool.child_gone(self)

    def _start_timed_out(self) -> None:
        if not self.ready.done():
            timeout = self.pool.settings.start_timeout
            self._fatal = f"the child did not import the app within {timeout:g}s"
            self.terminate(self.pool.settings.kill_grace)

    def _resolve_ready(self, value: ChildGone | None) -> None:
        if not self.ready.done():
            self.ready.set_result(value)

    # -- messages ----------------------------------------------------------------------------

    def send(self, message: dict[str, Any]) -> None:
        fd = self._write_fd
        if fd is None:
            return
        data = frames.encode(message)
        if self._out:
            self._out += data
            return
        try:
            written = os.write(fd, data)
        except BlockingIOError:
            written = 0
        except OSError:  # EPIPE: the child is gone; its exit is handled by _exited
            self._close_writer()
            return
        if written < len(data):
            self._out += data[written:]
            self.loop.add_writer(fd, self._writable)

    def _writable(self) -> None:
        fd = self._write_fd
        if fd is None:
            return
        try:
            written = os.write(fd, self._out)
        except BlockingIOError:
            return
        except OSError:
            self._close_writer()
            return
        del self._out[:written]
        if not self._out:
            self.loop.remove_writer(fd)

    def _read(self, drain: bool) -> None:
        """Read what the child wrote: one read per wake-up, or everything (``drain``, once it
        exited: what it wrote before dying is all in the pipe by then)."""
        while (fd := self._read_fd) is not None:
            try:
                data = os.read(fd, 1 << 16)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._close_reader()
                return
            try:
                messages = self._frames.feed(data)
            except ValueError as exc:  # not our protocol: nothing it says can be trusted
                log.error(
                    "child process wrote a corrupt frame (%s); killing it",
                    exc,
                    extra=fields(Action.CHILD_BAD_FRAME, pid=self.pid),
                )
                self._close_reader()
                self.terminate(0.0)
                return
            for message in messages:
                self._dispatch(message)
            if not drain:
                return

    def read_now(self) -> None:
        """Everything the child wrote so far, handled now (not at the loop's next turn)."""
        if self._read_fd is not None:
            self._read(drain=True)

    def _dispatch(self, message: frames.Message) -> None:
        kind = message.get("t")
        if kind == "done":
            self._done(message)
        elif kind == "log":
            _emit(frames.read_log(message))
        elif kind == "progress":
            value = frames.read_progress(message)
            if self.ctx is not None and value is not None and frames.key_of(message) == self.job:
                self.ctx.report_progress(value)
        elif kind == "tx":
            # Where the handler's ctx.transaction() stands: sent before each step, so the
            # heartbeat can tell a job being completed from a lost lease.
            state = frames.read_tx(message)
            if self.ctx is not None and state is not None and frames.key_of(message) == self.job:
                self.ctx.transaction_state, self.ctx.completed_as = state
        elif kind == "ready":
            if self._start_timer is not None:
                self._start_timer.cancel()
            self.tasks = frames.read_ready(message)
            self._resolve_ready(None)
            self.pool.child_ready(self)
        elif kind == "fatal":
            self._fatal = frames.read_fatal(message)

    def _done(self, message: frames.Message) -> None:
        reply = self.reply
        if reply is None or reply.done() or frames.key_of(message) != self.job:
            return  # not the job it runs now: an answer after we gave up on it
        self.rss = frames.read_rss(message)
        answer = frames.read_done(message, self.batch_size)
        if answer is None:
            log.error(
                "child process answered with kind %r; killing it",
                message.get("kind"),
                extra=fields(Action.CHILD_BAD_FRAME, pid=self.pid),
            )
            self.terminate(0.0)
            return
        reply.set_result(answer)

    # -- jobs --------------------------------------------------------------------------------

    def begin(
        self, job: ClaimedJob, ctx: JobContext, batch: list[JobContext] | None = None
    ) -> asyncio.Future[ChildReply | ChildGone]:
        """Send the child its job, or (``batch``) the jobs of a batch, one call for all."""
        self.job = (job.id, job.lease_token)
        self.reply = reply = self.loop.create_future()
        if batch is None:
            self.ctx = ctx  # where the child's progress reports go (the heartbeat writes them)
            transactions = self.pool.transactions
            wake = bool(transactions and transactions.wake(job))
            unsettled = bool(transactions and transactions.claim_unsettled(job))
            self.send(frames.job(job, wake=wake, unsettled=unsettled))
            return reply
        self.batch_size = len(batch)
        self.batch = {(c.id, c.job.lease_token): c for c in batch}
        self.send(frames.batch(self.job, [(c.job, c.cancel_reason) for c in batch]))
        return reply

    def stop_item(self, key: JobKey, reason: CancelReason) -> None:
        """Tell the handler one job of its batch was asked to stop (``item.cancelled`` in the
        child); the batch goes on."""
        if key in self.batch:
            self.send(frames.cancel(key, reason))

    def end(self) -> None:
        self.job = None
        self.ctx = None
        self.reply = None
        self.batch_size = 0
        self.batch = {}
        if self._stop_timer is not None:
            self._stop_timer.cancel()  # it stopped by itself in time: no kill
            self._stop_timer = None

    def stop(self, key: JobKey, reason: CancelReason, grace: float | None) -> None:
        """Ask the handler of ``key`` to stop (``ctx.cancelled`` in the child); terminate the
        child after ``grace`` seconds (None: the caller decides) unless the job ends first."""
        if self.job != key:
            return
        # For a batch, "batch" says every job of it stops (its key is its first job's too).
        self.send(frames.cancel(key, reason, whole_batch=bool(self.batch)))
        if grace is not None and self._stop_timer is None:
            self._stop_timer = self.loop.call_later(grace, self._not_stopped, key, reason, grace)

    def _not_stopped(self, key: JobKey, reason: CancelReason, grace: float) -> None:
        log.info(
            "handler did not stop within %gs (%s); terminating its child",
            grace,
            reason,
            extra=fields(Action.CHILD_TERMINATING, pid=self.pid, job_id=key[0]),
        )
        self.terminate(self.pool.settings.kill_grace)

    def retire(self, why: str) -> None:
        """No more jobs here: an idle child exits by itself (terminated if it does not)."""
        if self.retiring or self.gone:
            return
        self.retiring = True
        if self.pool.closing:
            log.debug(
                "stopping child process: %s", why, extra=fields(Action.CHILD_STOPPING, pid=self.pid)
            )
        else:
            log.info(
                "replacing child process: %s",
                why,
                extra=fields(Action.CHILD_REPLACING, pid=self.pid),
            )
        self.send(frames.exit_())
        self._stop_timer = self.loop.call_later(
            _EXIT_GRACE, self.terminate, self.pool.settings.kill_grace
        )

    # -- ending ------------------------------------------------------------------------------

    def terminate(self, grace: float) -> None:
        """SIGTERM now (the child raises an exception in the handler so it unwinds), SIGKILL
        after ``grace``, or sooner if asked again with less."""
        if self.gone:
            return
        self.retiring = True
        if not self.terminating:
            self.terminating = True
            self.send(frames.terminate())  # the child takes the SIGTERM only once told
            self.signal(signal.SIGTERM)
        kill_at = self.loop.time() + grace
        if self._kill_at is None or kill_at < self._kill_at:
            if self._kill_timer is not None:
                self._kill_timer.cancel()
            self._kill_at = kill_at
            self._kill_timer = self.loop.call_at(kill_at, self.signal, signal.SIGKILL)

    def signal(self, signum: int) -> None:
        if not self.gone and self.process is not None:
            self.process.signal(signum)

    def _exited(self) -> None:
        if self._exit_fd is not None:
            self.loop.remove_reader(self._exit_fd)
        self._reap(0)

    def _reap(self, tries: int) -> None:
        assert self.process is not None
        code = self.process.exitcode()
        if code is None:
            # The exit fd turns readable as the process exits; its status follows at once.
            self.loop.call_later(min(0.1, 0.001 * 2**tries), self._reap, tries + 1)
            return
        self.exitcode = code
        self._read(drain=True)
        self._finalize()

    def _finalize(self) -> None:
        if self.gone:
            return
        self.gone = True
        self._close_reader()
        self._close_writer()
        for timer in (self._stop_timer, self._kill_timer, self._start_timer):
            if timer is not None:
                timer.cancel()
        how = describe_exit(self.exitcode)
        if not self.ready.done():
            fatal = (self._fatal or "").strip()
            log.log(
                logging.DEBUG if self.pool.closing else logging.ERROR,
                "child process could not start (%s)%s",
                how,
                f":\n{fatal}" if fatal else "",
                extra=fields(Action.CHILD_START_FAILED, pid=self.pid),
            )
            # The error's last line ("ModuleNotFoundError: No module named 'x'") for the job.
            why = fatal.splitlines()[-1] if fatal else f"the child {how} before it was ready"
            self._resolve_ready(
                ChildGone(ChildStartFailed(f"child process could not start: {why}"))
            )
        reply = self.reply
        if reply is not None and not reply.done():
            if not self.terminating:
                log.warning(
                    "child process died while running a job",
                    extra=fields(
                        Action.CHILD_DIED,
                        pid=self.pid,
                        job_id=self.job[0] if self.job else "",
                        how=how,
                    ),
                )
            error = ChildProcessDied(f"child process {how} (pid {self.pid})")
            reply.set_result(ChildGone(error))
        elif not self.retiring and not self.pool.closing:
            log.warning(
                "idle child process died",
                extra=fields(Action.CHILD_DIED_IDLE, pid=self.pid, how=how),
            )
        if self.process is not None:
            self.process.release()
        self.pool.child_gone(self)

    def _close_reader(self) -> None:
        fd, self._read_fd = self._read_fd, None
        if fd is not None:
            self.loop.remove_reader(fd)
            os.close(fd)

    def _close_writer(self) -> None:
        fd, self._write_fd = self._write_fd, None
        if fd is not None:
            self.loop.remove_writer(fd)
            os.close(fd)
        self._out.clear()

    def abandon(self) -> None:
        """Last resort at teardown (no loop to wait on): SIGKILL, close our ends."""
        self.signal(signal.SIGKILL)
        self._close_reader()
        self._close_writer()
        if self._exit_fd is not None:
            with contextlib.suppress(ValueError, RuntimeError, OSError):
                self.loop.remove_reader(self._exit_fd)
        if self.process is not None:
            self.process.close_pidfd()  # the process itself is reaped at exit
        for timer in (self._stop_timer, self._kill_timer, self._start_timer):
            if timer is not None:
                timer.cancel()
        self.gone = True
        error = ChildProcessDied(f"child process killed at the worker's teardown (pid {self.pid})")
        self._resolve_ready(ChildGone(ChildStartFailed(str(error))))
        if self.reply is not None and not self.reply.done():
            self.reply.set_result(ChildGone(error))
