"""A job's input, declared once: the attributes of the row type ``pgqueue.job_input``.

:data:`JOB_INPUT` lists them in the composite's order: each with its SQL type, the
:class:`~pgqueue.rules.job_specs.JobSpec` attribute it is read from, and what it is (its
:class:`Kind`). Every enqueue path is derived from it:

* the SQL: the generated fragments :data:`FRAGMENTS` (the single ``INSERT``'s columns and
  parameters, the ``ROW(...)::pgqueue.job_input`` of one job, the rows of many built from one
  array per attribute, the ``COPY`` column lists) that the statements in
  ``pgqueue/db/queries/*.sql`` include as ``{{job_input_...}}``;
* the values: :func:`single_params`, :func:`input_params`, :func:`input_row`, :func:`copy_row`,
  :func:`ready_row`, their whole-batch forms (:func:`ready_rows`, :func:`copy_rows`) and
  :func:`input_arrays` read a spec in the same order (compiled once from the table).

The database takes the row whole: ``pgqueue.enqueue_input(pgqueue.job_input)`` (one job, with
the idempotency and deduplication logic) and ``pgqueue.insert_jobs(pgqueue.job_input[])``
(many; the one function that lists the stored columns). ``tests/unit/test_job_input_schema.py``
holds this table against ``migrations/schema.sql``.

A new stored option is one :attr:`Kind.OPTION` line here (appended: ``ALTER TYPE ... ADD
ATTRIBUTE`` appends), its declaration in :mod:`pgqueue.rules.options`, its field of
``JobSpec``, and a migration (the column, the attribute, a new version of ``insert_jobs``).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pgqueue.rules.job_specs import JobSpec


class Kind(enum.Enum):
    """What an attribute is, which says which statements write it."""

    #: Set by the plan, not read from the spec (the id, the due time and state of a bulk job,
    #: a fair queue's rank): first in the row.
    PLANNED = "planned"
    #: Every job has a value; every path writes it (``COPY`` of the plainest jobs included).
    CORE = "core"
    #: Read by ``pgqueue.enqueue_input`` only, never stored as given: the delay (``run_at`` is
    #: stored), the key modes (stored as the key, its lifetime, ``key_until_started``).
    CALL = "call"
    #: An idempotency or concurrency key and how long it is kept: written through the SQL
    #: functions (the single plain ``INSERT`` leaves a keyed job to ``enqueue_input``).
    KEY = "key"
    #: A stored option, None unless set: written by every path as it is (a new option is one).
    OPTION = "option"


@dataclass(frozen=True, slots=True)
class Column:
    """One attribute of ``pgqueue.job_input``."""

    name: str
    #: Its type in the composite, and the column's in ``pgqueue.jobs`` when stored.
    sql_type: str
    kind: Kind
    #: The JobSpec attribute it is read from (None: planned).
    spec: str | None = None

    @property
    def stored(self) -> bool:
        """A column of ``pgqueue.jobs`` with the same name and type."""
        return self.kind is not Kind.CALL

    @property
    def is_array(self) -> bool:
        return self.sql_type.endswith("[]")


# fmt: off
JOB_INPUT: tuple[Column, ...] = (
    Column("id", "bigint", Kind.PLANNED),
    Column("run_at", "timestamp with time zone", Kind.PLANNED),
    Column("state", "text", Kind.PLANNED),
    Column("fair_rank", "bigint", Kind.PLANNED),
    Column("queue", "text", Kind.CORE, "queue"),
    Column("task", "text", Kind.CORE, "task"),
    Column("args", "jsonb", Kind.CORE, "args_json"),
    Column("priority", "smallint", Kind.CORE, "priority"),
    Column("max_attempts", "integer", Kind.CORE, "max_attempts"),
    Column("delay", "interval", Kind.CALL, "delay"),
    Column("idempotency_key", "text", Kind.KEY, "idempotency_key"),
    Column("concurrency_key", "text", Kind.KEY, "concurrency_key"),
    Column("unique_for", "interval", Kind.KEY, "unique_for"),
    Column("unique_states", "text[]", Kind.KEY, "unique_state_list"),
    Column("unique_among", "text", Kind.CALL, "unique_among"),
    Column("on_conflict", "text", Kind.CALL, "on_conflict"),
    Column("throttle", "interval", Kind.CALL, "throttle"),
    Column("result_ttl", "interval", Kind.OPTION, "result_ttl"),
    Column("meta", "jsonb", Kind.OPTION, "meta_json"),
    Column("tags", "text[]", Kind.OPTION, "tag_list"),
    Column("caused_by", "bigint", Kind.OPTION, "caused_by"),
)
# fmt: on

NAMES = tuple(column.name for column in JOB_INPUT)
_PLANNED = tuple(c for c in JOB_INPUT if c.kind is Kind.PLANNED)
_READ = JOB_INPUT[len(_PLANNED) :]
assert all(c.kind is not Kind.PLANNED and c.spec for c in _READ), "planned attributes go first"
_CORE = tuple(c for c in JOB_INPUT if c.kind is Kind.CORE)
_OPTIONS = tuple(c for c in JOB_INPUT if c.kind is Kind.OPTION)
#: What the single plain INSERT writes as given (run_at and state it computes).
_PLAIN = _CORE + _OPTIONS
#: What a COPY writes: the planned attributes, then every stored one read from the spec.
_COPIED = _PLANNED + tuple(c for c in _READ if c.stored)


def _params(columns: Iterable[Column]) -> str:
    return ", ".join(f"%({c.name})s::{c.sql_type}" for c in columns)


def _from_arrays(column: Column) -> str:
    # An array attribute travels as one JSON array per job: unnest would flatten an array of
    # arrays.
    if column.is_array:
        return (
            f"CASE WHEN u.{column.name} IS NOT NULL "
            f"THEN ARRAY(SELECT jsonb_array_elements_text(u.{column.name})) END"
        )
    return f"u.{column.name}"


def _array_param(column: Column) -> str:
    return f"%({column.name})s::{'jsonb' if column.is_array else column.sql_type}[]"


#: The generated SQL the named queries include as ``{{name}}``.
FRAGMENTS: dict[str, str] = {
    "job_input_plain_columns": ", ".join(c.name for c in _PLAIN),
    "job_input_plain_params": _params(_PLAIN),
    "job_input_row": f"ROW({_params(JOB_INPUT)})::pgqueue.job_input",
    # Many jobs, one array per attribute: (job, n) rows, n the job's place in the arrays.
    # (Text from the declarations above only, never from a caller: values are parameters.)
    "job_input_rows": (
        f"SELECT ROW({', '.join(map(_from_arrays, JOB_INPUT))})::pgqueue.job_input AS job, u.n "  # noqa: S608
        f"FROM unnest({', '.join(map(_array_param, JOB_INPUT))}) "
        f"WITH ORDINALITY AS u({', '.join(NAMES)}, n)"
    ),
    "job_input_copy_columns": ", ".join(c.name for c in _COPIED),
    # The same columns from one array per column, for a small batch's plain INSERT.
    "job_input_copy_values": ", ".join(map(_from_arrays, _COPIED)),
    "job_input_copy_arrays": ", ".join(map(_array_param, _COPIED)),
    "job_input_ready_columns": ", ".join(c.name for c in (JOB_INPUT[0], *_CORE)),
    # The single INSERT's columns for many jobs, one array per column (a group commit:
    # ``insert_job_group``), and their values named as the columns.
    "job_input_plain_arrays": ", ".join(map(_array_param, _PLAIN)),
    "job_input_plain_values": ", ".join(f"{_from_arrays(c)} AS {c.name}" for c in _PLAIN),
}

# -- the readers, generated once from the table --------------------------------------------
# Each reads a spec's attributes in the table's order. They are compiled from text made of the
# names above (never of a caller's input), so that each attribute read runs as the
# interpreter's specialised bytecode: in a bulk enqueue's loop, a third of the time of
# operator.attrgetter's generic lookups.

#: What a job that is ready now and needs no more than its core columns leaves unset (the
#: fields themselves, not the list-making properties: None or empty either way).
_UNLISTED = {"unique_state_list": "unique_states", "tag_list": "tags"}
_EXTRAS = (
    "run_at",
    "delay",
    *(
        _UNLISTED.get(c.spec, c.spec)
        for c in JOB_INPUT
        if c.kind in (Kind.KEY, Kind.OPTION) and c.spec
    ),
)


def _reads(columns: Iterable[Column]) -> str:
    return ", ".join(f"s.{c.spec}" for c in columns if c.spec)


def _generated(name: str, doc: str, source: str) -> Any:
    namespace: dict[str, Any] = {}
    exec(compile(source, f"<pgqueue.db.job_rows.{name}>", "exec"), namespace)
    function = namespace[name]
    function.__doc__ = doc
    return function


_PLAIN_READY = " and ".join(f"s.{attr} is None" for attr in _EXTRAS)
#: One job's row for pgqueue.enqueue_input: what the spec holds, and its run_at (the function
#: plans the id, the state and the rank itself).
_GIVEN = {"run_at": "run_at", **{c.name: c.spec for c in _READ if c.spec}}
_given = ", ".join(f"{c.name!r}: s.{_GIVEN[c.name]}" for c in JOB_INPUT if c.name in _GIVEN)

single_params: Callable[[JobSpec], dict[str, Any]] = _generated(
    "single_params",
    """The parameters of ``insert_job`` (a job without keys): the plain columns, run_at and
    delay (the database computes the due time from its own clock).""",
    f"def single_params(s):\n"
    f"    return {{{', '.join(f'{c.name!r}: s.{c.spec}' for c in _PLAIN if c.spec)},"
    f" 'run_at': s.run_at, 'delay': s.delay}}\n",
)
input_params: Callable[[JobSpec], dict[str, Any]] = _generated(
    "input_params",
    """The parameters of ``{{job_input_row}}``: the whole row of one job for
    ``pgqueue.enqueue_input`` (which plans the due time, the state and the rank itself).""",
    f"def input_params(s):\n"
    f"    return {{{', '.join(f'{n!r}: None' for n in NAMES if n not in _GIVEN)}, {_given}}}\n",
)
input_row: Callable[[JobSpec, int | None, datetime | None, str | None], tuple[Any, ...]] = (
    _generated(
        "input_row",
        """One job's row in :data:`JOB_INPUT` order (for :func:`input_arrays`): its spec, id,
        due time and state.""",
        f"def input_row(s, job_id, run_at, state):\n"
        f"    return (job_id, run_at, state, None, {_reads(_READ)})\n",
    )
)
copy_row: Callable[..., tuple[Any, ...]] = _generated(
    "copy_row",
    """One job's row for ``COPY`` (``{{job_input_copy_columns}}``): spec, id, due time, state
    and rank (None: none).""",
    f"def copy_row(s, job_id, run_at, state, rank=None):\n"
    f"    return (job_id, run_at, state, rank, {_reads(_COPIED)})\n",
)
ready_row: Callable[[JobSpec, int], tuple[Any, ...] | None] = _generated(
    "ready_row",
    """One job's row for the ``COPY`` of plain ready jobs, or None when it is not one
    (:func:`is_plain_ready`; one call for both: bulk enqueue makes it once per job).""",
    f"def ready_row(s, job_id):\n"
    f"    if {_PLAIN_READY}:\n"
    f"        return (job_id, {_reads(_CORE)})\n"
    f"    return None\n",
)
all_plain_ready: Callable[[Iterable[JobSpec]], bool] = _generated(
    "all_plain_ready",
    """Every job is one :func:`is_plain_ready` takes.""",
    f"def all_plain_ready(specs):\n"
    f"    for s in specs:\n"
    f"        if not ({_PLAIN_READY}):\n"
    f"            return False\n"
    f"    return True\n",
)
ready_rows: Callable[[Sequence[JobSpec], Sequence[int]], list[tuple[Any, ...]]] = _generated(
    "ready_rows",
    """The ``COPY`` rows of plain ready jobs (:func:`all_plain_ready`): :func:`ready_row` for
    a whole batch in one comprehension.""",
    f"def ready_rows(specs, ids):\n"
    f"    return [(job_id, {_reads(_CORE)}) for s, job_id in zip(specs, ids)]\n",
)
copy_rows: Callable[[Sequence[JobSpec], Sequence[int], datetime, str], list[tuple[Any, ...]]] = (
    _generated(
        "copy_rows",
        """The ``COPY`` rows (:func:`copy_row`) of jobs that share a due time and a state and
        have no rank (:func:`all_now_unkeyed`), in one comprehension.""",
        f"def copy_rows(specs, ids, run_at, state):\n"
        f"    return [(job_id, run_at, state, None, {_reads(_COPIED)})\n"
        f"            for s, job_id in zip(specs, ids)]\n",
    )
)


plain_row: Callable[[JobSpec], tuple[Any, ...]] = _generated(
    "plain_row",
    """One job's values of the single INSERT's plain columns (for :func:`plain_arrays`).""",
    f"def plain_row(s):\n    return ({_reads(_PLAIN)},)\n",
)


def plain_arrays(specs: Sequence[JobSpec]) -> dict[str, list[Any]]:
    """The parameters of ``insert_job_group``: :func:`single_params` of many jobs, one array
    per parameter (``{{job_input_plain_arrays}}``, then ``run_at`` and ``delay``)."""
    arrays = input_arrays([plain_row(spec) for spec in specs], _PLAIN)
    arrays["run_at"] = [spec.run_at for spec in specs]
    arrays["delay"] = [spec.delay for spec in specs]
    return arrays


def due_at(spec: JobSpec, db_now: datetime) -> datetime:
    """When the job may run, by the database clock read for the batch."""
    return spec.run_at or (db_now + spec.delay if spec.delay else db_now)


def is_plain_ready(spec: JobSpec) -> bool:
    """Ready now, without keys or options: the column defaults give run_at, state and the rest
    (``{{job_input_ready_columns}}``)."""
    return all_plain_ready((spec,))


def all_now_unkeyed(specs: Iterable[JobSpec]) -> bool:
    """Every job is due now and has no idempotency key."""
    return all(s.run_at is None and s.delay is None and s.idempotency_key is None for s in specs)


def input_arrays(
    rows: Sequence[Sequence[Any]], declared: Sequence[Column] = JOB_INPUT
) -> dict[str, list[Any]]:
    """Rows in :data:`JOB_INPUT` order to one array per attribute (the parameters of
    ``{{job_input_rows}}``); array attributes as JSON text."""
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in declared]
    arrays: dict[str, list[Any]] = {}
    for column, values in zip(declared, columns, strict=True):
        if column.is_array:
            arrays[column.name] = [None if v is None else json.dumps(list(v)) for v in values]
        else:
            arrays[column.name] = list(values)
    return arrays


#: Where a row holds the id, the idempotency key and the result TTL.
ID, KEY, RESULT_TTL = (NAMES.index(n) for n in ("id", "idempotency_key", "result_ttl"))


def copy_arrays(rows: Sequence[Sequence[Any]]) -> dict[str, list[Any]]:
    """:func:`copy_row` rows to one array per column (the parameters of
    ``{{job_input_copy_arrays}}``)."""
    return input_arrays(rows, _COPIED)
