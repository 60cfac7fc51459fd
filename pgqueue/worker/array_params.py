"""The worker's list parameters sent as PostgreSQL array literals.

psycopg dumps a Python list element by element in Python, working out the array's type from
its elements first: the claim's five lists (queues, tasks and the cursor's three ``after_*``
keys) cost 0.1-0.15 ms of the event loop's time per claim, on the path from a NOTIFY to the
handler, and an ack's ids and tokens about 1 us a job. Their text form, built here with one
``join``, is bound as an ordinary parameter (never spliced into SQL) and the statement casts it
(``%(queues)s::text[]``), as it casts the lists. :func:`int_array` is the batches' form (ints
only: nothing to quote or check), :func:`array_literal` the claim's (mixed types).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any


def int_array(values: Iterable[int]) -> str:
    """A batch of ids or tokens as an array literal (``{1,2,3}``), cast by the query."""
    return "{" + ",".join(map(str, values)) + "}"


def _element(value: object) -> str | None:
    """One element of an array literal, or None for a value of another type."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        # Quoted, so that commas, braces, spaces and the word NULL stay text.
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, datetime):
        return '"' + value.isoformat(sep=" ") + '"'
    return None


def array_literal(values: list[Any]) -> str | None:
    """``values`` (None, bool, int, str or datetime) as an array literal (``{"a",NULL,3}``);
    None when an element is of another type (the caller keeps the list for psycopg)."""
    parts = []
    for value in values:
        part = _element(value)
        if part is None:
            return None
        parts.append(part)
    return "{" + ",".join(parts) + "}"


def with_array_literals(params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` with each list that array_literal can write as its literal."""
    out = dict(params)
    for key, value in params.items():
        if isinstance(value, list):
            literal = array_literal(value)
            if literal is not None:
                out[key] = literal
    return out
