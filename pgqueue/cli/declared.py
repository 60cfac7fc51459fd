"""Options made from declarations: a :class:`~pgqueue.rules.flags.Flag` becomes a typer option.

A command whose options mirror a declaration (``pgq enqueue``: the job options; ``pgq jobs
search``: the search filters) takes them as ``**options``; :func:`parameters` makes one keyword
parameter per declared value and :func:`~pgqueue.cli.common.with_options` puts them into the
command's signature (typer reads it), at the place ``--help`` has always shown them. What each
kind of value is on the command line (its type, parser, callback) is the command's own table of
:class:`Kind`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from pgqueue.cli.common import in_range
from pgqueue.rules.flags import Flag


@dataclass(frozen=True)
class Kind:
    """How a kind of :class:`Flag` is written: ``type`` (given the declared type hint),
    ``parser``/``callback`` (typer's), and the metavar it shows when its Flag gives none."""

    type: Callable[[Any], Any]
    parser: Callable[[str], Any] | None = None
    callback: Callable[[Any], Any] | None = None
    metavar: str | None = None


@dataclass(frozen=True)
class Declared:
    """One declared value with a flag: its name, type hint and :class:`Flag`, and the default
    its help may name (``{default}``)."""

    name: str
    hint: Any
    flag: Flag
    default: Any = None


def parameters(
    declared: Iterable[Declared], kinds: Mapping[str, Kind], shown_first: tuple[str, ...] = ()
) -> list[inspect.Parameter]:
    """The keyword parameters of ``declared`` (``shown_first`` in that order, then the others
    in theirs): each named as the declared value, defaulting to None (a switch: False)."""
    ordered = sorted(
        declared,
        key=lambda d: shown_first.index(d.name) if d.name in shown_first else len(shown_first),
    )
    made = []
    for value in ordered:
        flag, kind = value.flag, kinds[value.flag.kind]
        if flag.switch is not None:
            switch, help_text = flag.switch
            made.append(
                _keyword(switch_name(flag), bool, False, typer.Option(switch, help=help_text))
            )
        callback = kind.callback
        if flag.low is not None and flag.high is not None:
            callback = in_range(flag.low, flag.high)
        option = typer.Option(
            *flag.option_names(value.name),
            help=flag.help.format(default=value.default),
            metavar=flag.metavar or kind.metavar,
            parser=kind.parser,
            callback=callback,
            show_default=False,
        )
        made.append(_keyword(value.name, kind.type(value.hint) | None, None, option))
    return made


def switch_name(flag: Flag) -> str:
    """The parameter name of a flag's switch (``--unique``: ``unique``)."""
    assert flag.switch is not None
    return flag.switch[0].lstrip("-").replace("-", "_")


def _keyword(name: str, kind: Any, default: Any, option: Any) -> inspect.Parameter:
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[kind, option]
    )
