"""``pgq work`` and ``pgq reaper``: the long-running processes."""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from pgqueue.cli.common import (
    DsnOption,
    duration_option,
    example,
    friendly_errors,
    in_range,
    read_dsn_option,
)
from pgqueue.cli.work_options import settings_from_options, with_setting_options
from pgqueue.client import PgQueue
from pgqueue.errors import ConfigurationError
from pgqueue.handler import log_queue, logs
from pgqueue.rules import config
from pgqueue.rules.log_actions import Action, fields
from pgqueue.worker import Worker
from pgqueue.worker.reaper import reap_forever, reap_once

commands = typer.Typer()


def _logging_option(name: str, check: Callable[[str], str], metavar: str, help_text: str) -> Any:
    """``--log-level`` / ``--log-format``: a value ``check`` (pgqueue.handler.logs) accepts, a
    value it refuses a usage error with its message."""

    def parse(value: str) -> str:
        try:
            return check(value)
        except ConfigurationError as exc:
            raise typer.BadParameter(str(exc)) from None

    return typer.Option(name, parser=parse, metavar=metavar, show_default=False, help=help_text)


# Both default to None so that pgq work can tell a flag given from its default (see AppLogging).
LogLevel = Annotated[
    str | None,
    _logging_option(
        "--log-level",
        logs.check_level,
        "LEVEL",
        "DEBUG, INFO, WARNING, ERROR, CRITICAL (default INFO).",
    ),
]
LogFormat = Annotated[
    str | None,
    _logging_option(
        "--log-format",
        logs.check_format,
        "text|json",
        "text (key=value, the default) or json, for pgq's own handler.",
    ),
]
LogConfig = Annotated[
    Path | None,
    typer.Option(
        "--log-config",
        exists=True,
        dir_okay=False,
        readable=True,
        metavar="FILE",
        help="Configure logging from FILE before the app is imported: dictConfig from "
        ".json/.yaml/.yml, fileConfig from .ini/.conf (then pgq adds no handler of its own).",
    ),
]


def logging_setup(level: str | None, fmt: str | None, config_file: Path | None) -> logs.AppLogging:
    """The root level and the --log-config file, applied now: before the app is imported, so
    its import-time lines go where the file says. Bad combinations are usage errors."""
    if config_file is not None and fmt is not None:
        raise typer.BadParameter(
            "applies to pgq work's own handler, and with --log-config there is none: use a "
            "formatter in the file (pgqueue.handler.logs.JsonFormatter writes JSON lines)",
            param_hint="'--log-format'",
        )
    setup = logs.AppLogging(level, fmt, config_file)
    try:
        setup.apply_file()
    except logs.LogConfigError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--log-config'") from None
    return setup


