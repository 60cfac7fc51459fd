"""A single enqueue by name without options validates the task's name and defaults once per
client (``PgQueue._templates``, :mod:`pgqueue.client.templates`), and every job it makes is the
one a fresh validation makes."""

from __future__ import annotations

from typing import Any

import pytest

from pgqueue import InvalidJobError, PgQueue
from pgqueue.client import core, templates
from pgqueue.rules import job_specs


@pytest.fixture
def validations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    validate = job_specs.spec_template

    def counted(task: str, options: Any, *, defaults: Any) -> job_specs.JobSpec:
        seen.append(task)
        return validate(task, options, defaults=defaults)

    monkeypatch.setattr(core, "spec_template", counted)  # a call with options
    monkeypatch.setattr(templates, "spec_template", counted)  # the template of one without
    return seen


def test_a_call_without_options_validates_its_task_once(validations: list[str]) -> None:
    pgq = PgQueue("postgresql:///unused")
    first = pgq.spec("mail.send", {"to": "a"}, {})
    second = pgq.spec("mail.send", {"to": "b"}, {})
    assert validations == ["mail.send"]
    assert (first.args_json, second.args_json) == ('{"to":"a"}', '{"to":"b"}')
    assert first is not second and first.queue == second.queue == "default"
    # Options are validated at every call, as before.
    keyed = pgq.spec("mail.send", {}, {"idempotency_key": "k"})
    assert keyed.idempotency_key == "k" and validations == ["mail.send"] * 2


def test_a_task_registered_again_gets_its_new_defaults(validations: list[str]) -> None:
    pgq = PgQueue("postgresql:///unused")
    assert pgq.spec("report", {}, {}).queue == "default"  # not registered yet

    @pgq.task(name="report", queue="reports", max_attempts=2, unique_by=True)
    def report(day: str = "") -> None: ...

    spec = pgq.spec("report", {"day": "mon"}, {})
    assert (spec.queue, spec.max_attempts) == ("reports", 2)
    assert spec.idempotency_key is not None  # derived from the args, per call
    assert pgq.spec("report", {"day": "tue"}, {}).idempotency_key != spec.idempotency_key
    assert validations == ["report", "report"]


def test_a_bad_name_is_refused_at_every_call(validations: list[str]) -> None:
    pgq = PgQueue("postgresql:///unused")
    for _ in range(2):
        with pytest.raises(InvalidJobError, match="task name"):
            pgq.spec("", {}, {})
