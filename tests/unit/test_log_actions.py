"""pgqueue's log actions: declared once (pgqueue.rules.log_actions), named by every log call in
the package with only the fields declared for them, and listed in docs/how-to/logging.md."""

from __future__ import annotations

import ast
import logging
import re
from pathlib import Path

from pgqueue.rules.log_actions import Action, Seconds, fields

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pgqueue"
DOC = ROOT / "docs" / "how-to" / "logging.md"
LEVELS = {"debug", "info", "warning", "error", "exception", "critical", "log"}
# The names a LogRecord has of its own: extra= may not set them (makeRecord raises KeyError).
RECORD_NAMES = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


def log_calls() -> list[tuple[str, ast.Call]]:
    """Every call of a logging method on a logger in the package (``log.info(...)``,
    ``self.log.warning(...)``, ``logging.getLogger(...).warning(...)``)."""
    calls = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            receiver = ast.unparse(node.func.value)
            if node.func.attr not in LEVELS or "log" not in receiver.lower():
                continue
            if node.func.attr == "exception" and not node.args:  # a future's exception()
                continue
            calls.append((f"{path.relative_to(ROOT)}:{node.lineno}", node))
    return calls


def test_the_package_has_log_calls_to_check():
    assert len(log_calls()) > 80


# The one module whose calls pick their action at run time (an outcome's line: its kind decides);
# the worker-run test in tests/integration/test_logging.py checks what those records carry.
DYNAMIC = "pgqueue/worker/written_log.py"


def test_every_log_call_names_a_declared_action_and_only_its_fields():
    problems = []
    for where, call in log_calls():
        extra = next((k.value for k in call.keywords if k.arg == "extra"), None)
        if not (isinstance(extra, ast.Call) and ast.unparse(extra.func) == "fields" and extra.args):
            problems.append(f"{where}: no extra=fields(Action.X, ...)")
            continue
        if not (
            isinstance(extra.args[0], ast.Attribute)
            and ast.unparse(extra.args[0].value) == "Action"
        ):
            if not where.startswith(DYNAMIC):
                problems.append(f"{where}: the action is not named (Action.X)")
            continue
        action = Action[extra.args[0].attr]
        stated = [k.arg for k in extra.keywords]
        undeclared = [n for n in stated if n not in action.fields]
        if None in stated or undeclared:
            problems.append(f"{where}: {action.code} does not declare {undeclared or '**'}")
    assert problems == []


def test_no_pgqueue_message_holds_a_key_value_pair():
    """Data goes in fields (typed, for the JSON formatter), not in the message's text."""
    pair = re.compile(r"(?:^|\s)[A-Za-z_]\w*=%")
    found = []
    for where, call in log_calls():
        texts = [a.value for a in call.args if isinstance(a, ast.Constant)]
        texts += [
            v.value
            for a in call.args
            if isinstance(a, ast.JoinedStr | ast.BinOp)
            for v in ast.walk(a)
            if isinstance(v, ast.Constant) and isinstance(v.value, str)
        ]
        found += [f"{where}: {t!r}" for t in texts if isinstance(t, str) and pair.search(t)]
    assert found == []


def test_codes_are_unique_dotted_names_and_fields_never_clash_with_a_record():
    codes = [a.code for a in Action]
    assert len(codes) == len(set(codes))
    assert all(re.fullmatch(r"[a-z]+\.[a-z_]+", code) for code in codes), codes
    for action in Action:
        assert not set(action.fields) & RECORD_NAMES, action
        assert "action" not in action.fields


def test_fields_puts_the_action_first_and_keeps_the_given_order():
    extra = fields(Action.JOB_STARTED, job_id=1, task="t", queue="q", attempt=2)
    assert list(extra.items()) == [
        ("action", "job.started"),
        ("job_id", 1),
        ("task", "t"),
        ("queue", "q"),
        ("attempt", 2),
    ]


def test_seconds_are_numbers_shown_with_their_unit():
    assert [str(Seconds(x)) for x in (0.05, 1.0, 30, 0.0041)] == ["0.05s", "1s", "30s", "0.004s"]
    assert f"{Seconds(2.5)}" == "2.5s" and Seconds(2.5) == 2.5


def action_table() -> str:
    """The table docs/how-to/logging.md lists, made from the declaration."""
    rows = ["| action | fields | what happened |", "| --- | --- | --- |"]
    for action in Action:
        own = ", ".join(f"`{n}`" for n in action.fields) or "-"
        rows.append(f"| `{action.code}` | {own} | {action.meaning} |")
    return "\n".join(rows)


def test_the_docs_list_every_action_with_its_fields():
    text = DOC.read_text()
    start = "<!-- actions: generated from pgqueue.rules.log_actions -->\n"
    assert start in text
    table = text.split(start, 1)[1].split("\n\n", 1)[0]
    assert table == action_table(), "docs/how-to/logging.md: replace the table with\n" + (
        action_table()
    )
