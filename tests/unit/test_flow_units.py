"""Pure pieces of flow control: tick planning, rate limits, retry policies, option checks,
limit_by keys."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pgqueue import (
    CircuitBreaker,
    ConfigurationError,
    InvalidJobError,
    PgQueue,
    RateLimit,
    RetryPolicy,
)
from pgqueue.cli.work_options import parse_concurrency
from pgqueue.db.declarations import declarations
from pgqueue.handler.job_context import ClaimedJob
from pgqueue.rules.job_specs import make_spec
from pgqueue.rules.schedules import Schedule, next_tick, plan_ticks
from pgqueue.worker.completer import Completer
from pgqueue.worker.outcome import Outcome
from tests.unit.worker.fake_store import FakeStore

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
    completer = Completer(FakeStore())
    at = datetime.now(UTC)
    pending = ClaimedJob(3, "q", "t", {}, 1, 5, 7, 0, at, at)
    for job_id, token in ((1, 1), (2, 1), (3, 7)):
        completer.ledger.wake_on_exit(job_id, token)
    completer.submit(Outcome(pending, "ack"))  # written soon: kept
    completer.ledger.keep_wakes(
        {(2, 1)} | set(completer.held())
    )  # job 1's lease was lost: it gets no outcome
    assert completer.ledger.waking() == 2
    assert completer.ledger.to_wake([Outcome(pending, "ack")]) == ["q"]


def test_limit_by_takes_each_jobs_key_from_an_argument():
    pgq = PgQueue("postgresql://unused")

    @pgq.task(name="t.sync", limit_by="customer_id")
    def sync(customer_id: int, full: bool = False) -> None: ...

    @pgq.task(name="t.order", limit_by="order.customer.id")
    def order(order: dict[str, Any], tenant: str = "shared") -> None: ...

    @pgq.task(name="t.default", limit_by="tenant")
    def default(n: int, tenant: str = "shared") -> None: ...

    assert sync.s(42).spec().concurrency_key == "42"  # positional, an int
    assert sync.s(customer_id="acme").spec().concurrency_key == "acme"
    assert order.s({"customer": {"id": 7}}).spec().concurrency_key == "7"
    assert order.s({"customer": None}).spec().concurrency_key is None  # no key
    assert order.s({}).spec().concurrency_key is None
    assert default.s(1).spec().concurrency_key == "shared"  # the argument's default
    # An explicit key wins; enqueue by name applies the registered task's limit_by too.
    assert sync.s(42, concurrency_key="other").spec().concurrency_key == "other"
    assert pgq.spec("t.sync", {"customer_id": 9}, {}).concurrency_key == "9"
    with pytest.raises(InvalidJobError, match=r"limit_by='order.customer.id'.*list, not an obj"):
        order.s({"customer": [1]}).spec()
    with pytest.raises(InvalidJobError, match="a string or an integer, got float"):
        sync.s(1.5).spec()
    with pytest.raises(InvalidJobError, match="got bool"):
        sync.s(True).spec()
    with pytest.raises(InvalidJobError, match="at most 1000 characters"):
        sync.s("x" * 1001).spec()


def test_limit_by_is_checked_when_the_task_is_declared():
    pgq = PgQueue("postgresql://unused")
    with pytest.raises(ConfigurationError, match="has no argument 'customer'"):
        pgq.task(name="t.bad", limit_by="customer.id")(lambda account: None)
    bads: tuple[Any, ...] = ("", "a..b", "customer-id", 3)  # 3: not a name at all
    for bad in bads:
        with pytest.raises(ConfigurationError, match="must name an argument"):
            pgq.task(name="t.bad", limit_by=bad)(lambda customer_id: None)
    # A task taking **kwargs may be keyed by any of them.
    keyed = pgq.task(name="t.any", limit_by="tenant")(lambda **kw: None)
    assert keyed.s(tenant="b").spec().concurrency_key == "b"


def test_declared_key_limits():
    """What a worker writes at start-up: jobs with a key run one at a time per key unless the
    task says otherwise; keys from limit_by are partitions, limited only as declared."""
    pgq = PgQueue("postgresql://unused")
    pgq.task(name="t.keyed", key_rate_limit="10/s")(lambda n: None)
    pgq.task(name="t.by", limit_by="n", key_rate_limit=RateLimit(5, burst=2))(lambda n: None)
    pgq.task(name="t.both", limit_by="n", key_limit=3)(lambda n: None)
    pgq.task(name="t.plain")(lambda n: None)
    step = next(declarations(pgq))
    assert step.name == "sync_task_limits"
    rows = dict(
        zip(step.params["tasks"], zip(step.params["key_limits"], step.params["key_rates"],
                                      step.params["key_bursts"], strict=True), strict=True)
    )  # fmt: skip
    assert rows == {"t.both": (3, None, None), "t.by": (None, 5.0, 2.0), "t.keyed": (1, 10.0, 10.0)}
