"""``pgq enqueue``'s options for the job options, made from their declarations.

Each key of :class:`~pgqueue.rules.options.JobOptions` has a :class:`~pgqueue.rules.flags.Flag`
in its ``Annotated`` metadata: its help text, metavar and how its value is written are declared
there, once, beside its check and default. This module knows what each way of writing a value
is on the command line, puts the options into ``enqueue``'s signature and turns what the
command receives back into ``pgq.enqueue`` keyword arguments.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any, get_type_hints

import typer

from pgqueue.cli.common import duration, with_options
from pgqueue.cli.declared import Declared, Kind, parameters, switch_name
from pgqueue.errors import InvalidJobError
from pgqueue.rules.flags import Flag, flags_of, item_type, plain_type
from pgqueue.rules.options import DEFAULTS, JobOptions

KINDS = {
    "value": Kind(plain_type),
    "duration": Kind(lambda hint: float, parser=duration, metavar="DURATION"),
    "json": Kind(lambda hint: str),
    "repeat": Kind(lambda hint: list[item_type(hint)]),  # type: ignore[misc]
}
#: The order ``pgq enqueue --help`` has always listed its options in (where and when, keys,
#: what is stored with the job); an option declared later follows them.
SHOWN_FIRST = ("queue", "delay", "run_at", "priority", "max_attempts", "idempotency_key",
               "unique_by", "unique_among", "on_conflict", "throttle", "concurrency_key",
               "depends_on", "result_ttl", "meta", "tags")  # fmt: skip


@cache
def declared() -> tuple[Declared, ...]:
    """Every job option with its flag, in the order of the declarations."""
    hints = get_type_hints(JobOptions, include_extras=True)
    return tuple(
        Declared(name, hints[name], flag, DEFAULTS.get(name))
        for name, flag in flags_of(JobOptions).items()
    )


def with_job_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Give ``command`` an option for every job option, after its argument and ``--args``."""
    with_options(command, parameters(declared(), KINDS, SHOWN_FIRST), after=2)
    return command


def job_options(received: Mapping[str, Any]) -> dict[str, Any]:
    """``pgq.enqueue`` keyword arguments from what the command received (by parameter name);
    unset options are None. Bad input raises a usage error or InvalidJobError naming the
    option."""
    chosen: dict[str, Any] = {}
    for value in declared():
        given = received[value.name]
        if value.flag.switch is not None and received[switch_name(value.flag)]:
            if given:
                switch = value.flag.switch[0]
                raise typer.BadParameter(
                    f"pass either {switch} or {value.flag.option_names(value.name)[0]}",
                    param_hint=switch,
                )
            given = True
        chosen[value.name] = _read(value.flag, value.name, given)
    return chosen


def _read(flag: Flag, name: str, given: Any) -> Any:
    if flag.kind == "repeat":
        return given or None
    if flag.kind == "json" and given is not None:
        try:
            return json.loads(given)
        except json.JSONDecodeError as exc:
            raise InvalidJobError(
                f"{flag.option_names(name)[0]} is not valid JSON: {exc}"
            ) from None
    return given
