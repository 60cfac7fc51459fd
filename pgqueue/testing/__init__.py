"""pgqueue in an application's test suite: run the jobs the code under test enqueued, inline,
without a worker, and assert what it enqueued.

::

    from pgqueue.testing import assert_enqueued, drain

    def test_signup_sends_the_welcome(pgq):
        signup("a@example.com")                      # enqueues send_welcome
        assert_enqueued(pgq, send_welcome, args={"email": "a@example.com"})
        summary = drain(pgq)                         # runs it (and whatever it enqueues)
        assert [run.task for run in summary.succeeded] == [send_welcome.name]

Jobs really are rows: :func:`drain` claims, acks and fails them with the worker's own
statements against a real PostgreSQL (the pytest plugin, :mod:`pgqueue.testing.pytest`, gives
each test a migrated database). See the testing guide in the documentation.
"""

from pgqueue.testing.bind import bind
from pgqueue.testing.drain import drain, drain_async, run_job, run_job_async
from pgqueue.testing.enqueued import (
    EnqueuedJob,
    assert_enqueued,
    assert_not_enqueued,
    enqueued,
    enqueued_async,
)
from pgqueue.testing.runs import DrainError, DrainSummary, JobRun, JobsFailed, RunOutcome

__all__ = [
    "DrainError",
    "DrainSummary",
    "EnqueuedJob",
    "JobRun",
    "JobsFailed",
    "RunOutcome",
    "assert_enqueued",
    "assert_not_enqueued",
    "bind",
    "drain",
    "drain_async",
    "enqueued",
    "enqueued_async",
    "run_job",
    "run_job_async",
]
