"""The type-driven codec: values of the types a signature names go in as plain JSON and come
back as those types; a value that cannot be encoded names its argument."""

from __future__ import annotations

import enum
import json
import logging
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any, TypedDict
from uuid import UUID

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pgqueue.errors import InvalidJobError
from pgqueue.rules.codec import TaskCodec, decoder_for, duration_text, to_plain
from pgqueue.rules.payload import ArgBinder, dumps, signature_of


class Colour(enum.Enum):
    RED = "red"
    GREEN = "green"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@dataclass
class Point:
    x: Decimal
    y: Decimal
    at: datetime | None = None


@dataclass
class Route:
    name: str
    points: list[Point] = field(default_factory=list)
    tags: frozenset[str] = frozenset()


class Address(TypedDict):
    street: str
    since: date


class Customer(pydantic.BaseModel):
    id: UUID
    joined: datetime
    credit: Decimal


def roundtrip(annotation: Any, value: Any) -> Any:
    """Encode by the value's type (as stored: JSON text), decode by the annotation."""
    text = dumps({"v": value}, limit=1 << 20)
    stored = json.loads(text)["v"]
    decode = decoder_for(annotation)
    return stored if decode is None else decode(stored)


WHEN = datetime(2026, 12, 6, 9, 30, 15, 123456, tzinfo=UTC)
ROUNDTRIPS: list[tuple[Any, Any]] = [
    (datetime, WHEN),
    (datetime, datetime(2026, 1, 2, 3, 4, 5)),  # naive stays naive
    (date, date(2026, 2, 28)),
    (time, time(23, 59, 1, 5)),
    (timedelta, timedelta(days=3, hours=4, minutes=5, seconds=6, microseconds=7)),
    (timedelta, timedelta(seconds=-1)),
    (timedelta, timedelta(0)),
    (UUID, UUID("12345678-1234-5678-1234-567812345678")),
    (Decimal, Decimal("1234.5678")),
    (Decimal, Decimal("-0.000001")),
    (Colour, Colour.GREEN),
    (Level, Level.HIGH),
    (tuple[int, str], (1, "a")),
    (tuple[datetime, ...], (WHEN, WHEN)),
    (set[int], {3, 1, 2}),
    (frozenset[UUID], frozenset({UUID(int=1), UUID(int=2)})),
    (list[date], [date(2026, 1, 1), date(2026, 1, 2)]),
    (dict[str, Decimal], {"a": Decimal("1.5"), "b": Decimal("2")}),
    (datetime | None, None),
    (datetime | None, WHEN),
    (Point, Point(Decimal("1.1"), Decimal("2.2"), WHEN)),
    (Route, Route("r", [Point(Decimal(1), Decimal(2))], frozenset({"x", "y"}))),
    (Address, Address(street="Main", since=date(2020, 5, 1))),
    (Customer, Customer(id=UUID(int=7), joined=WHEN, credit=Decimal("9.99"))),
    (list[Customer], [Customer(id=UUID(int=8), joined=WHEN, credit=Decimal("0"))]),
    (dict[str, list[tuple[Colour, timedelta]]], {"k": [(Colour.RED, timedelta(minutes=1))]}),
]


@pytest.mark.parametrize(("annotation", "value"), ROUNDTRIPS)
def test_values_come_back_as_the_annotation_names(annotation: Any, value: Any) -> None:
    back = roundtrip(annotation, value)
    assert back == value
    assert type(back) is type(value)


def test_stored_json_is_plain_and_readable() -> None:
    text = dumps(
        {
            "when": WHEN,
            "ref": UUID(int=1),
            "amount": Decimal("1.10"),
            "wait": timedelta(hours=1, seconds=30),
            "pair": (1, 2),
            "ids": {2, 1},
            "colour": Colour.RED,
            "point": Point(Decimal(1), Decimal(2)),
        },
        limit=1 << 20,
    )
    assert json.loads(text) == {
        "when": "2026-12-06T09:30:15.123456+00:00",
        "ref": "00000000-0000-0000-0000-000000000001",
        "amount": "1.10",
        "wait": "PT1H0M30S",
        "pair": [1, 2],
        "ids": [1, 2],  # sorted: the same set gives the same JSON (and unique_by key)
        "colour": "red",
        "point": {"x": "1", "y": "2", "at": None},
    }


def test_plain_json_forms_decode_too() -> None:
    """What a SQL producer writes: ISO strings, numbers for Decimal and seconds."""
    assert decoder_for(datetime)("2026-12-06T09:30:00Z") == datetime(  # type: ignore[misc]
        2026, 12, 6, 9, 30, tzinfo=UTC
    )
    assert decoder_for(Decimal)(1.5) == Decimal("1.5")  # type: ignore[misc]
    assert decoder_for(timedelta)(90) == timedelta(seconds=90)  # type: ignore[misc]
    assert decoder_for(timedelta)("P1DT2H") == timedelta(days=1, hours=2)  # type: ignore[misc]
    assert decoder_for(Colour)("red") is Colour.RED  # type: ignore[misc]


