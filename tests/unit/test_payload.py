from __future__ import annotations

import inspect
import math

import pytest

from pgqueue.errors import InvalidJobError
from pgqueue.payload import bind_arguments, call_arguments, check_name, dumps


def test_dumps_is_compact_and_keeps_unicode():
    assert dumps({"a": [1, "é"]}, limit=100) == '{"a":[1,"é"]}'


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_infinity_are_rejected(bad):
    with pytest.raises(InvalidJobError, match="NaN or Infinity"):
        dumps({"x": [bad]}, limit=100)


def test_non_serialisable_value_is_named():
    with pytest.raises(InvalidJobError, match=r"not JSON-serialisable.*set"):
        dumps({"x": {1, 2}}, limit=100)


def test_circular_reference():
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(InvalidJobError, match="circular"):
        dumps({"x": loop}, limit=100)


def test_nul_character_is_rejected_but_escaped_backslash_u0000_is_fine():
    with pytest.raises(InvalidJobError, match="NUL"):
        dumps({"x": "a\x00b"}, limit=100)
    assert dumps({"x": "\\u0000"}, limit=100) == '{"x":"\\\\u0000"}'


def test_size_limit_counts_utf8_bytes():
    dumps({"x": "é" * 10}, limit=30)
    with pytest.raises(InvalidJobError, match="over the limit of 20 bytes"):
        dumps({"x": "é" * 10}, limit=20)


@pytest.mark.parametrize(
    ("name", "message"),
    [("", "must not be empty"), ("x" * 201, "over the limit"), ("a\x00", "NUL"), (3, "string")],
)
def test_bad_names(name, message):
    with pytest.raises(InvalidJobError, match=message):
        check_name(name, "queue name")


def test_names_with_quotes_and_sql_are_fine():
    assert check_name("q'; DROP TABLE x;--", "queue name") == "q'; DROP TABLE x;--"


def handler(a, /, b, *rest, c=3, **extra):
    return a, b, rest, c, extra


def test_bind_and_call_round_trip_every_parameter_kind():
    sig = inspect.signature(handler)
    stored = bind_arguments(sig, "h", (1, 2, 9, 8), {"c": 4, "z": 5})
    assert stored == {"a": 1, "b": 2, "rest": (9, 8), "c": 4, "extra": {"z": 5}}
    # after a JSON round trip tuples are lists
    stored["rest"] = list(stored["rest"])
    args, kwargs = call_arguments(sig, "h", stored)
    assert handler(*args, **kwargs) == (1, 2, (9, 8), 4, {"z": 5})


def test_bind_rejects_wrong_arity_at_enqueue_time():
    with pytest.raises(InvalidJobError, match="arguments do not match task 'h'"):
        bind_arguments(inspect.signature(handler), "h", (), {})


def test_call_arguments_rejects_unknown_and_missing():
    sig = inspect.signature(lambda to: None)
    with pytest.raises(InvalidJobError, match="no parameter"):
        call_arguments(sig, "t", {"to": 1, "cc": 2})
    with pytest.raises(InvalidJobError, match="do not match"):
        call_arguments(sig, "t", {})
