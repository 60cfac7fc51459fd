"""The child side of ``pgq work --pool process``: import the app, run one job at a time.

Started by :mod:`pgqueue.worker.process_pool` with multiprocessing's ``spawn``. The main thread
runs handlers; a reader thread takes the worker's messages (a job, a cancel, terminate, exit) so
``ctx.cancelled`` turns true while a handler runs. Every answer is JSON: what the attempt amounts
to is decided here, where the exception object is, by the executor's own functions (Retry's
delay, Fail, the task's retry_on / no_retry_on and its backoff), and sent as the outcome's kind,
delay and error record.

Signals: SIGINT is ignored (Ctrl-C in a terminal reaches the whole process group; the worker
drains and stops its children itself), and so is a SIGTERM the worker did not announce (systemd
signals every process of the unit). An announced one raises :class:`_Terminated` in the handler
so it unwinds (``finally`` blocks run) before the process exits; SIGKILL follows if it does
not. The child also dies with the worker: it exits on the end of its input pipe and, on Linux,
asks for SIGKILL when the worker's spawner thread ends (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import logging
import multiprocessing
import os
import queue
import signal
import sys
import threading
import traceback
from multiprocessing.connection import Connection
from types import FrameType
from typing import TYPE_CHECKING, Any, cast

from pgqueue.errors import ConfigurationError, InvalidJobError, JobCancelled
from pgqueue.handler import logs
from pgqueue.handler.batch import BatchTask
from pgqueue.handler.job_context import ClaimedJob, JobContext, reset_current, set_current
from pgqueue.handler.job_hooks import call_hooked
from pgqueue.handler.job_transaction import bind_host
from pgqueue.handler.parking import JobParked
from pgqueue.rules.tasks import Task
from pgqueue.rules.tracing import consumer
from pgqueue.rules.vocabulary import CancelReason
from pgqueue.worker import frames
from pgqueue.worker.batches import prepare, settle
from pgqueue.worker.child_transactions import ChildTransactions
from pgqueue.worker.frames import ChildReply
from pgqueue.worker.outcome import Outcome, parked_outcome, raised_outcome, returned_outcome

if TYPE_CHECKING:
    from pgqueue.client import PgQueue

log = logging.getLogger("pgqueue.worker.child")

#: Exit statuses of a child that ends itself: stopped by the worker; orphaned mid-job.
_TERMINATED = 143
_ORPHANED = 70
_PR_SET_PDEATHSIG = 1


class _Terminated(BaseException):
    """Raised in the handler when the worker terminates this child (timeout, a cancel not
    heeded, shutdown). A BaseException, so ``except Exception`` in handlers lets it through."""


class _Flags:
    terminating = False  # the worker announced a SIGTERM
    raised = False  # _Terminated was raised once already


_flags = _Flags()


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    if _flags.terminating and not _flags.raised:
        _flags.raised = True
        raise _Terminated


class _Channel:
    """The pipe to the worker; handlers' threads log through it too, hence the lock."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.lock = threading.RLock()

    def send(self, message: dict[str, Any]) -> None:
        data = frames.dumps(message)
        with self.lock:
            self.conn.send_bytes(data)


# Record attributes that are not plain values or are rebuilt by the worker's side.
_NOT_SENT = frozenset(("msg", "args", "exc_info", "exc_text", "stack_info"))


class _ForwardingHandler(logging.Handler):
    """Sends records to the worker, which hands them to its own logging set-up (format,
    handlers, the log queue), with the job's fields filled in here, where ``current_job()``
    knows them."""

    def __init__(self, channel: _Channel) -> None:
        super().__init__()
        self.channel = channel
        self._formatter = logging.Formatter()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            logs.add_context(record)
            data = {
                key: value
                for key, value in record.__dict__.items()
                if key not in _NOT_SENT and isinstance(value, str | int | float | bool | None)
            }
            data["msg"] = record.getMessage()
            if record.exc_info:
                data["exc_text"] = self._formatter.formatException(record.exc_info)
            elif record.exc_text:
                data["exc_text"] = record.exc_text
            if record.stack_info:
                data["stack_info"] = record.stack_info
            self.channel.send(frames.log(data))
        except Exception:
            self.handleError(record)


def _die_with_parent(parent_pid: int) -> None:
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent_pid:  # the worker died before the signal was armed
        os._exit(_ORPHANED)


def _load_app(spec: str) -> PgQueue:
    module_name, _, attribute = spec.partition(":")
    if os.environ.get("DJANGO_SETTINGS_MODULE"):
        import django
        from django.apps import apps

        if not apps.ready:
            django.setup()
    if module_name == "__main__":
        # spawn ran the worker's main script again under this name (multiprocessing does
        # that so a script's own definitions exist in its children).
        module = sys.modules.get("__mp_main__") or sys.modules["__main__"]
    else:
        module = importlib.import_module(module_name)
    app = getattr(module, attribute or "pgq", None)
    # The worker checked that the spec names a PgQueue; here a registry of tasks is what the
    # child needs (the worker imports no client module, so it checks for that).
    if not isinstance(getattr(app, "tasks", None), dict):
        raise ConfigurationError(
            f"{module_name}:{attribute or 'pgq'} is not a PgQueue instance "
            f"(got {type(app).__name__})"
        )
    return cast("PgQueue", app)


