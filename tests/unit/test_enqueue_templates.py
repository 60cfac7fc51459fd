"""A single enqueue by name without options validates the task's name and defaults once per
client (``PgQueue._templates``, :mod:`pgqueue.client.templates`), and every job it makes is the
one a fresh validation makes."""

from __future__ import annotations

from typing import Any

import pytest

from pgqueue import InvalidJobError, PgQueue
from pgqueue.client import core, templates
from pgqueue.rules import job_specs, tasks


@pytest.fixture
def validations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    validate = job_specs.spec_template

    def counted(task: str, options: Any, *, defaults: Any) -> job_specs.JobSpec:
        seen.append(task)
        return validate(task, options, defaults=defaults)

    monkeypatch.setattr(core, "spec_template", counted)  # a call with options
    monkeypatch.setattr(templates, "spec_template", counted)  # the template of one without
    monkeypatch.setattr(tasks, "spec_template", counted)  # a task's call (task.enqueue)
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


def test_a_tasks_call_without_options_validates_it_once(validations: list[str]) -> None:
    """``task.enqueue(...)`` (and ``task.s(...)``) without options: the task's name and
    defaults are validated at its first call, not at every one."""
    pgq = PgQueue("postgresql:///unused")

    @pgq.task(name="mail.digest", queue="mail", priority=3, unique_by=("to",))
    def digest(to: str) -> None: ...

    specs = [digest.s(to=to).spec() for to in ("a", "b", "c")]
    assert validations == ["mail.digest"]
    assert [s.args_json for s in specs] == ['{"to":"a"}', '{"to":"b"}', '{"to":"c"}']
    assert {(s.queue, s.priority) for s in specs} == {("mail", 3)}
    assert len({s.idempotency_key for s in specs}) == 3  # derived from each call's args
    # A call with options is validated at every call, as before, and checked.
    assert digest.options(priority=7).s(to="a").spec().priority == 7
    assert validations == ["mail.digest"] * 2
    with pytest.raises(InvalidJobError, match="priority"):
        digest.options(priority="high").s(to="a").spec()  # type: ignore[arg-type]
