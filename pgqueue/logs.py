"""Logging set-up for the ``pgq`` processes: key=value lines (default) or JSON lines."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime


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
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # psycopg's pool logs every reconnect attempt at WARNING; our services already say it.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
