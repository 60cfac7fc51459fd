"""Logging for the ``pgq`` processes and for applications that configure logging themselves.

Fields: pgqueue's own log calls pass their data as ``extra=`` with a stable ``action`` code
(:mod:`pgqueue.rules.log_actions`), so every value is a record attribute with its own type.
:class:`ContextFilter` puts ``job_id``, ``task``, ``queue``, ``attempt`` and ``worker_id`` on
every record it sees, so any formatter can name them (``%(job_id)s``): inside a job handler they
are the job's (from ``current_job()``), ``worker_id`` inside a worker (:func:`bind`); outside a
job, pgqueue's lines about one state them in ``extra=``. Missing ones (and ``action``) are
empty strings, so a format string that names them never fails. A value passed with ``extra=``
is never overwritten (the filter runs after ``makeRecord``; a record factory could not add
these names without breaking such ``extra=``).

Formatters: :class:`TextFormatter` (``message key=value ...`` lines, the default) and
:class:`JsonFormatter` (one JSON object per line; ``extra=`` values and the context fields are
fields, with their Python types). An application's own message that states ``key=value``
pairs still gets them as JSON fields (typed when they were arguments): that alone parses a
message; pgqueue's records (those with an ``action``) never are.

``pgq work`` sets logging up around importing the application (:class:`AppLogging`): it leaves
logging alone when the application configured it or ``--log-config`` did, and re-enables
pgqueue's loggers after ``dictConfig``/``fileConfig`` disabled them.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import logging
import math
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pgqueue.errors import ConfigurationError
from pgqueue.handler.job_context import _current as _current_job
from pgqueue.rules.log_actions import Action, fields

#: The record attributes the filter provides, in the order the text lines append them.
FIELDS = ("job_id", "task", "queue", "attempt", "worker_id")
#: What pgqueue's own records name in ``extra=``: the event (see pgqueue.rules.log_actions).
ACTION = "action"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
FORMATS = ("text", "json")
CONFIG_SUFFIXES = (".json", ".yaml", ".yml", ".ini", ".conf")

_FIELD_SET = frozenset(FIELDS)
# The attributes the filter makes sure of; an empty one is left out of the formatted line.
_DEFAULT_ORDER = (*FIELDS, ACTION)
_DEFAULTS = frozenset(_DEFAULT_ORDER)

_bound: contextvars.ContextVar[Mapping[str, object]] = contextvars.ContextVar(
    "pgqueue_log_fields", default=MappingProxyType({})
)


def bind(**fields: object) -> contextvars.Token[Mapping[str, object]]:
    """Add fields to every record logged from this context (tasks and threads started from it
    inherit them)."""
    return _bound.set({**_bound.get(), **fields})


# -- the fields on every record -------------------------------------------------------------


def add_context(record: logging.LogRecord) -> logging.LogRecord:
    """Set the missing ones of :data:`FIELDS` (and any other bound field) on ``record``.

    Must run in the logging call's own thread and context (a filter does): the job and the
    worker are context variables. Idempotent, and never overwrites an attribute the record
    already has (an ``extra=`` value, or an earlier pass). Runs for every record, on the
    worker's event loop too: kept to a few dictionary operations."""
    attrs = record.__dict__
    bound = _bound.get()
    keys = attrs.keys()
    if keys >= _DEFAULTS and keys >= bound.keys():
        return record
    ctx = _current_job.get(None)
    if ctx is not None:  # first: the line's order is FIELDS' order
        job = ctx.job
        attrs.setdefault("job_id", job.id)
        attrs.setdefault("task", job.task)
        attrs.setdefault("queue", job.queue)
        attrs.setdefault("attempt", job.attempt)
        attrs.setdefault("worker_id", ctx.worker_id)
    for name, value in bound.items():
        attrs.setdefault(name, value)
    # Outside a job: what extra= stated (pgqueue's lines about a job, logged by the fetcher or
    # the completer), else empty.
    for name in _DEFAULT_ORDER:
        attrs.setdefault(name, "")
    return record


class ContextFilter(logging.Filter):
    """Adds pgqueue's fields to every record that passes (never rejects one).

    ``pgq work`` puts it on every handler; an application that configures logging itself and
    names the fields in a format it uses before the worker starts can put it on its handlers
    too: ``"filters": {"pgqueue": {"()": "pgqueue.handler.logs.ContextFilter"}}``."""

    def filter(self, record: logging.LogRecord) -> bool:
        add_context(record)
        return True


def install_context_filter() -> None:
    """Put a :class:`ContextFilter` on every handler of every logger (once each)."""
    for logger in _all_loggers():
        for handler in logger.handlers:
            if not any(isinstance(f, ContextFilter) for f in handler.filters):
                handler.addFilter(ContextFilter())


