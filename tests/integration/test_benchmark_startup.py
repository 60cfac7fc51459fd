"""``python -m benchmarks.startup`` runs end to end for pgqueue, ``pgq work`` and the embedded
``Worker`` (the peers need network installs), with another checkout as the baseline. Figures
are never asserted, only that every round produced one."""

from __future__ import annotations

from pathlib import Path

from benchmarks import startup
from tests.conftest import PgServer

ROOT = Path(__file__).resolve().parents[2]


def test_startup_times_pgq_work_and_a_baseline(pg_server: PgServer) -> None:
    # The baseline is this same checkout run from its own directory: the code path of
    # --baseline, without a second checkout.
    figures = startup.main(
        [
            "--dsn",
            pg_server.admin_dsn,
            "--systems",
            "pgqueue,pgqueue_api",
            "--rounds",
            "1",
            "--baseline",
            str(ROOT),
        ]
    )
    assert set(figures) == {"pgqueue", "pgqueue_api", "pgqueue_baseline"}
    for key, values in figures.items():
        (seconds,) = values
        assert 0 < seconds < startup.TIMEOUT, key
