"""Prometheus metrics for a worker: ``pgq work --metrics-port 9108``.

Counters and the duration histogram come from :class:`WorkerObserver` hooks (no database work).
Queue depth and oldest-ready age come from ONE query over the hot table per scrape
(``queue_depths``), run on a small connection of the exporter's own (not the worker's pool),
and reused for a second when scrapes come in faster than that. The xmin horizon's age and
pgqueue's tables' dead tuples and sizes (views ``pgqueue.horizon`` and ``pgqueue.table_health``)
come from a second read on that kind of connection, reused for five seconds, and so do the
durable jobs parked (sleeping, waiting for an event: ``parked_jobs``). Every worker
exports the same database gauges: aggregate them with ``max by (queue, state)`` / ``max``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

import psycopg
from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from pgqueue.db.durable import ParkedJobs, parked_jobs
from pgqueue.db.horizon import Horizon, horizon_plan
from pgqueue.db.plan import run
from pgqueue.db.queries import query
from pgqueue.errors import ConfigurationError
from pgqueue.handler import log_queue
from pgqueue.handler.job_context import ClaimedJob
from pgqueue.rules.log_actions import Action, fields
from pgqueue.rules.vocabulary import LiveState
from pgqueue.worker.observer import WorkerObserver, Written
from pgqueue.worker.outcome import Outcome

log = logging.getLogger("pgqueue.worker.metrics")

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)
_STATES: tuple[LiveState, ...] = ("ready", "scheduled", "running")
T = TypeVar("T")


class WorkerMetrics(WorkerObserver):
    """The worker's counters and histogram, in a registry of its own."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        labels = ["queue", "task"]

        def counter(name: str, doc: str, names: list[str] = labels) -> Counter:
            return Counter(name, doc, names, registry=self.registry)

        self.claimed = counter("pgqueue_jobs_claimed", "Jobs claimed by this worker.")
        self.succeeded = counter("pgqueue_jobs_succeeded", "Jobs that succeeded.")
        self.failed = counter("pgqueue_jobs_failed", "Attempts that raised (or timed out).")
        self.retried = counter("pgqueue_jobs_retried", "Attempts rescheduled for a retry.")
        self.dead = counter("pgqueue_jobs_dead", "Jobs moved to the dead letters.")
        self.cancelled = counter("pgqueue_jobs_cancelled", "Jobs cancelled while running.")
        self.parked = counter(
            "pgqueue_jobs_parked", "Attempts that ended in a durable sleep or wait (parked)."
        )
        self.stale = counter(
            "pgqueue_stale_writes", "Outcomes ignored because the lease was no longer held."
        )
        self.lost = counter("pgqueue_leases_lost", "Leases this worker found it had lost.")
        self.duration = Histogram(
            "pgqueue_job_duration_seconds",
            "Handler run time per attempt.",
            labels,
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.reaped = Counter(
            "pgqueue_reaper_recovered_jobs",
            "Jobs with expired leases recovered by this worker's reaper.",
            registry=self.registry,
        )
        self.db_errors = counter(
            "pgqueue_db_errors", "Database errors seen by the worker's services.", ["service"]
        )
        self.maintenance = counter(
            "pgqueue_maintenance",
            "Steps of the maintenance service (action: vacuum, reindex, drop, gave_up).",
            ["action", "relation"],
        )
        self.reclaimed = counter(
            "pgqueue_maintenance_reclaimed_bytes",
            "Bytes the maintenance service gave back (a table's or index's size before less "
            "after).",
            ["relation"],
        )
        self.loop_stalls = Counter(
            "pgqueue_event_loop_stalls",
            "Times a handler blocked the worker's event loop past a heartbeat interval.",
            registry=self.registry,
        )
        # Read from the log queue at scrape time (it counts drops from any thread, including
        # before this exporter existed): pgqueue_log_records_dropped_total.
        self.registry.register(LogRecordsDropped())
        self._by_written = {
            "succeeded": self.succeeded,
            "retry": self.retried,
            "dead": self.dead,
            "cancelled": self.cancelled,
            "stale": self.stale,
            "parked": self.parked,
        }

    def job_started(self, job: ClaimedJob) -> None:
        self.claimed.labels(job.queue, job.task).inc()

    def job_written(self, outcome: Outcome, written: Written) -> None:
        job = outcome.job
        self._by_written[written].labels(job.queue, job.task).inc()
        if outcome.kind in ("error", "fail"):
            self.failed.labels(job.queue, job.task).inc()
        # A Retry is a deliberate reschedule and a park a run cut short: neither is a run to time.
        if outcome.kind not in ("retry", "park"):
            self.duration.labels(job.queue, job.task).observe(outcome.duration)

    def lease_lost(self, job: ClaimedJob) -> None:
        self.lost.labels(job.queue, job.task).inc()

    def jobs_reaped(self, count: int) -> None:
        self.reaped.inc(count)

    def db_error(self, service: str) -> None:
        self.db_errors.labels(service).inc()

    def maintained(self, action: str, relation: str, reclaimed: int) -> None:
        self.maintenance.labels(action, relation).inc()
        if reclaimed > 0:
            self.reclaimed.labels(relation).inc(reclaimed)

    def loop_stalled(self, seconds: float) -> None:
        self.loop_stalls.inc()


class LogRecordsDropped(Collector):
    """Log records the worker dropped because its log output did not keep up (the queue to
    the log writer thread was full; see pgqueue.handler.log_queue)."""

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            "pgqueue_log_records_dropped",
            "Log records dropped because the log output did not keep up (log queue full).",
        )
        family.add_metric([], log_queue.dropped_total())
        yield family


