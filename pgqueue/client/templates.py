"""Validated jobs before their arguments: what a client validates once rather than at every
enqueue.

A single enqueue by name without options makes the same job but for its arguments each time:
its task's name and defaults are validated once per client and kept here
(:class:`CallTemplates`); a bulk enqueue validates each distinct (task, options) once
(:func:`validated`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pgqueue.rules.gc_pause import gc_paused
from pgqueue.rules.job_specs import JobSpec, spec_template

if TYPE_CHECKING:
    from pgqueue.rules.tasks import JobCall, Task

#: The most templates a client keeps: names made up per call must not grow it without bound.
MOST = 1024


class CallTemplates:
    """Per task name, the validated job of a call without options, and the task it was made
    for (a task registered again under that name gets a new one, with its new defaults)."""

    def __init__(self) -> None:
        self._by_name: dict[str, tuple[Task[..., Any] | None, JobSpec]] = {}

    def get(
        self, name: str, registered: Task[..., Any] | None, defaults: Mapping[str, Any]
    ) -> JobSpec:
        cached = self._by_name.get(name)
        if cached is not None and cached[0] is registered:
            return cached[1]
        template = spec_template(name, {}, defaults=defaults)
        if len(self._by_name) >= MOST:
            self._by_name.clear()
        self._by_name[name] = (registered, template)
        return template


def validated(jobs: Iterable[JobCall | JobSpec]) -> list[JobSpec]:
    """Every job validated before the first write, so bad input leaves nothing half-written;
    each distinct (task, options) is validated once."""
    templates: dict[Any, JobSpec] = {}
    with gc_paused():
        return [job if isinstance(job, JobSpec) else job.spec(templates=templates) for job in jobs]
