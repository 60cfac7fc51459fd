"""Array literals for the claim's list parameters (the database reads them back in
tests/integration/test_claim_params.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from pgqueue.worker.array_params import array_literal, with_array_literals


def test_elements_are_written_as_postgresql_reads_them():
    at = datetime(2026, 12, 6, 13, 46, 41, 123456, tzinfo=UTC)
    assert array_literal([None, 3, True, at]) == '{NULL,3,t,"2026-12-06 13:46:41.123456+00:00"}'
    assert array_literal(["a,b", 'c"d', "e\\f", "NULL", ""]) == (
        '{"a,b","c\\"d","e\\\\f","NULL",""}'
    )
    assert array_literal([]) == "{}"


def test_a_list_of_another_type_is_left_to_psycopg():
    assert array_literal([Decimal(1)]) is None
    assert array_literal([[1, 2]]) is None
    params = {"ids": [Decimal(1)], "queues": ["q"], "limit": 3}
    assert with_array_literals(params) == {"ids": [Decimal(1)], "queues": '{"q"}', "limit": 3}
