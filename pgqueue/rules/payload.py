"""Job arguments as JSON: validation and (de)serialisation.

Arguments are stored as one JSON object keyed by parameter name, so a row reads well in psql and a
job enqueued from SQL or ``pgq enqueue --args '{...}'`` looks exactly like one from Python.
"""

from __future__ import annotations

import inspect
import json
import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

from pgqueue.errors import InvalidJobError
from pgqueue.rules.codec import TaskCodec, to_plain
from pgqueue.rules.config import MAX_NAME_LENGTH
from pgqueue.rules.log_actions import Action, fields

log = logging.getLogger(__name__)

# json.dumps writes U+0000 as the escape \u0000, which jsonb cannot store. Match the escape only
# when it is not itself an escaped backslash followed by the letters "u0000".
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


class UndecodableJson:
    """Stands in for a stored JSON value that Python cannot decode (a row written by hand:
    nested deeper than Python's recursion limit, a number with too many digits, ...). The
    worker's loaders return it instead of failing the whole claim; the job then fails alone."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"UndecodableJson({self.reason!r})"


def _check_keys(value: Any, what: str) -> None:
    """JSON object keys are strings. json.dumps would silently turn 1, 1.5, True or None keys
    into strings (and {1: a, "1": b} into a duplicate key): reject them instead, so what is
    stored is exactly what was given. Iterative, so deep nesting costs no recursion."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    raise InvalidJobError(
                        f"{what} contain a non-string object key {key!r:.80} "
                        "(JSON object keys are strings)"
                    )
                if isinstance(child, dict | list | tuple):
                    stack.append(child)
        elif isinstance(item, list | tuple):
            stack.extend(child for child in item if isinstance(child, dict | list | tuple))


# One encoder for every job: json.dumps with options builds a new JSONEncoder per call, which
# costs as much as encoding a small payload (bulk enqueue encodes one per job). Values JSON has
# no type for (datetime, UUID, Decimal, dataclasses, ...) go in as pgqueue.rules.codec stores them;
# the hook is called only for those, so plain JSON encodes at the C encoder's speed.
_ENCODER = json.JSONEncoder(
    allow_nan=False, ensure_ascii=False, separators=(",", ":"), default=to_plain
)


def dumps(value: Any, *, limit: int, what: str = "args") -> str:
    """Serialise ``value`` to compact JSON or raise :class:`InvalidJobError` saying why not.

    ``what`` names the value in messages ("args", "result").
    """
    if type(value) is dict and not value:
        return "{}"  # a task without arguments: nothing to check
    are = "are" if what.endswith("s") else "is"
    contain = "contain" if what.endswith("s") else "contains"
    try:
        text = _ENCODER.encode(value)
    except ValueError as exc:
        if "Out of range float" in str(exc):
            raise InvalidJobError(
                f"{what} {contain} NaN or Infinity, which JSON cannot represent"
            ) from None
        if "Circular reference" in str(exc):
            raise InvalidJobError(f"{what} {contain} a circular reference") from None
        raise InvalidJobError(f"{what} {are} not JSON-serialisable: {exc}") from None
    except TypeError as exc:
        raise InvalidJobError(f"{what} {are} not JSON-serialisable: {exc}") from None
    except RecursionError:
        raise InvalidJobError(f"{what} {are} nested too deeply to serialise") from None
    if "\\u0000" in text and _NUL_ESCAPE.search(text):
        raise InvalidJobError(
            f"{what} {contain} a NUL character (U+0000), which PostgreSQL jsonb cannot store"
        )
    _check_keys(value, what)
    try:
        # ASCII text is its own UTF-8 (and holds no lone surrogate): skip the encode.
        size = len(text) if text.isascii() else len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidJobError(
            f"{what} contain a string that is not valid Unicode (a lone surrogate)"
        ) from None
    if size > limit:
        raise InvalidJobError(f"{what} {are} {size} bytes of JSON, over the limit of {limit} bytes")
    return text


def check_name(value: object, what: str) -> str:
    """Queue and task names are plain data: any characters but NUL, 1..200 of them."""
    if not isinstance(value, str):
        raise InvalidJobError(f"{what} must be a string, got {type(value).__name__}")
    if not value:
        raise InvalidJobError(f"{what} must not be empty")
    if len(value) > MAX_NAME_LENGTH:
        raise InvalidJobError(
            f"{what} is {len(value)} characters long, over the limit of {MAX_NAME_LENGTH}"
        )
    if "\x00" in value:
        raise InvalidJobError(f"{what} must not contain a NUL character")
    check_unicode(value, what)
    return value


