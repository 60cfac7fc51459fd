"""pgqueue.handler.logs and pgqueue.handler.log_queue in one process: fields, formatters, pgq
work's set-up around the app import, and the queue's drop-don't-block rule. (The real processes
are in tests/integration/test_logging.py.)"""

from __future__ import annotations

import io
import json
import logging
import logging.config
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from pgqueue.handler import log_queue, logs
from pgqueue.rules.log_actions import Action, Seconds, fields


@pytest.fixture
def clean_logging() -> Iterator[None]:
    """Put back everything these tests change in the process-wide logging state."""
    root = logging.getLogger()
    loggers = [
        root,
        *(x for x in logging.Logger.manager.loggerDict.values() if isinstance(x, logging.Logger)),
    ]
    saved = [(x, x.level, list(x.handlers), x.disabled, x.propagate) for x in loggers]
    last_resort = logging.lastResort
    yield
    for logger, level, handlers, disabled, propagate in saved:
        logger.setLevel(level)
        logger.handlers[:] = handlers
        logger.disabled = disabled
        logger.propagate = propagate
    logging.lastResort = last_resort


def capture(fmt: logging.Formatter, name: str = "t.logs") -> tuple[logging.Logger, io.StringIO]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(fmt)
    handler.addFilter(logs.ContextFilter())
    logger = logging.getLogger(name)
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    return logger, out


def test_a_format_naming_the_fields_works_outside_a_job(clean_logging):
    log, out = capture(logging.Formatter("[%(job_id)s|%(task)s|%(attempt)s] %(message)s"))
    log.info("no job here")
    # pgqueue's own lines about a job, logged outside it: the job's fields come with extra=
    log.info("about one", extra=fields(Action.JOB_STARTED, job_id=7, task="send", attempt=2))
    assert out.getvalue().splitlines() == ["[||] no job here", "[7|send|2] about one"]


def test_json_fields_come_from_extra_with_their_types_not_from_the_message(clean_logging):
    log, out = capture(logs.JsonFormatter())
    log.info(
        "job succeeded",
        extra=fields(Action.JOB_SUCCEEDED, job_id=7, task="send", duration=Seconds(0.25)),
    )
    log.info("a message that says job_id=%s", 9, extra=fields(Action.JOB_STARTED, job_id=8))
    first, second = (json.loads(x) for x in out.getvalue().splitlines())
    assert first["msg"] == "job succeeded" and first["action"] == "job.succeeded"
    assert (first["job_id"], first["task"], first["duration"]) == (7, "send", 0.25)
    assert "queue" not in first  # empty context fields are left out
    # pgqueue's records are never parsed: the message is text, the fields are extra's
    assert (second["msg"], second["job_id"]) == ("a message that says job_id=9", 8)


def test_text_lines_append_the_fields_in_the_order_given_then_the_context(clean_logging):
    log, out = capture(logs.TextFormatter("%(message)s"))
    token = logs.bind(worker_id="w-1")
    try:
        log.info(
            "job succeeded",
            extra=fields(
                Action.JOB_SUCCEEDED,
                job_id=7,
                task="send",
                queue="q",
                attempt=1,
                duration=Seconds(0.004),
            ),
        )
        log.info("charging card", extra={"order": 8})
        log.info("reaper started", extra=fields(Action.REAPER_STARTED, interval=Seconds(60)))
    finally:
        logs._bound.reset(token)
    assert out.getvalue().splitlines() == [
        "job succeeded job_id=7 task=send queue=q attempt=1 duration=0.004s worker_id=w-1",
        "charging card order=8 worker_id=w-1",
        "reaper started interval=60s worker_id=w-1",  # the action is not in text lines
    ]


def test_extra_values_with_the_field_names_are_kept_not_refused(clean_logging):
    """A record factory adding job_id/task would make extra={"task": ...} raise in
    makeRecord; the filter leaves such values alone."""
    log, out = capture(logs.JsonFormatter())
    log.info("mine", extra={"task": "my-own", "job_id": "abc"})
    [line] = [json.loads(x) for x in out.getvalue().splitlines()]
    assert (line["task"], line["job_id"]) == ("my-own", "abc")


def test_json_keeps_types_and_writes_valid_json_for_any_value(clean_logging):
    log, out = capture(logs.JsonFormatter())
    log.info(
        "done n=%s ratio=%s who=%r took=%.2fs bad=%s",
        3,
        0.5,
        "x y",
        1.234,
        float("nan"),
        extra={"ts": "not the time", "nested": [1, {"inf": float("inf")}], "obj": object()},
    )
    [line] = [json.loads(x) for x in out.getvalue().splitlines()]
    assert (line["n"], line["ratio"], line["who"], line["took"]) == (3, 0.5, "x y", "1.23s")
    assert line["bad"] == "nan" and line["nested"] == [1, {"inf": "inf"}]
    assert line["ts"] != "not the time"  # extra= never replaces the record's own keys
    assert line["obj"].startswith("<object object")


