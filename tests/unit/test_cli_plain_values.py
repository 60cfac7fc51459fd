"""``pgq``'s option values converted without pydantic (pgqueue/cli/plain_values.py) come out
exactly as typer's own conversion gives them: the same value of the same type, or the same
error, for every option of every command and values of every shape (a typer that converts
differently fails here)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer._coercion import build_runtime_param

from pgqueue.cli.app import Pgq, app
from pgqueue.cli.plain_values import PlainValues, plain

VALUES: tuple[Any, ...] = (
    *("", "0", "1", "7", "64", "007", "-1", "+1", " 1", "1 ", "1_000", "٣", "10" * 10),
    *("1.5", "0.5", "00.5", "1.", ".5", "1e3", "inf", "nan", "-0.5"),
    *("abc", "5s", "2m", "1h", "auto", "1-8", "4:8", "thread", "process", "default", "a,b"),
    *(0, 1, 5, 1.5, 30.0, True, b"1"),
)


def every_command() -> Iterator[tuple[str, Any]]:
    root = typer.main.get_command(app)
    yield "pgq", root
    stack = [(f"pgq {name}", root.commands[name]) for name in Pgq.lazy]  # type: ignore[attr-defined]
    while stack:
        path, command = stack.pop()
        yield path, command
        stack.extend((f"{path} {n}", c) for n, c in getattr(command, "commands", {}).items())


def outcome(converter: Any, value: Any, param: Any, ctx: Any) -> tuple[str, Any, str]:
    try:
        result = converter.coerce(value, param=param, ctx=ctx)
    except Exception as exc:
        return "error", type(exc), str(exc)
    return "value", type(result), repr(result)


def test_every_option_converts_as_typer_does() -> None:
    checked = 0
    for path, command in every_command():
        ctx = typer.Context(command)
        for param in [*command.params, command.get_help_option(ctx)]:
            if param is None:
                continue
            ours = param._runtime_param
            assert isinstance(ours, PlainValues), f"{path} {param.name} converts with pydantic"
            if ours.descriptor.file_annotation is not None:
                continue  # typer's own (it opens files)
            typers = build_runtime_param(ours.descriptor)
            for value in (None, param.default, *VALUES):
                expected = outcome(typers, value, param, ctx)
                assert outcome(ours, value, param, ctx) == expected, (path, param.name, value)
                checked += 1
    assert checked > 1000


@pytest.mark.parametrize(
    ("annotation", "value", "result"),
    [(int, "64", 64), (str, "default", "default"), (float, "0.5", 0.5), (float, 2.0, 2.0)],
)
def test_the_usual_values_need_no_pydantic(annotation: type, value: Any, result: Any) -> None:
    info = typer.models.OptionInfo()
    converted = plain(annotation, info, value)
    assert converted == result
    assert type(converted) is annotation