class _ScrapeReader(Generic[T]):
    """A small connection of the exporter's own (not the worker's pool), and ``read``'s last
    result, reused for ``max_age`` seconds when scrapes come in faster than that."""

    def __init__(
        self, dsn: str, read: Callable[[psycopg.Connection[Any]], T], max_age: float, timeout: float
    ) -> None:
        self.dsn = dsn
        self.max_age = max_age
        self.timeout = timeout
        self.queries = 0  # how many times the database was asked (tests read it)
        self._read_fn = read
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        self._value: T | None = None
        self._read_at = float("-inf")

    def read(self, what: str) -> T:
        with self._lock:
            if self._value is not None and time.monotonic() - self._read_at < self.max_age:
                return self._value
            try:
                if self._conn is None or self._conn.closed:
                    # prepare_threshold=None: safe behind a transaction-pooling PgBouncer.
                    self._conn = psycopg.connect(
                        self.dsn,
                        autocommit=True,
                        connect_timeout=int(self.timeout),
                        prepare_threshold=None,
                        options=f"-c statement_timeout={int(self.timeout * 1000)}",
                    )
                self.queries += 1
                self._value = self._read_fn(self._conn)
            except psycopg.Error as exc:
                log.warning(
                    "%s query failed",
                    what,
                    extra=fields(Action.METRICS_QUERY_FAILED, error=str(exc).strip()[:200]),
                )
                if self._conn is not None:
                    self._conn.close()
                self._conn = None
                raise
            self._read_at = time.monotonic()
            return self._value

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


class _ScrapedCollector(Collector, Generic[T]):
    """Gauges read from the database per scrape through a :class:`_ScrapeReader`: first
    ``<up_name>``, 1 if the read succeeded (0, and nothing else, if it failed), then
    :meth:`families` of what was read."""

    #: The up gauge's name.
    up_name: str
    #: The read, in the words of the up gauge's help and of the warning when it fails.
    what: str

    def __init__(
        self,
        dsn: str,
        read: Callable[[psycopg.Connection[Any]], T],
        max_age: float,
        timeout: float,
    ) -> None:
        self.reader: _ScrapeReader[T] = _ScrapeReader(dsn, read, max_age, timeout)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        up = GaugeMetricFamily(self.up_name, f"1 if the last {self.what} query succeeded.")
        try:
            value = self.reader.read(self.what)
        except psycopg.Error:
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from self.families(value)

    def families(self, value: T) -> Iterator[GaugeMetricFamily]:
        raise NotImplementedError

    def close(self) -> None:
        self.reader.close()


class QueueDepthCollector(_ScrapedCollector[list[tuple[Any, ...]]]):
    """Queue gauges from one ``queue_depths`` query per scrape (cached for ``max_age``)."""

    up_name = "pgqueue_queue_depth_up"
    what = "queue depth"

    def __init__(self, dsn: str, max_age: float = 1.0, timeout: float = 5.0) -> None:
        super().__init__(
            dsn, lambda conn: conn.execute(query("queue_depths")).fetchall(), max_age, timeout
        )

    @property
    def queries(self) -> int:
        """How many times the database was asked (tests read it)."""
        return self.reader.queries

    @property
    def max_age(self) -> float:
        """Seconds a read is reused for."""
        return self.reader.max_age

    @max_age.setter
    def max_age(self, seconds: float) -> None:
        self.reader.max_age = seconds

    def families(self, rows: list[tuple[Any, ...]]) -> Iterator[GaugeMetricFamily]:
        depth = GaugeMetricFamily(
            "pgqueue_queue_depth", "Live jobs by queue and state.", labels=["queue", "state"]
        )
        oldest = GaugeMetricFamily(
            "pgqueue_queue_oldest_ready_age_seconds",
            "Age of the oldest ready job per queue (0 when none is ready).",
            labels=["queue"],
        )
        for queue, *counts, age in rows:
            for state, count in zip(_STATES, counts, strict=True):
                depth.add_metric([queue, state], count)
            oldest.add_metric([queue], float(age))
        yield depth
        yield oldest


