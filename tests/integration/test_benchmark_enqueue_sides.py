"""``benchmarks.enqueue_single`` measures a task's own ``enqueue_async`` (``--kinds task_async``)
and, per tree, the sync and async calls interleaved in one process (``--kinds side``)."""

from __future__ import annotations

import re

import pytest

from benchmarks import enqueue_single

pytestmark = pytest.mark.slow


def test_a_tasks_async_call_and_both_sides_in_one_process_are_measured(
    pg_server, capsys: pytest.CaptureFixture[str]
) -> None:
    kinds = ["--kinds", "task_async,side", "--commit-flush", "off", "--producers", "1"]
    figures = enqueue_single.main(
        ["--dsn", pg_server.admin_dsn, "--count", "20", "--rounds", "1", *kinds]
    )
    assert figures[("task.enqueue_async this", 1)][0] > 0
    out = capsys.readouterr().out
    sides = re.findall(
        r"this +(by name|task) +sync +[\d.]+ +async +[\d.]+ +async/sync ([\d.]+)", out
    )
    assert [call for call, _ in sides] == ["by name", "task"]
    assert all(float(ratio) > 0 for _, ratio in sides)
