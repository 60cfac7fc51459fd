"""The process pool (``pgq work --pool process``): sync handlers run in child processes.

Why: a thread cannot be stopped. A sync handler past its timeout keeps running (and writing)
while its retry runs elsewhere, and one that leaks memory or crashes the interpreter (a segfault
in a C extension, ``os._exit``, the OOM killer) takes the whole worker down with every job it
holds. A child process can be killed, recycled, and can die alone.

What stays in the worker: claiming, heartbeats (a child's job is held by the executor like any
running job, so every beat extends its lease), acks, the timeout clock, cancellation and lease
loss. A child only imports the app (by its ``module:attribute`` spec), runs one job at a time
and reports what the attempt amounted to; it never touches the worker's database connections.

Children are started with multiprocessing's ``spawn`` start method (a fresh interpreter: no
fork of a process with an event loop, open connections and threads), from one spawner thread
so the loop never waits for a fork+exec. Each has two pipes carrying JSON frames
(:mod:`pgqueue.worker.frames`): the worker reads its end without blocking (``add_reader``),
the child reads and writes its ends with blocking calls. On Linux the worker watches and
signals each child through a pidfd (exit noticed even if a handler's own subprocess inherited
the pipes; no signal can reach a recycled pid).

Stopping a child's job: a message sets ``ctx.cancelled`` in the child; for a timeout or shutdown
the worker then terminates the child at once, for a cancel or a lost lease after
``stop_grace`` unless the handler stopped by itself. Terminating is SIGTERM (the child raises
an exception in the handler, so ``finally`` blocks run) and SIGKILL ``kill_grace`` later. A
job's outcome is written only once its child is dead or has answered, so a retry can never
overlap the attempt it replaces.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import signal
import sys
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Any, Literal, cast, get_args

from pgqueue.errors import ConfigurationError
from pgqueue.handler.job_context import ClaimedJob, JobContext
from pgqueue.handler.job_transaction import TransactionHost
from pgqueue.rules.vocabulary import HISTORY_STATES, TRANSACTION_STATES, CancelReason
from pgqueue.worker import frames
from pgqueue.worker.child import main as child_main
from pgqueue.worker.outcome import Kind

if TYPE_CHECKING:
    from pgqueue.client import PgQueue

log = logging.getLogger("pgqueue.worker.pool")

JobKey = tuple[int, int]  # (job id, lease token)
ReplyKind = Kind | Literal["stopped"]
_REPLY_KINDS = frozenset((*get_args(Kind), "stopped"))

_TX_STATES = frozenset((None, *TRANSACTION_STATES))

_SPAWN = multiprocessing.get_context("spawn")
#: How long an idle child told to exit may take before it is terminated.
_EXIT_GRACE = 5.0
#: At shutdown, children get at least this long to exit after the last job.
_CLOSE_MIN = 1.0


class ChildProcessDied(Exception):
    """The child process running a sync handler died before the handler returned: a crash
    (segfault in a C extension, ``os._exit``) or a kill from outside (the OOM killer's
    SIGKILL). A failed attempt, retried like any other error."""


class ChildStartFailed(Exception):
    """No child process could be started for the job: the app failed to import in it, or it
    did not start within the start timeout."""


@dataclass(frozen=True, slots=True)
class ChildSettings:
    """How the worker runs its children (``WorkerSettings.child_settings``)."""

    app_spec: str  # "module:attribute", imported by every child
    max_jobs: int | None = None  # replace a child after this many jobs
    max_memory_mb: float | None = None  # replace a child whose RSS after a job is above this
    stop_grace: float = 2.0  # cancel / lost lease: how long the handler may take to stop itself
    kill_grace: float = 1.0  # SIGTERM to SIGKILL
    start_timeout: float = 60.0  # importing the app in a new child


@dataclass(slots=True)
class ChildReply:
    """What the attempt amounted to, decided in the child, where the exception object is: the
    task's retry_on / no_retry_on and its backoff (which may look at the error) apply there,
    with the very code the thread pool uses (``pgqueue.worker.executor``). For a batch,
    ``items`` holds each job's, in the order the jobs were sent."""

    kind: ReplyKind  # an Outcome kind, or "stopped": the handler raised JobCancelled
    delay: float = 0.0
    error: str | None = None
    summary: str | None = None
    result: str | None = None
    items: list[ChildReply] = field(default_factory=list)

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> ChildReply | None:
        """The reply a ``done`` message (or one job's part of it) holds; None if malformed."""
        kind = message.get("kind")
        if kind not in _REPLY_KINDS:
            return None
        return cls(
            cast(ReplyKind, kind),
            float(message.get("delay") or 0.0),
            message.get("error"),
            message.get("summary"),
            message.get("result"),
        )


