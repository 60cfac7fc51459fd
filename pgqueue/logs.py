"""Logging set-up for the ``pgq`` processes: key=value lines (default) or JSON lines.

Every record carries the context it was logged in as extra ``key=value`` fields (unless the
message already says them): ``worker_id`` inside a worker (:func:`bind`), and ``job_id``,
``task``, ``attempt`` inside a job handler, so an application's own log lines in a handler can
be traced to their job and worker too.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

_bound: contextvars.ContextVar[Mapping[str, object]] = contextvars.ContextVar(
    "pgqueue_log_fields", default=MappingProxyType({})
)


def bind(**fields: object) -> contextvars.Token[Mapping[str, object]]:
    """Add fields to every record logged from this context (tasks and threads started from it
    inherit them)."""
    return _bound.set({**_bound.get(), **fields})


_job: contextvars.ContextVar[Any] | None = None  # pgqueue.worker.context's, bound lazily


def context_fields(message: str) -> dict[str, object]:
    """The current job's fields and the bound ones, minus those the message already states.

    Called by the formatters, so in the logging call's own context (handlers run synchronously)
    and once per record that is actually emitted."""
    global _job  # noqa: PLW0603 - a lazy import: pgqueue.worker imports this module
    if _job is None:
        from pgqueue.worker.context import _current

        _job = _current
    job = _job.get(None)
    bound = _bound.get()
    if job is None:
        fields: dict[str, object] = dict(bound)
    else:  # job fields first, then the worker's
        fields = {
            "job_id": job.id,
            "task": job.task,
            "attempt": job.attempt,
            "worker_id": job.worker_id,
            **bound,
        }
    if "=" in message:
        return {key: value for key, value in fields.items() if f"{key}=" not in message}
    return fields


class TextFormatter(logging.Formatter):
    """``time level logger: message key=value ...`` with the context's fields appended."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        fields = context_fields(record.message)
        if not fields:
            return text
        extra = " ".join(f"{key}={value}" for key, value in fields.items())
        head, newline, rest = text.partition("\n")  # keep tracebacks below the fields
        return f"{head} {extra}{newline}{rest}"


class JsonFormatter(logging.Formatter):
    """One JSON object per line; ``key=value`` pairs in the message become fields."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        entry: dict[str, object] = {
            # Log timestamps are the local observer's clock by nature; job times come from
            # the database.
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(),  # ok: log time
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        text, fields = split_fields(message)
        entry["msg"] = text
        entry.update(context_fields(message))
        entry.update(fields)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


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


def configure(level: str = "INFO", fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # psycopg's pool logs every reconnect attempt at WARNING; our services already say it.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
