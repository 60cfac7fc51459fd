"""Property tests: whatever a caller passes as queue name, task name, idempotency key or args,
enqueue either stores exactly that (read back unchanged) or raises InvalidJobError before
writing anything. Quotes, SQL, Unicode (lone surrogates included), NUL, huge values, NaN and
deep nesting; single enqueue, multi-row insert and COPY."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pgqueue import InvalidJobError, JobId, PgQueue
from tests.helpers import scalar

# Every code point, surrogates included (st.text() leaves those out by default).
ANY_CHAR = st.characters(codec=None, categories=None)
NASTY = st.sampled_from(
    [
        "'; DROP TABLE pgqueue.jobs; --",
        '" OR 1=1 --',
        "\\",
        "\\u0000",
        "\x00",
        "$$",
        "%(task)s",
        "%s",
        "{}",
        "\ud800",
        "é" * 300,
        "🙂",
        "\u202e",
        "\r\n\t",
        "",
    ]
)
NAMES = st.one_of(NASTY, st.text(ANY_CHAR, max_size=250))
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(ANY_CHAR, max_size=60),
    NASTY,
)
JSONISH = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(st.one_of(st.text(ANY_CHAR, max_size=20), NASTY), children, max_size=5),
    ),
    max_leaves=30,
)
ARGS = st.dictionaries(st.one_of(st.text(ANY_CHAR, max_size=20), NASTY), JSONISH, max_size=6)
PROPERTY = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def same_json(stored: Any, given: Any) -> bool:
    """JSON equality: tuples are arrays, and numbers compare by value (PostgreSQL's numeric
    writes 1e+16 as 10000000000000000, which Python reads back as an int of the same value)."""
    if isinstance(given, bool) or given is None or isinstance(given, str):
        return stored == given and type(stored) is type(given)
    if isinstance(given, int | float):
        return not isinstance(stored, bool) and float(stored) == float(given)
    if isinstance(given, list | tuple):
        return (
            isinstance(stored, list)
            and len(stored) == len(given)
            and all(same_json(s, g) for s, g in zip(stored, given, strict=True))
        )
    assert isinstance(given, dict)
    return (
        isinstance(stored, dict)
        and stored.keys() == given.keys()
        and all(same_json(stored[k], given[k]) for k in given)
    )


def stored_rows(dsn: str, ids: Sequence[int]) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT queue, task, args, idempotency_key FROM pgqueue.jobs"
            " WHERE id = ANY(%s) ORDER BY id",
            (ids,),
        ).fetchall()


def job_count(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) FROM pgqueue.jobs").fetchone()[0]


def check_stored(row: tuple[Any, ...], queue: str, task: str, args: Any, key: str | None) -> None:
    assert row[0] == queue and row[1] == task and row[3] == key
    assert same_json(row[2], args), (row[2], args)


def written_or_rejected(dsn: str, write: Callable[[PgQueue], list[JobId]]) -> list[int] | None:
    """The ids written, or None when enqueue refused with a clear InvalidJobError (and wrote
    nothing)."""
    pgq = PgQueue(dsn)
    before = job_count(dsn)
    try:
        return [int(job_id) for job_id in write(pgq)]
    except InvalidJobError as exc:
        # A clear message, never an empty one or a driver error in disguise.
        assert str(exc) and not isinstance(exc, psycopg.Error)
        assert job_count(dsn) == before, "a rejected job (or part of a batch) was written"
        return None
    finally:
        pgq.close()


@PROPERTY
@given(queue=NAMES, task=NAMES, args=ARGS, key=st.one_of(st.none(), NAMES))
def test_enqueue_stores_exactly_or_rejects(dsn, queue, task, args, key):
    ids = written_or_rejected(
        dsn, lambda pgq: [pgq.enqueue(task, args, queue=queue, idempotency_key=key)]
    )
    if ids is None:
        return
    [row] = stored_rows(dsn, ids)
    check_stored(row, queue, task, args, key)
    with psycopg.connect(dsn, autocommit=True) as conn:  # keep keys free for later examples
        conn.execute("DELETE FROM pgqueue.jobs WHERE id = ANY(%s)", (ids,))


@PROPERTY
@given(
    jobs=st.lists(st.tuples(NAMES, NAMES, ARGS), min_size=1, max_size=4),
    copies=st.sampled_from([1, 70]),  # 70 identical jobs go through COPY
    keyed=st.booleans(),
)
def test_bulk_enqueue_stores_exactly_or_rejects(dsn, jobs, copies, keyed):
    calls = [
        (queue, task, args, f"{index}-{queue!r}" if keyed else None)
        for index, (queue, task, args) in enumerate(jobs * copies)
    ]
    ids = written_or_rejected(
        dsn,
        lambda pgq: pgq.enqueue_many(
            [
                pgq.spec(task, args, {"queue": queue, "idempotency_key": key})
                for queue, task, args, key in calls
            ]
        ),
    )
    if ids is None:
        return
    rows = stored_rows(dsn, ids)
    assert len(rows) == len(calls)
    for row, (queue, task, args, key) in zip(rows, calls, strict=True):
        check_stored(row, queue, task, args, key)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM pgqueue.jobs WHERE id = ANY(%s)", (ids,))


def test_the_specific_hostile_values_are_rejected_with_their_reason(pgq):
    cases = {
        "NaN": ({"x": math.nan}, "NaN"),
        "infinity": ({"x": [math.inf]}, "NaN or Infinity"),
        "NUL": ({"x": "a\x00b"}, "NUL"),
        "surrogate": ({"x": "\udfff"}, "lone surrogate"),
        "int key": ({"x": {1: "a"}}, "non-string object key"),
        "huge": ({"x": "a" * (2 * 1024 * 1024)}, "over the limit"),
        "deep": ({"x": _nested(100_000)}, "nested too deeply"),
        "huge int": ({"x": 10**5000}, "not JSON-serialisable"),
        "object": ({"x": object()}, "not JSON-serialisable"),
    }
    for label, (args, reason) in cases.items():
        try:
            pgq.enqueue("t", args)
        except InvalidJobError as exc:
            assert reason in str(exc), (label, str(exc))
        else:
            raise AssertionError(f"{label}: accepted")
    bad_options = [
        ("queue", "\ud800", "lone surrogate"),
        ("queue", "", "empty"),
        ("queue", "q" * 201, "over the limit"),
        ("queue", "a\x00b", "NUL"),
        ("idempotency_key", "\ud800", "lone surrogate"),
        ("idempotency_key", "", "non-empty"),
        ("idempotency_key", "k" * 1001, "at most"),
    ]
    for option, value, reason in bad_options:
        try:
            pgq.enqueue("t", {}, **{option: value})
        except InvalidJobError as exc:
            assert reason in str(exc), (option, str(exc))
        else:
            raise AssertionError(f"{option}={value[:10]!r}: accepted")
    assert scalar(pgq.dsn, "SELECT count(*) FROM pgqueue.jobs") == 0


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value
