"""Log records leave the worker's event loop through a bounded queue to one writer thread.

The worker logs from its event loop (every claim, start, ack), and a logging handler writes
synchronously: a handler that blocks (stdout piped to a reader that stopped reading, a full
disk, a stuck syslog socket) would block the loop inside ``StreamHandler.emit``, and with it
heartbeats, claims, acks and the reaper, until leases expired. :class:`LogQueue` moves every
handler configured at start (the root logger's and any other logger's: pgq work's own, a
``--log-config`` file's, the application's) behind a :class:`QueueingHandler`. What stays in
the logging thread is cheap and cannot block: pgqueue's fields (they are context variables, so
they must be read there), the handlers' levels and filters (so filters that read context
variables still see the job's), a snapshot of the arguments; then one append to a queue. The
writer thread formats and writes.

When the queue is full the record is dropped and counted, never waited for: the count is
:func:`dropped_total` (``pgqueue_log_records_dropped_total`` in the worker's metrics) and the
writer says how many it dropped, at most once every ``report_every`` seconds, once it can write
again. At exit :meth:`LogQueue.stop` puts the original handlers back and lets the writer drain
what is queued (bounded by a timeout: a reader that never reads cannot keep the process alive).
"""

from __future__ import annotations

import contextlib
import logging
import logging.handlers
import queue
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from pgqueue.handler.logs import add_context, parse_format
from pgqueue.rules.log_actions import Action, fields

DEFAULT_MAXSIZE = 10_000  # records; about 10 MB at worst
REPORT_EVERY = 10.0  # seconds between two "log records dropped" lines
DRAIN_TIMEOUT = 10.0  # seconds the writer gets at exit to write what is queued

_SCALARS = frozenset({str, int, float, bool, bytes, type(None)})
_STOP: tuple[()] = ()  # the writer's stop signal (an empty batch: nothing to deliver)

_lock = threading.Lock()
_dropped = 0  # records dropped by every LogQueue of this process
_active: LogQueue | None = None

Delivery = tuple[tuple[logging.Handler, logging.LogRecord], ...]


def dropped_total() -> int:
    """Log records dropped so far in this process because the log queue was full."""
    return _dropped


class _Rendered:
    """An argument rendered in the logging thread: ``%s`` and ``%r`` give the text back."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text

    __repr__ = __str__


def snapshot(record: logging.LogRecord) -> logging.LogRecord:
    """A copy of ``record`` safe to format later in another thread.

    Plain arguments (str, numbers, None) are kept as they are, so the JSON formatter still
    sees their types; any other argument (a list the caller may change next, an object whose
    ``__str__`` reads mutable state) is rendered now, under the conversion its placeholder
    uses. A message that cannot be analysed that way is rendered whole."""
    clone = object.__new__(type(record))  # copy.copy, without its reduce protocol
    clone.__dict__.update(record.__dict__)
    record = clone
    args = record.args
    if not args:
        return record
    if isinstance(args, tuple):
        if all(type(a) in _SCALARS for a in args):
            return record
        parsed = parse_format(record.msg) if isinstance(record.msg, str) else None
        if parsed is not None and len(parsed[0]) == len(args):
            frozen: list[object] = []
            for arg, conv in zip(args, parsed[0], strict=True):
                if type(arg) in _SCALARS or conv not in "sra":
                    frozen.append(arg)  # numbers formatted with %d/%f are not mutable state
                elif conv == "s":
                    frozen.append(_Rendered(str(arg)))
                else:
                    frozen.append(_Rendered(repr(arg) if conv == "r" else ascii(arg)))
            record.args = tuple(frozen)
            return record
    # A message that does not format is left as it is: the writer's formatter reports it.
    with contextlib.suppress(Exception):
        record.msg, record.args = record.getMessage(), None
    return record


class QueueingHandler(logging.handlers.QueueHandler):
    """Stands in for a logger's handlers (``targets``): decides in the logging thread which
    of them take the record and hands it to the :class:`LogQueue`'s writer."""

    def __init__(self, sink: LogQueue, targets: list[logging.Handler]) -> None:
        super().__init__(sink.queue)
        self.sink = sink
        self.targets = tuple(targets)
        self.setLevel(min((h.level for h in self.targets), default=logging.NOTSET))

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        return snapshot(record)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            targets = [h for h in self.targets if record.levelno >= h.level]
            if not targets:
                return
            add_context(record)  # on the caller's record: later handlers see the fields too
            prepared = self.prepare(record)
            delivery: list[tuple[logging.Handler, logging.LogRecord]] = []
            for handler in targets:
                accepted = handler.filter(prepared)
                if isinstance(accepted, logging.LogRecord):  # Python 3.12+: a filter's copy
                    delivery.append((handler, accepted))
                elif accepted:
                    delivery.append((handler, prepared))
            if delivery:
                self.sink.put(tuple(delivery))
        except Exception:
            self.handleError(record)

    def close(self) -> None:
        # logging.shutdown() (at exit, or a second signal) and dictConfig close every handler:
        # write what is queued first.
        self.sink.stop(timeout=min(DRAIN_TIMEOUT, 5.0))
        super().close()