def _all_loggers() -> list[logging.Logger]:
    named = list(logging.Logger.manager.loggerDict.values())
    return [logging.getLogger(), *(x for x in named if isinstance(x, logging.Logger))]


# -- what an application's message says -----------------------------------------------------
# pgqueue's own records carry their data in extra=; an application's line may still state
# ``key=%s`` pairs in its message, which the JSON formatter has always made fields of (and the
# log queue's snapshot reads the conversions to render arguments safely).

# One printf-style conversion specifier (what ``msg % args`` consumes).
_SPEC = re.compile(
    r"%(?:\((?P<name>[^)]*)\))?[-#0+ ]*(?P<width>\*|\d+)?(?:\.(?P<prec>\*|\d+))?[hlL]?"
    r"(?P<conv>[diouxXeEfFgGcrsa%])"
)
_KEY_VALUE = re.compile(r"(?:^|(?<= ))(?P<key>[A-Za-z_]\w*)=(?P<value>[^ ]*)")
_SCALARS = (str, int, float, bool, type(None))


@functools.lru_cache(maxsize=1024)
def parse_format(fmt: str) -> tuple[tuple[str, ...], dict[str, tuple[int | str, str]]] | None:
    """For a logging format string: the conversion of each positional argument, and the keys
    whose value is exactly one argument (``job_id=%s``: key -> (argument, conversion)).
    None when the string takes ``*`` widths or mixes named and positional arguments."""
    specs = [m for m in _SPEC.finditer(fmt) if m["conv"] != "%"]
    if any(m["width"] == "*" or m["prec"] == "*" for m in specs):
        return None
    named = {m["name"] is not None for m in specs}
    if len(named) > 1:
        return None
    by_start = {m.start(): (i, m) for i, m in enumerate(specs)}
    slots: dict[str, tuple[int | str, str]] = {}
    for word in _KEY_VALUE.finditer(fmt):
        hit = by_start.get(word.start("value"))
        if hit is not None and hit[1].end() == word.end("value"):
            index, spec = hit
            slots[word["key"]] = (spec["name"] if spec["name"] is not None else index, spec["conv"])
    convs = () if named == {True} else tuple(m["conv"] for m in specs)
    return convs, slots


def arg_fields(record: logging.LogRecord) -> dict[str, object]:
    """The message's ``key=%s`` fields with the arguments' own values (ints stay ints).

    Only plain values (str, int, float, bool, None) under a ``%s``/``%r``/``%d``-style
    conversion that is the whole value: ``duration=%.3fs`` stays the text the message shows."""
    msg, args = record.msg, record.args
    if not args or not isinstance(msg, str) or "=" not in msg:
        return {}
    parsed = parse_format(msg)
    if parsed is None or not parsed[1]:
        return {}
    convs, slots = parsed
    values: Any = args
    if not isinstance(args, Mapping):
        if len(args) != len(convs):
            return {}
    elif convs:  # "%s" % {...}: a lone mapping argument is the one positional value
        values = (args,)
    fields: dict[str, object] = {}
    for key, (where, conv) in slots.items():
        try:
            value = values[where]
        except (KeyError, IndexError, TypeError):
            return {}
        kind = type(value)
        if conv in "sra" and kind in _SCALARS:
            if kind is float and not math.isfinite(value):
                continue
            fields[key] = value
        elif conv in "diu" and kind is int:
            fields[key] = value
    return fields


def split_fields(message: str) -> tuple[str, dict[str, str]]:
    """'job started job_id=5 task=x' -> ('job started', {'job_id': '5', 'task': 'x'})."""
    words = message.split(" ")
    text: list[str] = []
    fields: dict[str, str] = {}
    for word in words:
        key, sep, value = word.partition("=")
        if sep and key.isidentifier():
            fields[key] = value
        elif not fields:
            text.append(word)
        else:
            last = next(reversed(fields))
            fields[last] += " " + word
    return " ".join(text), fields


# The attributes every LogRecord has; anything else on a record came from extra= or a filter.
_STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}
_LEADING = len(vars(logging.makeLogRecord({})))
_LAST_STANDARD = list(vars(logging.makeLogRecord({})))[-1]
_NOT_EXTRA = _STANDARD | _DEFAULTS


def record_fields(record: logging.LogRecord) -> dict[str, object]:
    """The ``extra=`` values in the caller's order (``action`` first in pgqueue's), then the
    context fields it did not state; empty ones are left out."""
    attrs = record.__dict__
    if not attrs.keys() >= _DEFAULTS:
        add_context(record)  # a formatter used without the filter still gets them
    if not attrs[ACTION] and not attrs.keys() - _NOT_EXTRA:  # no extra=: the context alone
        return {
            name: attrs[name] for name in FIELDS if attrs[name] != "" and attrs[name] is not None
        }
    return {
        name: value
        for name, value in _after_standard(attrs)
        if name not in _STANDARD
        and name[0] != "_"
        and not (name in _DEFAULTS and (value is None or value == ""))
    }


