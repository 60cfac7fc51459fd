"""The held-snapshot benchmark runs end to end (tiny sizes, the suite's server, whose fsync is
off: the figures mean nothing). Figures are never asserted, only that every window has one and
that both queues took every job."""

from __future__ import annotations

import pytest

from benchmarks import horizon

pytestmark = pytest.mark.slow


def test_both_queues_run_under_a_held_snapshot_and_every_window_has_figures(pg_server):
    args = ["--rate", "50", "--producers", "1", "--before-seconds", "2", "--hold-seconds", "4"]
    args += ["--after-seconds", "2", "--window", "2", "--maintenance-wait", "1"]
    args += ["--allow-fsync-off"]
    results = horizon.main(["--dsn", pg_server.admin_dsn, *args])
    assert set(results) == {"pgqueue", "naive"}
    for system, result in results.items():
        windows = result["windows"]
        assert len(windows) >= 4, system
        assert any(w["held"] for w in windows) and not windows[0]["held"], system
        assert all(w["not_started"] == 0 for w in windows), system
        assert sum(w["started"] for w in windows) > 0, system
        labels = {label.split(" (")[0] for label in result["sizes"]}
        assert labels == {
            "before the hold",
            "peak",
            "after the drain",
            "after VACUUM",
            *(["after the workers' maintenance"] if system == "pgqueue" else []),
        }, system