def test_plain_annotations_need_no_decoder() -> None:
    for annotation in (int, str, float, bool, Any, list[int], dict[str, Any], int | None):
        assert decoder_for(annotation) is None


@pytest.mark.parametrize(
    ("annotation", "stored", "message"),
    [
        (datetime, "tomorrow", "expected datetime"),
        (datetime, 5, "expected datetime"),
        (UUID, "nope", "expected UUID"),
        (Decimal, True, "expected Decimal"),
        (Colour, "blue", "expected Colour"),
        (tuple[int, int], [1], "expected 2 items"),
        (Point, {"x": "1"}, "Point"),
        (Point, {"x": "1", "y": "2", "z": 3}, "Point"),
        (Customer, {"id": "x"}, "Customer"),
    ],
)
def test_a_value_that_does_not_fit_says_why(annotation: Any, stored: Any, message: str) -> None:
    decode = decoder_for(annotation)
    assert decode is not None
    with pytest.raises(ValueError, match=message):
        decode(stored)


def remind(when: datetime, ref: UUID, note: str = "") -> datetime:
    return when


def test_enqueue_names_the_argument_that_cannot_be_encoded() -> None:
    codec = TaskCodec(remind, signature_of(remind, skip_first=False), "app.tasks.remind")
    with pytest.raises(InvalidJobError, match=r"^argument 'when' of app.tasks.remind: .*datetime"):
        codec.encode({"when": 42, "ref": UUID(int=1)})
    with pytest.raises(InvalidJobError, match=r"^argument 'ref' of app.tasks.remind: .*UUID"):
        codec.encode({"when": WHEN, "ref": "not-a-uuid"})


def test_encode_and_decode_arguments_and_result() -> None:
    codec = TaskCodec(remind, signature_of(remind, skip_first=False), "app.tasks.remind")
    stored = json.loads(dumps(codec.encode({"when": WHEN, "ref": UUID(int=3)}), limit=1 << 20))
    assert stored == {"when": WHEN.isoformat(), "ref": str(UUID(int=3))}
    assert codec.decode(stored) == {"when": WHEN, "ref": UUID(int=3)}
    assert codec.decode_result(WHEN.isoformat()) == WHEN


def test_binder_packs_plain_json_and_binds_typed_values() -> None:
    binder = ArgBinder(signature_of(remind, skip_first=False), "app.tasks.remind", remind)
    packed = binder.pack((WHEN, UUID(int=1)), {})
    assert packed == {"when": WHEN.isoformat(), "ref": str(UUID(int=1))}
    assert binder.bind(packed) == ([], {"when": WHEN, "ref": UUID(int=1)})


def test_unresolvable_annotations_fall_back_to_plain_json() -> None:
    def handler(x: NotDefinedAnywhere) -> None: ...  # type: ignore[name-defined]  # noqa: F821

    codec = TaskCodec(handler, signature_of(handler, skip_first=False), "t")
    assert not codec.typed
    assert codec.decode({"x": "2026-01-01"}) == {"x": "2026-01-01"}


# -- payload versioning: a job enqueued by an older signature ----------------------------


def test_an_argument_added_with_a_default_takes_it() -> None:
    def new(when: datetime, note: str = "none") -> tuple[datetime, str]:
        return when, note

    binder = ArgBinder(signature_of(new, skip_first=False), "t", new)
    assert binder.bind({"when": WHEN.isoformat()}) == ([], {"when": WHEN})


def test_a_removed_argument_is_dropped_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    def new(when: datetime) -> None: ...

    binder = ArgBinder(signature_of(new, skip_first=False), "t.removed", new)
    with caplog.at_level(logging.WARNING, logger="pgqueue.rules.payload"):
        for _ in range(3):
            assert binder.bind({"when": WHEN.isoformat(), "old": 1}) == ([WHEN], {})
    warnings = [r.getMessage() for r in caplog.records if "no longer takes" in r.getMessage()]
    assert len(warnings) == 1
    assert "'old'" in warnings[0] and "t.removed" in warnings[0]


def test_a_removed_argument_goes_to_kwargs_when_the_handler_takes_them() -> None:
    def new(when: datetime, **extra: Decimal) -> None: ...

    binder = ArgBinder(signature_of(new, skip_first=False), "t", new)
    assert binder.bind({"when": WHEN.isoformat(), "old": "1.5"}) == (
        [WHEN],
        {"old": Decimal("1.5")},
    )


