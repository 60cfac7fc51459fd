"""Job hooks wrap every sync handler call in order, let its exception through, and are added
once (pgqueue.handler.job_hooks; the Django app's hook is tested in a real worker process by
tests/integration/test_django_connections.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from pgqueue.handler import job_hooks


def test_hooks_wrap_the_call_in_order_and_see_its_exception() -> None:
    seen: list[str] = []

    def hook(name: str) -> job_hooks.JobHook:
        @contextmanager
        def around() -> Iterator[None]:
            seen.append(f"{name} before")
            try:
                yield
            finally:
                seen.append(f"{name} after")

        return around

    def add(a: int, b: int) -> int:
        seen.append("call")
        return a + b

    outer, inner = hook("outer"), hook("inner")
    job_hooks.add_job_hook(outer)
    job_hooks.add_job_hook(inner)
    job_hooks.add_job_hook(outer)  # once only
    try:
        assert job_hooks.job_hooks() == (outer, inner)
        assert job_hooks.call_hooked(add, [1], {"b": 2}) == 3
        with pytest.raises(ZeroDivisionError):
            job_hooks.call_hooked(lambda: 1 / 0, [], {})
    finally:
        job_hooks.remove_job_hook(outer)
        job_hooks.remove_job_hook(inner)
    assert job_hooks.job_hooks() == ()
    wrapped = ["outer before", "inner before", "call", "inner after", "outer after"]
    assert seen == [*wrapped, *(step for step in wrapped if step != "call")]