class HorizonCollector(_ScrapedCollector[Horizon]):
    """The xmin horizon and pgqueue's tables' dead tuples and sizes (views ``pgqueue.horizon``
    and ``pgqueue.table_health``), read once per scrape (cached for ``max_age``). Alert on
    ``pgqueue_oldest_snapshot_age_seconds``: while a snapshot is held, VACUUM cannot remove the
    dead rows finished jobs leave, and claims slow down as they pile up."""

    up_name = "pgqueue_horizon_up"
    what = "horizon"

    def __init__(self, dsn: str, max_age: float = 5.0, timeout: float = 5.0) -> None:
        super().__init__(dsn, lambda conn: run(horizon_plan(), conn), max_age, timeout)

    def families(self, report: Horizon) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(
            "pgqueue_oldest_snapshot_age_seconds",
            "Age of the oldest transaction or snapshot holding back the xmin horizon"
            " (0 when none; the view pgqueue.horizon names it).",
            value=report.oldest_age_seconds,
        )
        yield GaugeMetricFamily(
            "pgqueue_oldest_xmin_age_transactions",
            "How many transactions old the xmin horizon is (replication slots included).",
            value=report.oldest_xmin_age,
        )
        families = {
            "dead_tuples": ("pgqueue_dead_tuples", "Dead row versions VACUUM has not removed."),
            "live_tuples": ("pgqueue_live_tuples", "Live rows (the statistics' estimate)."),
            "table_bytes": ("pgqueue_table_bytes", "Size of the table's main fork."),
            "index_bytes": ("pgqueue_index_bytes", "Size of the table's indexes."),
            "estimated_table_bytes": (
                "pgqueue_table_estimated_bytes",
                "What the table's main fork would take rebuilt (view pgqueue.bloat).",
            ),
            "estimated_index_bytes": (
                "pgqueue_index_estimated_bytes",
                "What the table's B-tree indexes would take rebuilt (view pgqueue.bloat).",
            ),
        }
        for field, (name, doc) in families.items():
            family = GaugeMetricFamily(name, f"{doc} Per pgqueue table.", labels=["table"])
            for table in report.tables:
                value = getattr(table, field)
                if value is not None:
                    family.add_metric([table.table_name], float(value))
            yield family


class ParkedCollector(_ScrapedCollector[list[ParkedJobs]]):
    """Durable jobs parked, per queue: sleeping, and waiting for an event (one ``parked_jobs``
    query per scrape, cached for ``max_age``). They hold no worker, lease or slot; the gauge
    says how many will come back."""

    up_name = "pgqueue_parked_up"
    what = "parked jobs"

    def __init__(self, dsn: str, max_age: float = 5.0, timeout: float = 5.0) -> None:
        super().__init__(dsn, lambda conn: run(parked_jobs(), conn), max_age, timeout)

    def families(self, rows: list[ParkedJobs]) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "pgqueue_parked_jobs",
            "Durable jobs parked by queue: sleeping, or waiting for an event.",
            labels=["queue", "state"],
        )
        for row in rows:
            family.add_metric([row.queue, "sleeping"], row.sleeping)
            family.add_metric([row.queue, "waiting"], row.waiting)
        yield family


class MetricsServer:
    """Serves a worker's metrics over HTTP (``/metrics``) from a background thread."""

    def __init__(self, dsn: str, port: int, host: str = "0.0.0.0") -> None:
        self.metrics = WorkerMetrics()
        self.depths = QueueDepthCollector(dsn)
        self.horizon = HorizonCollector(dsn)
        self.parked = ParkedCollector(dsn)
        self.metrics.registry.register(self.depths)
        self.metrics.registry.register(self.horizon)
        self.metrics.registry.register(self.parked)
        try:
            self.server, self.thread = start_http_server(port, host, registry=self.metrics.registry)
        except OSError as exc:
            raise ConfigurationError(f"cannot serve metrics on {host}:{port}: {exc}") from None
        self.port = self.server.server_port
        log.info(
            "metrics served",
            extra=fields(Action.METRICS_SERVED, host=host, port=self.port, path="/metrics"),
        )

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.depths.close()
        self.horizon.close()
        self.parked.close()