def _rss() -> int | None:
    """Resident memory now, in bytes; where there is no /proc (macOS), the peak so far."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource
    except ImportError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # bytes there, KiB elsewhere


class _Runner:
    def __init__(
        self,
        app: PgQueue,
        spec: str,
        worker_id: str,
        channel: _Channel,
        transactions: ChildTransactions | None = None,
    ) -> None:
        self.app = app
        self.spec = spec
        self.worker_id = worker_id
        self.channel = channel
        #: Handlers' ctx.transaction() blocks: this child's own connection.
        self.transactions = transactions
        self.jobs: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.current: JobContext | None = None
        #: The contexts of the batch running now, by (id, token).
        self.batch: dict[tuple[int, int], JobContext] = {}
        self.busy = False
        #: OpenTelemetry: the child traces the attempts it runs when the app it imported set
        #: a tracer provider (pgqueue.rules.tracing).
        self.tracer = consumer()
        #: A cancel read before its job started (the reader runs ahead of the main thread).
        self.early: dict[tuple[int, int], CancelReason] = {}

    # -- the reader thread -------------------------------------------------------------------

    def read(self, inbox: Connection, main_thread: int) -> None:
        while True:
            try:
                message = frames.decode(inbox.recv_bytes())
            except (EOFError, OSError):
                break
            kind = message.get("t")
            if kind in ("job", "batch"):
                with self.lock:
                    self.busy = True
                self.jobs.put(message)
            elif kind == "cancel":
                order = frames.read_cancel(message)
                self._cancel(order.key, order.reason, order.whole_batch)
            elif kind == "terminate":
                _flags.terminating = True
                # The worker's SIGTERM may have come before this message and been ignored.
                signal.pthread_kill(main_thread, signal.SIGTERM)
            elif kind == "exit":
                self.jobs.put(None)
        # The worker is gone (or closed our input to be rid of us). A job still running here
        # belongs to nobody now: its lease expires and it runs again elsewhere, so stop.
        with self.lock:
            busy = self.busy  # set when a job arrives, so it covers one not started yet
        if busy:
            os._exit(_ORPHANED)
        self.jobs.put(None)

    def _cancel(self, key: tuple[int, int], reason: CancelReason, whole: bool = False) -> None:
        """Stop the job ``key`` (or, ``whole``, every job of the batch whose key it is)."""
        with self.lock:
            ctx = self.current
            if ctx is not None and (ctx.id, ctx.job.lease_token) == key:
                targets = [ctx]
            elif key in self.batch:
                targets = list(self.batch.values()) if whole else [self.batch[key]]
            else:
                self.early[key] = reason
                return
        for target in targets:
            target.cancel(reason)

    # -- the main thread ---------------------------------------------------------------------

    def serve(self) -> None:
        while (message := self.jobs.get()) is not None:
            reply = self.run(message)
            with self.lock:
                # Before the answer: once sent, the next job may come (and set it again).
                self.busy = False
            self.channel.send(reply)

    def run(self, message: dict[str, Any]) -> dict[str, Any]:
        if message.get("t") == "batch":
            return self.run_batch(frames.read_batch(message))
        order = frames.read_job(message)
        job = order.job
        key = (job.id, job.lease_token)
        transactions = self.transactions
        ctx = JobContext(job, self.worker_id)
        if transactions is not None:
            transactions.waking = {key} if order.wake else set()
            transactions.unsettled = {key} if order.unsettled else set()
        channel = self.channel
        ctx.progress_hook = lambda text: channel.send(frames.progress(key, text))
        with self.lock:
            self.current = ctx
            early = self.early.pop((job.id, job.lease_token), None)
            self.early.clear()  # any other is about a job that never came
        if early is not None:
            ctx.cancel(early)
        try:
            reply = self._attempt(job, ctx)
        finally:
            with self.lock:
                self.current = None
        return frames.done(key, reply, _rss())

    def run_batch(self, order: frames.BatchOrder) -> dict[str, Any]:
        """One call of a batch handler for the jobs of the message; an answer per job."""
        contexts = [JobContext(job, self.worker_id) for job, _ in order.jobs]
        for ctx, (_, cancelled) in zip(contexts, order.jobs, strict=True):
            if cancelled is not None:
                ctx.cancel(cancelled)
        with self.lock:
            self.batch = {(c.id, c.job.lease_token): c for c in contexts}
            early = {key: self.early.pop(key) for key in self.batch if key in self.early}
            self.early.clear()  # any other is about a job that never came
        for key, reason in early.items():
            self.batch[key].cancel(reason)
        try:
            replies = self._batch_attempt(contexts)
        finally:
            with self.lock:
                self.batch = {}
        return frames.done(order.key, ChildReply("ack", items=replies), _rss())

    def _batch_attempt(self, contexts: list[JobContext]) -> list[ChildReply]:
        task = self.app.tasks.get(contexts[0].task)
        if not isinstance(task, BatchTask) or task.is_async:
            error = ConfigurationError(
                f"task {contexts[0].task!r} is not a sync batch task of the app this child "
                f"imported ({self.spec}); register it when that module is imported"
            )
            return [
                ChildReply.of(Outcome.from_exception(c.job, "error", error, self.worker_id))
                for c in contexts
            ]
        items, positions, failed = prepare(task, contexts, self.worker_id)
        replies = [ChildReply("stopped") for _ in contexts]  # each one set below
        for position, outcome in failed.items():
            replies[position] = ChildReply.of(outcome)
        if not items:
            return replies
        token = set_current(None)  # current_job() names one job: not in a batch
        try:
            value = call_hooked(task.func, [items], {})
        except Exception as exc:
            settled = settle(task, items, None, exc, self.worker_id)
        else:
            settled = settle(task, items, value, None, self.worker_id)
        finally:
            reset_current(token)
        for position, what in zip(positions, settled, strict=True):
            replies[position] = self._item_reply(task, contexts[position].job, what)
        return replies

    def _item_reply(
        self, task: Task[..., Any], job: ClaimedJob, what: Outcome | BaseException
    ) -> ChildReply:
        if isinstance(what, Outcome):
            return ChildReply.of(what)
        if isinstance(what, JobCancelled):
            return ChildReply("stopped")
        if isinstance(what, Exception):
            return ChildReply.of(raised_outcome(task, job, what, self.worker_id))
        raise what  # not an Exception (only a marked or raised one gets here)

    def _attempt(self, job: ClaimedJob, ctx: JobContext) -> ChildReply:
        task = self.app.tasks.get(job.task)
        if task is None or task.is_async:
            error = ConfigurationError(
                f"task {job.task!r} is not a sync task of the app this child imported "
                f"({self.spec}); register it when that module is imported"
            )
            return ChildReply.of(Outcome.from_exception(job, "error", error, self.worker_id))
        try:
            args, kwargs = task.binder.bind(job.args)
        except InvalidJobError as exc:
            return ChildReply.of(Outcome.from_exception(job, "fail", exc, self.worker_id))
        if task.pass_context:
            args.insert(0, ctx)
        tracer = self.tracer
        span: Any = None
        if tracer is None:
            func = task.func
        else:
            span = tracer.start(job)
            func = tracer.wrap(task.func, span, False)
        token = set_current(ctx)
        outcome: Outcome | None = None
        try:
            value = call_hooked(func, args, kwargs)
        except JobCancelled:
            return ChildReply("stopped")
        except JobParked as signal:
            outcome = parked_outcome(job, signal)
        except Exception as exc:
            if tracer is not None:
                tracer.failed(span, exc)
            outcome = raised_outcome(task, job, exc, self.worker_id)
        else:
            outcome = returned_outcome(task, job, value, self.worker_id)
        finally:
            reset_current(token)
            if tracer is not None:
                # Before the reply: a failed attempt's error record keeps the span's context.
                tracer.finish(span, outcome)
        return ChildReply.of(outcome)


def _transactions(
    config: dict[str, Any], app: PgQueue, channel: _Channel
) -> ChildTransactions | None:
    """What this child's handlers' ctx.transaction() blocks connect with (the worker's DSN)."""
    settings = config.get("transactions")
    if not settings:
        return None
    return ChildTransactions(
        str(settings["dsn"]),
        prepare=bool(settings["prepare"]),
        application_name=settings["application_name"],
        max_result_bytes=app.max_payload_bytes,
        send=channel.send,
    )


def main(config: dict[str, Any], inbox: Connection, outbox: Connection) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _on_sigterm)
    _die_with_parent(int(config["parent_pid"]))
    # Started as a daemon (so the worker's multiprocessing would end it at exit); as a daemon it
    # could not start processes of its own, which handlers may well do.
    multiprocessing.current_process().daemon = False
    channel = _Channel(outbox)
    worker_id = str(config["worker_id"])
    logs.bind(worker_id=worker_id)
    spec = str(config["app"])
    try:
        try:
            app = _load_app(spec)
        except BaseException as exc:
            channel.send(frames.fatal("".join(traceback.format_exception(exc))))
            raise SystemExit(1) from None
        root = logging.getLogger()
        if not root.handlers:
            # The app configured no logging of its own: records go to the worker's.
            root.addHandler(_ForwardingHandler(channel))
            root.setLevel(int(config["log_level"]))
        transactions = _transactions(config, app, channel)
        if transactions is not None:
            bind_host(transactions)
        runner = _Runner(app, spec, worker_id, channel, transactions)
        threading.Thread(
            target=runner.read,
            args=(inbox, threading.get_ident()),
            name="pgqueue-child-reader",
            daemon=True,
        ).start()
        sync_tasks = sorted(name for name, task in app.tasks.items() if not task.is_async)
        channel.send(frames.ready(os.getpid(), sync_tasks))
        runner.serve()
    except _Terminated:
        os._exit(_TERMINATED)
    except BrokenPipeError:
        os._exit(_ORPHANED)  # the worker is gone
