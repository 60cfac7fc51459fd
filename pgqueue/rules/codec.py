"""Typed arguments and results: a task's annotations say what its plain JSON comes back as.

What is stored stays plain, readable JSON, so SQL producers, psql and the dashboard read and
write it: ISO 8601 strings for ``datetime``/``date``/``time``, ISO 8601 durations
(``"PT1H0M30S"``) for ``timedelta``, strings for ``UUID`` and ``Decimal`` (a number keeps every
digit that way), an ``Enum``'s value, arrays for tuples and sets (sets sorted, so the same set is
the same JSON and the same ``unique_by`` key), objects for dataclasses, ``TypedDict`` and
pydantic models.

Encoding goes by the value's type (:func:`to_plain` is the JSON encoder's hook for what JSON has
no type for), so a ``datetime`` is stored the same way wherever it sits. Decoding goes by the
annotation (:func:`decoder_for`): the worker turns each argument back into what the handler's
signature names, and ``pgq.result()`` a result into what the task's return annotation names;
plain JSON forms decode too (``"2026-12-06T09:30:00Z"`` or a number of seconds from SQL). At
enqueue, :class:`TaskCodec` checks each typed argument by decoding what it would store, so a
value that would fail on the worker fails in the caller instead, naming the argument.

Annotations that need nothing (``int``, ``str``, ``list[int]``, ``Any``, none at all, a class
pgqueue does not know) cost nothing: a task whose parameters are all plain has no decoders, and
its enqueue and bind skip this module. Annotations are resolved at first use (not when the task
is declared), so a dataclass defined below its task works; one that cannot be resolved at run
time (a name imported only under ``TYPE_CHECKING``) is treated as plain JSON.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import inspect
import re
import sys
import types
import typing
from collections.abc import Callable, Mapping
from datetime import date, datetime, time, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any, Literal, Union, get_args, get_origin, is_typeddict
from uuid import UUID

from pgqueue.errors import InvalidJobError

#: Turns a stored (plain JSON) value into the annotated type; raises ValueError saying why not.
Decode = Callable[[Any], Any]

# -- encoding: by the value's type ---------------------------------------------------------


def duration_text(value: timedelta) -> str:
    """``value`` as an ISO 8601 duration: ``P3DT4H5M6.000007S``, ``-PT1S``, ``PT0S``."""
    if value < timedelta(0):
        return "-" + duration_text(-value)
    hours, rest = divmod(value.seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    fraction = f".{value.microseconds:06d}" if value.microseconds else ""
    days = f"{value.days}D" if value.days else ""
    return f"P{days}T{hours}H{minutes}M{seconds}{fraction}S"


def to_plain(value: Any) -> Any:
    """A JSON-able stand-in for one value JSON has no type for (the JSON encoder's ``default``
    hook: it encodes what this returns, calling the hook again for what is inside)."""
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, timedelta):
        return duration_text(value)
    if isinstance(value, UUID | Decimal):
        return str(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, set | frozenset):
        try:
            return sorted(value)
        except TypeError:  # items without an order: keep the set's own
            return list(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.init}
    pydantic = sys.modules.get("pydantic")
    if pydantic is not None and isinstance(value, pydantic.BaseModel):
        return value.model_dump(mode="json")
    raise TypeError(
        f"{type(value).__qualname__} is not a JSON type, and pgqueue stores only datetime, "
        "date, time, timedelta, UUID, Decimal, Enum, tuple, set, dataclasses and pydantic "
        "models besides"
    )


_JSON_SCALARS = (str, int, float, bool, type(None))


def plain(value: Any) -> Any:
    """``value`` with everything JSON has no type for replaced by :func:`to_plain`'s stand-in,
    all the way down (what the stored JSON will read back as)."""
    if isinstance(value, _JSON_SCALARS):
        return value
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    return plain(to_plain(value))


# -- decoding: by the annotation -----------------------------------------------------------


def _describe(value: Any) -> str:
    return f"{type(value).__name__} {value!r:.80}"


def _iso(kind: type[Any]) -> Decode:
    def decode(value: Any) -> Any:
        if type(value) is kind:
            return value
        if isinstance(value, str):
            try:
                return kind.fromisoformat(value)
            except ValueError:
                pass
        raise ValueError(f"expected {kind.__name__} (an ISO 8601 string), got {_describe(value)}")

    return decode


_DURATION = re.compile(
    r"(?P<sign>-)?P(?:(?P<weeks>\d+(?:\.\d+)?)W)?(?:(?P<days>\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<hours>\d+(?:\.\d+)?)H)?(?:(?P<minutes>\d+(?:\.\d+)?)M)?"
    r"(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?",
    re.ASCII,
)


def _timedelta(value: Any) -> timedelta:
    if type(value) is timedelta:
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return timedelta(seconds=value)
    if isinstance(value, str) and (match := _DURATION.fullmatch(value)) and value[-1] != "T":
        parts = {k: float(v) for k, v in match.groupdict().items() if v and k != "sign"}
        if parts:
            # Whole units exactly, so microseconds survive (a float of seconds would round).
            seconds = match["seconds"] or "0"
            whole, _, fraction = seconds.partition(".")
            parts["seconds"] = int(whole)
            parts["microseconds"] = int((fraction + "000000")[:6])
            result = timedelta(**parts)
            return -result if match["sign"] else result
    raise ValueError(
        "expected timedelta (an ISO 8601 duration such as 'PT1H30M', or seconds), "
        f"got {_describe(value)}"
    )


def _uuid(value: Any) -> UUID:
    if type(value) is UUID:
        return value
    if isinstance(value, str):
        try:
            return UUID(value)
        except ValueError:
            pass
    raise ValueError(f"expected UUID (a string), got {_describe(value)}")


def _decimal(value: Any) -> Decimal:
    if type(value) is Decimal:
        return value
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        try:
            return Decimal(str(value))
        except InvalidOperation:
            pass
    raise ValueError(f"expected Decimal (a string or a number), got {_describe(value)}")


_SCALARS: dict[Any, Decode] = {
    datetime: _iso(datetime),
    date: _iso(date),
    time: _iso(time),
    timedelta: _timedelta,
    UUID: _uuid,
    Decimal: _decimal,
}


def _enum(kind: type[enum.Enum]) -> Decode:
    def decode(value: Any) -> Any:
        if isinstance(value, kind):
            return value
        try:
            return kind(value)
        except ValueError:
            choices = ", ".join(repr(member.value) for member in kind)
            raise ValueError(
                f"expected {kind.__name__} (one of {choices}), got {_describe(value)}"
            ) from None

    return decode


def _sequence(item: Decode | None, build: Callable[[Any], Any], what: str) -> Decode:
    def decode(value: Any) -> Any:
        if not isinstance(value, list | tuple | set | frozenset):
            raise ValueError(f"expected {what} (an array), got {_describe(value)}")
        items = value if item is None else [item(each) for each in value]
        try:
            return build(items)
        except TypeError as exc:  # an unhashable item of a set
            raise ValueError(f"expected {what}: {exc}") from None

    return decode


def _fixed_tuple(items: list[Decode | None]) -> Decode:
    def decode(value: Any) -> Any:
        if not isinstance(value, list | tuple) or len(value) != len(items):
            raise ValueError(f"expected {len(items)} items (a tuple), got {_describe(value)}")
        return tuple(v if d is None else d(v) for d, v in zip(items, value, strict=True))

    return decode


def _mapping(item: Decode) -> Decode:
    def decode(value: Any) -> Any:
        if not isinstance(value, dict):
            raise ValueError(f"expected an object, got {_describe(value)}")
        return {key: item(each) for key, each in value.items()}

    return decode


_PLAIN_TYPES: dict[Any, tuple[type[Any], ...]] = {
    str: (str,),
    int: (int,),
    float: (int, float),
    bool: (bool,),
    list: (list,),
    dict: (dict,),
    type(None): (type(None),),
}


def _union(members: tuple[Any, ...]) -> Decode | None:
    decoders = [decoder_for(member) for member in members]
    if all(d is None for d in decoders):
        return None
    optional = type(None) in members
    names = " | ".join(getattr(m, "__name__", str(m)) for m in members)

    def decode(value: Any) -> Any:
        if value is None and optional:
            return None
        # Members in the order written: a plain one takes a value of its own JSON type, a
        # typed one takes what it can decode.
        for member, member_decode in zip(members, decoders, strict=True):
            if member_decode is None:
                kinds = _PLAIN_TYPES.get(get_origin(member) or member)
                if kinds is None or (
                    isinstance(value, kinds) and not (bool not in kinds and type(value) is bool)
                ):
                    return value
                continue
            try:
                return member_decode(value)
            except Exception:  # any failure: try the next member
                continue
        raise ValueError(f"expected {names}, got {_describe(value)}")

    return decode


def _fields(kind: type[Any], what: str) -> Callable[[], dict[str, Decode | None]]:
    """The field decoders of a dataclass or TypedDict, resolved at first use (a class may
    name itself, or one defined after it)."""
    cache: list[dict[str, Decode | None]] = []

    def fields() -> dict[str, Decode | None]:
        if not cache:
            hints = _type_hints(kind)
            names = (
                [f.name for f in dataclasses.fields(kind) if f.init]
                if what == "dataclass"
                else hints
            )
            cache.append({name: _decoder_or_plain(hints.get(name, Any)) for name in names})
        return cache[0]

    return fields


def _dataclass(kind: type[Any]) -> Decode:
    fields = _fields(kind, "dataclass")

    def decode(value: Any) -> Any:
        if isinstance(value, kind):
            return value
        if not isinstance(value, dict):
            raise ValueError(f"expected {kind.__name__} (an object), got {_describe(value)}")
        decoders = fields()
        unknown = sorted(set(value) - decoders.keys())
        if unknown:
            raise ValueError(f"expected {kind.__name__}: it has no field(s) {', '.join(unknown)}")
        try:
            arguments = {
                name: item if decoders[name] is None else decoders[name](item)  # type: ignore[misc]
                for name, item in value.items()
            }
            return kind(**arguments)
        except Exception as exc:  # a __post_init__ may raise anything
            raise ValueError(f"expected {kind.__name__}: {exc}") from None

    return decode


def _typed_dict(kind: type[Any]) -> Decode | None:
    fields = _fields(kind, "typeddict")

    def decode(value: Any) -> Any:
        if not isinstance(value, dict):
            raise ValueError(f"expected {kind.__name__} (an object), got {_describe(value)}")
        decoders = fields()
        try:
            return {
                name: item if decoders.get(name) is None else decoders[name](item)  # type: ignore[misc]
                for name, item in value.items()
            }
        except ValueError as exc:
            raise ValueError(f"expected {kind.__name__}: {exc}") from None

    return decode


def _pydantic(kind: Any) -> Decode:
    def decode(value: Any) -> Any:
        if isinstance(value, kind):
            return value
        try:
            return kind.model_validate(value)
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            detail = " ".join(str(exc).split())
            raise ValueError(f"expected {kind.__name__}: {detail:.300}") from None

    return decode


def decoder_for(annotation: Any) -> Decode | None:
    """What turns a stored value back into ``annotation``; None when it needs nothing (plain
    JSON types, ``Any``, a class pgqueue does not know)."""
    if annotation in _SCALARS:
        return _SCALARS[annotation]
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is typing.Annotated:
        return decoder_for(args[0])
    if hasattr(annotation, "__supertype__"):  # a NewType
        return decoder_for(annotation.__supertype__)
    if origin is Union or origin is types.UnionType:
        return _union(args)
    if origin is Literal:
        return None
    if annotation is tuple or origin is tuple:
        if not args or (len(args) == 2 and args[1] is Ellipsis):
            return _sequence(decoder_for(args[0]) if args else None, tuple, "tuple")
        return _fixed_tuple([decoder_for(arg) for arg in args])
    if annotation in (set, frozenset) or origin in (set, frozenset):
        kind = origin or annotation
        return _sequence(decoder_for(args[0]) if args else None, kind, kind.__name__)
    if origin is list or origin in _ABC_SEQUENCES:
        item = decoder_for(args[0]) if args else None
        return None if item is None else _sequence(item, list, "list")
    if origin is dict or origin in _ABC_MAPPINGS:
        item = decoder_for(args[1]) if len(args) == 2 else None
        return None if item is None else _mapping(item)
    if isinstance(annotation, type):
        if issubclass(annotation, enum.Enum):
            return _enum(annotation)
        if dataclasses.is_dataclass(annotation):
            return _dataclass(annotation)
        if is_typeddict(annotation):
            return _typed_dict(annotation)
        pydantic = sys.modules.get("pydantic")
        if pydantic is not None and issubclass(annotation, pydantic.BaseModel):
            return _pydantic(annotation)
    return None


# What typing.Sequence[X] and the like read as: decoded to a list (a dict for the mappings).
_ABC_SEQUENCES = {
    collections.abc.Sequence,
    collections.abc.MutableSequence,
    collections.abc.Collection,
    collections.abc.Iterable,
}
_ABC_MAPPINGS = {collections.abc.Mapping, collections.abc.MutableMapping}


def _type_hints(owner: Any) -> dict[str, Any]:
    """``owner``'s resolved annotations; those that cannot be resolved at run time are left out
    (treated as plain JSON)."""
    try:
        return typing.get_type_hints(owner)
    except Exception:
        pass
    raw = getattr(owner, "__annotations__", None)
    if not isinstance(raw, dict):
        return {}
    module = sys.modules.get(getattr(owner, "__module__", None) or "")
    scope = getattr(owner, "__globals__", None) or (vars(module) if module else {})
    hints: dict[str, Any] = {}
    for name, annotation in raw.items():
        holder = types.SimpleNamespace(__annotations__={name: annotation})
        try:
            hints[name] = typing.get_type_hints(holder, globalns=scope)[name]
        except Exception:
            continue
    return hints


def _decoder_or_plain(annotation: Any) -> Decode | None:
    """:func:`decoder_for`, with an annotation it cannot read (an unhashable ``Annotated``
    extra, a class whose ``issubclass`` raises) treated as plain JSON rather than failing the
    task's every enqueue."""
    try:
        return decoder_for(annotation)
    except Exception:
        return None


