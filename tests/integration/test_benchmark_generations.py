"""The generations study runs end to end (tiny sizes, the suite's server: the timings mean
nothing and are never asserted). What is asserted is the mechanism it reports: under a held
snapshot a partition attached after the snapshot is emptied by TRUNCATE, one the snapshot read
is not, and the plain table keeps what the held snapshot pins."""

from __future__ import annotations

import pytest

from benchmarks import generations

pytestmark = pytest.mark.slow


def test_a_partition_attached_after_a_held_snapshot_is_truncated_and_an_older_one_waits(
    pg_server,
):
    result = generations.main(
        ["--dsn", pg_server.admin_dsn, "--partitions", "1,3", "--rounds", "3", "--hold-jobs", "200"]
    )
    assert set(result["times"]) == {
        "generations.plain",
        "generations.parted1",
        "generations.parted3",
    }
    for table, steps in result["times"].items():
        assert len(steps["claim"]) == 3, table
    held = result["held"]
    table_after, _ = held["new partition after"]
    truncated_table, _ = held["truncate new partition"]
    assert truncated_table < table_after / 4
    assert held["truncate old partition"] is None  # the holder read it: TRUNCATE must wait
    plain_table, _ = held["plain after"]
    assert plain_table > held["plain before"][0]  # VACUUM could not take the held versions
