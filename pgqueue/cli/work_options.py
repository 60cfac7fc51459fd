"""``pgq work``'s options for the worker's settings, made from :class:`WorkerSettings`.

Each WorkerSettings field with a :class:`~pgqueue.worker.settings.Flag` is an option of ``pgq
work``: its help text, metavar and how its value is written are declared there, once. This
module knows what each way of writing a value is on the command line (the option's type and
parser, its default as written, how its value becomes settings), puts the options into the
command's signature (typer reads it), and turns what the command receives back into settings.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import Field, dataclass, fields
from typing import Annotated, Any, get_type_hints

import typer

from pgqueue.cli.common import duration, with_options
from pgqueue.errors import ConfigurationError
from pgqueue.worker import WorkerSettings
from pgqueue.worker.settings import Flag


def parse_concurrency(value: str) -> tuple[int, int]:
    """``"16"`` -> (16, 16); ``"4:64"`` -> (4, 64)."""
    low, sep, high = value.partition(":")
    try:
        lo = int(low)
        hi = int(high) if sep else lo
    except ValueError:
        raise ConfigurationError(
            f"--concurrency must be N or MIN:MAX (e.g. 16 or 4:64), got {value!r}"
        ) from None
    if not 1 <= lo <= hi:
        raise ConfigurationError(f"--concurrency {value}: need 1 <= MIN <= MAX")
    return lo, hi


def parse_prefetch(value: str) -> int | None:
    """``auto`` -> None; otherwise a non-negative number of jobs."""
    if value.strip().lower() == "auto":
        return None
    try:
        count = int(value)
    except ValueError:
        raise typer.BadParameter(f"--prefetch must be a number or auto, got {value!r}") from None
    if count < 0:
        raise typer.BadParameter(f"--prefetch must not be negative, got {count}")
    return count


def _pool_kind(value: str) -> str:
    kind = value.strip().lower()
    if kind not in ("thread", "process"):
        raise typer.BadParameter(f"--pool must be thread or process, got {value!r}")
    return kind


@dataclass(frozen=True)
class _Kind:
    type: Any  # the option's type (None: the setting's)
    read: Callable[[str, Any], dict[str, Any]]  # (setting name, option value) -> settings
    parser: Callable[[str], Any] | None = None
    metavar: str | None = None
    written: Callable[[Any], Any] = lambda default: default  # the setting's default as typed
    show_default: bool = True


def _as_is(name: str, value: Any) -> dict[str, Any]:
    return {name: value}


def _concurrency(name: str, value: str) -> dict[str, Any]:
    low, high = parse_concurrency(value)
    return {name: high, "min_concurrency": low if low != high else None}


_KINDS = {
    "value": _Kind(None, _as_is),
    "duration": _Kind(float, _as_is, parser=duration, metavar="DURATION"),
    # Empty: the worker serves the queues the app's tasks declare.
    "queues": _Kind(
        str | None,
        lambda name, value: {name: [q.strip() for q in (value or "").split(",") if q.strip()]},
        written=lambda default: None,
        show_default=False,
    ),
    "concurrency": _Kind(str, _concurrency, written=str),
    "prefetch": _Kind(
        str,
        lambda name, value: {name: parse_prefetch(value)},
        written=lambda default: "auto" if default is None else str(default),
    ),
    "pool": _Kind(str, _as_is, parser=_pool_kind),
}


def _setting_options() -> list[tuple[Field[Any], Flag]]:
    return [(f, f.metadata["flag"]) for f in fields(WorkerSettings) if "flag" in f.metadata]


def _option_parameters() -> list[inspect.Parameter]:
    """pgq work's options for the settings, in the order of WorkerSettings' fields."""
    types = get_type_hints(WorkerSettings)
    defaults = WorkerSettings()
    parameters = []
    for setting, flag in _setting_options():
        kind = _KINDS[flag.kind]
        option = typer.Option(
            *flag.names,
            help=flag.help,
            metavar=flag.metavar or kind.metavar,
            parser=kind.parser,
            min=flag.min,
            show_default=kind.show_default,
        )
        parameters.append(
            inspect.Parameter(
                setting.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=kind.written(getattr(defaults, setting.name)),
                annotation=Annotated[kind.type or types[setting.name], option],
            )
        )
        if flag.switch is not None:
            switch, help_text = flag.switch
            parameters.append(
                inspect.Parameter(
                    switch,
                    inspect.Parameter.KEYWORD_ONLY,
                    default=True,
                    annotation=Annotated[bool, typer.Option(help=help_text)],
                )
            )
    return parameters


def settings_from_options(options: dict[str, Any], *, app_spec: str | None) -> WorkerSettings:
    """The worker settings of pgq work's options (by parameter name, as typer passes them)."""
    values: dict[str, Any] = {}
    for setting, flag in _setting_options():
        value = options[setting.name]
        if flag.switch is not None and not options[flag.switch[0]]:
            values[setting.name] = None  # switched off: --no-reaper, --no-pruner
            continue
        values.update(_KINDS[flag.kind].read(setting.name, value))
    # app_spec: what --pool process children import
    return WorkerSettings(**values, app_spec=app_spec)


def with_setting_options(command: Callable[..., None]) -> None:
    """Give ``command`` (whose ``**settings`` takes them) an option for every setting: after
    its argument, before its own options (the order ``pgq work --help`` has always shown)."""
    with_options(command, _option_parameters(), after=1)