def test_a_required_argument_added_since_cannot_run() -> None:
    def new(when: datetime, ref: UUID) -> None: ...

    binder = ArgBinder(signature_of(new, skip_first=False), "t", new)
    with pytest.raises(InvalidJobError, match="missing a required argument: 'ref'"):
        binder.bind({"when": WHEN.isoformat()})


def test_a_stored_value_that_no_longer_fits_fails_naming_the_argument() -> None:
    binder = ArgBinder(signature_of(remind, skip_first=False), "app.tasks.remind", remind)
    with pytest.raises(InvalidJobError, match=r"argument 'ref' of app.tasks.remind: .*UUID"):
        binder.bind({"when": WHEN.isoformat(), "ref": 12})


# -- round trips of generated values --------------------------------------------------------

_datetimes = st.datetimes(timezones=st.sampled_from([None, UTC]))
_scalars = st.one_of(
    _datetimes.map(lambda v: (datetime, v)),
    st.dates().map(lambda v: (date, v)),
    st.times().map(lambda v: (time, v)),
    st.timedeltas().map(lambda v: (timedelta, v)),
    st.uuids().map(lambda v: (UUID, v)),
    st.decimals(allow_nan=False, allow_infinity=False).map(lambda v: (Decimal, v)),
    st.sampled_from(Colour).map(lambda v: (Colour, v)),
)


@given(_scalars)
def test_scalars_round_trip(pair: tuple[Any, Any]) -> None:
    annotation, value = pair
    assert roundtrip(annotation, value) == value


@given(st.lists(st.tuples(st.timedeltas(), st.uuids()), max_size=5))
def test_nested_containers_round_trip(value: list[tuple[timedelta, UUID]]) -> None:
    assert roundtrip(list[tuple[timedelta, UUID]], value) == value


@given(st.timedeltas())
def test_durations_are_iso_8601(value: timedelta) -> None:
    assert duration_text(value).lstrip("-").startswith("P")
    assert to_plain(value) == duration_text(value)


def test_annotations_pgqueue_cannot_read_are_plain_json() -> None:
    from functools import partial
    from typing import Annotated

    def handler(x: Annotated[int, {"unhashable": []}], y: datetime) -> None: ...

    codec = TaskCodec(handler, signature_of(handler, skip_first=False), "t")
    assert codec.arguments.keys() == {"y"}
    bound = partial(handler, 1)
    codec = TaskCodec(bound, signature_of(bound, skip_first=False), "t")
    assert codec.decode({"y": "2026-01-01T00:00:00"}) == {"y": "2026-01-01T00:00:00"}


def test_a_result_that_does_not_fit_the_return_annotation_fails_the_job_for_good() -> None:
    from pgqueue import PgQueue
    from pgqueue.handler.job_context import ClaimedJob
    from pgqueue.worker.outcome import returned_outcome

    pgq = PgQueue("postgresql://nobody@localhost/none")

    @pgq.task(name="typed.when")
    def when() -> datetime:
        return WHEN

    now = datetime.now(UTC)
    job = ClaimedJob(1, "default", "typed.when", {}, 1, 3, 7, 0, now, now, True)
    ok = returned_outcome(when, job, WHEN, "w")
    assert ok.kind == "ack" and ok.result == json.dumps(WHEN.isoformat())
    bad = returned_outcome(when, job, "soon", "w")
    assert bad.kind == "fail"
    assert "return annotation of typed.when: expected datetime" in (bad.summary or "")
    pgq.close()


def test_a_stored_value_out_of_range_fails_naming_the_argument() -> None:
    """A number of seconds too large for a timedelta (a row written by hand) raises
    OverflowError in Python: the job fails with the argument named, nothing crashes."""

    def wait(by: timedelta, on: list[timedelta] | None = None) -> None: ...

    binder = ArgBinder(signature_of(wait, skip_first=False), "t.wait", wait)
    with pytest.raises(InvalidJobError, match=r"^argument 'by' of t.wait: "):
        binder.bind({"by": 1e20})
    with pytest.raises(InvalidJobError, match=r"^argument 'on' of t.wait: "):
        binder.bind({"by": 1, "on": ["P99999999999D"]})


# What jsonb stores exactly: no NaN or Infinity, no NUL, no lone surrogate (refused at enqueue).
_text = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"))
_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=10,
)


@given(_json, _json)
def test_plain_json_arguments_pass_through_a_typed_task_unchanged(a: Any, b: Any) -> None:
    """Only the typed parameters are converted: a plain one's JSON is exactly what it was."""

    def task(when: datetime, a: Any, b: dict[str, Any] | list[Any] | None = None) -> None: ...

    binder = ArgBinder(signature_of(task, skip_first=False), "t", task)
    b = b if isinstance(b, dict | list) or b is None else [b]
    stored = json.loads(dumps(binder.pack((WHEN, a), {"b": b}), limit=1 << 20))
    assert binder.bind(stored) == ([], {"when": WHEN, "a": a, "b": b})
