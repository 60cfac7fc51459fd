"""A claim's rows are decoded by column name: the store puts each row's columns in the order
ClaimedJob names them, whatever order the statement returns them in, working the positions out
once per result (and at no cost per row when the statement's order is already that one)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import psycopg
import pytest

from pgqueue.handler.job_context import CLAIMED_COLUMNS, ClaimedJob
from pgqueue.worker.store import FLOW_CLAIM_COLUMNS, ROWS_BY_NAME, rows_named


def cursor(*names: str) -> Any:
    return SimpleNamespace(description=[SimpleNamespace(name=name) for name in names])


def test_the_claimed_columns_are_the_fields_of_a_claimed_job():
    assert tuple(f for f in ClaimedJob._fields if f != "leased_at") == CLAIMED_COLUMNS
    assert FLOW_CLAIM_COLUMNS[: len(CLAIMED_COLUMNS)] == CLAIMED_COLUMNS
    assert set(ROWS_BY_NAME) == {"claim_jobs", "claim_flow"}


def test_columns_in_the_expected_order_are_plain_tuples():
    make = rows_named(("id", "queue", "task"))(cursor("id", "queue", "task", "extra"))
    assert make is tuple  # psycopg's own tuple rows: nothing added per row


def test_columns_in_another_order_are_put_in_the_named_order():
    make = rows_named(("id", "queue", "task"))(cursor("task", "id", "other", "queue"))
    assert make(("send", 7, "x", "emails")) == (7, "emails", "send")


def test_a_missing_column_is_named():
    factory = rows_named(("id", "lease_token", "queue"))
    with pytest.raises(psycopg.ProgrammingError, match="the claim returned no column lease_token"):
        factory(cursor("id", "queue"))


def test_a_claimed_job_reads_a_decoded_row_by_its_field_names():
    values = {name: f"<{name}>" for name in FLOW_CLAIM_COLUMNS}
    shuffled = list(reversed(FLOW_CLAIM_COLUMNS))
    row = rows_named(FLOW_CLAIM_COLUMNS)(cursor(*shuffled))(tuple(values[n] for n in shuffled))
    job = ClaimedJob.from_row(row, 1.5)
    assert job._asdict() == {**{n: values[n] for n in CLAIMED_COLUMNS}, "leased_at": 1.5}