def load_app(spec: str) -> PgQueue:
    """Import ``module:attribute`` (the attribute defaults to ``pgq``) from the current dir."""
    module_name, _, attribute = spec.partition(":")
    if not module_name:
        raise ConfigurationError(f"APP must look like 'package.module:pgq', got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    _setup_django()
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not _is_prefix(exc.name, module_name):
            raise  # an import inside the app failed: its traceback says where
        raise ConfigurationError(
            f"APP {spec!r}: no module named {exc.name!r} (run pgq from the directory that holds "
            f"it, or add that directory to PYTHONPATH)"
        ) from None
    except Exception as exc:
        if _django_not_set_up(exc):
            raise ConfigurationError(_django_settings_missing(module_name, spec)) from None
        raise  # any other error while importing the app is the app's own: its traceback
    attribute = attribute or "pgq"
    if not hasattr(module, attribute):
        found = sorted(k for k, v in vars(module).items() if isinstance(v, PgQueue))
        hint = f"its PgQueue: {', '.join(found)}" if found else "it defines no PgQueue"
        raise ConfigurationError(
            f"APP {spec!r}: module {module_name} has no attribute {attribute!r} ({hint})"
        )
    app = getattr(module, attribute)
    if not isinstance(app, PgQueue):
        raise ConfigurationError(
            f"APP {spec!r}: {module_name}.{attribute} is not a PgQueue instance "
            f"(got {type(app).__name__})"
        )
    return app


def _django_not_set_up(exc: Exception) -> bool:
    """The app's import touched Django's settings or models with no settings module to set
    Django up from (ImproperlyConfigured / AppRegistryNotReady; Django is not imported here)."""
    exceptions = sys.modules.get("django.core.exceptions")
    return (
        exceptions is not None
        and not os.environ.get("DJANGO_SETTINGS_MODULE")
        and isinstance(exc, (exceptions.ImproperlyConfigured, exceptions.AppRegistryNotReady))
    )


def _django_settings_missing(module_name: str, spec: str) -> str:
    """One line naming the problem and both fixes (the settings module read from ./manage.py,
    where there is one)."""
    found = _MANAGE_SETTINGS.search(_read(Path("manage.py")))
    settings = found.group(1) if found else "myproject.settings"
    return (
        f"{module_name} uses Django, but DJANGO_SETTINGS_MODULE is not set: run "
        f"`python manage.py pgq work {spec}` in the project, or set "
        f"DJANGO_SETTINGS_MODULE={settings}"
    )


# What `django-admin startproject` writes in manage.py.
_MANAGE_SETTINGS = re.compile(r"""DJANGO_SETTINGS_MODULE["']\s*,\s*["']([\w.]+)["']""")


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _is_prefix(missing: str, module_name: str) -> bool:
    """``missing`` is ``module_name`` or one of its packages (the APP itself is not found)."""
    return module_name == missing or module_name.startswith(missing + ".")


def _setup_django() -> None:
    """With ``DJANGO_SETTINGS_MODULE`` set, set Django up before the tasks are imported (and
    before any handler touches the ORM, which would fail every job with AppRegistryNotReady)."""
    if not os.environ.get("DJANGO_SETTINGS_MODULE"):
        return
    try:
        import django
        from django.apps import apps
    except ImportError:
        raise ConfigurationError(
            "DJANGO_SETTINGS_MODULE is set but Django is not installed: pip install django, "
            "or unset DJANGO_SETTINGS_MODULE"
        ) from None
    if apps.ready:
        return
    try:
        django.setup()
    except Exception as exc:  # ImproperlyConfigured, ImportError of the settings module...
        raise ConfigurationError(
            f"could not set up Django ({os.environ['DJANGO_SETTINGS_MODULE']}): "
            f"{type(exc).__name__}: {exc}"
        ) from None


# What a Django project runs without an APP: every installed app's tasks (a name, not an
# import: the CLI does not depend on the Django integration).
DJANGO_PROJECT_APP = "pgqueue.contrib.django.project:pgq"


def app_or_default(app: str | None) -> str:
    """The APP given, else the Django project's (with ``DJANGO_SETTINGS_MODULE`` set), else a
    usage error."""
    if app:
        return app
    if os.environ.get("DJANGO_SETTINGS_MODULE"):
        return DJANGO_PROJECT_APP
    raise typer.BadParameter(
        "missing: say where your PgQueue lives ('myapp.tasks:pgq'); in a Django project set "
        "DJANGO_SETTINGS_MODULE (or run manage.py pgq work) to run every app's tasks",
        param_hint="'APP'",
    )


def work(
    app: Annotated[
        str | None,
        typer.Argument(
            help="Where your PgQueue lives: 'myapp.tasks:pgq'. In a Django project "
            "(DJANGO_SETTINGS_MODULE set, or manage.py pgq work) it may be left out: every "
            "installed app's tasks module is imported and all their tasks run."
        ),
    ] = None,
    *,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            callback=in_range(0, 65535),
            help="Serve Prometheus metrics on this port (/metrics); 0 picks one.",
        ),
    ] = None,
    # All interfaces by default: Prometheus scrapes workers from other hosts and containers.
    metrics_host: Annotated[
        str, typer.Option(help="Address the metrics server binds.")
    ] = "0.0.0.0",
    dsn: DsnOption = None,
    read_dsn: Annotated[
        str | None,
        read_dsn_option(
            "Read the metrics' queue depths from this DSN (a streaming replica) instead of "
            "--dsn. Default: $PGQUEUE_READ_DSN."
        ),
    ] = None,
    log_level: LogLevel = None,
    log_format: LogFormat = None,
    log_config: LogConfig = None,
    **settings: Any,
) -> None:
    """Run jobs: claim with SKIP LOCKED, hold leases with heartbeats, retry, dead-letter."""
    app = app_or_default(app)
    app_logging = logging_setup(log_level, log_format, log_config)
    with friendly_errors():
        with app_logging.importing_app():  # pgq's own handler only if the app set up none
            pgq = load_app(app)
        worker_settings = settings_from_options(settings, app_spec=app)
        worker_dsn = dsn or config.configured_dsn(None) or pgq.dsn
        # Only the scrape's queue depth query reads: jobs are claimed and written on --dsn.
        depths_dsn = config.configured_read_dsn(read_dsn) or worker_dsn
        metrics = None
        if metrics_port is not None:
            # prometheus_client and its HTTP server (some 30 modules): only when scraped.
            from pgqueue.worker.metrics import MetricsServer

            metrics = MetricsServer(depths_dsn, metrics_port, metrics_host)
        worker = Worker(
            pgq, worker_settings, dsn=worker_dsn, observers=[metrics.metrics] if metrics else None
        )
    # While the event loop runs, every handler writes from a thread behind a bounded queue:
    # a log output that blocks must not stop heartbeats, claims and acks
    # (pgqueue.handler.log_queue).
    log_writer = log_queue.LogQueue().start()
    try:
        try:
            # A DSN rejected for good, a schema at the wrong revision: one line, exit 1.
            with friendly_errors():
                worker.run_sync()
        finally:
            if metrics is not None:
                metrics.close()
        pgq.close()
        if not worker.threads_finished:
            logging.getLogger("pgqueue.worker").warning(
                "exiting with handler threads still running (their jobs were handed back)",
                extra=fields(Action.WORKER_THREADS_LEFT),
            )
    finally:
        drained = log_writer.stop()  # the last lines are written before we exit
    if not worker.threads_finished or not drained:
        # Handler threads still running (abandoned after a timeout, or released at shutdown)
        # would keep the interpreter alive, and a log output still blocked would hang it in
        # logging.shutdown(); the jobs were already handed back, so leave now.
        if drained:
            logging.shutdown()
            sys.stdout.flush()
        os._exit(0)


with_setting_options(work)
commands.command(
    "work", epilog=example("pgq work myapp.tasks:pgq --queue emails,reports --concurrency 4:32")
)(work)


def reaper(
    interval: Annotated[float, duration_option(help="Time between runs.")] = 5.0,
    once: Annotated[bool, typer.Option(help="Run once and exit.")] = False,
    dsn: DsnOption = None,
    log_level: LogLevel = None,
    log_format: LogFormat = None,
) -> None:
    """A standalone janitor: runs pgqueue.reap() every INTERVAL (safe beside workers)."""
    logs.configure(log_level or "INFO", log_format or "text")
    with friendly_errors():
        pgq = PgQueue(dsn)  # resolves the DSN as every command does (an embedded server too)
        try:
            if once:
                typer.echo(asyncio.run(reap_once(pgq.dsn)))
            else:
                asyncio.run(reap_forever(pgq.dsn, every=interval))
        finally:
            pgq.close()


commands.command("reaper", epilog=example("pgq reaper --interval 10s"))(reaper)
