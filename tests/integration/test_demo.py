from __future__ import annotations

import subprocess

import pytest

from tests.helpers import PGQ, ROOT

pytestmark = pytest.mark.slow


def test_demo_runs_real_workers_and_prints_a_summary(dsn):
    done = subprocess.run(
        [PGQ, "demo", "--jobs", "300", "--workers", "2", "--dsn", dsn],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "demo summary" in out and "pgqueue.queue_stats" in out
    # 300 jobs + 1 poison: 300 processed, 1 dead-lettered (row: processed retried dead ...)
    row = next(line for line in out.splitlines() if "│" in line and "s │" in line)
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    assert cells[0] == "300" and cells[2] == "1", row