def _after_standard(attrs: dict[str, Any]) -> Iterable[tuple[str, Any]]:
    """A record's attributes past the ones ``LogRecord.__init__`` sets (skipped at C speed when
    they lead, as they do in every record ``makeRecord`` made): ``extra=`` in the caller's
    order, then what the filter added. That order is the line's."""
    if next(islice(attrs, _LEADING - 1, None), None) == _LAST_STANDARD:
        return islice(attrs.items(), _LEADING, None)
    return attrs.items()


# -- formatters -----------------------------------------------------------------------------

TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


class TextFormatter(logging.Formatter):
    """``time level logger: message key=value ...``: the ``extra=`` values in the order given,
    then the context fields, each unless the message states it already. The ``action`` is not
    shown (the message says it in words; the JSON formatter and ``%(action)s`` have it)."""

    def __init__(
        self,
        fmt: str | None = None,
        datefmt: str | None = None,
        style: Any = "%",
        validate: bool = True,
    ) -> None:
        super().__init__(fmt or TEXT_FORMAT, datefmt, style, validate)

    def format(self, record: logging.LogRecord) -> str:
        fields = record_fields(record)
        text = super().format(record)
        if ACTION in fields:  # pgqueue's own: its message never states a field
            extra = " ".join([f"{key}={value}" for key, value in fields.items() if key != ACTION])
        else:
            message = record.message
            extra = " ".join(
                [f"{key}={value}" for key, value in fields.items() if f"{key}=" not in message]
            )
        if not extra:
            return text
        head, newline, rest = text.partition("\n")  # keep tracebacks below the fields
        return f"{head} {extra}{newline}{rest}"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``msg``, then the ``extra=``
    values (``action`` first in pgqueue's records) and the context fields, with their types;
    ``exc`` with the traceback. An application's record (no ``action``) also gets the
    message's ``key=value`` pairs (typed when they were arguments)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            # Log timestamps are the local observer's clock by nature; job times come from
            # the database.
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(),  # ok: log time
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        fields = record_fields(record)
        message = record.getMessage()
        if ACTION in fields or "=" not in message:  # pgqueue's own: the data is in extra=
            entry["msg"] = message
        else:
            entry["msg"], stated = split_fields(message)
            fields.update(stated)  # what the message says wins over the context ...
            fields.update(arg_fields(record))  # ... with the argument's own type
        for key, value in fields.items():
            entry.setdefault(key, value)  # never over ts, level, logger, msg
        if record.exc_info:
            if not record.exc_text:
                record.exc_text = self.formatException(record.exc_info)
            entry["exc"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(_jsonable(entry), ensure_ascii=False)


def _jsonable(value: Any, depth: int = 0) -> Any:
    """What json.dumps can write as valid JSON (no NaN); anything else becomes its str()."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if depth < 8 and isinstance(value, list | tuple):
        return [_jsonable(v, depth + 1) for v in value]
    if depth < 8 and isinstance(value, dict):
        return {str(k): _jsonable(v, depth + 1) for k, v in value.items()}
    return str(value)


# -- set-up ---------------------------------------------------------------------------------


def check_level(level: str) -> str:
    name = level.strip().upper()
    if name not in LEVELS:
        raise ConfigurationError(f"log level must be one of {', '.join(LEVELS)}, got {level!r}")
    return name


def check_format(fmt: str) -> str:
    name = fmt.strip().lower()
    if name not in FORMATS:
        raise ConfigurationError(f"log format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    return name


def configure(level: str = "INFO", fmt: str = "text") -> None:
    """pgqueue's own handler: one line per record to stderr, replacing the root's handlers."""
    level, fmt = check_level(level), check_format(fmt)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(ContextFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # psycopg's pool logs every reconnect attempt at WARNING; our services already say it.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)


class LogConfigError(ConfigurationError):
    """A ``--log-config`` file that cannot be read or applied."""


def load_config_file(path: Path) -> None:
    """``dictConfig`` from .json/.yaml/.yml, ``fileConfig`` from .ini/.conf."""
    # Only with --log-config: logging.config brings socketserver and logging.handlers.
    import logging.config

    suffix = path.suffix.lower()
    if suffix not in CONFIG_SUFFIXES:
        raise LogConfigError(
            f"{path.name}: must end in .json, .yaml or .yml (logging.config.dictConfig) or "
            f".ini or .conf (logging.config.fileConfig)"
        )
    try:
        if suffix in (".ini", ".conf"):
            logging.config.fileConfig(path)
            return
        text = path.read_text()
        if suffix == ".json":
            try:
                config = json.loads(text)
            except ValueError as exc:
                raise LogConfigError(f"{path.name}: not valid JSON: {exc}") from None
        else:
            config = _read_yaml(path, text)
        if not isinstance(config, dict):
            raise LogConfigError(f"{path.name}: must hold a mapping (the dictConfig schema)")
        logging.config.dictConfig(config)
    except LogConfigError:
        raise
    except Exception as exc:  # dictConfig/fileConfig raise all sorts; say them in one line
        raise LogConfigError(f"{path.name}: {_describe(exc)}") from None


def _read_yaml(path: Path, text: str) -> Any:
    try:
        import yaml
    except ImportError:
        raise LogConfigError(
            f"{path.name}: reading YAML needs PyYAML (pip install pyyaml), or use .json"
        ) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise LogConfigError(f"{path.name}: not valid YAML: {_describe(exc)}") from None


def _describe(exc: BaseException) -> str:
    """An exception and its causes, on one line."""
    parts: list[str] = []
    seen: BaseException | None = exc
    while seen is not None and len(parts) < 4:
        text = " ".join(str(seen).split()) or type(seen).__name__
        if isinstance(seen, KeyError | AttributeError | ImportError | TypeError):
            text = f"{type(seen).__name__}: {text}"
        parts.append(text)
        seen = seen.__cause__ or seen.__context__
    return ": ".join(parts)


def enable_pgqueue_loggers() -> list[str]:
    """Undo ``disable_existing_loggers`` for pgqueue's own loggers; returns their names.

    ``dictConfig`` and ``fileConfig`` disable, by default, every logger that exists and that
    the configuration does not name: pgqueue's module-level loggers exist before the
    application is imported, so its import-time configuration would silence "worker started",
    database errors and executor errors. Only ``disabled`` is reset: levels, handlers and
    ``propagate`` that a configuration set for ``pgqueue`` still apply."""
    enabled: list[str] = []
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if (
            (name == "pgqueue" or name.startswith("pgqueue."))
            and isinstance(logger, logging.Logger)
            and logger.disabled
        ):
            logger.disabled = False
            enabled.append(name)
    return enabled


class _Buffer(logging.Handler):
    """Stands in for ``logging.lastResort`` while the application is imported: records logged
    then with no handler anywhere wait here for the configuration that follows."""

    def __init__(self, limit: int = 1000) -> None:
        super().__init__()
        self.limit = limit
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.records) < self.limit:
            self.records.append(record)


class AppLogging:
    """``pgq work``'s logging set-up, around importing the application.

    Before the import: the root level (``--log-level``, default INFO), then the
    ``--log-config`` file if any. After it, pgq work adds its own handler (``--log-format``)
    only if there was no file and importing the application left the root logger's handlers
    as they were: an application that configured logging at import (``dictConfig``,
    ``fileConfig``, ``basicConfig``, ``addHandler`` on the root) keeps its configuration. In
    every case pgqueue's loggers are re-enabled, every handler gets a :class:`ContextFilter`,
    an explicit ``--log-level`` is applied to the root again, and records logged during the
    import with no handler to take them are handed to the handlers now in place."""

    log = logging.getLogger("pgqueue.logs")

    def __init__(
        self, level: str | None = None, fmt: str | None = None, config_file: Path | None = None
    ) -> None:
        self.level = None if level is None else check_level(level)
        self.fmt = None if fmt is None else check_format(fmt)
        self.config_file = config_file
        self.configured_by: str | None = None  # "file", "app" or None (pgq work's own)

    def apply_file(self) -> None:
        """Set the root level and load ``config_file`` (LogConfigError if it is bad)."""
        logging.getLogger().setLevel(self.level or "INFO")
        if self.config_file is not None:
            load_config_file(self.config_file)

    @contextlib.contextmanager
    def importing_app(self) -> Iterator[None]:
        root = logging.getLogger()
        before = list(root.handlers)
        buffer = _Buffer()
        last_resort, logging.lastResort = logging.lastResort, buffer
        try:
            yield
        finally:
            logging.lastResort = last_resort
            if self.config_file is not None:
                self.configured_by = "file"
            elif root.handlers != before:
                self.configured_by = "app"
            if self.configured_by is None:
                configure(self.level or "INFO", self.fmt or "text")
            elif self.level is not None:
                root.setLevel(self.level)
            enable_pgqueue_loggers()
            install_context_filter()
            for record in buffer.records:
                # Already past its logger's level and filters: what Python would have printed
                # through lastResort then, even if the configuration disabled its logger since.
                logging.getLogger(record.name).callHandlers(record)
            if self.configured_by == "app" and self.fmt is not None:
                self.log.warning(
                    "the application configured logging when imported: --log-format is not used",
                    extra=fields(Action.LOG_FORMAT_UNUSED),
                )