@dataclass(slots=True)
class ChildGone:
    """The attempt ended without an answer: the child died, or none could be started."""

    error: Exception


def app_spec_for(app: PgQueue) -> str:
    """The ``module:attribute`` a child imports to get ``app``: the module of one of its tasks
    that holds it, else any loaded module that does (for programmatic ``Worker`` users; ``pgq
    work`` passes the spec it was given)."""
    names = [task.func.__module__ for task in app.tasks.values()]
    for name in dict.fromkeys([*names, *list(sys.modules)]):
        module = sys.modules.get(name)
        if module is None:
            continue
        for attribute, value in list(vars(module).items()):
            if value is app and not attribute.startswith("__"):
                return f"{name}:{attribute}"
    raise ConfigurationError(
        "pool='process' needs the module the PgQueue can be imported from, and no loaded "
        "module holds it: set WorkerSettings(app_spec='package.module:attribute')"
    )


def describe_exit(code: int | None) -> str:
    """How a child ended, for the job's error: "killed by SIGSEGV", "exited with status 3"."""
    if code is None:
        return "exited"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        if -code == signal.SIGKILL:
            return f"killed by {name} (the kernel's OOM killer sends SIGKILL too)"
        return f"killed by {name}"
    return f"exited with status {code}"


def _job_message(job: ClaimedJob) -> dict[str, Any]:
    return {
        "id": job.id,
        "queue": job.queue,
        "task": job.task,
        # The claimed args (JSON from jsonb) go back out as JSON: nothing is pickled.
        "args": job.args,
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "token": job.lease_token,
        "priority": job.priority,
        "created_at": job.created_at.isoformat(),
        "run_at": job.run_at.isoformat(),
        "wants_result": job.wants_result,
        "meta": job.meta if isinstance(job.meta, dict) else None,
        "tags": job.tags,
        "last_trace": job.last_trace,
    }


def _child_entry(config: dict[str, Any], inbox: Connection, outbox: Connection) -> None:
    """The spawned process's target (imported by reference: nothing of the app is pickled)."""
    child_main(config, inbox, outbox)


def _emit(data: dict[str, Any]) -> None:
    """A child's log record, handled here by the worker's own logging set-up."""
    record = logging.makeLogRecord(data)
    logger = logging.getLogger(record.name)
    if logger.isEnabledFor(record.levelno):
        logger.handle(record)


