"""pgqueue: a PostgreSQL-native job queue.

Jobs are rows in ``pgqueue.jobs``: enqueue them inside your own transactions, run them with
``pgq work``, inspect everything with plain SQL.
"""

from pgqueue._version import __version__
from pgqueue.client import PgQueue
from pgqueue.enqueue import JobId, JobSpec
from pgqueue.errors import (
    ConfigurationError,
    Fail,
    InvalidJobError,
    JobCancelled,
    JobNotFoundError,
    PgQueueError,
    QueueFullError,
    Retry,
    UnknownTaskError,
)
from pgqueue.flow import UNSET, CircuitBreaker, RateLimit
from pgqueue.retry import ConstantBackoff, ExponentialBackoff, RetryPolicy
from pgqueue.schedules import Schedule
from pgqueue.tasks import JobCall, Task
from pgqueue.worker.context import JobContext, current_job
from pgqueue.worker.executor import JobTimeout

__all__ = [
    "UNSET",
    "CircuitBreaker",
    "ConfigurationError",
    "ConstantBackoff",
    "ExponentialBackoff",
    "Fail",
    "InvalidJobError",
    "JobCall",
    "JobCancelled",
    "JobContext",
    "JobId",
    "JobNotFoundError",
    "JobSpec",
    "JobTimeout",
    "PgQueue",
    "PgQueueError",
    "QueueFullError",
    "RateLimit",
    "Retry",
    "RetryPolicy",
    "Schedule",
    "Task",
    "UnknownTaskError",
    "__version__",
    "current_job",
]
