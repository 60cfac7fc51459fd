"""pgqueue: a PostgreSQL-native job queue.

Jobs are rows in ``pgqueue.jobs``: enqueue them inside your own transactions, run them with
``pgq work``, inspect everything with plain SQL.
"""

from pgqueue.client import PgQueue
from pgqueue.enqueue import JobId, JobSpec
from pgqueue.errors import (
    ConfigurationError,
    Fail,
    InvalidJobError,
    JobCancelled,
    JobNotFoundError,
    PgQueueError,
    Retry,
    UnknownTaskError,
)
from pgqueue.retry import ConstantBackoff, ExponentialBackoff
from pgqueue.tasks import JobCall, Task

__version__ = "0.1.0"

__all__ = [
    "ConfigurationError",
    "ConstantBackoff",
    "ExponentialBackoff",
    "Fail",
    "InvalidJobError",
    "JobCall",
    "JobCancelled",
    "JobId",
    "JobNotFoundError",
    "JobSpec",
    "PgQueue",
    "PgQueueError",
    "Retry",
    "Task",
    "UnknownTaskError",
    "__version__",
]