class Child:
    """One child process and the worker's end of its pipes. Lives on the event loop, apart
    from :meth:`launch`, which runs in the spawner thread."""

    def __init__(self, pool: ProcessPool, loop: asyncio.AbstractEventLoop) -> None:
        self.pool = pool
        self.loop = loop
        self.process: BaseProcess | None = None
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
        self._pidfd: int | None = None
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

    def launch(self, config: dict[str, Any]) -> tuple[int, int]:
        """In the spawner thread: start the process; the worker's (write, read) pipe ends."""
        to_child, to_child_w = os.pipe()
        from_child_r, from_child = os.pipe()
        inbox = Connection(to_child, writable=False)
        outbox = Connection(from_child, readable=False)
        try:
            process = _SPAWN.Process(
                target=_child_entry,
                args=(config, inbox, outbox),
                name="pgqueue-child",
                # Terminated by multiprocessing at exit should the worker ever leave one
                # behind; the child clears the flag for itself, so handlers may start
                # processes of their own.
                daemon=True,
            )
            process.start()
        except BaseException:
            os.close(to_child_w)
            os.close(from_child_r)
            raise
        finally:
            inbox.close()  # the child has its own copies now
            outbox.close()
        self.process = process
        self.pid = process.pid or 0
        # Opened before anything can reap the child (only this thread's next start() could).
        with contextlib.suppress(AttributeError, OSError):
            self._pidfd = os.pidfd_open(self.pid)
        return to_child_w, from_child_r

    def connect(self, write_fd: int, read_fd: int) -> None:
        """On the loop, once launched: watch the pipe and the process."""
        assert self.process is not None
        os.set_blocking(write_fd, False)
        os.set_blocking(read_fd, False)
        self._write_fd, self._read_fd = write_fd, read_fd
        self.loop.add_reader(read_fd, self._read, False)
        self._exit_fd = self._pidfd if self._pidfd is not None else self.process.sentinel
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
                    "child process pid=%s wrote a corrupt frame (%s); killing it", self.pid, exc
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

    def _dispatch(self, message: dict[str, Any]) -> None:
        kind = message.get("t")
        if kind == "done":
            self._done(message)
        elif kind == "log":
            _emit(message.get("record") or {})
        elif kind == "progress":
            ctx = self.ctx
            value = message.get("value")
            job = (message.get("id"), message.get("token"))
            if ctx is not None and isinstance(value, str) and job == self.job:
                ctx.report_progress(value)
        elif kind == "tx":
            # Where the handler's ctx.transaction() stands: sent before each step, so the
            # heartbeat can tell a job being completed from a lost lease.
            ctx = self.ctx
            state = message.get("state")
            job = (message.get("id"), message.get("token"))
            if ctx is not None and job == self.job and state in _TX_STATES:
                ctx.transaction_state = state
                done_as = message.get("as")
                ctx.completed_as = done_as if done_as in HISTORY_STATES else None
        elif kind == "ready":
            if self._start_timer is not None:
                self._start_timer.cancel()
            self.tasks = frozenset(message.get("tasks") or ())
            self._resolve_ready(None)
            self.pool.child_ready(self)
        elif kind == "fatal":
            self._fatal = str(message.get("error") or "")

    def _done(self, message: dict[str, Any]) -> None:
        reply = self.reply
        if reply is None or reply.done() or (message.get("id"), message.get("token")) != self.job:
            return  # not the job it runs now: an answer after we gave up on it
        rss = message.get("rss")
        self.rss = rss if isinstance(rss, int) else None
        answer = ChildReply.from_message(message)
        if answer is not None and self.batch_size:
            # A batch's answer holds one answer per job it was sent, in order.
            parts = message.get("items")
            parts = parts if isinstance(parts, list) else []
            items = [ChildReply.from_message(p) if isinstance(p, dict) else None for p in parts]
            if len(items) == self.batch_size and all(items):
                answer.items = cast("list[ChildReply]", items)
            else:
                answer = None
        if answer is None:
            log.error(
                "child process pid=%s answered with kind %r; killing it",
                self.pid,
                message.get("kind"),
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
            self.send(
                {
                    "t": "job",
                    **_job_message(job),
                    # Its completion notifies its queue (it took a limit's last free place); its
                    # claim may not have committed yet (the completion waits for it).
                    "wake": bool(transactions and transactions.wake(job)),
                    "unsettled": bool(transactions and transactions.claim_unsettled(job)),
                }
            )
            return reply
        self.batch_size = len(batch)
        self.batch = {(c.id, c.job.lease_token): c for c in batch}
        self.send(
            {
                "t": "batch",
                "id": job.id,
                "token": job.lease_token,
                # A job asked to stop before the batch got here starts so in the child.
                "jobs": [{**_job_message(c.job), "cancelled": c.cancel_reason} for c in batch],
            }
        )
        return reply

    def stop_item(self, key: JobKey, reason: CancelReason) -> None:
        """Tell the handler one job of its batch was asked to stop (``item.cancelled`` in the
        child); the batch goes on."""
        if key in self.batch:
            self.send({"t": "cancel", "id": key[0], "token": key[1], "reason": reason})

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
        self.send(
            {
                "t": "cancel",
                "id": key[0],
                "token": key[1],
                "reason": reason,
                "batch": bool(self.batch),
            }
        )
        if grace is not None and self._stop_timer is None:
            self._stop_timer = self.loop.call_later(grace, self._not_stopped, key, reason, grace)

    def _not_stopped(self, key: JobKey, reason: CancelReason, grace: float) -> None:
        log.info(
            "handler did not stop within %gs (%s); terminating its child pid=%s job_id=%s",
            grace,
            reason,
            self.pid,
            key[0],
        )
        self.terminate(self.pool.settings.kill_grace)

    def retire(self, why: str) -> None:
        """No more jobs here: an idle child exits by itself (terminated if it does not)."""
        if self.retiring or self.gone:
            return
        self.retiring = True
        if self.pool.closing:
            log.debug("stopping child process pid=%s: %s", self.pid, why)
        else:
            log.info("replacing child process pid=%s: %s", self.pid, why)
        self.send({"t": "exit"})
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
            self.send({"t": "terminate"})  # the child takes the SIGTERM only once told
            self.signal(signal.SIGTERM)
        kill_at = self.loop.time() + grace
        if self._kill_at is None or kill_at < self._kill_at:
            if self._kill_timer is not None:
                self._kill_timer.cancel()
            self._kill_at = kill_at
            self._kill_timer = self.loop.call_at(kill_at, self.signal, signal.SIGKILL)

    def signal(self, signum: int) -> None:
        if self.gone or self.pid == 0:
            return
        with contextlib.suppress(ProcessLookupError):
            if self._pidfd is not None:
                signal.pidfd_send_signal(self._pidfd, signum)
            else:
                os.kill(self.pid, signum)

    def _exited(self) -> None:
        if self._exit_fd is not None:
            self.loop.remove_reader(self._exit_fd)
        self._reap(0)

    def _reap(self, tries: int) -> None:
        assert self.process is not None
        code = self.process.exitcode  # waitpid(WNOHANG)
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
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        how = describe_exit(self.exitcode)
        if not self.ready.done():
            fatal = (self._fatal or "").strip()
            log.log(
                logging.DEBUG if self.pool.closing else logging.ERROR,
                "child process pid=%s could not start (%s)%s",
                self.pid,
                how,
                f":\n{fatal}" if fatal else "",
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
                    "child process died while running a job pid=%s job_id=%s: %s",
                    self.pid,
                    self.job[0] if self.job else "",
                    how,
                )
            error = ChildProcessDied(f"child process {how} (pid {self.pid})")
            reply.set_result(ChildGone(error))
        elif not self.retiring and not self.pool.closing:
            log.warning("idle child process died pid=%s: %s", self.pid, how)
        if self.process is not None:
            with contextlib.suppress(ValueError):
                self.process.close()
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
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        for timer in (self._stop_timer, self._kill_timer, self._start_timer):
            if timer is not None:
                timer.cancel()
        self.gone = True
        error = ChildProcessDied(f"child process killed at the worker's teardown (pid {self.pid})")
        self._resolve_ready(ChildGone(ChildStartFailed(str(error))))
        if self.reply is not None and not self.reply.done():
            self.reply.set_result(ChildGone(error))


class ProcessPool:
    """Up to ``size`` children (the worker's slots), started on demand and kept while idle."""

    def __init__(
        self,
        settings: ChildSettings,
        size: int,
        worker_id: str,
        sync_tasks: frozenset[str],
        transactions: TransactionHost | None = None,
    ) -> None:
        self.settings = settings
        #: Where the children's ctx.transaction() blocks connect (their own connection each).
        self.transactions = transactions
        self.size = size
        self.worker_id = worker_id
        self.sync_tasks = sync_tasks
        self.children: set[Child] = set()
        self.closing = False
        self._idle: deque[Child] = deque()
        self._busy: dict[JobKey, Child] = {}
        self._acquiring: dict[JobKey, asyncio.Event] = {}
        self._available = asyncio.Event()  # an idle child, or room for a new one
        self._all_gone = asyncio.Event()
        self._all_gone.set()
        self._spawner: ThreadPoolExecutor | None = None
        self._starting: set[asyncio.Task[None]] = set()
        self._warned_tasks = False
        self._warned_rss = False

    # -- running a job -----------------------------------------------------------------------

    async def run(
        self,
        job: ClaimedJob,
        ctx: JobContext,
        started: Callable[[], None],
        batch: list[JobContext] | None = None,
    ) -> ChildReply | ChildGone | None:
        """Run one attempt in a child (or, with ``batch``, one call for the jobs of a batch:
        ``job`` is its first, whose key is the batch's). None: stopped (``stop``) before it was
        handed over. ``started`` is called the moment it is (the timeout counts from there, not
        from the wait for a child to import the app)."""
        key = (job.id, job.lease_token)
        acquired = await self._acquire(key)
        if not isinstance(acquired, Child):
            return acquired
        child = acquired
        cancelled = ctx.cancelled if batch is None else all(c.cancelled for c in batch)
        if cancelled:  # asked to stop while it waited for a child: it never starts
            self._release(child)
            return None
        try:
            reply = child.begin(job, ctx, batch)
        except (TypeError, ValueError, RecursionError) as exc:  # args JSON cannot encode again
            child.end()
            self._release(child)
            return ChildGone(ChildStartFailed(f"cannot send the job to a child: {exc}"))
        self._busy[key] = child
        started()
        try:
            result = await reply
        except BaseException:
            # Our wait was cancelled (the loop is going away): the handler must not go on
            # unwatched.
            child.terminate(0.0)
            raise
        finally:
            self._busy.pop(key, None)
            child.end()
        if isinstance(result, ChildReply):
            child.jobs += 1
            why = self._recycle_reason(child)
            if why is not None:
                child.retire(why)
            else:
                self._release(child)
        return result

    def stop(self, key: JobKey, reason: CancelReason) -> None:
        """Stop the attempt ``key`` (the executor set its context's reason already): a timeout
        or shutdown terminates its child now; a cancel or a lost lease gives the handler
        ``stop_grace`` to notice ``ctx.cancelled`` first."""
        waiting = self._acquiring.get(key)
        if waiting is not None:
            waiting.set()
            return
        child = self._busy.get(key)
        if child is None:
            return
        if reason == "timeout":
            child.stop(key, reason, None)
            child.terminate(self.settings.kill_grace)
        elif reason == "shutdown":
            # The shutdown grace was the handler's time to finish; die before the job is
            # handed back (the drain waits up to a second for that).
            child.stop(key, reason, None)
            child.terminate(min(self.settings.kill_grace, 0.5))
        else:
            child.stop(key, reason, self.settings.stop_grace)

    def stop_item(self, key: JobKey, item: JobKey, reason: CancelReason) -> None:
        """One job (``item``) of the batch ``key`` was asked to stop (a cancel, a lost lease):
        its child's handler is told; the batch goes on. Before a child took the batch, the
        job's context says so when the batch is sent."""
        child = self._busy.get(key)
        if child is not None:
            child.stop_item(item, reason)

    def read_now(self, key: JobKey) -> None:
        """Read what the child running ``key`` has written so far (its transaction's state
        comes that way)."""
        child = self._busy.get(key)
        if child is not None:
            child.read_now()

    def _recycle_reason(self, child: Child) -> str | None:
        settings = self.settings
        if settings.max_jobs is not None and child.jobs >= settings.max_jobs:
            return f"it ran {child.jobs} jobs (max-jobs-per-child {settings.max_jobs})"
        if settings.max_memory_mb is not None:
            if child.rss is None:
                if not self._warned_rss:
                    self._warned_rss = True
                    log.warning(
                        "max-memory-per-child is not applied: children cannot read their "
                        "memory use on this system"
                    )
            elif child.rss > settings.max_memory_mb * 2**20:
                return (
                    f"its memory (RSS) was {child.rss / 2**20:.0f} MB after a job "
                    f"(max-memory-per-child {settings.max_memory_mb:g} MB)"
                )
        return None

    # -- children ----------------------------------------------------------------------------

    async def _acquire(self, key: JobKey) -> Child | ChildGone | None:
        """A ready child for ``key``: an idle one, one starting with nobody waiting for it, or a
        new one while there is room; otherwise wait. None: stopped meanwhile."""
        stop = self._acquiring[key] = asyncio.Event()
        try:
            while not stop.is_set():
                while self._idle:
                    idle = self._idle.pop()  # the most recently used: warm caches
                    if not idle.gone and not idle.retiring:
                        return idle
                starting = self._adoptable()
                if starting is None and len(self.children) < self.size and not self.closing:
                    starting = self._spawn()
                if starting is not None:
                    return await self._wait_ready(starting, key, stop)
                self._available.clear()
                await _first(self._available, stop)
            return None
        finally:
            self._acquiring.pop(key, None)

    async def _wait_ready(
        self, child: Child, key: JobKey, stop: asyncio.Event
    ) -> Child | ChildGone | None:
        child.owner = key
        stopper = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait((child.ready, stopper), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
            child.owner = None
        if not child.ready.done():
            return None  # stopped first; the child goes idle once ready (child_ready)
        gone = child.ready.result()
        if gone is not None:
            return gone
        if stop.is_set():
            self._release(child)
            return None
        return child

    def _adoptable(self) -> Child | None:
        """A child still starting that no job waits for (a replacement started ahead)."""
        for child in self.children:
            if child.owner is None and not child.ready.done() and not child.retiring:
                return child
        return None

    def _spawn(self) -> Child:
        loop = asyncio.get_running_loop()
        child = Child(self, loop)
        self.children.add(child)
        self._all_gone.clear()
        task = loop.create_task(self._start(child))
        self._starting.add(task)
        task.add_done_callback(self._starting.discard)
        return child

    async def _start(self, child: Child) -> None:
        if self._spawner is None:
            # One long-lived thread starts every child: Linux's parent-death signal (set by
            # the child) follows the thread that forked it, so that thread must outlive them.
            self._spawner = ThreadPoolExecutor(1, thread_name_prefix="pgqueue-spawner")
        config: dict[str, Any] = {
            "app": self.settings.app_spec,
            "worker_id": self.worker_id,
            "parent_pid": os.getpid(),
            "log_level": logging.getLogger().getEffectiveLevel(),
        }
        transactions = self.transactions
        if transactions is not None:
            config["transactions"] = {
                "dsn": transactions.dsn,
                "application_name": transactions.application_name,
                "prepare": transactions.prepare,
            }
        try:
            write_fd, read_fd = await child.loop.run_in_executor(
                self._spawner, child.launch, config
            )
        except Exception as exc:
            log.exception("could not start a child process")
            child.launch_failed(exc)
            return
        child.connect(write_fd, read_fd)

    def child_ready(self, child: Child) -> None:
        log.info("child process started pid=%s", child.pid)
        missing = self.sync_tasks - child.tasks
        if missing and not self._warned_tasks:
            self._warned_tasks = True
            log.error(
                "the app the children import (%s) lacks tasks this worker runs: %s; their "
                "jobs fail in children (register them at import time, or set app_spec)",
                self.settings.app_spec,
                ", ".join(sorted(missing)),
            )
        if child.owner is None:
            self._release(child)

    def _release(self, child: Child) -> None:
        """A child free for the next job (or retired, when the pool is over its size)."""
        if child.gone or child.retiring:
            return
        if self.closing:
            child.retire("the worker is stopping")
            return
        if len(self.children) > self.size:
            child.retire(f"the pool shrank to {self.size}")
            return
        self._idle.append(child)
        self._available.set()

    def child_gone(self, child: Child) -> None:
        self.children.discard(child)
        with contextlib.suppress(ValueError):
            self._idle.remove(child)
        self._available.set()  # room for a new child
        if not self.children:
            self._all_gone.set()
        # A child that ran jobs and was recycled or died gets a successor at once, so the
        # next job does not wait for an interpreter to start and import the app.
        if child.jobs and not self.closing and len(self.children) < self.size:
            self._spawn()

    def resize(self, size: int) -> None:
        self.size = size
        while len(self.children) > size and self._idle:
            self._idle.popleft().retire(f"the pool shrank to {size}")
        self._available.set()

    # -- shutting down -----------------------------------------------------------------------

    async def close(self, timeout: float) -> None:
        """Idle children exit; any still running is killed. Returns once every child is
        gone, or after ``timeout`` plus a kill (never leaves a live child behind)."""
        self.closing = True
        if self._starting:  # a launch in the spawner thread takes milliseconds: let it finish
            await asyncio.wait(list(self._starting), timeout=5.0)
        for child in list(self.children):
            if child.job is None and child.ready.done():
                child.retire("the worker is stopping")
            else:
                child.terminate(self.settings.kill_grace)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._all_gone.wait(), max(timeout, _CLOSE_MIN))
        if self.children:
            for child in list(self.children):
                child.signal(signal.SIGKILL)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._all_gone.wait(), 2.0)
        for child in list(self.children):
            log.error("child process pid=%s did not exit after SIGKILL", child.pid)
            child.abandon()
        self.children.clear()
        if self._spawner is not None:
            self._spawner.shutdown(wait=False)
            self._spawner = None

    def kill_all(self) -> None:
        """At teardown without a drain (the worker's run was cancelled): SIGKILL every child
        left; multiprocessing reaps them at exit."""
        self.closing = True
        for child in list(self.children):
            child.abandon()
        self.children.clear()
        if self._spawner is not None:
            self._spawner.shutdown(wait=False)
            self._spawner = None


async def _first(event: asyncio.Event, stop: asyncio.Event) -> None:
    """Until ``event`` or ``stop`` is set."""
    waiters = (asyncio.ensure_future(event.wait()), asyncio.ensure_future(stop.wait()))
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
