"""The job input's one declaration (``pgqueue/db/job_rows.py``) against ``migrations/schema.sql``:
the composite ``pgqueue.job_input``, the ``jobs`` columns, the function that writes them, and
the statements generated from it."""

from __future__ import annotations

import re
from pathlib import Path

from pgqueue.db import job_rows
from pgqueue.db.job_rows import JOB_INPUT, Kind
from pgqueue.db.queries import query
from pgqueue.rules.job_specs import JobSpec

SCHEMA = (Path(__file__).resolve().parents[2] / "migrations" / "schema.sql").read_text("utf-8")


def _attributes(statement: str) -> list[tuple[str, str]]:
    """(name, type) of each line ``name type,`` of a CREATE TABLE/TYPE body (constraints out)."""
    found = []
    for line in statement.splitlines():
        match = re.match(
            r"\s+(\w+) ((?:pgqueue\.)?[a-z][a-z_ ]*(?:\[\])?)(?: DEFAULT .*?)?(?: NOT NULL)?,?$",
            line,
        )
        if match and match.group(1) != "CONSTRAINT":
            found.append((match.group(1), match.group(2)))
    return found


# domain -> its base type: the columns of jobs that hold a rule are typed as its domain (0027).
DOMAINS = dict(re.findall(r"^CREATE DOMAIN (pgqueue\.\w+) AS (.+)$", SCHEMA, re.MULTILINE))


def _block(start: str, end: str = ";\n") -> str:
    begin = SCHEMA.index(start)
    return SCHEMA[begin : SCHEMA.index(end, begin)]


def test_the_composite_is_the_table_in_order():
    composite = _attributes(_block("CREATE TYPE pgqueue.job_input AS ("))
    assert composite == [(c.name, c.sql_type) for c in JOB_INPUT]


def test_every_stored_attribute_is_a_jobs_column_of_the_same_type():
    columns = {
        name: DOMAINS.get(kind, kind)
        for name, kind in _attributes(_block("CREATE TABLE pgqueue.jobs ("))
    }
    assert "pgqueue.jobs_state" in DOMAINS
    for column in JOB_INPUT:
        if column.stored:
            assert columns.get(column.name) == column.sql_type, column.name
        else:
            assert column.name not in columns, f"{column.name} is stored: mark it so"


def test_insert_jobs_writes_every_stored_attribute():
    # The one function that lists the stored columns: a new option needs a new version of it.
    body = _block("CREATE FUNCTION pgqueue.insert_jobs(jobs pgqueue.job_input[])", "$$;\n")
    match = re.search(r"INSERT INTO pgqueue\.jobs AS j \(([^)]*)\)", body)
    assert match is not None
    written = {name.strip() for name in match.group(1).split(",")}
    assert {c.name for c in JOB_INPUT if c.stored} <= written
    for column in JOB_INPUT:
        if column.kind is Kind.OPTION:
            assert f"u.{column.name}" in body, column.name


def test_each_statement_writes_the_options_and_reads_them_by_name():
    options = [c.name for c in JOB_INPUT if c.kind is Kind.OPTION]
    assert options, "result_ttl, meta and tags at least"
    for name in ("insert_job", "copy_jobs", "insert_plain_jobs"):
        for option in options:
            assert re.search(rf"\b{option}\b", query(name)), (name, option)
    for name in ("enqueue_input", "insert_jobs", "enqueue_jobs_in_order"):
        sql = query(name)
        assert "::pgqueue.job_input" in sql
        for column in JOB_INPUT:
            assert f"%({column.name})s" in sql, (name, column.name)
    assert "result_ttl" not in query("copy_ready_jobs")


def test_rows_follow_the_declared_order():
    spec = JobSpec("t", '{"a": 1}', "q", 3, 7, meta_json='{"m": 1}', tags=("x",))
    row = job_rows.input_row(spec, 42, None, "ready")
    by_name = dict(zip(job_rows.NAMES, row, strict=True))
    assert by_name["id"] == 42 and by_name["state"] == "ready" and by_name["args"] == '{"a": 1}'
    assert by_name["priority"] == 3 and by_name["max_attempts"] == 7 and by_name["tags"] == ["x"]
    arrays = job_rows.input_arrays([row])
    assert arrays["tags"] == ['["x"]'] and arrays["meta"] == ['{"m": 1}']
    copy_columns = query("copy_jobs").split("(", 1)[1].split(")", 1)[0].split(", ")
    copied = dict(zip(copy_columns, job_rows.copy_row(spec, 42, None, "ready"), strict=True))
    assert copied["meta"] == '{"m": 1}' and copied["id"] == 42 and copied["queue"] == "q"
    params = job_rows.single_params(spec)
    assert set(params) == {*re.findall(r"%\((\w+)\)s", query("insert_job"))}
    assert not job_rows.is_plain_ready(spec)  # it has metadata
    assert job_rows.ready_row(spec, 1) is None
    assert job_rows.ready_row(JobSpec("t", "{}", "q", 0, 5), 1) == (1, "q", "t", "{}", 0, 5)
    assert job_rows.is_plain_ready(JobSpec("t", "{}", "q", 0, 5))


def test_a_whole_batchs_rows_are_each_jobs_rows():
    from datetime import UTC, datetime, timedelta

    now = datetime.now(UTC)
    plain = [JobSpec("t", f'{{"i": {i}}}', "q", i % 3, 5) for i in range(4)]
    assert job_rows.all_plain_ready(plain) and job_rows.all_now_unkeyed(plain)
    assert job_rows.ready_rows(plain, [7, 8, 9, 10]) == [
        job_rows.ready_row(spec, job_id) for spec, job_id in zip(plain, [7, 8, 9, 10], strict=True)
    ]
    options = [
        JobSpec("t", "{}", "q", 0, 5, meta_json='{"m": 1}', tags=("x",)),
        JobSpec("t", "{}", "q", 0, 5, result_ttl=timedelta(hours=1), caused_by=3),
        JobSpec("t", "{}", "q", 0, 5, concurrency_key="c"),
        JobSpec("t", "{}", "q", 0, 5, tags=()),
    ]
    assert job_rows.all_now_unkeyed(options)
    for spec in options:
        assert not job_rows.all_plain_ready([*plain, spec])
    assert job_rows.copy_rows(options, [1, 2, 3, 4], now, "ready") == [
        job_rows.copy_row(spec, job_id, now, "ready")
        for spec, job_id in zip(options, [1, 2, 3, 4], strict=True)
    ]
    assert not job_rows.all_now_unkeyed([*options, JobSpec("t", "{}", "q", 0, 5, run_at=now)])
    assert not job_rows.all_now_unkeyed([JobSpec("t", "{}", "q", 0, 5, idempotency_key="k")])
