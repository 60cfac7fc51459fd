"""What a worker can be told: :class:`WorkerSettings`, and how ``pgq work`` spells each one.

A setting and its command-line option are declared once, here: each field's metadata holds its
:class:`Flag`, and pgqueue/cli/work_options.py makes the command's options from them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pgqueue.errors import ConfigurationError
from pgqueue.rules.payload import check_name

if TYPE_CHECKING:
    from pgqueue.client import PgQueue
    from pgqueue.worker.process_pool import ChildSettings


@dataclass(frozen=True)
class Flag:
    """How ``pgq work`` spells a setting (the command's options are made from these, so a
    setting and its option are declared once: pgqueue/cli/worker_cmds.py).

    ``kind`` is how the value is written: ``"value"`` (as the field's type), ``"duration"``
    (``30s``, ``5m``), ``"queues"`` (comma-separated), ``"concurrency"`` (``N`` or
    ``MIN:MAX``, which also sets ``min_concurrency``), ``"prefetch"`` (``N`` or ``auto``),
    ``"pool"`` (``thread`` or ``process``). ``switch`` is the ``--NAME/--no-NAME`` option and
    its help for a setting that can be switched off (None)."""

    help: str
    kind: str = "value"
    metavar: str | None = None
    names: tuple[str, ...] = ()  # the option's names, when not --<field-name>
    min: float | None = None
    switch: tuple[str, str] | None = None


def option(help: str, **flag: Any) -> dict[str, Flag]:
    """The metadata of a setting that ``pgq work`` takes as an option (see :class:`Flag`)."""
    return {"flag": Flag(help, **flag)}


@dataclass
class WorkerSettings:
    """Everything ``pgq work`` can set (a field's :class:`Flag` is its option). Durations are
    in seconds."""

    #: The queues to claim from; empty: every queue the app's tasks declare.
    queues: list[str] = field(
        default_factory=list,
        metadata=option(
            kind="queues",
            names=("--queue", "-q"),
            help="Comma-separated queues. Default: every queue the app's tasks declare.",
        ),
    )
    concurrency: int = field(  # the slots, or the most slots when min_concurrency is set
        default=10,
        metadata=option(
            kind="concurrency",
            metavar="N|MIN:MAX",
            help="Jobs run at once in this process: N, or MIN:MAX to autoscale the slots.",
        ),
    )
    min_concurrency: int | None = None  # autoscale between this and concurrency (MIN:MAX)
    scale_cooldown: float = field(  # seconds between shrinking steps (and after any change)
        default=10.0,
        metadata=option(
            kind="duration", help="With MIN:MAX: how long slots must sit idle before shrinking."
        ),
    )
    prefetch: int | None = field(  # jobs claimed ahead of free slots; None: auto (short jobs)
        default=None,
        metadata=option(
            kind="prefetch",
            metavar="N|auto",
            help="Jobs claimed ahead of free slots: N, or auto (up to 8x --concurrency, at most "
            "1,000, while jobs are short; none for long jobs).",
        ),
    )
    #: Where sync handlers run: "thread" (a thread pool in the worker) or "process" (child
    #: processes: a timeout kills the handler, a crash fails only its job, children recycle).
    pool: str = field(
        default="thread",
        metadata=option(
            kind="pool",
            metavar="thread|process",
            help="Where sync handlers run: thread (a thread pool here) or process (child "
            "processes: a timeout kills the handler, a crash fails only its job).",
        ),
    )
    max_jobs_per_child: int | None = field(  # pool="process": replace a child after N jobs
        default=None,
        metadata=option(
            min=1, metavar="N", help="With --pool process: replace a child after N jobs."
        ),
    )
    max_memory_per_child: float | None = field(  # pool="process": ... whose RSS after a job > MB
        default=None,
        metadata=option(
            min=1,
            metavar="MB",
            help="With --pool process: replace a child whose memory (RSS) after a job is "
            "above MB megabytes.",
        ),
    )
    #: Connections the worker keeps for handlers' ctx.transaction() blocks (opened on first
    #: use, per kind of handler: threads, async); None: one per slot (concurrency).
    transaction_connections: int | None = field(
        default=None,
        metadata=option(
            min=1,
            metavar="N",
            help="Connections kept for handlers' ctx.transaction() blocks, opened on first "
            "use. Default: one per slot (--concurrency).",
        ),
    )
    scheduler: bool = field(
        default=True, metadata=option(help="Enqueue due cron ticks (safe in every worker).")
    )
    scheduler_interval: float = 2.0  # longest sleep between looks at the schedules
    burst: bool = field(
        default=False, metadata=option(help="Exit 0 once nothing is ready or running.")
    )
    lease: float = field(
        default=30.0,
        metadata=option(kind="duration", help="Lease length; heartbeats every lease/3."),
    )
    shutdown_grace: float = field(
        default=30.0,
        metadata=option(
            kind="duration",
            help="On SIGTERM, how long running jobs may finish before they are handed back.",
        ),
    )
    poll_interval: float = field(
        default=5.0,
        metadata=option(kind="duration", help="Fallback polling when no notification arrives."),
    )
    reaper_interval: float | None = field(  # None: this worker does not run the reaper
        default=5.0,
        metadata=option(
            kind="duration",
            help="How often this worker runs the reaper.",
            switch=("reaper", "Run the reaper inside this worker."),
        ),
    )
    prune_interval: float | None = field(  # None: this worker does not prune (retention)
        default=60.0,
        metadata=option(
            kind="duration",
            help="How often this worker prunes (retention).",
            switch=("pruner", "Prune history and dead letters here."),
        ),
    )
    #: None: this worker does not run the maintenance service (pgqueue/worker/maintainer.py).
    maintenance_interval: float | None = field(
        default=60.0,
        metadata=option(
            kind="duration",
            help="How often this worker looks for bloat to reclaim once a held snapshot ended "
            "(one worker per database does it; needs the tables' owner).",
            switch=(
                "maintenance",
                "VACUUM and REINDEX CONCURRENTLY what a held snapshot bloated (see pgq maintain).",
            ),
        ),
    )
    listen: bool = field(
        default=True, metadata=option(help="LISTEN for wake-ups (else poll only).")
    )
    listen_dsn: str | None = field(
        default=None,
        metadata=option(help="Direct DSN for LISTEN when --dsn goes through a transaction pooler."),
    )
    prepare: bool = field(
        default=True, metadata=option(help="Use server-side prepared statements.")
    )
    #: pool="process": "module:attribute" the children import the app from (pgq work passes
    #: its APP); None: found from the modules loaded here (see process_pool.app_spec_for).
    app_spec: str | None = None

    def child_settings(self, app: PgQueue) -> ChildSettings | None:
        """How the executor runs children (None: sync handlers run in threads)."""
        if self.pool != "process":
            return None
        # Only here: the pool brings multiprocessing and the children's frames.
        from pgqueue.worker.process_pool import ChildSettings, app_spec_for

        return ChildSettings(
            app_spec=self.app_spec or app_spec_for(app),
            max_jobs=self.max_jobs_per_child,
            max_memory_mb=self.max_memory_per_child,
        )

    def validate(self) -> None:
        for queue in self.queues:
            check_name(queue, "queue name")
        if self.concurrency < 1:
            raise ConfigurationError(f"concurrency must be at least 1, got {self.concurrency}")
        if self.prefetch is not None and self.prefetch < 0:
            raise ConfigurationError(f"prefetch must not be negative, got {self.prefetch}")
        if self.min_concurrency is not None and not 1 <= self.min_concurrency <= self.concurrency:
            raise ConfigurationError(
                f"concurrency range {self.min_concurrency}:{self.concurrency} must satisfy "
                "1 <= MIN <= MAX"
            )
        if self.scale_cooldown <= 0 or self.scheduler_interval <= 0:
            raise ConfigurationError("scale cooldown and scheduler interval must be positive")
        if self.lease < 0.5:
            raise ConfigurationError(f"lease must be at least 0.5s, got {self.lease}s")
        if self.poll_interval <= 0:
            raise ConfigurationError("poll interval must be positive")
        if self.shutdown_grace < 0:
            raise ConfigurationError("shutdown grace must not be negative")
        if self.reaper_interval is not None and self.reaper_interval <= 0:
            raise ConfigurationError("reaper interval must be positive")
        if self.prune_interval is not None and self.prune_interval <= 0:
            raise ConfigurationError("prune interval must be positive")
        if self.maintenance_interval is not None and self.maintenance_interval <= 0:
            raise ConfigurationError("maintenance interval must be positive")
        if self.pool not in ("thread", "process"):
            raise ConfigurationError(f"pool must be 'thread' or 'process', got {self.pool!r}")
        if self.pool != "process" and (
            self.max_jobs_per_child is not None or self.max_memory_per_child is not None
        ):
            raise ConfigurationError(
                "max jobs / max memory per child apply to child processes: use pool='process' "
                "(pgq work --pool process)"
            )
        if self.transaction_connections is not None and self.transaction_connections < 1:
            raise ConfigurationError(
                f"transaction connections must be at least 1, got {self.transaction_connections}"
            )
        if self.max_jobs_per_child is not None and self.max_jobs_per_child < 1:
            raise ConfigurationError(
                f"max jobs per child must be at least 1, got {self.max_jobs_per_child}"
            )
        if self.max_memory_per_child is not None and not self.max_memory_per_child > 0:
            raise ConfigurationError(
                f"max memory per child must be positive (MB), got {self.max_memory_per_child}"
            )
        if self.app_spec is not None and not self.app_spec.partition(":")[0]:
            raise ConfigurationError(
                f"app_spec must look like 'package.module:attribute', got {self.app_spec!r}"
            )
