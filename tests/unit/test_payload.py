from __future__ import annotations

import inspect
import math

import pytest

from pgqueue.errors import InvalidJobError
from pgqueue.rules.payload import (
    ArgBinder,
    bind_arguments,
    call_arguments,
    check_complete,
    check_name,
    dumps,
)


def test_dumps_is_compact_and_keeps_unicode():
    assert dumps({"a": [1, "é"]}, limit=100) == '{"a":[1,"é"]}'


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_infinity_are_rejected(bad):
    with pytest.raises(InvalidJobError, match="NaN or Infinity"):
        dumps({"x": [bad]}, limit=100)


def test_non_serialisable_value_is_named():
    with pytest.raises(InvalidJobError, match=r"not JSON-serialisable.*object is not a JSON type"):
        dumps({"x": object()}, limit=100)


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


def test_call_arguments_drops_unknown_and_rejects_missing():
    sig = inspect.signature(lambda to: None)
    # A name the handler no longer takes (a job enqueued by an older signature) is dropped.
    assert call_arguments(sig, "t", {"to": 1, "cc": 2}) == ([1], {})
    with pytest.raises(InvalidJobError, match="do not match"):
        call_arguments(sig, "t", {})


def _plain(a: int, b: int = 1, *, k: int = 2) -> None: ...
def _pos_only(a: int, /, b: int) -> None: ...
def _variadic(a: int, *rest: int, **extra: int) -> None: ...
def _none() -> None: ...


@pytest.mark.parametrize("func", [_plain, _pos_only, _variadic, _none])
@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((), {}),
        ((1,), {}),
        ((1, 2), {}),
        ((1, 2, 3), {}),
        ((), {"a": 1}),
        ((1,), {"a": 1}),
        ((1,), {"k": 3}),
        ((), {"zz": 1}),
        ((1,), {"b": 2, "k": 3}),
    ],
)
@pytest.mark.parametrize("partial", [False, True])
def test_fast_binding_agrees_with_signature_bind(func, args, kwargs, partial):
    # ArgBinder.pack skips Signature.bind for plainly valid calls: same result, same errors.
    signature = inspect.signature(func)
    binder = ArgBinder(signature, "t")
    try:
        expected: object = bind_arguments(signature, "t", args, kwargs, partial=partial)
    except InvalidJobError as exc:
        expected = str(exc)
    try:
        got: object = binder.pack(args, kwargs, partial=partial)
    except InvalidJobError as exc:
        got = str(exc)
    assert got == expected
    if isinstance(expected, dict):
        try:
            check_complete(signature, "t", expected)
            complete: object = None
        except InvalidJobError as exc:
            complete = str(exc)
        try:
            binder.check_complete(expected)
            fast: object = None
        except InvalidJobError as exc:
            fast = str(exc)
        assert fast == complete
