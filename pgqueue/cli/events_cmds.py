"""``pgq events``: emit an event that durable jobs wait for (``pgq.emit_event``)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from pgqueue.cli.common import (
    DsnOption,
    JsonOption,
    command_group,
    duration_option,
    example,
    open_queue,
)
from pgqueue.errors import InvalidJobError

events_app = command_group(
    "Events durable jobs wait for (the first emit of a name wins).",
    "pgq events emit order-42-packed --payload '{\"parcels\": 2}'",
)


def _payload(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidJobError(f"--payload is not valid JSON: {exc}") from None


@events_app.command(
    "emit",
    epilog=example(
        "pgq events emit order-42-packed --payload '{\"parcels\": 2}'",
        "pgq events emit nightly-export-done --keep 2d",
    ),
)
def emit(
    name: Annotated[str, typer.Argument(help="The event's name.")],
    payload: Annotated[
        str | None,
        typer.Option(metavar="JSON", help="The event's payload, any JSON value (default: null)."),
    ] = None,
    keep: Annotated[
        float | None,
        duration_option(
            help="Keep the event this long for jobs that wait later "
            "(default: the history retention, at least a day)."
        ),
    ] = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Emit the event NAME: jobs waiting for it resume with its payload. An event already
    emitted (and still kept) is left as it is: the first emit wins."""
    with open_queue(dsn) as pgq:
        won = pgq.emit_event(name, _payload(payload), keep=keep)
    if as_json:
        typer.echo(json.dumps({"name": name, "emitted": won}))
    elif won:
        typer.echo(f"emitted {name}")
    else:
        typer.echo(f"{name} was emitted before: the first emit stands")
