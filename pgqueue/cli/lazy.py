"""``pgq``'s commands imported when used: the root group knows each command by name and the
module it lives in, and makes the click command (typer's reading of its signature) on first use.

``pgq work`` so imports the worker's command module only, not the other commands' modules and
what they need (the views, search, migrations, pg_cron, output tables); ``pgq --help`` and
``docs/cli.md`` read every command and so import them all, in the order the table gives.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperGroup
from typer.main import get_command_from_info, get_command_name, get_group

from pgqueue.cli import plain_values

if TYPE_CHECKING:
    # The click typer builds on (recent typer carries its own copy; importing the click
    # package as well would load a dozen modules more).
    from typer._click import Command


@dataclass(frozen=True)
class Lazy:
    """Where one command of the root group lives: ``module``'s ``typer.Typer`` named
    ``attribute``. ``group``: that Typer is the command (a group such as ``pgq dlq``); else it
    holds the command among its commands, under the command's name (``pgq work``)."""

    module: str
    attribute: str
    group: bool

    def load(self, name: str) -> Command:
        holder = getattr(importlib.import_module(self.module), self.attribute)
        if not isinstance(holder, typer.Typer):
            raise TypeError(f"{self.module}.{self.attribute} is not a typer.Typer")
        if self.group:
            command: Command = get_group(holder)
            command.name = name
            return _plain_values(command)
        for info in holder.registered_commands:
            if (info.name or get_command_name(info.callback.__name__)) == name:  # type: ignore[union-attr]
                return _plain_values(
                    get_command_from_info(
                        info,
                        pretty_exceptions_short=holder.pretty_exceptions_short,
                        rich_markup_mode=holder.rich_markup_mode,
                    )
                )
        raise LookupError(f"{self.module}.{self.attribute} has no command {name!r}")


def _plain_values(command: Command) -> Command:
    """``command`` (and a group's commands) converting its options' values without pydantic
    where the result is certain (:mod:`pgqueue.cli.plain_values`)."""
    plain_values.install(command)
    for sub in getattr(command, "commands", {}).values():
        _plain_values(sub)
    return command


def group(module: str, attribute: str) -> Lazy:
    """A command group: ``module.attribute`` is its ``typer.Typer``."""
    return Lazy(module, attribute, group=True)


def command(module: str, attribute: str = "commands") -> Lazy:
    """A command among the commands of ``module.attribute`` (a ``typer.Typer``)."""
    return Lazy(module, attribute, group=False)


class LazyCommands(MutableMapping[str, "Command"]):
    """A group's ``commands``: its names known at once, each command made on first read (click
    and typer read a group's commands from this mapping: by name to run one, all of them for
    ``--help``)."""

    def __init__(self, table: Mapping[str, Lazy], made: Mapping[str, Command]) -> None:
        self._table = dict(table)
        self._made = dict(made)

    def __getitem__(self, name: str) -> Command:
        if name not in self._made:
            if name not in self._table:
                raise KeyError(name)
            self._made[name] = self._table[name].load(name)
        return self._made[name]

    def __setitem__(self, name: str, command: Command) -> None:
        self._made[name] = command

    def __delitem__(self, name: str) -> None:
        if name not in self._table and name not in self._made:
            raise KeyError(name)
        self._table.pop(name, None)
        self._made.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        yield from self._table
        yield from (name for name in self._made if name not in self._table)

    def __len__(self) -> int:
        return len(self._table.keys() | self._made.keys())


class LazyGroup(TyperGroup):
    """A typer group whose commands are the ``lazy`` table's (``typer.Typer(cls=...)``)."""

    lazy: Mapping[str, Lazy] = {}

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self.commands = LazyCommands(self.lazy, self.commands)
        plain_values.install(self)  # the root's own options (--help, --version)