def test_a_format_of_ones_own_gets_the_fields_through_the_text_formatter(clean_logging):
    """What docs/how-to/logging.md tells a --log-config with a format of its own to do."""
    out = io.StringIO()
    logging.config.dictConfig(
        {
            "version": 1,
            "disable_existing_loggers": False,
            "formatters": {
                "mine": {"()": "pgqueue.handler.logs.TextFormatter", "fmt": "MINE %(message)s"}
            },
            "handlers": {
                "h": {"class": "logging.StreamHandler", "stream": out, "formatter": "mine"}
            },
            "loggers": {"t.mine": {"handlers": ["h"], "level": "INFO", "propagate": False}},
        }
    )
    logging.getLogger("t.mine").info(
        "job started", extra=fields(Action.JOB_STARTED, job_id=3, task="t")
    )
    assert out.getvalue() == "MINE job started job_id=3 task=t\n"


def test_app_logging_leaves_an_app_configuration_alone_and_reenables_pgqueue(clean_logging):
    out = io.StringIO()
    logging.getLogger().handlers[:] = []  # a fresh process: nothing configured (not pytest's)
    setup = logs.AppLogging("WARNING", None, None)
    setup.apply_file()
    pgqueue_log = logging.getLogger("pgqueue.worker")  # exists before the app is imported
    with setup.importing_app():  # what an app module does when imported
        logging.getLogger("t.early").warning("before the app configured anything")
        logging.config.dictConfig(
            {
                "version": 1,
                "formatters": {"f": {"format": "%(name)s %(job_id)s|%(message)s"}},
                "handlers": {
                    "h": {"class": "logging.StreamHandler", "stream": out, "formatter": "f"}
                },
                "root": {"level": "INFO", "handlers": ["h"]},
            }
        )
        assert pgqueue_log.disabled  # what disable_existing_loggers=True did
    assert setup.configured_by == "app"
    assert not pgqueue_log.disabled
    assert logging.getLogger().level == logging.WARNING  # the explicit --log-level wins
    pgqueue_log.warning("still heard", extra={"job_id": 4})
    pgqueue_log.info("below the level")
    assert out.getvalue().splitlines() == [
        "t.early |before the app configured anything",  # replayed from the import
        "pgqueue.worker 4|still heard",
    ]


def test_app_logging_adds_its_own_handler_when_the_app_sets_none(clean_logging):
    logging.getLogger().handlers[:] = []
    setup = logs.AppLogging(None, "json", None)
    setup.apply_file()
    with setup.importing_app():
        pass
    assert setup.configured_by is None
    [handler] = logging.getLogger().handlers
    assert isinstance(handler.formatter, logs.JsonFormatter)
    assert logging.getLogger().level == logging.INFO


class Gate(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.open = threading.Event()
        self.entered = threading.Event()
        self.messages: list[str] = []
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.entered.set()
        self.open.wait(30)
        self.messages.append(record.getMessage())
        self.records.append(record)


def test_the_queue_drops_and_counts_instead_of_blocking_and_snapshots_arguments(clean_logging):
    gate = Gate()
    root = logging.getLogger()
    root.handlers[:] = [gate]
    root.setLevel(logging.INFO)
    log = logging.getLogger("t.queue")
    before = log_queue.dropped_total()
    items: list[Any] = ["first"]
    with log_queue.queue_logging(maxsize=3) as writer:
        assert root.handlers != [gate]  # moved behind the queue
        log.info("one")
        assert gate.entered.wait(10)  # the writer is now stuck in emit
        log.info("items=%s", items)  # rendered now, not when the writer gets to it
        items.append("changed later")
        for n in range(50):  # returns at once: 2 more fit, the rest are dropped
            log.info("more n=%s", n)
        assert writer.dropped == 48
        assert log_queue.dropped_total() - before == 48
        gate.open.set()
    assert root.handlers == [gate]  # put back
    lines = [m for m in gate.messages if "dropped" not in m]
    assert lines == ["one", "items=['first']", "more n=0", "more n=1"]
    [report] = [m for m in gate.messages if "dropped" in m]
    assert report == "log records dropped: the log output did not keep up"
    [record] = [r for r in gate.records if "dropped" in r.getMessage()]
    said = vars(record)
    assert (said["action"], said["count"], said["queue_size"]) == ("logging.dropped", 48, 3)
