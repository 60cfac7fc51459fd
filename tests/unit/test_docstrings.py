"""Every public name has a docstring: the API reference (docs/reference/, mkdocstrings) is
generated from them, so a name without one would be a blank entry.

Public: the names in ``pgqueue.__all__``, ``pgqueue.contrib.django.__all__``,
``pgqueue.alembic.__all__`` and ``pgqueue.testing.__all__`` (dunders such as ``__version__``
aside), and the public methods and properties of the public classes, inherited ones included
when pgqueue defines them, and of the client's parts (``pgq.flow``, ``pgq.cron``, ...).
Constants are documented by a string literal right after the assignment (what mkdocstrings reads).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import griffe

import pgqueue
import pgqueue.alembic
import pgqueue.contrib.django
import pgqueue.testing
from pgqueue.client.part import Part

ROOT = Path(__file__).resolve().parents[2]
MODULES = [pgqueue, pgqueue.contrib.django, pgqueue.alembic, pgqueue.testing]


def _own(member: Any) -> bool:
    """Whether a class member is pgqueue's own code (not object's, Exception's, int's...)."""
    target = member.fget if isinstance(member, property) else member
    target = getattr(target, "__func__", target)
    return inspect.isfunction(target) and target.__module__.startswith("pgqueue")


def missing_docstrings(module: ModuleType, loaded: griffe.Object | griffe.Alias) -> list[str]:
    missing = []
    for name in module.__all__:
        if name.startswith("__"):
            continue
        obj = getattr(module, name)
        where = f"{module.__name__}.{name}"
        if inspect.isclass(obj) or inspect.isfunction(obj):
            if not (obj.__doc__ or "").strip():
                missing.append(where)
        elif not (loaded[name].docstring and loaded[name].docstring.value.strip()):
            missing.append(f"{where} (a constant: a string literal after its assignment)")
        if inspect.isclass(obj):
            missing += _undocumented_members(obj, where)
    return missing


def _undocumented_members(cls: type, where: str) -> list[str]:
    missing = []
    for attr in dir(cls):
        if attr.startswith("_"):
            continue
        member = inspect.getattr_static(cls, attr)
        if _own(member):
            doc = member.__doc__ if isinstance(member, property) else None
            doc = doc or getattr(getattr(member, "__func__", member), "__doc__", None)
            if not (doc or "").strip():
                missing.append(f"{where}.{attr}")
    return missing


def parts() -> dict[str, type[Part]]:
    """The client's parts by attribute name (``flow``: ``FlowControl``, ...)."""
    client = pgqueue.PgQueue("postgresql://nobody@localhost/nothing")  # connects to nothing
    found = {}
    for name in dir(pgqueue.PgQueue):
        if isinstance(inspect.getattr_static(pgqueue.PgQueue, name), functools.cached_property):
            part = type(getattr(client, name))
            if issubclass(part, Part):
                found[name] = part
    return found


def test_every_part_of_the_client_is_documented() -> None:
    found = parts()
    assert {"flow", "cron"} <= set(found)
    missing = []
    for name, part in found.items():
        if not (part.__doc__ or "").strip():
            missing.append(part.__qualname__)
        missing += _undocumented_members(part, f"pgq.{name}")
    assert not missing, "parts of the client without a docstring:\n" + "\n".join(missing)


def test_the_check_finds_a_missing_docstring(tmp_path: Path, monkeypatch: Any) -> None:
    source = (
        '"""A module."""\n'
        "__all__ = ['Documented', 'bare', 'CONSTANT', 'DOCUMENTED_CONSTANT']\n"
        "class Documented:\n"
        '    """Has one."""\n'
        "    def method(self):\n"
        "        pass\n"
        "    @property\n"
        "    def prop(self):\n"
        '        """Has one."""\n'
        "def bare():\n"
        "    pass\n"
        "CONSTANT = 1\n"
        "DOCUMENTED_CONSTANT = 2\n"
        '"""Has one."""\n'
    )
    (tmp_path / "pgqueue_docstring_probe.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    probe = importlib.import_module("pgqueue_docstring_probe")

    # Only pgqueue's own members are checked: this probe's count as its own here.
    monkeypatch.setattr(probe.Documented.method, "__module__", "pgqueue.probe")
    monkeypatch.setattr(probe.Documented.prop.fget, "__module__", "pgqueue.probe")
    loaded = griffe.load("pgqueue_docstring_probe", search_paths=[str(tmp_path)])
    assert missing_docstrings(probe, loaded) == [
        "pgqueue_docstring_probe.Documented.method",
        "pgqueue_docstring_probe.bare",
        "pgqueue_docstring_probe.CONSTANT (a constant: a string literal after its assignment)",
    ]


def test_the_api_reference_lists_every_public_name() -> None:
    """docs/reference/ renders each public name (a new one needs its region there: a
    ``<!-- ::: NAME -->`` marker, or its module's ``members=`` list; ``make api-docs``)."""
    reference = ROOT / "docs" / "reference"
    api = (reference / "api.md").read_text()
    missing = [n for n in pgqueue.__all__ if f"<!-- ::: pgqueue.{n} -->\n" not in api]
    missing += [
        f"{part.__module__}.{part.__qualname__}"
        for part in parts().values()
        if f"<!-- ::: {part.__module__}.{part.__qualname__} -->\n" not in api
    ]
    for module, page in [
        (pgqueue.contrib.django, "django.md"),
        (pgqueue.alembic, "alembic.md"),
    ]:
        text = (reference / page).read_text()
        region = re.search(
            rf"^<!-- ::: {re.escape(module.__name__)} members=([\w,]+) -->$", text, re.M
        )
        listed = region.group(1).split(",") if region else []
        missing += [f"{module.__name__}.{n}" for n in module.__all__ if n not in listed]
    assert not missing, f"public names missing from docs/reference/: {missing}"
