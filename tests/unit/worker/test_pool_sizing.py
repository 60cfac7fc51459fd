"""When the process pool replaces a child (pgqueue.worker.pool_sizing), without processes."""

from __future__ import annotations

import logging

from pgqueue.worker.child_process import ChildSettings
from pgqueue.worker.pool_sizing import Recycling, shrunk


def test_a_child_is_replaced_after_its_jobs_or_past_its_memory():
    recycling = Recycling(ChildSettings("app:pgq", max_jobs=3, max_memory_mb=100))
    assert recycling.why_replace(2, 50 * 2**20) is None
    assert recycling.why_replace(3, 50 * 2**20) == "it ran 3 jobs (max-jobs-per-child 3)"
    assert recycling.why_replace(1, 150 * 2**20) == (
        "its memory (RSS) was 150 MB after a job (max-memory-per-child 100 MB)"
    )
    assert Recycling(ChildSettings("app:pgq")).why_replace(10**6, 2**40) is None
    assert shrunk(4) == "the pool shrank to 4"


def test_memory_it_cannot_read_is_warned_about_once(caplog):
    recycling = Recycling(ChildSettings("app:pgq", max_memory_mb=100))
    with caplog.at_level(logging.WARNING, logger="pgqueue.worker.pool"):
        assert recycling.why_replace(1, None) is None
        assert recycling.why_replace(2, None) is None
    assert caplog.text.count("max-memory-per-child is not applied") == 1
