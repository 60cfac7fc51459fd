"""How the command line spells a declared value: a :class:`Flag` beside the declaration.

A job option (a key of :class:`~pgqueue.rules.options.JobOptions`, in its ``Annotated``
metadata) and a search filter (a field of :class:`~pgqueue.db.search.JobFilter`, in its
metadata) carry their ``pgq`` option with them, so a value and its option are declared once;
pgqueue/cli makes ``pgq enqueue``'s and ``pgq jobs search``'s options from them (as it makes
``pgq work``'s from :class:`~pgqueue.worker.WorkerSettings`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from types import UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints


@dataclass(frozen=True, slots=True)
class Flag:
    """A declared value's command-line option.

    ``help`` is its ``--help`` text (``{default}`` in it is the declared default). ``kind`` is
    how the value is written, and the command that takes it knows each kind: ``"value"`` (as
    the declared type), ``"duration"`` (``30s``, ``5m``), ``"json"`` (a JSON object),
    ``"repeat"`` (the option repeats, one item each), and for search filters ``"states"``,
    ``"pairs"`` (``KEY=VALUE`` or a JSON object), ``"tags"`` and ``"time"`` (ISO 8601 or an
    age). ``names``: the option's names when not ``--<name>``; ``low``/``high``: the range of
    an integer (each item of a repeated one); ``switch``: a second option, a bare switch, and
    its help (``--unique`` for ``unique_by``)."""

    help: str
    kind: str = "value"
    metavar: str | None = None
    names: tuple[str, ...] = ()
    low: int | None = None
    high: int | None = None
    switch: tuple[str, str] | None = None

    def option_names(self, name: str) -> tuple[str, ...]:
        """The option's names for the declared value ``name``."""
        return self.names or ("--" + name.replace("_", "-"),)


def flags_of(declared: type) -> dict[str, Flag]:
    """The :class:`Flag` of each key of a TypedDict whose ``Annotated`` metadata has one, in
    the order of the declaration."""
    hints = get_type_hints(declared, include_extras=True)
    found = {}
    for name, hint in hints.items():
        flag = next((m for m in getattr(hint, "__metadata__", ()) if isinstance(m, Flag)), None)
        if flag is not None:
            found[name] = flag
    return found


def plain_type(hint: Any) -> Any:
    """The type a ``value`` option parses: ``hint`` without its ``Annotated`` metadata and
    without None (``int | None`` -> ``int``)."""
    if hasattr(hint, "__metadata__"):
        hint = get_args(hint)[0]
    args = [a for a in get_args(hint) if a is not type(None)] if _is_union(hint) else [hint]
    if len(args) != 1:
        raise TypeError(f"{hint!r} is no one type a command line can parse")
    return args[0]


def item_type(hint: Any) -> Any:
    """The item type of a ``repeat`` option: ``X`` of the ``Iterable[X]`` in ``hint``."""
    if hasattr(hint, "__metadata__"):
        hint = get_args(hint)[0]
    for arg in get_args(hint) if _is_union(hint) else (hint,):
        origin = get_origin(arg)
        if isinstance(origin, type) and issubclass(origin, Iterable) and get_args(arg):
            return get_args(arg)[0]
    raise TypeError(f"{hint!r} has no Iterable[...] a repeated option can fill")


def _is_union(hint: Any) -> bool:
    return get_origin(hint) in (Union, UnionType)
