from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pgqueue.errors import InvalidJobError
from pgqueue.rules.durations import format_duration, parse_duration
from pgqueue.rules.job_specs import JobId, make_spec
from pgqueue.rules.options import check_options


def spec(options, defaults=None, args=None):
    return make_spec("t", args or {}, options, defaults=defaults or {}, payload_limit=1000)


def test_defaults_then_call_options():
    s = spec({"priority": 3}, defaults={"queue": "emails", "priority": 1, "max_attempts": 7})
    assert (s.queue, s.priority, s.max_attempts) == ("emails", 3, 7)


def test_unknown_option_is_named():
    with pytest.raises(InvalidJobError, match=r"unknown enqueue option.*prioroty"):
        check_options({"prioroty": 1})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"priority": 40000}, "priority must be between"),
        ({"priority": "high"}, "priority must be an integer"),
        ({"priority": True}, "priority must be an integer"),
        ({"max_attempts": 0}, "max_attempts must be between"),
        ({"delay": -1}, "must not be negative"),
        ({"delay": float("nan")}, "finite"),
        ({"delay": "soon"}, "seconds or a timedelta"),
        ({"run_at": datetime(2030, 1, 1)}, "timezone-aware"),
        ({"run_at": "2030-01-01"}, "must be a datetime"),
        ({"run_at": datetime.now(UTC), "delay": 3}, "either run_at or delay"),
        ({"queue": ""}, "must not be empty"),
        ({"idempotency_key": ""}, "idempotency_key"),
        ({"idempotency_key": 5}, "idempotency_key"),
    ],
)
def test_bad_options(options, message):
    with pytest.raises(InvalidJobError, match=message):
        spec(options)


def test_delay_accepts_seconds_and_timedelta():
    assert spec({"delay": 2}).delay == timedelta(seconds=2)
    assert spec({"delay": timedelta(minutes=1)}).delay == timedelta(minutes=1)


def test_args_must_be_a_mapping():
    with pytest.raises(InvalidJobError, match="JSON object"):
        make_spec("t", [1], {}, defaults={}, payload_limit=100)  # type: ignore[arg-type]


def test_job_id_is_an_int_that_knows_if_it_was_created():
    job = JobId(5, created=False)
    assert job == 5 and not job.created and repr(job) == "JobId(5, created=False)"
    assert str(job) == f"{job}" == "5"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30", 30), ("30s", 30), ("250ms", 0.25), ("5m", 300), ("1.5h", 5400), ("2d", 172800)],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5x", "-3s", "s", "1e400"])
def test_parse_duration_rejects(text):
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


def test_format_duration():
    assert [format_duration(s) for s in (0.25, 5, 90, 300, 7200)] == [
        "250ms",
        "5s",
        "90s",
        "5m",
        "2h",
    ]


def test_with_args_json_copies_every_other_field():
    from dataclasses import fields, replace

    from pgqueue.rules.job_specs import JobSpec

    values: list[Any] = [object() for _ in fields(JobSpec)]  # distinct, so any mix-up shows
    template = JobSpec(*values)
    assert template.with_args_json("{}") == replace(template, args_json="{}")


def test_every_job_option_is_a_field_of_the_job() -> None:
    """An option is declared once (pgqueue/rules/options.py) and reaches the job by its name."""
    from dataclasses import fields

    from pgqueue.rules.job_specs import JobSpec
    from pgqueue.rules.options import OPTION_NAMES, JobOptions

    assert JobOptions.__optional_keys__ == OPTION_NAMES
    # Metadata travels as JSON text, as args do (validated and serialised once).
    assert {f.name for f in fields(JobSpec)} | {"meta"} >= OPTION_NAMES
    assert "meta_json" in {f.name for f in fields(JobSpec)}
    job = spec({"priority": 3, "delay": 5, "wait_if_full": 2, "idempotency_key": "k"})
    assert (job.priority, job.delay, job.wait_if_full, job.idempotency_key) == (
        3,
        timedelta(seconds=5),
        2.0,
        "k",
    )


def test_unknown_task_options_are_named() -> None:
    from pgqueue import ConfigurationError, PgQueue

    pgq = PgQueue("postgresql://nobody@localhost/nothing")
    options: dict[str, Any] = {"queu": "math"}
    with pytest.raises(ConfigurationError, match=r"unknown task option\(s\): queu \(known: "):
        pgq.task(**options)(lambda: None)
