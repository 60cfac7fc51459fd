"""The client's surface: every operation that reaches the database has a sync and an async
form, with the same parameters (both drive one plan; tests/integration/test_client_parts.py
runs each against PostgreSQL both ways)."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from pgqueue import DAG, Chain, Group, JobCall, PgQueue, Task, WorkflowRun
from pgqueue.rules.tasks import TaskCall
from tests.unit.test_docstrings import parts


def _operations(cls: type) -> dict[str, Any]:
    return {
        name: member
        for name in dir(cls)
        if not name.startswith("_")
        and inspect.isfunction(member := inspect.getattr_static(cls, name))
    }


def _shape(function: Any) -> list[tuple[str, Any, Any]]:
    """Parameters by name, kind and default (the annotations of ``conn`` differ)."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


# What needs no database (the registry, validation, building jobs and workflows) and the pair
# named after Python's own convention (close / aclose).
NO_IO = {"task", "periodic", "spec", "declared_queues", "declare_queues", "get_task", "close",
         "aclose", "options", "s", "retry_delay", "result_arg", "compile", "add"}  # fmt: skip


def _check_twins(operations: dict[str, Any], where: str) -> None:
    assert operations
    for name, function in operations.items():
        if name in NO_IO:
            continue
        if name.endswith("_async"):
            assert name.removesuffix("_async") in operations, f"{where}.{name} has no sync form"
            assert inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(
                getattr(function, "__wrapped__", function)
            ), f"{where}.{name} is not async"
            continue
        twin = operations.get(f"{name}_async")
        assert twin is not None, f"{where}.{name} has no async twin"
        assert _shape(twin) == _shape(function), f"{where}.{name}_async differs from {name}"


@pytest.mark.parametrize("part", sorted(parts()))
def test_every_operation_of_a_part_has_an_async_twin_of_the_same_shape(part: str) -> None:
    assert not set(_operations(parts()[part])) & NO_IO
    _check_twins(_operations(parts()[part]), f"pgq.{part}")


def test_every_operation_of_the_client_has_an_async_twin_of_the_same_shape() -> None:
    _check_twins(_operations(PgQueue), "pgq")


@pytest.mark.parametrize(
    "cls", [Task, TaskCall, JobCall, WorkflowRun, Chain, Group, DAG], ids=lambda c: c.__name__
)
def test_what_tasks_and_workflows_write_has_an_async_twin_too(cls: type) -> None:
    _check_twins(_operations(cls), cls.__name__)


def test_the_parts_are_the_ones_documented() -> None:
    assert set(parts()) == {"flow", "cron", "admin", "retention"}