def check_unicode(value: str, what: str) -> None:
    """PostgreSQL stores UTF-8: a lone surrogate (from a bad decode) cannot be written."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidJobError(
            f"{what} is not valid Unicode (it contains a lone surrogate)"
        ) from None


def bind_arguments(
    signature: inspect.Signature,
    name: str,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    *,
    partial: bool = False,
) -> dict[str, Any]:
    """Map a call's positional and keyword arguments to parameter names (checked at enqueue).

    ``partial`` allows required parameters to be left out (a workflow step that receives its
    parent's result); :func:`check_complete` checks them later.
    """
    try:
        bound = (
            signature.bind_partial(*args, **kwargs) if partial else signature.bind(*args, **kwargs)
        )
    except TypeError as exc:
        raise InvalidJobError(f"arguments do not match task {name!r}: {exc}") from None
    return dict(bound.arguments)


_NAMED_KINDS = (
    inspect.Parameter.POSITIONAL_ONLY,
    inspect.Parameter.POSITIONAL_OR_KEYWORD,
    inspect.Parameter.KEYWORD_ONLY,
)


def free_parameter(signature: inspect.Signature, bound: Mapping[str, Any]) -> str | None:
    """The first required parameter a partial binding left free: where a workflow step
    receives its parents' results. None when every required parameter is bound (parameters
    with defaults never receive results implicitly)."""
    for param in signature.parameters.values():
        if (
            param.kind in _NAMED_KINDS
            and param.default is inspect.Parameter.empty
            and param.name not in bound
        ):
            return param.name
    return None


def check_complete(
    signature: inspect.Signature, name: str, bound: Mapping[str, Any], *, given: str | None = None
) -> None:
    """Every required parameter is bound (``given``: one that will be filled in later)."""
    for param in signature.parameters.values():
        if (
            param.kind in _NAMED_KINDS
            and param.default is inspect.Parameter.empty
            and param.name not in bound
            and param.name != given
        ):
            raise InvalidJobError(
                f"arguments do not match task {name!r}: missing a required argument: {param.name!r}"
            )


def call_arguments(
    signature: inspect.Signature,
    name: str,
    stored: Mapping[str, Any],
    codec: TaskCodec | None = None,
) -> tuple[list[Any], dict[str, Any]]:
    """Turn a stored args object back into ``(*args, **kwargs)`` for the handler, each typed
    argument decoded by ``codec``.

    A job enqueued by an older signature (a rolling deploy): a parameter added since with a
    default takes it; a value stored under a name the handler no longer has goes to its
    ``**kwargs`` when it takes them (as a Python call would), else it is dropped with a warning
    (once per task and names). Raises :class:`InvalidJobError` when the stored object cannot
    fit the signature (a required parameter added since, a value of the wrong type, a job
    written by hand): the job can never succeed.
    """
    if isinstance(stored, UndecodableJson):
        raise InvalidJobError(f"task {name!r}: stored args cannot be decoded: {stored.reason}")
    if not isinstance(stored, Mapping):
        raise InvalidJobError(
            f"task {name!r}: stored args must be a JSON object keyed by parameter name, "
            f"got {_json_type(stored)}"
        )
    positional: list[Any] = []
    keywords: dict[str, Any] = {}
    known = set()
    # Parameters before *args must be passed by position, so keep passing positionally until
    # the first one that is absent (defaulted); after that, by keyword.
    in_order = True
    var_keyword = None
    for param in signature.parameters.values():
        known.add(param.name)
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            var_keyword = param.name
        if param.name not in stored:
            if param.kind in (
                inspect.Parameter.POSITIONAL_ONLY,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
            ):
                in_order = False
            continue
        value = stored[param.name]
        if codec is not None:
            value = codec.decode_argument(param.name, value)
        if param.kind is inspect.Parameter.POSITIONAL_ONLY or (
            param.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and in_order
        ):
            positional.append(value)
        elif param.kind is inspect.Parameter.VAR_POSITIONAL:
            if not isinstance(value, list):
                raise InvalidJobError(f"task {name!r}: *{param.name} must be a JSON array")
            positional.extend(value)
        elif param.kind is inspect.Parameter.VAR_KEYWORD:
            if not isinstance(value, dict):
                raise InvalidJobError(f"task {name!r}: **{param.name} must be a JSON object")
            keywords.update(value)
        else:
            keywords[param.name] = value
    unknown = sorted(set(stored) - known)
    if unknown:
        if var_keyword is not None:
            for extra in unknown:
                value = stored[extra]
                keywords.setdefault(
                    extra, value if codec is None else codec.decode_extra(extra, value)
                )
        else:
            _warn_dropped(name, unknown)
    try:
        signature.bind(*positional, **keywords)
    except TypeError as exc:
        raise InvalidJobError(f"stored args do not match task {name!r}: {exc}") from None
    return positional, keywords


_DROPPED_WARNED: set[tuple[str, tuple[str, ...]]] = set()
# Rows written by hand could name anything: remember this many (task, names) at most.
_MAX_DROPPED_WARNED = 1024


def _warn_dropped(task: str, names: list[str]) -> None:
    """Say once per task and names that stored arguments were dropped: every job enqueued
    before the deploy that removed them would otherwise log the same line."""
    key = (task, tuple(names))
    if key in _DROPPED_WARNED:
        return
    if len(_DROPPED_WARNED) < _MAX_DROPPED_WARNED:
        _DROPPED_WARNED.add(key)
    log.warning(
        "task %r no longer takes %s: the stored value(s) are dropped (a job enqueued by an "
        "older signature; logged once)",
        task,
        ", ".join(map(repr, names)),
        extra=fields(Action.PAYLOAD_ARGS_DROPPED),
    )


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


class ArgBinder:
    """Maps a task's arguments to and from the stored object, fast for the common shape.

    Most tasks take plain named parameters (no ``*args``/``**kwargs``, no positional-only).
    For those, enqueue maps positional arguments to their names and checks keywords against a
    set, and the worker passes a stored object whose keys are known parameters and cover the
    required ones as the call's keyword arguments as it is: no ``Signature.bind`` per job
    either way. Anything else (and every error, for its message) goes through
    :func:`bind_arguments` / :func:`call_arguments`.
    """

    def __init__(
        self, signature: inspect.Signature, name: str, func: Callable[..., Any] | None = None
    ) -> None:
        self.signature = signature
        self.name = name
        #: The function (or a batch task's model class) whose annotations type the arguments;
        #: the codec is derived at first use, as a type it names may be defined further down.
        self.annotated = func
        self._codec: TaskCodec | None = None
        simple = {inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY}
        params = signature.parameters.values()
        self.simple = all(p.kind in simple for p in params)
        self.names = frozenset(p.name for p in params)
        self.required = frozenset(p.name for p in params if p.default is inspect.Parameter.empty)
        self.positional = tuple(
            p.name for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
        )
        # What check_complete requires, for any signature (*args/**kwargs are never required).
        self.required_named = frozenset(
            p.name
            for p in params
            if p.kind in _NAMED_KINDS and p.default is inspect.Parameter.empty
        )

    @property
    def codec(self) -> TaskCodec:
        """What the task's annotations say about its arguments and result (derived once)."""
        codec = self._codec
        if codec is None:
            codec = self._codec = TaskCodec(self.annotated, self.signature, self.name)
        return codec

    def pack(
        self, args: tuple[Any, ...], kwargs: Mapping[str, Any], *, partial: bool = False
    ) -> dict[str, Any]:
        """:func:`bind_arguments`, without ``Signature.bind`` when the call is plainly valid;
        typed arguments in their stored form (:meth:`TaskCodec.encode`)."""
        codec = self._codec or self.codec
        if self.simple and len(args) <= len(self.positional):
            bound = dict(zip(self.positional, args, strict=False))
            if not kwargs or (kwargs.keys() <= self.names and bound.keys().isdisjoint(kwargs)):
                bound.update(kwargs)
                if partial or self.required <= bound.keys():
                    return codec.encode(bound) if codec.typed else bound
        bound = bind_arguments(self.signature, self.name, args, kwargs, partial=partial)
        return codec.encode(bound) if codec.typed else bound

    def check_complete(self, bound: Mapping[str, Any], *, given: str | None = None) -> None:
        """:func:`check_complete`, a set comparison when nothing is missing."""
        if not self.required_named <= bound.keys():
            check_complete(self.signature, self.name, bound, given=given)

    def bind(self, stored: Any) -> tuple[list[Any], dict[str, Any]]:
        """The handler's ``(*args, **kwargs)`` for a stored args object, typed arguments
        decoded (:func:`call_arguments`)."""
        codec = self._codec or self.codec
        if (
            self.simple
            and type(stored) is dict
            and stored.keys() <= self.names
            and self.required <= stored.keys()
        ):
            return [], codec.decode(stored) if codec.typed else stored
        return call_arguments(self.signature, self.name, stored, codec if codec.typed else None)


def signature_of(func: Callable[..., Any], *, skip_first: bool) -> inspect.Signature:
    signature = inspect.signature(func)
    if skip_first:
        params = list(signature.parameters.values())[1:]
        signature = signature.replace(parameters=params)
    return signature
