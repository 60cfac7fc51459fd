"""The worker (``pgq work``): one asyncio loop running a few small services.

See :mod:`pgqueue.worker.worker` for the job state machine and the worker's lifecycle, and
:mod:`pgqueue.worker.wiring` for how the services are connected.
"""

from pgqueue.handler.job_context import JobContext, current_job
from pgqueue.worker.settings import WorkerSettings
from pgqueue.worker.worker import Worker

__all__ = ["JobContext", "Worker", "WorkerSettings", "current_job"]
