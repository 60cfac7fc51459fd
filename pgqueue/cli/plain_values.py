"""Option values converted without pydantic where the result is certain.

typer (0.29 and later) converts every option's value with a pydantic ``TypeAdapter`` it builds
on first use, so parsing ``pgq work``'s options imported pydantic (some 50 modules, a sixth of
the CPU a worker spends before its first job) to turn ``"64"`` into 64. :func:`install` gives
each parameter of a command a converter that handles the values whose result is certain (a
string for a ``str`` option, plain digits for an ``int``, a plain decimal for a ``float``, what
the option's own ``parser`` returns, no value at all) exactly as typer's adapter would, and
hands every other value to typer's own conversion, built then: errors, their messages,
constraints beyond a plain range, dates, paths, choices and lists stay typer's.
``tests/unit/test_cli_plain_values.py`` checks both give the same for every option of every
command, so a typer that converts differently fails it.

The converter takes the place typer keeps for its own (``_runtime_param``, built lazily): a
typer without that place, or without its conversion module, is left as it is.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["install"]

#: Digits only: ``int()`` and pydantic's lax integer agree (no sign, space, underscore or
#: other numerals); short enough for any integer pydantic takes.
_INTEGER = re.compile(r"[0-9]{1,18}")
#: A plain decimal: ``float()`` and pydantic's lax float agree.
_DECIMAL = re.compile(r"[0-9]{1,15}(\.[0-9]{1,15})?")


class _Unsure:
    """Returned by :func:`plain` for a value typer's own conversion must decide."""


UNSURE = _Unsure()


def plain(annotation: Any, info: Any, value: Any) -> Any:
    """``value`` converted for an option of type ``annotation`` (typer's ``ParameterInfo``
    ``info``), or :data:`UNSURE`."""
    parser = getattr(info, "parser", None)
    if parser is not None:
        try:
            return parser(value)
        except Exception:  # typer's conversion calls it again and words the error
            return UNSURE
    if getattr(info, "clamp", False):
        return UNSURE
    if annotation is str:
        return value if type(value) is str else UNSURE
    if annotation is int:
        if type(value) is str and _INTEGER.fullmatch(value):
            return _in_range(int(value), info)
        return _in_range(value, info) if type(value) is int else UNSURE
    if annotation is float:
        if type(value) is str and _DECIMAL.fullmatch(value):
            return _in_range(float(value), info)
        return _in_range(value, info) if type(value) is float else UNSURE
    return UNSURE


def _in_range(number: float, info: Any) -> Any:
    low, high = getattr(info, "min", None), getattr(info, "max", None)
    if (low is not None and number < low) or (high is not None and number > high):
        return UNSURE  # typer's message names the bound
    return number


class PlainValues:
    """One parameter's converter (typer's ``RuntimeParam`` interface: ``coerce``): the certain
    values here, the rest by typer's own, built on first need."""

    def __init__(self, descriptor: Any, build: Any) -> None:
        self.descriptor = descriptor
        self._build = build
        self._typer: Any = None

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        multiple = param.multiple or param.nargs == -1
        if value is None:
            return () if multiple else None
        if not multiple and self.descriptor.file_annotation is None:
            done = plain(self.descriptor.annotation, self.descriptor.parameter_info, value)
            if done is not UNSURE:
                return done
        if self._typer is None:
            self._typer = self._build(self.descriptor)
        return self._typer.coerce(value, param=param, ctx=ctx)


def install(command: Any) -> None:
    """Give every parameter of ``command`` (a click command typer made) a :class:`PlainValues`
    converter; nothing if this typer converts otherwise."""
    try:
        from typer._coercion import build_runtime_param
    except ImportError:
        return
    params = list(getattr(command, "params", ()))
    get_help_option = getattr(command, "get_help_option", None)
    if get_help_option is not None:
        # Made once and kept by the command (typer converts its value too): made here so that
        # it converts as the rest. The names it takes from a context are click's defaults,
        # which pgq keeps.
        import typer

        params.append(get_help_option(typer.Context(command)))
    for param in params:
        descriptor = getattr(param, "type_descriptor", None)
        if descriptor is None or getattr(param, "_runtime_param", False) is not None:
            continue
        param._runtime_param = PlainValues(descriptor, build_runtime_param)
