"""Bulk enqueue pauses the cyclic garbage collector and always gives it back as it found it."""

from __future__ import annotations

import gc
import threading

import pytest

from pgqueue.rules.gc_pause import gc_paused


@pytest.fixture(autouse=True)
def _collector_on():
    gc.enable()
    yield
    gc.enable()


def test_paused_inside_and_on_again_after():
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_on_again_after_an_error():
    with pytest.raises(ValueError), gc_paused():
        raise ValueError("boom")
    assert gc.isenabled()


def test_nested_and_concurrent_pauses_end_with_the_last():
    inner_started, outer_done = threading.Event(), threading.Event()
    seen: list[bool] = []

    def other_thread() -> None:
        with gc_paused():
            inner_started.set()
            outer_done.wait(5)
            seen.append(gc.isenabled())  # the first pause has ended: still paused for us
        seen.append(gc.isenabled())

    with gc_paused():
        thread = threading.Thread(target=other_thread)
        thread.start()
        inner_started.wait(5)
    outer_done.set()
    thread.join(5)
    assert seen == [False, True]


def test_a_collector_switched_off_by_the_application_stays_off():
    gc.disable()
    with gc_paused():
        pass
    assert not gc.isenabled()
