"""Pure pieces of flow control: tick planning, rate limits, retry policies, option checks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pgqueue import CircuitBreaker, ConfigurationError, InvalidJobError, RateLimit, RetryPolicy
from pgqueue.cli.work_options import parse_concurrency
from pgqueue.enqueue import make_spec
from pgqueue.job_context import ClaimedJob
from pgqueue.schedules import Schedule, next_tick, plan_ticks
from pgqueue.worker.completer import Completer
from pgqueue.worker.outcome import Outcome

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def test_next_tick_in_a_time_zone_across_dst():
    # 03:00 Paris every day: 02:00 UTC in winter, 01:00 UTC in summer.
    assert next_tick("0 3 * * *", "Europe/Paris", T0) == datetime(2026, 12, 1, 2, tzinfo=UTC)
    summer = datetime(2026, 7, 1, 12, tzinfo=UTC)
    assert next_tick("0 3 * * *", "Europe/Paris", summer) == datetime(2026, 7, 2, 1, tzinfo=UTC)


def test_seconds_field_is_last():
    assert next_tick("* * * * * */10", "UTC", T0) == T0 + timedelta(seconds=10)


def test_on_time_tick_runs_under_both_policies():
    for missed in ("skip", "catch_up"):
        plan = plan_ticks(
            "* * * * *", "UTC", T0, T0 + timedelta(seconds=2), missed=missed,
            grace=timedelta(minutes=1), max_catch_up=5,
        )  # fmt: skip
        assert plan.ticks == [T0] and plan.skipped == 0
        assert plan.next_tick == T0 + timedelta(minutes=1)


def test_skip_drops_missed_ticks_and_runs_the_latest_within_grace():
    now = T0 + timedelta(minutes=10, seconds=5)
    plan = plan_ticks(
        "* * * * *", "UTC", T0, now, missed="skip", grace=timedelta(minutes=1), max_catch_up=5
    )
    assert plan.ticks == [T0 + timedelta(minutes=10)] and plan.skipped == 10
    late = plan_ticks(
        "* * * * *", "UTC", T0, now, missed="skip", grace=timedelta(seconds=1), max_catch_up=5
    )
    assert late.ticks == [] and late.skipped == 11


def test_catch_up_enqueues_the_latest_missed_ticks_up_to_the_cap():
    now = T0 + timedelta(minutes=10, seconds=5)
    plan = plan_ticks(
        "* * * * *", "UTC", T0, now, missed="catch_up", grace=timedelta(0), max_catch_up=3
    )
    assert plan.ticks == [T0 + timedelta(minutes=m) for m in (8, 9, 10)]
    assert plan.skipped == 8


def test_a_very_long_outage_does_not_walk_every_tick():
    now = T0 + timedelta(days=30)
    plan = plan_ticks(
        "* * * * * *", "UTC", T0, now, missed="skip", grace=timedelta(minutes=1), max_catch_up=1
    )
    assert plan.ticks == [now - timedelta(seconds=1)] or plan.ticks == [now]
    assert plan.next_tick == now + timedelta(seconds=1)


def test_schedule_validation():
    with pytest.raises(ConfigurationError, match="invalid cron expression"):
        Schedule("s", "every day", "t")
    with pytest.raises(ConfigurationError, match="unknown time zone"):
        Schedule("s", "* * * * *", "t", tz="Mars/Olympus")
    with pytest.raises(ConfigurationError, match="missed must be"):
        Schedule("s", "* * * * *", "t", missed="sometimes")


def test_rate_limit_parsing():
    assert RateLimit.parse("20/s") == RateLimit(20.0, 20.0)
    per_minute = RateLimit.parse("120/m")
    assert per_minute.rate == 2.0 and per_minute.bucket == 120.0
    assert RateLimit.parse("20/s", burst=40).bucket == 40
    assert RateLimit(0.5).bucket == 1.0
    for bad in ("fast", "20/fortnight", "-1/s", 0):
        with pytest.raises(ConfigurationError):
            RateLimit.parse(bad)


def test_circuit_breaker_validation():
    with pytest.raises(ConfigurationError):
        CircuitBreaker(failure_threshold=0)
    with pytest.raises(ConfigurationError):
        CircuitBreaker(min_calls=0)


def test_retry_policy():
    policy = RetryPolicy.build(retry_on=(OSError,), no_retry_on=PermissionError)
    assert policy.retryable(ConnectionError())
    assert not policy.retryable(PermissionError())  # no_retry_on wins
    assert not policy.retryable(ValueError())
    assert RetryPolicy.build().retryable(ValueError())  # default: every Exception
    with pytest.raises(ConfigurationError, match="exception classes"):
        RetryPolicy.build(retry_on=("OSError",))
    by_error = RetryPolicy.build(
        backoff=lambda attempt, error: 5 if isinstance(error, OSError) else 1
    )
    assert by_error.delay(1, OSError()) == 5 and by_error.delay(1, ValueError()) == 1
    assert RetryPolicy.build(backoff=lambda attempt: timedelta(minutes=attempt)).delay(2) == 120
    assert RetryPolicy.build(backoff=lambda attempt: -3).delay(1) == 0


def test_concurrency_ranges():
    assert parse_concurrency("16") == (16, 16)
    assert parse_concurrency("4:64") == (4, 64)
    for bad in ("0", "8:4", "a:b", "4:"):
        with pytest.raises(ConfigurationError):
            parse_concurrency(bad)


def test_unique_options_need_a_key_and_known_states():
    spec = make_spec(
        "t", {}, {"idempotency_key": "k", "unique_for": 60, "unique_states": "dead"},
        defaults={}, payload_limit=1000,
    )  # fmt: skip
    assert spec.unique_for == timedelta(seconds=60) and spec.unique_states == ("dead",)
    with pytest.raises(InvalidJobError, match="need an idempotency_key"):
        make_spec("t", {}, {"unique_for": 60}, defaults={}, payload_limit=1000)
    with pytest.raises(InvalidJobError, match="unique_states must name final states"):
        make_spec(
            "t", {}, {"idempotency_key": "k", "unique_for": 1, "unique_states": ["running"]},
            defaults={}, payload_limit=1000,
        )  # fmt: skip
    with pytest.raises(InvalidJobError, match="needs unique_for"):
        make_spec(
            "t", {}, {"idempotency_key": "k", "unique_states": ["dead"]},
            defaults={}, payload_limit=1000,
        )  # fmt: skip
    with pytest.raises(InvalidJobError, match="concurrency_key"):
        make_spec("t", {}, {"concurrency_key": ""}, defaults={}, payload_limit=1000)


def test_completer_forgets_wake_ups_of_jobs_it_will_never_write():
    completer = Completer(db=None)  # type: ignore[arg-type]
    at = datetime.now(UTC)
    pending = ClaimedJob(3, "q", "t", {}, 1, 5, 7, 0, at, at)
    for job_id, token in ((1, 1), (2, 1), (3, 7)):
        completer.wake_on_exit(job_id, token)
    completer.submit(Outcome(pending, "ack"))  # written soon: kept
    completer.keep_wakes({(2, 1)})  # job 1's lease was lost: it gets no outcome
    assert completer.waking() == 2
    assert completer._to_wake([Outcome(pending, "ack")]) == ["q"]
