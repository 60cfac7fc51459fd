"""Numbers out of range never escape as a raw error (OverflowError, a database error, a
traceback): enqueue raises InvalidJobError naming the option and its range before writing
anything, and the CLI answers with a usage error naming the option and its range."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from typer.testing import CliRunner

from pgqueue import InvalidJobError, PgQueue
from pgqueue.cli.app import app as cli
from tests.helpers import scalar

runner = CliRunner()
HUGE_ID = 2**70

# (options, words the error must contain)
BAD_OPTIONS: list[tuple[dict[str, object], str]] = [
    ({"delay": 1e300}, "delay must be between 0 and 1000 years"),
    ({"delay": 10**400}, "delay must be between 0 and 1000 years"),
    ({"delay": timedelta.max}, "delay must be between 0 and 1000 years"),
    ({"delay": -1}, "delay must be between 0 and 1000 years"),
    ({"delay": float("nan")}, "delay must be between 0 and 1000 years"),
    ({"result_ttl": 1e300}, "result_ttl must be between 0 and 1000 years"),
    ({"result_ttl": timedelta(days=10**8)}, "result_ttl must be between 0 and 1000 years"),
    (
        {"idempotency_key": "k", "unique_for": 1e300},
        "unique_for must be between 0 and 1000 years",
    ),
    ({"wait_if_full": 1e300}, "wait_if_full must be between 0 and 1000 years"),
    ({"idempotency_key": "k", "throttle": 1e300}, "throttle must be between 0 and 1000 years"),
    ({"idempotency_key": "k", "throttle": float("inf")}, "throttle must be between 0 and 1000"),
    ({"depends_on": [HUGE_ID]}, "between 1 and 9223372036854775807"),
    ({"depends_on": [1, 0]}, "between 1 and 9223372036854775807"),
    ({"priority": 2**70}, "priority must be between -32768 and 32767"),
    ({"max_attempts": 2**70}, "max_attempts must be between 1 and 1000000"),
]


def _label(value: object) -> str:
    return (" ".join(value) if isinstance(value, list) else repr(value))[:40]


@pytest.mark.parametrize(("options", "words"), BAD_OPTIONS, ids=_label)
def test_enqueue_rejects_out_of_range_numbers_before_writing(dsn, options, words):
    pgq = PgQueue(dsn)
    try:
        with pytest.raises(InvalidJobError) as caught:
            pgq.enqueue("noop", {}, **options)
        assert words in str(caught.value)
        with pytest.raises(InvalidJobError) as caught:
            pgq.enqueue_many([pgq.spec("noop", {}, options)])
        assert words in str(caught.value)
    finally:
        pgq.close()
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.jobs") == 0


def test_far_but_storable_values_are_stored(dsn):
    pgq = PgQueue(dsn)
    try:
        far = pgq.enqueue("noop", {}, delay=timedelta(days=365 * 999))
        latest = pgq.enqueue("noop", {}, run_at=datetime(9999, 12, 31, 23, 59, tzinfo=UTC))
        kept = pgq.enqueue("noop", {}, result_ttl=timedelta(days=365 * 999))
        # The longest throttle: one period since 1970, its key kept for 999 years.
        throttled = pgq.enqueue("noop", {}, idempotency_key="t", throttle=timedelta(days=365 * 999))
    finally:
        pgq.close()
    years = scalar(
        dsn,
        "SELECT extract(year FROM run_at) - extract(year FROM now()) FROM pgqueue.jobs"
        " WHERE id = %s",
        (far,),
    )
    assert years >= 998
    assert scalar(dsn, "SELECT extract(year FROM run_at) FROM pgqueue.jobs WHERE id = %s",
                  (latest,)) == 9999  # fmt: skip
    assert scalar(dsn, "SELECT result_ttl FROM pgqueue.jobs WHERE id = %s", (kept,)) is not None
    assert (
        scalar(dsn, "SELECT idempotency_key FROM pgqueue.jobs WHERE id = %s", (throttled,))
        == "t@1970-01-01T00:00:00Z"
    )


# (command, the option the usage error names)
BAD_COMMANDS: list[tuple[list[str], str]] = [
    (["dlq", "list", "--limit", "-1"], "--limit"),
    (["dlq", "list", "--limit", str(HUGE_ID)], "--limit"),
    (["dlq", "replay", "--all", "--batch-size", "0"], "--batch-size"),
    (["dlq", "replay", "--id", str(HUGE_ID)], "--id"),
    (["workflow", "list", "--limit", "-1"], "--limit"),
    (["workflow", "list", "--limit", "0"], "--limit"),
    (["workflow", "show", str(HUGE_ID)], "ID"),
    (["jobs", "list", "--limit", str(HUGE_ID)], "--limit"),
    (["jobs", "list", "--limit", "-5"], "--limit"),
    (["jobs", "show", str(HUGE_ID)], "job_id"),
    (["cancel", str(HUGE_ID)], "job_ids"),
    (["retry", "0"], "job_ids"),
    (["retention", "prune", "--batch-size", "-1"], "--batch-size"),
    (["enqueue", "noop", "--depends-on", str(HUGE_ID)], "--depends-on"),
]


@pytest.mark.parametrize(("command", "option"), BAD_COMMANDS, ids=_label)
def test_cli_numbers_out_of_range_are_usage_errors(dsn, command, option):
    result = runner.invoke(cli, [*command, "--dsn", dsn])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "psycopg" not in result.output
    # The message as one line, without the frame rich draws around it.
    text = " ".join(re.sub("[│╭╮╰╯─]", " ", result.output).split())
    assert f"Invalid value for '{option}': must be between" in text, text


def test_api_listing_limits_are_checked_before_any_query():
    from pgqueue import PgQueue

    pgq = PgQueue("host=/nonexistent")  # never reached: the limit is refused first
    for call in (lambda: pgq.admin.dead_letters(limit=-1), lambda: pgq.workflows(limit=0)):
        with pytest.raises(InvalidJobError, match="limit must be between 1 and 1000000"):
            call()
