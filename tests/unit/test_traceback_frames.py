"""What a failed attempt's stored traceback shows: from the handler on, without the frames of
pgqueue's own that called it (``worker/outcome.py`` ``format_traceback``)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from functools import partial
from typing import Any

import pgqueue
from pgqueue.rules.durations import parse_duration
from pgqueue.worker.outcome import format_traceback

PACKAGE = os.path.dirname(pgqueue.__file__)


def _caller() -> Callable[[Callable[[], Any]], Any]:
    # A stand-in for the worker's executor: a function whose code lives in pgqueue's tree,
    # which calls the handler and catches what it raises (so the traceback starts there).
    scope: dict[str, Any] = {}
    code = compile(
        "def run(handler):\n"
        "    try:\n"
        "        return handler()\n"
        "    except BaseException as error:\n"
        "        return error\n",
        os.path.join(PACKAGE, "worker", "threads.py"),
        "exec",
    )
    exec(code, scope)
    return scope["run"]


def _handler() -> None:
    raise ValueError("the user's error")


def _files(text: str) -> list[str]:
    return re.findall(r'File "([^"]+)"', text)


def test_the_workers_frames_are_dropped_and_the_handlers_kept() -> None:
    exc = _caller()(_handler)
    text = format_traceback(exc)
    assert all(not f.startswith(PACKAGE) for f in _files(text)), text
    assert _files(text)[-1] == __file__ and "ValueError: the user's error" in text
    assert "in _handler" in text


def test_an_error_raised_by_pgqueue_itself_keeps_its_frames() -> None:
    exc = _caller()(partial(parse_duration, "soon"))
    files = _files(format_traceback(exc))
    # Nothing but pgqueue's frames: they are the story, and stay.
    assert files[0] == os.path.join(PACKAGE, "worker", "threads.py"), files
    assert all(f.startswith(PACKAGE) for f in files) and len(files) >= 2, files


def test_chained_errors_lose_the_callers_frames_too() -> None:
    def handler() -> None:
        try:
            _handler()
        except ValueError as error:
            raise RuntimeError("wrapped") from error

    exc = _caller()(handler)
    text = format_traceback(exc)
    cause, _, effect = text.partition("The above exception was the direct cause")
    for part in (cause, effect):
        files = _files(part)
        assert files and not files[0].startswith(PACKAGE), text
    assert "RuntimeError: wrapped" in effect and "ValueError: the user's error" in cause