class LogQueue:
    """A bounded queue to one writer thread, and the handlers moved behind it."""

    def __init__(self, maxsize: int = DEFAULT_MAXSIZE, report_every: float = REPORT_EVERY) -> None:
        if maxsize < 1:
            raise ValueError("maxsize must be at least 1")
        self.maxsize = maxsize
        self.report_every = report_every
        # SimpleQueue: put() never blocks and takes no Python-level lock. The bound is checked
        # before each put, so it can be passed by at most one record per logging thread.
        self.queue: queue.SimpleQueue[Delivery] = queue.SimpleQueue()
        self.dropped = 0
        self._reported = 0
        self._next_report = 0.0
        self._wrapped: list[tuple[logging.Logger, list[logging.Handler], QueueingHandler]] = []
        self._report_to: tuple[logging.Handler, ...] = ()
        self._thread = threading.Thread(target=self._run, name="pgqueue-log-writer", daemon=True)
        self._started = False
        self._stopped = False
        self._drained = False

    # -- the logging threads' side ----------------------------------------------------------

    def put(self, delivery: Delivery) -> None:
        if self.queue.qsize() >= self.maxsize:
            self._drop()
        else:
            self.queue.put(delivery)

    def _drop(self) -> None:
        global _dropped  # noqa: PLW0603 - the process-wide count the metrics read
        with _lock:
            self.dropped += 1
            _dropped += 1

    # -- start and stop ---------------------------------------------------------------------

    def start(self) -> LogQueue:
        """Move every logger's handlers behind the queue and start the writer."""
        global _active  # noqa: PLW0603 - one queue per process
        with _lock:
            if _active is not None:
                raise RuntimeError("a LogQueue is already running in this process")
            _active = self
        self._started = True
        self._thread.start()
        named = list(logging.Logger.manager.loggerDict.values())
        root = logging.getLogger()
        for logger in [root, *(x for x in named if isinstance(x, logging.Logger))]:
            handlers = list(logger.handlers)
            if handlers:
                standin = QueueingHandler(self, handlers)
                self._wrapped.append((logger, handlers, standin))
                logger.handlers = [standin]
                if logger is root:
                    self._report_to = tuple(handlers)
        return self

    def stop(self, timeout: float = DRAIN_TIMEOUT) -> bool:
        """Put the handlers back and let the writer write what is queued; True if it did
        within ``timeout`` (False: a handler is still blocked, its records stay unwritten)."""
        global _active  # noqa: PLW0603
        with _lock:
            if self._stopped or not self._started:
                return self._drained or not self._started
            self._stopped = True
        # Handlers first: a record logged from now on goes straight to its handler, after
        # those already queued (which the writer still delivers before the stop signal).
        for logger, handlers, standin in self._wrapped:
            if logger.handlers == [standin]:  # unless logging was reconfigured meanwhile
                logger.handlers = handlers
        self.queue.put(_STOP)
        self._thread.join(timeout)
        self._drained = not self._thread.is_alive()
        with _lock:
            if _active is self:
                _active = None
        return self._drained

    # -- the writer -------------------------------------------------------------------------

    def _run(self) -> None:
        get = self.queue.get
        while True:
            delivery = get()
            if not delivery:  # _STOP: nothing else is ever an empty batch
                break
            _deliver(delivery)
            if self.dropped != self._reported:
                self._report_drops(force=False)
        self._report_drops(force=True)

    def _report_drops(self, *, force: bool) -> None:
        now = time.monotonic()
        if not force and now < self._next_report:
            return
        count = self.dropped - self._reported
        if count <= 0:
            return
        self._reported += count
        self._next_report = now + self.report_every
        record = logging.LogRecord(
            "pgqueue.logs",
            logging.WARNING,
            __file__,
            0,
            "log records dropped: the log output did not keep up",
            None,
            None,
        )
        record.__dict__.update(
            fields(Action.LOG_DROPPED, count=count, total=self.dropped, queue_size=self.maxsize)
        )
        add_context(record)
        targets = self._report_to or ((logging.lastResort,) if logging.lastResort else ())
        _deliver(
            tuple(
                (handler, record)
                for handler in targets
                if record.levelno >= handler.level and handler.filter(record)
            )
        )


def _deliver(delivery: Delivery) -> None:
    for handler, record in delivery:
        try:
            handler.acquire()
            try:
                handler.emit(record)
            finally:
                handler.release()
        except Exception:
            handler.handleError(record)


@contextmanager
def queue_logging(
    maxsize: int = DEFAULT_MAXSIZE, drain_timeout: float = DRAIN_TIMEOUT
) -> Iterator[LogQueue]:
    """Run a block (a worker embedded in your own process) with the handlers configured now
    behind a :class:`LogQueue`; ``pgq work`` does this for you::

        with queue_logging():
            worker.run_sync()
    """
    sink = LogQueue(maxsize).start()
    try:
        yield sink
    finally:
        sink.stop(drain_timeout)
