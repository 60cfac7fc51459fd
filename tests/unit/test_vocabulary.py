"""pgqueue's words (``pgqueue/rules/vocabulary.py``) are the database's: each list of values is
held against the CHECK constraint, view or query of ``migrations/schema.sql`` and
``pgqueue/db/queries/`` that spells it in SQL."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pgqueue.db import search, views, workflow_views
from pgqueue.rules import options
from pgqueue.rules.vocabulary import (
    BREAKER_STATES,
    CANCEL_REASONS,
    FINISHED_STATES,
    HISTORY_STATES,
    JOB_STATES,
    LIVE_STATES,
    PLACE_TABLES,
    PLACES,
    WORKFLOW_STATES,
    cancel_reason,
)

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = (ROOT / "migrations" / "schema.sql").read_text()
QUERIES = "\n".join(
    p.read_text() for p in sorted((ROOT / "pgqueue" / "db" / "queries").glob("*.sql"))
)


def checked_values(constraint: str) -> tuple[str, ...]:
    """The values a CHECK constraint of schema.sql allows (``col = ANY (ARRAY[...])`` or
    ``col <@ ARRAY[...]``), in its order."""
    match = re.search(rf"CONSTRAINT {constraint} CHECK \((.*)\)", SCHEMA)
    assert match, f"no constraint {constraint} in schema.sql"
    return tuple(re.findall(r"'([a-z_ ]+)'::text", match.group(1)))


def query(name: str) -> str:
    return QUERIES.split(f"-- name: {name}\n", 1)[1].split("-- name: ", 1)[0]


@pytest.mark.parametrize(
    ("constraint", "values"),
    [
        ("jobs_state_check", LIVE_STATES),
        ("job_history_state_check", HISTORY_STATES),
        ("idempotency_keys_state_check", FINISHED_STATES),
        ("jobs_unique_states_check", FINISHED_STATES),
        ("circuit_breakers_state_check", BREAKER_STATES),
    ],
)
def test_each_list_of_states_is_the_check_constraint(constraint, values):
    assert checked_values(constraint) == values


def test_a_job_state_is_a_live_one_a_finished_one_or_nothing_else():
    assert set(JOB_STATES) == set(LIVE_STATES) | set(FINISHED_STATES)
    assert set(HISTORY_STATES) | {"dead"} == set(FINISHED_STATES)
    assert len(JOB_STATES) == len(set(JOB_STATES))


def test_the_places_are_the_ones_job_outcome_reports_and_search_reads():
    assert set(re.findall(r"'(\w+)'", query("job_outcome"))) >= set(PLACES)
    assert set(PLACES) == {*PLACE_TABLES, "gone"}
    for table in PLACE_TABLES.values():
        assert f"CREATE TABLE pgqueue.{table} (" in SCHEMA
    assert tuple(PLACE_TABLES) == search.PLACES


def test_the_workflow_states_are_the_ones_workflow_overview_derives():
    # the last definition (the first is a placeholder the views that use it are created on)
    view = SCHEMA.split("VIEW pgqueue.workflow_overview AS")[-1].split(";", 1)[0]
    derived = re.findall(r"THEN '(\w+)'::text|ELSE '(\w+)'::text", view)
    assert {value for pair in derived for value in pair if value} == set(WORKFLOW_STATES)


def test_the_code_lists_states_from_the_vocabulary_only():
    assert search.STATES == JOB_STATES
    assert options.UNIQUE_STATES == FINISHED_STATES
    assert workflow_views.STATES == WORKFLOW_STATES
    assert set(views.JOB_STATES) <= set(LIVE_STATES)


def test_a_cancel_reason_from_another_process_is_checked():
    assert [cancel_reason(reason) for reason in CANCEL_REASONS] == list(CANCEL_REASONS)
    with pytest.raises(ValueError, match="not a cancel reason: 'bored'"):
        cancel_reason("bored")