# -- one task --------------------------------------------------------------------------------


class TaskCodec:
    """What one task's signature says about its arguments and result, derived once."""

    def __init__(self, func: Callable[..., Any] | None, signature: Any, name: str) -> None:
        self.name = name
        hints = _type_hints(func) if func is not None else {}
        #: argument name -> decoder, for the typed ones (*args: of the list, **kwargs: of the
        #: object stored under its name)
        self.arguments: dict[str, Decode] = {}
        #: what each value of ``**kwargs`` decodes with (also a value stored under a name the
        #: handler no longer has, handed to ``**kwargs``)
        self.extra: Decode | None = None
        for param in signature.parameters.values():
            annotation = hints.get(param.name, param.annotation)
            if annotation is inspect.Parameter.empty or isinstance(annotation, str):
                continue
            decode = _decoder_or_plain(annotation)
            if decode is None:
                continue
            if param.kind is inspect.Parameter.VAR_POSITIONAL:
                decode = _sequence(decode, list, "*" + param.name)
            elif param.kind is inspect.Parameter.VAR_KEYWORD:
                self.extra = decode
                decode = _mapping(decode)
            self.arguments[param.name] = decode
        #: a task with at least one typed argument (the others skip encode and decode)
        self.typed = bool(self.arguments)
        returns = hints.get("return", signature.return_annotation)
        #: what the result decodes with (None: it is plain JSON)
        self.result: Decode | None = (
            None
            if returns is inspect.Signature.empty or isinstance(returns, str)
            else _decoder_or_plain(returns)
        )

    def _failed(self, name: str, exc: Exception) -> InvalidJobError:
        return InvalidJobError(f"argument {name!r} of {self.name}: {exc}")

    def encode(self, bound: Mapping[str, Any]) -> dict[str, Any]:
        """``bound`` (arguments by name) with each typed argument in its stored form, checked
        against its annotation by decoding that form."""
        encoded = dict(bound)
        for name, decode in self.arguments.items():
            if name not in encoded:
                continue
            try:
                value = plain(encoded[name])
                decode(value)
            except (TypeError, ValueError, ArithmeticError) as exc:
                raise self._failed(name, exc) from None
            except RecursionError:
                raise self._failed(name, ValueError("nested too deeply")) from None
            encoded[name] = value
        return encoded

    def decode_argument(self, name: str, value: Any) -> Any:
        """One stored argument as its annotation names it."""
        decode = self.arguments.get(name)
        if decode is None:
            return value
        try:
            return decode(value)
        except (ValueError, TypeError, ArithmeticError) as exc:
            raise self._failed(name, exc) from None

    def decode_extra(self, name: str, value: Any) -> Any:
        """A value for ``**kwargs`` under ``name``."""
        if self.extra is None:
            return value
        try:
            return self.extra(value)
        except (ValueError, TypeError, ArithmeticError) as exc:
            raise self._failed(name, exc) from None

    def decode(self, stored: Mapping[str, Any]) -> dict[str, Any]:
        """A stored args object with each typed argument decoded."""
        decoded = dict(stored)
        for name in self.arguments.keys() & decoded.keys():
            decoded[name] = self.decode_argument(name, decoded[name])
        return decoded

    def encode_result(self, value: Any) -> Any:
        """A returned value in its stored form, checked against the return annotation."""
        if self.result is None:
            return value
        try:
            stored = plain(value)
            self.result(stored)
        except (TypeError, ValueError, ArithmeticError) as exc:
            raise InvalidJobError(f"the return annotation of {self.name}: {exc}") from None
        return stored

    def decode_result(self, value: Any) -> Any:
        """A stored result as the task's return annotation names it."""
        if self.result is None or value is None:
            return value
        try:
            return self.result(value)
        except (ValueError, TypeError, ArithmeticError) as exc:
            raise InvalidJobError(
                f"the stored result of {self.name} does not fit its return annotation: {exc}"
            ) from None
