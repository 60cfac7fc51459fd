"""What pgqueue's own log lines are about, declared once: a stable ``action`` code per event and
the fields its records carry.

Every log call in pgqueue passes its data as ``extra=fields(Action.X, key=value, ...)``: the
values become record attributes with their Python types (the JSON formatter writes them as
they are, the text formatter appends them as ``key=value``), and ``action`` names the event
whatever the message's wording. The message is text for people; it may hold a value a sentence
needs (``"concurrency 2 -> 3"``), never a ``key=value`` pair: those are fields.

``docs/how-to/logging.md`` lists the table below (``tests/unit/test_log_actions.py`` holds the
two together, and checks that every log call in the package names an action and only the
fields declared for it).
"""

from __future__ import annotations

from enum import Enum

# The context fields (pgqueue.handler.logs.FIELDS) that every record carries anyway, for the
# table's sake: an action lists them when its call states them itself (a line about a job logged
# outside the job's handler).
_JOB = "job_id task queue attempt"


class Action(Enum):
    """One kind of event pgqueue logs: ``code`` (the ``action`` field), the ``fields`` its
    records may carry (beyond the context fields) and what it means."""

    # -- a job's life -----------------------------------------------------------------------
    JOB_STARTED = ("job.started", _JOB, "a claimed job was handed to its handler")
    JOB_SUCCEEDED = ("job.succeeded", f"{_JOB} duration", "its success was written")
    JOB_RESCHEDULED = (
        "job.rescheduled",
        f"{_JOB} max_attempts outcome delay error",
        "it failed and runs again after `delay`",
    )
    JOB_DEAD_LETTERED = (
        "job.dead_lettered",
        f"{_JOB} max_attempts outcome reason error",
        "it failed for good: moved to the dead letters",
    )
    JOB_CANCELLED = (
        "job.cancelled",
        f"{_JOB} max_attempts outcome reason error",
        "its cancellation was written",
    )
    JOB_PARKED = (
        "job.parked",
        f"{_JOB} max_attempts outcome reason event",
        "a durable job sleeps or waits for an event",
    )
    JOB_RELEASED = ("job.released", _JOB, "handed back unfinished at shutdown (`ready` again)")
    JOB_CANCEL_REQUESTED = (
        "job.cancel_requested",
        "job_id task attempt",
        "a cancel arrived: its handler is asked to stop",
    )
    JOB_LATE = (
        "job.finished_late",
        "job_id task attempt jobs",
        "an abandoned handler (or batch) returned after all; ignored",
    )
    JOB_FAILED_AFTER_COMMIT = (
        "job.failed_after_commit",
        "job_id task attempt error",
        "the handler raised after its transaction completed the job; ignored",
    )
    JOB_RESULT_NOT_KEPT = (
        "job.result_not_kept",
        "job_id task",
        "a value returned after the job's transaction completed it",
    )
    # -- leases and claims ------------------------------------------------------------------
    LEASE_LOST = (
        "lease.lost",
        "job_id task attempt lease_token",
        "another worker holds the job now: its handler is asked to stop",
    )
    LEASE_END_FAILED = (
        "lease.end_failed",
        "job_id error",
        "an unwritable job's lease could not be ended; it expires on its own",
    )
    CLAIM_UNCOMMITTED = (
        "claim.uncommitted",
        "job_ids error",
        "a claim did not commit: its jobs were stopped and run again later",
    )
    CLAIM_REPLY_LOST_COMMITTED = (
        "claim.reply_lost_committed",
        "job_ids",
        "a claim's COMMIT reply was lost; it committed: its jobs run on",
    )
    CLAIM_LOST_RELEASED = (
        "claim.lost_released",
        "job_ids",
        "jobs a claim took whose reply never came: given back, the attempt not counted",
    )
    CLAIM_LATE_CONFIRMED = (
        "claim.late_confirmed",
        "job_ids seconds",
        "a claim's rows came `seconds` after it was sent: its leases were extended first",
    )
    CLAIM_LATE_LOST = (
        "claim.late_lost",
        "job_ids seconds",
        "a claim's rows came so late that these jobs were taken back meanwhile: not started",
    )
    CLAIM_COMMIT_LATE = (
        "claim.commit_late",
        "job_ids seconds",
        "an idle claim's COMMIT reply was `seconds` late: its running jobs' leases were extended",
    )
    CLAIM_AHEAD_FAILED = ("claim.ahead_failed", "error", "a claim sent ahead of need failed")
    # -- outcomes written -------------------------------------------------------------------
    OUTCOME_UNCLAIMED = (
        "outcome.claim_uncommitted",
        "job_id task attempt",
        "an outcome of a claim that did not commit: not written",
    )
    OUTCOME_FIRST_TRY = (
        "outcome.first_try",
        f"{_JOB} lease_token",
        "the outcome was already written: the first try committed, its reply was lost",
    )
    OUTCOME_CLAIM_UNKNOWN = (
        "outcome.claim_unknown",
        f"{_JOB} lease_token",
        "the database does not know the claim (a failover?): ignored, the job runs again",
    )
    OUTCOME_FIRST_TRY_UNKNOWN = (
        "outcome.first_try_unknown",
        f"{_JOB} lease_token",
        "nothing to write after a lost reply: written before, or the job was taken over",
    )
    OUTCOME_STALE = (
        "outcome.stale",
        f"{_JOB} lease_token",
        "the lease was no longer held: nothing written",
    )
    OUTCOME_UNKNOWN = (
        "outcome.unknown",
        "job_id task attempt",
        "the job's own COMMIT got no reply and could not be asked about: nothing written",
    )
    OUTCOME_DEAD_LETTERED = (
        "outcome.dead_lettered",
        f"{_JOB} outcome dead_letter_id error",
        "an outcome that cannot be written: the job went to the dead letters",
    )
    OUTCOME_UNWRITABLE = (
        "outcome.unwritable",
        f"{_JOB} outcome dead_letter_error error",
        "neither the outcome nor a dead letter could be written: the lease was ended",
    )
    BATCH_SPLIT = (
        "outcome.batch_split",
        "statement jobs error",
        "a batch write failed: written again in halves to find the failing job",
    )
    BREAKER_NOT_RECORDED = (
        "breaker.not_recorded",
        "jobs error",
        "outcomes could not be counted by their circuit breakers",
    )
    BREAKER_CHANGED = ("breaker.changed", "task", "a task's circuit breaker changed state")
    RETRY_POLICY_FAILED = (
        "retry.policy_failed",
        "task",
        "a backoff policy raised: the job is retried at once",
    )
    # -- a handler's transaction and steps --------------------------------------------------
    TRANSACTION_COMMITTED = (
        "transaction.reply_lost_committed",
        "job_id attempt",
        "a job transaction's COMMIT reply was lost; it committed",
    )
    TRANSACTION_NOT_COMMITTED = (
        "transaction.reply_lost_not_committed",
        "job_id attempt",
        "a job transaction's COMMIT got no reply and did not commit: the attempt failed",
    )
    TRANSACTION_UNKNOWN = (
        "transaction.reply_unknown",
        "error",
        "whether a job transaction committed cannot be asked",
    )
    TRANSACTION_ROLLBACK_FAILED = (
        "transaction.rollback_failed",
        "",
        "rolling back a job's transaction failed (DEBUG)",
    )
    STEP_NOT_RECORDED = ("step.not_recorded", "", "a failed step could not be recorded")
    # -- the worker -------------------------------------------------------------------------
    WORKER_STARTED = (
        "worker.started",
        "worker_id queues concurrency lease tasks pid",
        "a worker registered and starts claiming",
    )
    WORKER_SERVING = ("worker.serving", "queue tasks", "a queue the worker serves, its tasks")
    WORKER_QUEUES_UNSERVED = (
        "worker.queues_unserved",
        "",
        "declared tasks whose queue this worker does not serve",
    )
    WORKER_TASKS_UNRUN = ("worker.tasks_unrun", "", "jobs wait for tasks no running worker runs")
    WORKER_DECLARATIONS_FAILED = (
        "worker.declarations_failed",
        "error",
        "the task declarations could not be written",
    )
    WORKER_DB_UNAVAILABLE = (
        "worker.db_unavailable",
        "retry_in error",
        "the database is unavailable at start-up: retrying",
    )
    WORKER_SIGNAL = (
        "worker.draining",
        "signal grace running",
        "a stop signal: no more claims, running handlers get `grace`",
    )
    WORKER_DRAINING = ("worker.waiting", "running grace", "waiting for running handlers")
    WORKER_SECOND_SIGNAL = ("worker.second_signal", "signal", "a second signal: exiting at once")
    WORKER_RELEASED = ("worker.released", "count ids", "unfinished or unstarted jobs handed back")
    WORKER_RELEASE_FAILED = (
        "worker.release_failed",
        "error",
        "what a stopping worker writes could not be written",
    )
    WORKER_STOPPED = (
        "worker.stopped",
        "worker_id succeeded retried dead cancelled leases_lost",
        "a worker stopped, with its totals",
    )
    WORKER_STOP_UNMARKED = (
        "worker.stop_unmarked",
        "",
        "the worker could not be marked stopped: the reaper prunes its row",
    )
    WORKER_COUNTS_UNFLUSHED = (
        "worker.counts_unflushed",
        "",
        "the last job counts could not be written",
    )
    WORKER_THREADS_LEFT = (
        "worker.threads_left",
        "",
        "exiting with handler threads still running (their jobs handed back)",
    )
    WORKER_CONCURRENCY = ("worker.concurrency", "running", "the autoscaler changed concurrency")
    EXECUTOR_BUG = ("executor.bug", "job_id task", "an error in pgqueue running a job")
    OBSERVER_FAILED = ("observer.failed", "hook observer", "an observer hook raised")
    # -- the worker's services --------------------------------------------------------------
    SERVICE_DB_UNAVAILABLE = (
        "service.db_unavailable",
        "service retry_in error",
        "a service lost the database: retrying (WARNING once, then DEBUG)",
    )
    SERVICE_DB_BACK = ("service.db_back", "service", "the database is reachable again")
    SERVICE_CRASHED = ("service.crashed", "service retry_in", "a service raised: restarted")
    LISTENER_LISTENING = ("listener.listening", "", "LISTEN works: woken by notifications")
    LISTENER_POLLING = (
        "listener.polling",
        "poll_interval",
        "notifications do not arrive (or LISTEN is off): picking up jobs by polling",
    )
    REAPER_STARTED = ("reaper.started", "interval", "`pgq reaper` started")
    REAPER_RECOVERED = ("reaper.recovered", "count", "jobs whose leases expired were recovered")
    REAPER_STOPPED = ("reaper.stopped", "recovered", "`pgq reaper` stopped, with its total")
    PRUNER_PRUNED = (
        "pruner.pruned",
        "history dead_letters workflows",
        "history, dead letters and workflows pruned by retention",
    )
    PRUNER_BUCKETS = ("pruner.buckets", "buckets", "full per-key rate buckets deleted")
    PRUNER_SETTLED = (
        "pruner.settled",
        "parents",
        "waiting jobs whose parents left unnoticed were settled",
    )
    MAINTENANCE_STARTED = ("maintenance.started", "interval", "`pgq maintain` started")
    MAINTENANCE_WAITING = (
        "maintenance.waiting",
        "holder",
        "an old snapshot holds the horizon: nothing is reclaimed until it ends",
    )
    MAINTENANCE_NOT_OURS = (
        "maintenance.not_ours",
        "relations",
        "bloated relations this role may not maintain: run `pgq maintain` as their owner",
    )
    MAINTENANCE_DONE = (
        "maintenance.done",
        "step relation bytes_before bytes_after",
        "a VACUUM (`step=vacuum`) or REINDEX (`step=reindex`) or drop of a leftover index",
    )
    MAINTENANCE_GAVE_UP = (
        "maintenance.gave_up",
        "step relation error",
        "a step would have waited for a lock (or timed out): tried again next pass",
    )
    CRON_ENQUEUED = ("cron.enqueued", "schedule tick job_id inserted", "a schedule's tick")
    CRON_MISSED = ("cron.missed", "schedule skipped policy", "ticks missed while no worker ran")
    CRON_FAILED = ("cron.failed", "schedule error", "a tick could not be enqueued")
    METRICS_SERVED = ("metrics.served", "host port path", "the metrics endpoint listens")
    METRICS_QUERY_FAILED = ("metrics.query_failed", "error", "a metrics query failed")
    LOOP_BLOCKED = ("loop.blocked", "", "a handler blocks the event loop (with its stack)")
    LOOP_RUNNING = ("loop.running", "", "the event loop runs again after a stall")
    LOOP_OBSERVER_FAILED = ("loop.observer_failed", "", "the stall observer hook raised")
    WATCHDOG_EXTEND_FAILED = (
        "watchdog.extend_failed",
        "",
        "the watchdog could not extend leases during a stall",
    )
    # -- child processes --------------------------------------------------------------------
    CHILD_STARTED = ("child.started", "pid", "a child process started")
    CHILD_START_FAILED = ("child.start_failed", "pid", "a child process could not start")
    CHILD_TASKS_MISSING = (
        "child.tasks_missing",
        "",
        "the app the children import lacks tasks this worker runs",
    )
    CHILD_STOPPING = ("child.stopping", "pid", "a child process is stopped (DEBUG)")
    CHILD_REPLACING = ("child.replacing", "pid", "a child process is replaced (recycling)")
    CHILD_TERMINATING = (
        "child.terminating",
        "pid job_id",
        "a handler did not stop in time: its child is terminated",
    )
    CHILD_DIED = ("child.died", "pid job_id how", "a child process died while running a job")
    CHILD_DIED_IDLE = ("child.died_idle", "pid how", "an idle child process died")
    CHILD_BAD_FRAME = (
        "child.bad_frame",
        "pid",
        "a child process wrote a corrupt or unknown frame: killed",
    )
    CHILD_UNKILLABLE = ("child.unkillable", "pid", "a child did not exit after SIGKILL")
    POOL_MEMORY_UNCHECKED = (
        "pool.memory_unchecked",
        "",
        "max-memory-per-child is not applied on this system",
    )
    # -- the database and the client --------------------------------------------------------
    DB_REFUSED = ("db.refused", "", "PostgreSQL refuses connections: retrying with backoff")
    DB_ACCEPTING = ("db.accepting", "", "PostgreSQL accepts connections again")
    RESULTS_LISTENER_LOST = (
        "results.listener_lost",
        "",
        "the results listener lost its connection: retrying",
    )
    TASK_NAMES_UNCHECKED = (
        "client.names_unchecked",
        "",
        "this role cannot read the declared tasks: names go unchecked",
    )
    POOL_ROLLBACK_FAILED = (
        "client.rollback_failed",
        "error",
        "an application pool's connection could not roll back after a failed call",
    )
    PAYLOAD_ARGS_DROPPED = (
        "payload.args_dropped",
        "",
        "a stored argument the task no longer takes is dropped (once per task)",
    )
    DJANGO_TASKS_ELSEWHERE = (
        "django.tasks_elsewhere",
        "",
        "tasks that live in another database than the worker's",
    )
    # -- logging itself ---------------------------------------------------------------------
    LOG_FORMAT_UNUSED = (
        "logging.format_unused",
        "",
        "the app configured logging: --log-format is not used",
    )
    LOG_DROPPED = (
        "logging.dropped",
        "count total queue_size",
        "log records dropped: the log output did not keep up",
    )

    def __init__(self, code: str, names: str, meaning: str) -> None:
        self.code = code
        self.fields = tuple(names.split())
        self.meaning = meaning


def fields(action: Action, **values: object) -> dict[str, object]:
    """The ``extra=`` of a log call: ``action`` (the code), then ``values`` in the order given
    (the order the text formatter appends them)."""
    return {"action": action.code, **values}


class Seconds(float):
    """A duration in seconds: a number in JSON, ``1.5s`` in text (milliseconds at most)."""

    __slots__ = ()

    def __str__(self) -> str:
        return f"{float(self):.3f}".rstrip("0").rstrip(".") + "s"
