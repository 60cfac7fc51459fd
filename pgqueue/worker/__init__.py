"""The worker (``pgq work``): one asyncio loop running a few small services.

See :mod:`pgqueue.worker.worker` for how they are wired and the job state machine.
"""

from pgqueue.job_context import JobContext, current_job
from pgqueue.worker.worker import Worker, WorkerSettings

__all__ = ["JobContext", "Worker", "WorkerSettings", "current_job"]
