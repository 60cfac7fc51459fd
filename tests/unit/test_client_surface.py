"""The client's surface: every operation that reaches the database has a sync and an async
form, with the same parameters (both drive one plan; tests/integration/test_client_parts.py
runs each against PostgreSQL both ways)."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

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


@pytest.mark.parametrize("part", sorted(parts()))
def test_every_operation_of_a_part_has_an_async_twin_of_the_same_shape(part: str) -> None:
    operations = _operations(parts()[part])
    assert operations
    for name, function in operations.items():
        if name.endswith("_async"):
            assert name.removesuffix("_async") in operations, f"pgq.{part}.{name} has no sync form"
            assert inspect.iscoroutinefunction(function), f"pgq.{part}.{name} is not async"
            continue
        twin = operations.get(f"{name}_async")
        assert twin is not None, f"pgq.{part}.{name} has no async twin"
        assert _shape(twin) == _shape(function), f"pgq.{part}.{name}_async differs"
