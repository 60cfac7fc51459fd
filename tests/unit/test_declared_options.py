"""``pgq enqueue``'s and ``pgq jobs search``'s options are made from the declarations they mirror:
the job options (pgqueue/rules/options.py) and the search filters (JobFilter). These tests fail
when the two drift: a declared option without a flag, a flag without a declaration, help text
that is not the declaration's, a value that lands in the wrong keyword."""

from __future__ import annotations

from dataclasses import fields
from datetime import datetime, timedelta
from typing import Any

import pytest
import typer.main

from pgqueue.cli.app import app
from pgqueue.cli.job_options import job_options
from pgqueue.cli.search_cmd import filters
from pgqueue.db.search import JobFilter
from pgqueue.errors import InvalidJobError
from pgqueue.rules.flags import flags_of
from pgqueue.rules.options import DEFAULTS, OPTION_NAMES, JobOptions

# The commands' own options and arguments: not job options, not search filters.
ENQUEUE_OWN = {"task", "args", "allow_unknown", "dsn", "as_json"}
SEARCH_OWN = {"limit", "after", "timeout", "dsn", "read_dsn", "fmt", "as_json"}
# Bare switches a declaration's flag adds (--unique sets unique_by=True).
SWITCHES = {"unique"}


def command(*path: str) -> Any:
    found: Any = typer.main.get_command(app)
    for name in path:
        found = found.commands[name]
    return found


def parse(path: tuple[str, ...], *argv: str) -> dict[str, Any]:
    """What typer passes to the command for this command line."""
    found = command(*path)
    with found.make_context(path[-1], list(argv)) as ctx:
        return dict(ctx.params)


def enqueue_kwargs(*argv: str) -> dict[str, Any]:
    received = parse(("enqueue",), "some.task", *argv)
    return job_options({k: v for k, v in received.items() if k not in ENQUEUE_OWN})


def search_kwargs(*argv: str) -> dict[str, Any]:
    received = parse(("jobs", "search"), *argv)
    return filters({k: v for k, v in received.items() if k not in SEARCH_OWN})


def test_every_job_option_is_a_flag_of_pgq_enqueue_and_every_flag_an_option() -> None:
    assert set(flags_of(JobOptions)) == OPTION_NAMES
    assert set(parse(("enqueue",), "t")) == OPTION_NAMES | SWITCHES | ENQUEUE_OWN


def test_every_search_filter_is_a_flag_of_pgq_jobs_search_and_every_flag_a_filter() -> None:
    declared = {f.name for f in fields(JobFilter)}
    assert all("flag" in f.metadata for f in fields(JobFilter))
    assert set(parse(("jobs", "search"))) == declared | SEARCH_OWN


def test_the_help_is_the_declarations() -> None:
    helps = {p.name: p.help for p in command("enqueue").params}
    for name, flag in flags_of(JobOptions).items():
        assert helps[name] == flag.help.format(default=DEFAULTS.get(name))
    assert (
        helps["max_attempts"]
        == f"Attempts before dead-lettering (default {DEFAULTS['max_attempts']})."
    )
    assert helps["queue"] == "Queue (default: 'default')."
    helps = {p.name: p.help for p in command("jobs", "search").params}
    for field in fields(JobFilter):
        assert helps[field.name] == field.metadata["flag"].help
    # pgq jobs list takes --tag and --meta as search does: the same declaration.
    list_helps = {p.name: p.help for p in command("jobs", "list").params}
    assert list_helps["tag"] == helps["tags"] and list_helps["meta"] == helps["meta"]


def test_unset_options_are_none_and_each_flag_sets_its_option() -> None:
    assert enqueue_kwargs() == dict.fromkeys(OPTION_NAMES)
    chosen = enqueue_kwargs(
        *("--queue", "q", "--delay", "5m", "--priority", "-1", "--max-attempts", "3"),
        *("--idempotency-key", "k", "--unique-among", "pending", "--on-conflict", "replace"),
        *("--concurrency-key", "c", "--depends-on", "7", "--depends-on", "8"),
        *("--result-ttl", "1h", "--meta", '{"tenant": "acme"}', "--tag", "a", "--tag", "b"),
        *("--unique-for", "1d", "--unique-state", "dead", "--wait-if-full", "2s"),
        *("--run-at", "2030-01-01T00:00:00+00:00", "--throttle", "1m", "--caused-by", "6"),
    )
    assert chosen["run_at"] == datetime.fromisoformat("2030-01-01T00:00:00+00:00")
    del chosen["run_at"]
    assert chosen == {
        "queue": "q",
        "delay": 300.0,
        "priority": -1,
        "max_attempts": 3,
        "idempotency_key": "k",
        "unique_by": None,
        "unique_among": "pending",
        "on_conflict": "replace",
        "throttle": 60.0,
        "concurrency_key": "c",
        "depends_on": [7, 8],
        "result_ttl": 3600.0,
        "meta": {"tenant": "acme"},
        "tags": ["a", "b"],
        "unique_for": 86400.0,
        "unique_states": ["dead"],
        "wait_if_full": 2.0,
        "caused_by": 6,
    }
    assert enqueue_kwargs("--unique")["unique_by"] is True
    assert enqueue_kwargs("--unique-by", "a", "--unique-by", "b")["unique_by"] == ["a", "b"]


def test_bad_enqueue_flags_name_the_flag() -> None:
    with pytest.raises(typer.BadParameter, match="pass either --unique or --unique-by"):
        enqueue_kwargs("--unique", "--unique-by", "a")
    with pytest.raises(InvalidJobError, match="--meta is not valid JSON"):
        enqueue_kwargs("--meta", "{nope")


def test_each_search_flag_sets_its_filter() -> None:
    assert search_kwargs() == {
        "id": None, "task": None, "queue": None, "state": None, "error": None, "args": None,
        "tags": None, "meta": None, "since": None, "until": None, "finished_since": None,
        "finished_until": None,
    }  # fmt: skip
    chosen = search_kwargs(
        *("--id", "9", "--task", "t", "-q", "q", "--state", "dead", "--state", "ready"),
        *("--error", "boom", "--args", "n=3", "--args", '{"m": "x"}', "--tag", "a"),
        *("--meta", "tenant=acme", "--since", "2026-11-30", "--finished-until", "1h"),
    )
    assert chosen["since"] == datetime.fromisoformat("2026-11-30T00:00:00+00:00")
    # An age stays an age: the database counts it back from its own clock.
    assert chosen.pop("finished_until") == timedelta(hours=1)
    assert {k: v for k, v in chosen.items() if k != "since"} == {
        "id": 9, "task": "t", "queue": "q", "state": ["dead", "ready"], "error": "boom",
        "args": {"n": 3, "m": "x"}, "tags": ["a"], "meta": {"tenant": "acme"}, "until": None,
        "finished_since": None,
    }  # fmt: skip
    with pytest.raises(typer.BadParameter, match="is not a time"):
        search_kwargs("--until", "soon")
