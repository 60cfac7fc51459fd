"""``pgq dashboard``: serve the web dashboard."""

from __future__ import annotations

from typing import Annotated, Any, NoReturn

import typer

from pgqueue.cli.common import (
    DsnOption,
    err_console,
    escape,
    example,
    friendly_errors,
    in_range,
    read_dsn_option,
)
from pgqueue.cli.common import read_dsn as reads_from
from pgqueue.client import PgQueue
from pgqueue.errors import ConfigurationError
from pgqueue.handler import logs

commands = typer.Typer()


def _credential(envvar: str, help_text: str) -> Any:
    """An option that asks for a credential: also read from ``envvar`` (kept out of the
    process list), no default shown."""
    return typer.Option(envvar=envvar, help=help_text, show_default=False)


def dashboard(
    host: Annotated[
        str, typer.Option(help="Address to bind; anything but loopback requires auth.")
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(callback=in_range(0, 65535), help="Port to serve on.")
    ] = 8080,
    token: Annotated[
        str | None,
        _credential(
            "PGQUEUE_DASHBOARD_TOKEN",
            "Require this bearer token (or open /?token=... once in the browser).",
        ),
    ] = None,
    basic_auth: Annotated[
        str | None,
        _credential(
            "PGQUEUE_DASHBOARD_BASIC_AUTH", "Require HTTP basic auth, given as USER:PASSWORD."
        ),
    ] = None,
    read_only: Annotated[bool, typer.Option(help="Show everything, allow no actions.")] = False,
    secure_cookies: Annotated[
        bool,
        typer.Option(help="Served over HTTPS (by a proxy): Secure cookies, https:// Origin."),
    ] = False,
    allowed_hosts: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-host",
            metavar="NAME",
            envvar="PGQUEUE_DASHBOARD_ALLOWED_HOSTS",
            help=(
                "Also answer to this Host name, IP or *.domain (repeatable). Always: localhost, "
                "127.0.0.1, [::1] and the --host address; other Hosts get 400."
            ),
            show_default=False,
        ),
    ] = None,
    dsn: DsnOption = None,
    read_dsn: Annotated[
        str | None,
        read_dsn_option(
            "Read the pages from this DSN (a streaming replica); the actions (replay, "
            "cancel, retry, pause) still write to --dsn. Default: $PGQUEUE_READ_DSN."
        ),
    ] = None,
    log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING, ERROR.")] = "INFO",
) -> None:
    """Serve the web dashboard: queues, charts, running jobs, workers, dead letters, actions."""
    import uvicorn

    from pgqueue.dashboard import DashboardSettings, create_app
    from pgqueue.dashboard.security import (
        LOOPBACK_HOSTS,
        Auth,
        allowed_host,
        bind_host,
        is_loopback,
    )
    from pgqueue.db import views

    names = list(LOOPBACK_HOSTS)
    bound = bind_host(host)
    if bound is not None:
        names.append(bound)
    # Click splits the environment variable on whitespace; commas work in both places.
    for value in allowed_hosts or []:
        pieces = [piece.strip() for piece in value.split(",")]
        if not any(pieces):
            _usage_error(f"--allowed-host {value!r}: empty")
        for piece in filter(None, pieces):
            try:
                names.append(allowed_host(piece))
            except ValueError as exc:
                _usage_error(f"--allowed-host {piece!r}: {exc}")
    allowed = tuple(dict.fromkeys(names))

    with friendly_errors():
        username = password = None
        if basic_auth is not None:
            username, sep, password = basic_auth.partition(":")
            if not sep or not username or not password:
                raise ConfigurationError("--basic-auth must look like USER:PASSWORD")
        auth = Auth(token=token or None, username=username, password=password)
        if not auth.required and not is_loopback(host):
            raise ConfigurationError(
                f"refusing to serve the dashboard on {host} without authentication: "
                "pass --token or --basic-auth (or bind to 127.0.0.1)"
            )
        logs.configure(log_level)
        reads = reads_from(dsn, read_dsn)
        pgq = PgQueue(dsn)
        reader = PgQueue(reads) if reads != dsn else None
        # Fail now, with a clear message, if a database is not ready. (The primary is checked
        # too: the actions need it.)
        for queue in (pgq, reader):
            if queue is not None:
                views.queue_stats(queue)
        app = create_app(
            pgq,
            DashboardSettings(
                auth=auth,
                read_only=read_only,
                secure_cookies=secure_cookies,
                allowed_hosts=allowed,
            ),
            reader=reader,
        )
    shown = f"[{host}]" if ":" in host else host
    typer.echo(
        f"pgqueue dashboard on http://{shown}:{port}/" + (" (read-only)" if read_only else "")
    )
    typer.echo("answering to Host: " + ", ".join(allowed))
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
    finally:
        pgq.close()
        if reader is not None:
            reader.close()


def _usage_error(message: str) -> NoReturn:
    # One line, whatever the terminal's width, and the user's value printed as typed (brackets
    # in it are not rich markup).
    err_console.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(1)


commands.command(
    "dashboard", epilog=example("pgq dashboard --host 0.0.0.0 --token s3cret --read-only")
)(dashboard)
