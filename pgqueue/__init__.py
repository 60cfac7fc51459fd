"""pgqueue: a PostgreSQL-native job queue.

Jobs are rows in ``pgqueue.jobs``: enqueue them inside your own transactions, run them with
``pgq work``, inspect everything with plain SQL.
"""

from typing import TYPE_CHECKING

from pgqueue._version import __version__
from pgqueue.client import PgQueue
from pgqueue.errors import (
    CommitOutcomeUnknown,
    ConfigurationError,
    DatabaseConnectionError,
    DatabaseRejectedError,
    DatabaseUnavailableError,
    DuplicateStepError,
    EventTimeout,
    Fail,
    InvalidCursorError,
    InvalidJobError,
    JobCancelled,
    JobCancelledError,
    JobDeadError,
    JobFailedError,
    JobNotFoundError,
    JobTimeout,
    JobTransactionError,
    LeaseLost,
    NondeterministicStepError,
    PgQueueError,
    QueueFullError,
    ResultTimeoutError,
    ResultUnavailableError,
    Retry,
    SchemaVersionError,
    SearchTimeoutError,
    StepError,
    UnknownTaskError,
    UnsupportedConnectionError,
    WorkflowNotFoundError,
)
from pgqueue.handler.batch import BatchTask, Item
from pgqueue.handler.job_context import JobContext, current_job
from pgqueue.handler.steps import StepRetry
from pgqueue.rules.flow_control import UNSET, CircuitBreaker, RateLimit
from pgqueue.rules.job_specs import JobId, JobSpec
from pgqueue.rules.retry import ConstantBackoff, ExponentialBackoff, RetryPolicy
from pgqueue.rules.schedules import Schedule
from pgqueue.rules.tasks import JobCall, Task

if TYPE_CHECKING:
    from pgqueue.rules.workflow import DAG, Chain, Group, WorkflowRun, chain, chord, group
else:  # the workflow names are imported when first used (pgqueue/_lazy.py)
    from pgqueue._lazy import __dir__ as __dir__
    from pgqueue._lazy import __getattr__ as __getattr__

__all__ = [
    "DAG",
    "UNSET",
    "BatchTask",
    "Chain",
    "CircuitBreaker",
    "CommitOutcomeUnknown",
    "ConfigurationError",
    "ConstantBackoff",
    "DatabaseConnectionError",
    "DatabaseRejectedError",
    "DatabaseUnavailableError",
    "DuplicateStepError",
    "EventTimeout",
    "ExponentialBackoff",
    "Fail",
    "Group",
    "InvalidCursorError",
    "InvalidJobError",
    "Item",
    "JobCall",
    "JobCancelled",
    "JobCancelledError",
    "JobContext",
    "JobDeadError",
    "JobFailedError",
    "JobId",
    "JobNotFoundError",
    "JobSpec",
    "JobTimeout",
    "JobTransactionError",
    "LeaseLost",
    "NondeterministicStepError",
    "PgQueue",
    "PgQueueError",
    "QueueFullError",
    "RateLimit",
    "ResultTimeoutError",
    "ResultUnavailableError",
    "Retry",
    "RetryPolicy",
    "Schedule",
    "SchemaVersionError",
    "SearchTimeoutError",
    "StepError",
    "StepRetry",
    "Task",
    "UnknownTaskError",
    "UnsupportedConnectionError",
    "WorkflowNotFoundError",
    "WorkflowRun",
    "__version__",
    "chain",
    "chord",
    "current_job",
    "group",
]
