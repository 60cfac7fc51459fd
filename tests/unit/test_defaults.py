"""Each default is declared once in Python (a job option's in pgqueue/rules/options.py, a schedule's
timing in Schedule) and derived everywhere else; the database holds some of them again, as column
DEFAULTs and as the defaults of ``pgqueue.enqueue(...)``'s parameters (what SQL users get). These
tests hold ``migrations/schema.sql`` to the Python declarations."""

from __future__ import annotations

import re
from dataclasses import fields
from datetime import timedelta
from pathlib import Path
from typing import Any

from pgqueue.rules.job_specs import JobSpec
from pgqueue.rules.options import DEFAULTS
from pgqueue.rules.schedules import Schedule

SCHEMA = (Path(__file__).resolve().parents[2] / "migrations" / "schema.sql").read_text()


def _value(sql: str) -> Any:
    """A DEFAULT as Python: '...'::text -> str, '00:01:00'::interval -> timedelta, 5 -> int."""
    text = re.fullmatch(r"'(.*)'::text", sql)
    if text:
        return text.group(1)
    interval = re.fullmatch(r"'(\d+):(\d+):(\d+)'::interval", sql)
    if interval:
        hours, minutes, seconds = map(int, interval.groups())
        return timedelta(hours=hours, minutes=minutes, seconds=seconds)
    if sql in ("true", "false"):
        return sql == "true"
    return int(sql) if re.fullmatch(r"-?\d+", sql) else sql


def column_defaults(table: str) -> dict[str, Any]:
    body = SCHEMA.split(f"CREATE TABLE pgqueue.{table} (\n", 1)[1].split("\n);", 1)[0]
    found = {}
    for line in body.splitlines():
        match = re.match(r"\s+(\w+) [\w. ]+? DEFAULT (.+?)( NOT NULL)?,?$", line)
        if match and "(" not in match.group(2):  # now(), nextval(...): not a declared value
            found[match.group(1)] = _value(match.group(2))
    return found


def parameter_defaults(function: str) -> dict[str, Any]:
    signature = SCHEMA.split(f"CREATE FUNCTION pgqueue.{function}(", 1)[1].split(") RETURNS", 1)[0]
    found = {}
    for parameter in signature.split(", "):
        match = re.fullmatch(r"(\w+) [\w ]+? DEFAULT (.+)", parameter)
        if match and not match.group(2).startswith("NULL") and "jsonb" not in match.group(2):
            found[match.group(1)] = _value(match.group(2))
    return found


def test_the_jobs_columns_default_to_the_job_options_defaults() -> None:
    columns = column_defaults("jobs")
    assert {name: columns[name] for name in ("priority", "max_attempts")} == {
        name: DEFAULTS[name] for name in ("priority", "max_attempts")
    }


def test_pgqueue_enqueue_defaults_to_the_job_options_defaults() -> None:
    spec: dict[str, Any] = {f.name: f.default for f in fields(JobSpec)}
    assert parameter_defaults("enqueue") == {
        "queue": DEFAULTS["queue"],
        "priority": DEFAULTS["priority"],
        "max_attempts": DEFAULTS["max_attempts"],
        "unique_among": spec["unique_among"],
        "on_conflict": spec["on_conflict"],
    }


def test_the_schedules_columns_default_to_a_schedules_defaults() -> None:
    schedule: dict[str, Any] = {f.name: f.default for f in fields(Schedule)}
    columns = column_defaults("schedules")
    assert {
        name: columns[name]
        for name in ("timezone", "queue", "priority", "max_attempts", "missed", "grace",
                     "max_catch_up")
    } == {
        "timezone": schedule["tz"],
        "queue": schedule["queue"],
        "priority": schedule["priority"],
        "max_attempts": schedule["max_attempts"],
        "missed": schedule["missed"],
        "grace": timedelta(seconds=schedule["grace"]),
        "max_catch_up": schedule["max_catch_up"],
    }  # fmt: skip
    # A schedule's jobs get the job options' defaults (its task's, once registered).
    assert (schedule["queue"], schedule["priority"], schedule["max_attempts"]) == (
        DEFAULTS["queue"],
        DEFAULTS["priority"],
        DEFAULTS["max_attempts"],
    )
